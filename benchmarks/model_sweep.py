"""A sweep of models outside the zoo, as an outside reviewer would try them (not a CI test).

``python benchmarks/model_sweep.py [NAME ...] [--json FILE]`` builds each named model (default:
all of ``SWEEP``) in a tiny config with seeded random weights, runs one inference call eagerly,
under ``compile_api.compile`` (``--backend``, default aot_eager) and under ``torch.compile``
(backend ``eager``, counting graphs and broken frames as the zoo does), and prints one row per
model: Strata's graphs/breaks beside torch's, whether Strata's result matches eager, and the
first break reason. ``--json FILE`` appends the rows to FILE (run the sweep in chunks, then
``--report FILE`` prints the Markdown table of every row kept there). ``--mode train`` runs
the language models' forward with labels and the loss's backward instead, comparing gradients;
``--mode dynamic`` calls the model at two sequence lengths (or batches) under ``dynamic=True``.
``--mode generate_hf`` / ``generate_static`` runs transformers' ``model.generate`` (greedy, 8 new
tokens; the default cache / a StaticCache) with ``model.forward`` compiled, on the causal LMs
(``GENERATE`` by default; zoo models may be named too), comparing the tokens and every step's
logits, and frame compiles (recompiles as the cache grows) beside torch's.

A Strata compile that crashed and ran the frame eagerly (the "Strata could not compile" warning)
counts as a crash even when the result is right. Local CPU, 1 thread; each model is tiny.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks.zoo.detection import python_detection_ops  # noqa: E402
from benchmarks.zoo.measure import run_eager, run_strata, run_torch, tolerance  # noqa: E402
from benchmarks.zoo.models import (  # noqa: E402
    BATCH,
    GENERATE_MODES,
    MODELS,
    SEQ,
    SEQ2,
    VOCAB,
    Built,
    Case,
    ZooModel,
    _generator,
    _images,
    _lm,
    _seeded,
    _timm,
    _tokens,
    _torchvision,
    _vision,
)
from benchmarks.zoo.vision import import_torchvision, import_transformers  # noqa: E402

# Shared tiny sizes: a transformers config takes these by their common names (its
# attribute_map renames them for GPT-2-style configs).
SMALL = {
    "vocab_size": VOCAB, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
    "intermediate_size": 64, "max_position_embeddings": 64,
}  # fmt: skip
NO_DROPOUT = {
    "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "dropout": 0.0,
    "attention_dropout": 0.0, "activation_dropout": 0.0,
}  # fmt: skip


def _hf(
    config_name: str, model_name: str, drop: tuple[str, ...] = (), **overrides: Any
) -> Callable[[], Built]:
    """A transformers language model (causal or masked LM) from a tiny config (``drop``: shared
    sizes the config refuses)."""

    def build() -> Built:
        t = import_transformers()
        sizes = {k: v for k, v in SMALL.items() if k not in drop}
        config = getattr(t, config_name)(**{**sizes, **NO_DROPOUT, **overrides})
        return _lm(getattr(t, model_name), config)

    return build


def _hf_seq2seq(config_name: str, model_name: str, **overrides: Any) -> Callable[[], Built]:
    """An encoder-decoder with ``decoder_input_ids`` (BART-style configs and T5-style)."""

    def build() -> Built:
        t = import_transformers()
        base = {
            "vocab_size": VOCAB, "d_model": 32, "encoder_layers": 2, "decoder_layers": 2,
            "encoder_attention_heads": 2, "decoder_attention_heads": 2, "encoder_ffn_dim": 64,
            "decoder_ffn_dim": 64, "max_position_embeddings": 64, "pad_token_id": 1,
            "bos_token_id": 0, "eos_token_id": 2, "decoder_start_token_id": 2,
        }  # fmt: skip
        config = getattr(t, config_name)(**{**base, **NO_DROPOUT, **overrides})
        model = _seeded(lambda: getattr(t, model_name)(config))
        ids, ids2 = _tokens(BATCH, SEQ), _tokens(BATCH, SEQ2, 1)
        dec, dec2 = _tokens(BATCH, SEQ // 2, 2), _tokens(BATCH, SEQ2 // 2, 3)
        return Built(
            model,
            {"input_ids": ids, "attention_mask": torch.ones_like(ids), "decoder_input_ids": dec},
            {"input_ids": ids2, "attention_mask": torch.ones_like(ids2),
             "decoder_input_ids": dec2},
            {"labels": dec.clone()},
            {"labels": dec2.clone()},
        )  # fmt: skip

    return build


def _t5_like(config_name: str, model_name: str, **overrides: Any) -> Callable[[], Built]:
    t5 = {
        "d_model": 32, "d_kv": 16, "d_ff": 64, "num_layers": 2, "num_heads": 2,
        "dropout_rate": 0.0, "decoder_start_token_id": 0, "pad_token_id": 0,
    }  # fmt: skip
    return _hf_seq2seq(config_name, model_name, **{**t5, **overrides})


IMAGE_SMALL = {
    "image_size": 32, "patch_size": 8, "hidden_size": 32, "num_hidden_layers": 2,
    "num_attention_heads": 2, "intermediate_size": 64, "num_labels": 10,
}  # fmt: skip


def _hf_vision(config_name: str, model_name: str, **config: Any) -> Callable[[], Built]:
    """A transformers image model taking ``pixel_values`` (32x32, batch 2)."""

    def build() -> Built:
        t = import_transformers()
        cfg = getattr(t, config_name)(**{**NO_DROPOUT, **config})
        model = _seeded(lambda: getattr(t, model_name)(cfg))
        return Built(model, {"pixel_values": _images(BATCH)}, {"pixel_values": _images(3, 1)})

    return build


def _hf_audio(config_name: str, model_name: str, **config: Any) -> Callable[[], Built]:
    """A raw-waveform model (wav2vec2-style conv feature encoder): 1,600 samples."""

    def build() -> Built:
        t = import_transformers()
        cfg = getattr(t, config_name)(**{**NO_DROPOUT, **config})
        model = _seeded(lambda: getattr(t, model_name)(cfg))
        wave = torch.randn(BATCH, 1600, generator=_generator())
        return Built(model, {"input_values": wave}, {"input_values": wave[:, :1200]})

    return build


def _torchvision_custom(make: Callable[[Any], torch.nn.Module]) -> Callable[[], Built]:
    def build() -> Built:
        models = import_torchvision().models
        return _vision(lambda: make(models))

    return build


def _detection(name: str, **config: Any) -> Callable[[], Built]:
    """A torchvision detection model in eval (random weights, 5 classes, fewer proposals and
    detections than the defaults), called on one 3x200x240 image (a 3x160x208 one second);
    zoo.detection.python_detection_ops supplies nms and roi_align where the C ops don't load."""

    def build() -> Built:
        detection = python_detection_ops().models.detection
        model = _seeded(lambda: getattr(detection, name)(
            weights=None, weights_backbone=None, num_classes=5, rpn_pre_nms_top_n_test=200,
            rpn_post_nms_top_n_test=100, box_detections_per_img=20, **config))
        images, images2 = ([torch.rand(3, h, w, generator=_generator(k))]
                           for k, (h, w) in enumerate([(200, 240), (160, 208)]))
        return Built(model, {"images": images}, {"images": images2})  # fmt: skip

    return build


def _variant(base: Callable[[], Built], **call: Any) -> Callable[[], Built]:
    """A model of the zoo or the sweep called another way: extra forward arguments, a padded
    attention mask (``pad=True``: the second row's last 3 tokens masked), or gradient
    checkpointing (``checkpointing=True``, run in training mode: ``mode="train"`` cases)."""
    pad = call.pop("pad", False)
    checkpointing = call.pop("checkpointing", False)

    def build() -> Built:
        built = base()
        if checkpointing:
            built.model.gradient_checkpointing_enable()
        for kwargs in (built.kwargs, built.kwargs2):
            if pad and "attention_mask" in kwargs:
                mask = kwargs["attention_mask"].clone()
                mask[1, -3:] = 0
                kwargs["attention_mask"] = mask
            kwargs.update(call)
        return built

    return build


def _zoo_build(name: str, **config: Any) -> Callable[[], Built]:
    """A zoo model's build, with its transformers config changed (``attn_implementation``)."""

    def build() -> Built:
        built = MODELS[name].build()
        for key, value in config.items():
            setattr(built.model.config, key, value)
        return built

    return build


def _retyped(
    base: Callable[[], Built], *, bf16: bool = False, batch1: bool = False, cache: bool = False
) -> Callable[[], Built]:
    """A model built another way: bf16 weights, batch 1, or a ``DynamicCache`` passed in with
    ``use_cache=True`` (a fresh one per call, as a caller starting a generation does)."""

    def build() -> Built:
        built = base()
        if bf16:
            built.model.to(torch.bfloat16)
        for kwargs in (built.kwargs, built.kwargs2, built.labels, built.labels2):
            if batch1:
                kwargs.update({k: v[:1] for k, v in kwargs.items()})
        if cache:
            t = import_transformers()
            for kwargs in (built.kwargs, built.kwargs2):
                kwargs.update(
                    past_key_values=t.DynamicCache(config=built.model.config), use_cache=True
                )
        return built

    return build


def _inputs_changed(base: Callable[[], Built], how: str) -> Callable[[], Built]:
    """Other inputs: ``embeds`` (``inputs_embeds`` and ``position_ids`` instead of ids),
    ``encoder_outputs`` (T5's encoder run first, its output passed in), ``token_types``
    (BERT's segment ids and explicit positions)."""

    def build() -> Built:
        built = base()
        model = built.model
        for kwargs in (built.kwargs, built.kwargs2):
            ids = kwargs["input_ids"]
            positions = torch.arange(ids.shape[1]).expand_as(ids)
            with torch.no_grad():
                if how == "embeds":
                    kwargs.update(inputs_embeds=model.get_input_embeddings()(kwargs.pop(
                        "input_ids")), position_ids=positions)  # fmt: skip
                elif how == "encoder_outputs":
                    encoded = model.get_encoder()(input_ids=kwargs.pop("input_ids"))
                    kwargs["encoder_outputs"] = (encoded.last_hidden_state,)
                else:
                    segments = (positions >= ids.shape[1] // 2).long()
                    kwargs.update(token_type_ids=segments, position_ids=positions)
        if how == "embeds":
            built.labels = built.labels2 = {}
        return built

    return build


def _whisper() -> Built:
    """The whole Whisper (encoder and decoder, ``decoder_input_ids``); the batch varies."""
    t = import_transformers()
    config = t.WhisperConfig(
        vocab_size=VOCAB, num_mel_bins=16, d_model=32, encoder_layers=2,
        encoder_attention_heads=2, decoder_layers=2, decoder_attention_heads=2,
        encoder_ffn_dim=64, decoder_ffn_dim=64, max_source_positions=16,
        max_target_positions=16, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        decoder_start_token_id=1, **NO_DROPOUT)  # fmt: skip
    model = _seeded(lambda: t.WhisperForConditionalGeneration(config))
    feats = torch.randn(BATCH, 16, 32, generator=_generator(1))
    feats2 = torch.randn(BATCH + 1, 16, 32, generator=_generator(2))
    dec, dec2 = _tokens(BATCH, 4, 2), _tokens(BATCH + 1, 6, 3)
    return Built(model, {"input_features": feats, "decoder_input_ids": dec},
                 {"input_features": feats2, "decoder_input_ids": dec2},
                 {"labels": dec.clone()}, {"labels": dec2.clone()})  # fmt: skip


def _siglip() -> Built:
    """SigLIP's text and vision towers with its sigmoid contrastive loss."""
    t = import_transformers()
    text = {
        "vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 2, "max_position_embeddings": 16,
    }  # fmt: skip
    vision = {"image_size": 32, "patch_size": 8, "hidden_size": 32, "intermediate_size": 64,
              "num_hidden_layers": 2, "num_attention_heads": 2}  # fmt: skip
    model = _seeded(lambda: t.SiglipModel(t.SiglipConfig(text_config=text, vision_config=vision)))
    ids, ids2 = _tokens(BATCH, SEQ), _tokens(BATCH, SEQ2, 1)
    return Built(model, {"input_ids": ids, "pixel_values": _images(BATCH)},
                 {"input_ids": ids2, "pixel_values": _images(BATCH, 1)},
                 {"return_loss": True}, {"return_loss": True})  # fmt: skip


CLASSES_SEG = 5  # segmentation classes (tv_deeplabv3)
SWEEP_MODERNBERT = _hf(
    "ModernBertConfig", "ModernBertForMaskedLM", global_attn_every_n_layers=2, local_attention=4,
    pad_token_id=0, embedding_dropout=0.0, mlp_dropout=0.0)  # fmt: skip
KV2 = {"num_key_value_heads": 2}

WAV2VEC = {
    "vocab_size": 32, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
    "intermediate_size": 64, "conv_dim": (16, 16), "conv_stride": (5, 4),
    "conv_kernel": (10, 4), "num_conv_pos_embeddings": 16, "num_conv_pos_embedding_groups": 2,
    "feat_proj_dropout": 0.0, "hidden_dropout": 0.0, "activation_dropout": 0.0,
    "do_stable_layer_norm": False, "mask_time_prob": 0.0,
}  # fmt: skip

SWEEP: dict[str, ZooModel] = {
    m.name: m
    for m in [
        # decoders
        ZooModel("gpt_neo", "transformers", _hf(
            "GPTNeoConfig", "GPTNeoForCausalLM", attention_types=[[["global", "local"], 1]],
            window_size=4, embed_dropout=0.0, resid_dropout=0.0)),
        ZooModel("gptj", "transformers", _hf(
            "GPTJConfig", "GPTJForCausalLM", rotary_dim=4, n_inner=64, resid_pdrop=0.0,
            embd_pdrop=0.0, attn_pdrop=0.0)),
        ZooModel("codegen", "transformers", _hf(
            "CodeGenConfig", "CodeGenForCausalLM", rotary_dim=4, n_inner=64, n_ctx=64,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)),
        ZooModel("bloom", "transformers", _hf("BloomConfig", "BloomForCausalLM", n_head=4)),
        ZooModel("falcon", "transformers", _hf(
            "FalconConfig", "FalconForCausalLM", num_kv_heads=2, new_decoder_architecture=True)),
        ZooModel("mixtral", "transformers", _hf(
            "MixtralConfig", "MixtralForCausalLM", num_key_value_heads=2, num_local_experts=4,
            num_experts_per_tok=2)),
        ZooModel("qwen2_moe", "transformers", _hf(
            "Qwen2MoeConfig", "Qwen2MoeForCausalLM", num_key_value_heads=2, num_experts=4,
            num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32)),
        ZooModel("phi", "transformers", _hf("PhiConfig", "PhiForCausalLM",
                                            partial_rotary_factor=0.5)),
        ZooModel("phi3", "transformers", _hf("Phi3Config", "Phi3ForCausalLM",
                                             num_key_value_heads=2, pad_token_id=0)),
        ZooModel("gemma2", "transformers", _hf(
            "Gemma2Config", "Gemma2ForCausalLM", num_key_value_heads=2, head_dim=8,
            sliding_window=4)),
        ZooModel("gemma3", "transformers", _hf(
            "Gemma3TextConfig", "Gemma3ForCausalLM", num_key_value_heads=2, head_dim=8,
            sliding_window=4)),
        ZooModel("qwen3", "transformers", _hf("Qwen3Config", "Qwen3ForCausalLM",
                                              num_key_value_heads=2, head_dim=8)),
        ZooModel("stablelm", "transformers", _hf("StableLmConfig", "StableLmForCausalLM",
                                                 num_key_value_heads=2)),
        ZooModel("starcoder2", "transformers", _hf("Starcoder2Config", "Starcoder2ForCausalLM",
                                                   num_key_value_heads=2, residual_dropout=0.0,
                                                   embedding_dropout=0.0)),
        ZooModel("olmo", "transformers", _hf("OlmoConfig", "OlmoForCausalLM",
                                             num_key_value_heads=2)),
        ZooModel("cohere", "transformers", _hf("CohereConfig", "CohereForCausalLM",
                                               num_key_value_heads=2)),
        ZooModel("granite", "transformers", _hf("GraniteConfig", "GraniteForCausalLM",
                                                num_key_value_heads=2)),
        ZooModel("mpt", "transformers", _hf("MptConfig", "MptForCausalLM", d_model=32,
                                            n_heads=4, n_layers=2, expansion_ratio=2,
                                            max_seq_len=64)),
        ZooModel("gpt_bigcode", "transformers", _hf(
            "GPTBigCodeConfig", "GPTBigCodeForCausalLM", n_inner=64, multi_query=True,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)),
        ZooModel("xglm", "transformers", _hf("XGLMConfig", "XGLMForCausalLM", d_model=32,
                                             ffn_dim=64, num_layers=2)),
        ZooModel("biogpt", "transformers", _hf("BioGptConfig", "BioGptForCausalLM")),
        ZooModel("ctrl", "transformers", _hf("CTRLConfig", "CTRLLMHeadModel", dff=64)),
        # (session 13) a state-space model: its scan is torch's associative_scan under compile
        ZooModel("mamba", "transformers", _hf(
            "MambaConfig", "MambaForCausalLM", state_size=4, expand=2, conv_kernel=4,
            drop=("num_attention_heads", "intermediate_size", "max_position_embeddings"))),
        ZooModel("recurrent_gemma", "transformers", _hf(
            "RecurrentGemmaConfig", "RecurrentGemmaForCausalLM", drop=("max_position_embeddings",),
            num_key_value_heads=1, lru_width=32, attention_window_size=4,
            block_types=["recurrent", "attention"])),
        ZooModel("olmo2", "transformers", _hf("Olmo2Config", "Olmo2ForCausalLM", **KV2)),
        # Llama's rotary scalings (rope_scaling): linear, dynamic NTK (a data-dependent
        # frequency update past 8 positions), Llama 3's and YaRN
        ZooModel("llama_rope_linear", "transformers", _hf(
            "LlamaConfig", "LlamaForCausalLM", rope_scaling={"rope_type": "linear", "factor": 2.0},
            **KV2)),
        ZooModel("llama_rope_dynamic", "transformers", _hf(
            "LlamaConfig", "LlamaForCausalLM", max_position_embeddings=8,
            rope_scaling={"rope_type": "dynamic", "factor": 2.0}, **KV2)),
        ZooModel("llama_rope_llama3", "transformers", _hf(
            "LlamaConfig", "LlamaForCausalLM", rope_scaling={
                "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 16}, **KV2)),
        ZooModel("llama_rope_yarn", "transformers", _hf(
            "LlamaConfig", "LlamaForCausalLM", rope_scaling={
                "rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 32},
            **KV2)),
        # encoders
        ZooModel("xlm_roberta", "transformers", _hf("XLMRobertaConfig", "XLMRobertaForMaskedLM",
                                                    pad_token_id=1)),
        ZooModel("electra", "transformers", _hf("ElectraConfig", "ElectraForMaskedLM",
                                                embedding_size=16)),
        ZooModel("mobilebert", "transformers", _hf(
            "MobileBertConfig", "MobileBertForMaskedLM", embedding_size=16,
            intra_bottleneck_size=16, true_hidden_size=16, num_feedforward_networks=2)),
        ZooModel("squeezebert", "transformers", _hf("SqueezeBertConfig",
                                                    "SqueezeBertForMaskedLM", embedding_size=32)),
        ZooModel("convbert", "transformers", _hf("ConvBertConfig", "ConvBertForMaskedLM",
                                                 embedding_size=32)),
        ZooModel("deberta", "transformers", _hf("DebertaConfig", "DebertaForMaskedLM",
                                                relative_attention=True,
                                                pos_att_type=["p2c", "c2p"])),
        ZooModel("ernie", "transformers", _hf("ErnieConfig", "ErnieForMaskedLM")),
        ZooModel("funnel", "transformers", _hf("FunnelConfig", "FunnelForMaskedLM",
                                               drop=("num_hidden_layers",),
                                               block_sizes=[1, 1], d_model=32, n_head=2,
                                               d_head=16, d_inner=64)),
        ZooModel("megatron_bert", "transformers", _hf("MegatronBertConfig",
                                                      "MegatronBertForMaskedLM")),
        ZooModel("rembert", "transformers", _hf("RemBertConfig", "RemBertForMaskedLM",
                                                input_embedding_size=16,
                                                output_embedding_size=16)),
        ZooModel("big_bird", "transformers", _hf("BigBirdConfig", "BigBirdForMaskedLM",
                                                 attention_type="original_full")),
        ZooModel("xlm", "transformers", _hf("XLMConfig", "XLMWithLMHeadModel", emb_dim=32,
                                            n_layers=2, n_heads=2)),
        ZooModel("modernbert", "transformers", SWEEP_MODERNBERT),
        ZooModel("mpnet", "transformers", _hf("MPNetConfig", "MPNetForMaskedLM")),
        ZooModel("camembert", "transformers", _hf("CamembertConfig", "CamembertForMaskedLM",
                                                  pad_token_id=1)),
        # encoder-decoders
        ZooModel("whisper", "transformers", _whisper),
        ZooModel("siglip", "transformers", _siglip),
        ZooModel("mbart", "transformers", _hf_seq2seq("MBartConfig",
                                                      "MBartForConditionalGeneration")),
        ZooModel("pegasus", "transformers", _hf_seq2seq("PegasusConfig",
                                                        "PegasusForConditionalGeneration")),
        ZooModel("marian", "transformers", _hf_seq2seq("MarianConfig", "MarianMTModel",
                                                       decoder_vocab_size=VOCAB)),
        ZooModel("blenderbot", "transformers", _hf_seq2seq(
            "BlenderbotSmallConfig", "BlenderbotSmallForConditionalGeneration")),
        ZooModel("mt5", "transformers", _t5_like("MT5Config", "MT5ForConditionalGeneration")),
        ZooModel("umt5", "transformers", _t5_like("UMT5Config",
                                                  "UMT5ForConditionalGeneration")),
        ZooModel("longt5", "transformers", _t5_like("LongT5Config",
                                                    "LongT5ForConditionalGeneration")),
        # vision (transformers)
        ZooModel("hf_deit", "transformers", _hf_vision("DeiTConfig",
                                                       "DeiTForImageClassification",
                                                       **IMAGE_SMALL)),
        ZooModel("hf_beit", "transformers", _hf_vision(
            "BeitConfig", "BeitForImageClassification", use_relative_position_bias=True,
            **IMAGE_SMALL)),
        ZooModel("hf_dinov2", "transformers", _hf_vision("Dinov2Config", "Dinov2Model",
                                                         **IMAGE_SMALL)),
        ZooModel("hf_swin", "transformers", _hf_vision(
            "SwinConfig", "SwinForImageClassification", image_size=32, patch_size=2,
            embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4, num_labels=10)),
        ZooModel("hf_convnext", "transformers", _hf_vision(
            "ConvNextConfig", "ConvNextForImageClassification", hidden_sizes=[8, 16, 32, 64],
            depths=[1, 1, 1, 1], num_labels=10)),
        ZooModel("hf_resnet", "transformers", _hf_vision(
            "ResNetConfig", "ResNetForImageClassification", embedding_size=8,
            hidden_sizes=[8, 16, 32, 64], depths=[1, 1, 1, 1], num_labels=10)),
        ZooModel("segformer", "transformers", _hf_vision(
            "SegformerConfig", "SegformerForSemanticSegmentation", hidden_sizes=[8, 16, 24, 32],
            num_attention_heads=[1, 1, 2, 2], depths=[1, 1, 1, 1], decoder_hidden_size=32,
            num_labels=10)),
        ZooModel("mobilevit", "transformers", _hf_vision(
            "MobileViTConfig", "MobileViTForImageClassification", image_size=32,
            hidden_sizes=[16, 24, 32], neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64],
            num_labels=10)),
        ZooModel("levit", "transformers", _hf_vision(
            "LevitConfig", "LevitForImageClassification", image_size=32, hidden_sizes=[16, 32, 48],
            num_attention_heads=[1, 2, 3], depths=[1, 1, 1], key_dim=[8, 8, 8],
            num_labels=10)),
        ZooModel("clip_vision", "transformers", _hf_vision(
            "CLIPVisionConfig", "CLIPVisionModel", image_size=32, patch_size=8, hidden_size=32,
            intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)),
        ZooModel("siglip_vision", "transformers", _hf_vision(
            "SiglipVisionConfig", "SiglipVisionModel", image_size=32, patch_size=8,
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)),
        # other configurations of zoo models: padding, extra outputs, tuple outputs, the eager
        # attention implementation, a cache kept by the caller
        ZooModel("llama+padded_mask", "transformers", _variant(MODELS["llama"].build, pad=True)),
        ZooModel("bert+padded_mask", "transformers", _variant(MODELS["bert"].build, pad=True)),
        ZooModel("gpt2+padded_mask", "transformers", _variant(MODELS["gpt2"].build, pad=True)),
        ZooModel("llama+all_outputs", "transformers", _variant(
            _zoo_build("llama", _attn_implementation="eager"), output_hidden_states=True,
            output_attentions=True)),
        ZooModel("bert+all_outputs", "transformers", _variant(
            _zoo_build("bert", _attn_implementation="eager"), output_hidden_states=True,
            output_attentions=True)),
        ZooModel("t5+all_outputs", "transformers", _variant(
            MODELS["t5"].build, output_hidden_states=True, output_attentions=True)),
        ZooModel("gpt2+tuple_out", "transformers", _variant(MODELS["gpt2"].build,
                                                            return_dict=False)),
        ZooModel("qwen2+eager_attn", "transformers", _zoo_build(
            "qwen2", _attn_implementation="eager")),
        ZooModel("mistral+eager_attn", "transformers", _zoo_build(
            "mistral", _attn_implementation="eager")),
        ZooModel("llama+no_cache", "transformers", _variant(MODELS["llama"].build,
                                                            use_cache=False)),
        ZooModel("bart+padded_mask", "transformers", _variant(MODELS["bart"].build, pad=True)),
        # (session 12) every output of other families: T5's multilingual twin (sdpa attention,
        # which warns once per call that it cannot return weights), Phi and GPT-BigCode with the
        # eager attention
        ZooModel("mt5+all_outputs", "transformers", _variant(
            _t5_like("MT5Config", "MT5ForConditionalGeneration"), output_hidden_states=True,
            output_attentions=True)),
        ZooModel("phi+all_outputs", "transformers", _variant(
            _hf("PhiConfig", "PhiForCausalLM", partial_rotary_factor=0.5,
                attn_implementation="eager"), output_hidden_states=True, output_attentions=True)),
        ZooModel("gpt_bigcode+all_outputs", "transformers", _variant(
            _hf("GPTBigCodeConfig", "GPTBigCodeForCausalLM", n_inner=64, multi_query=True,
                resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="eager"),
            output_hidden_states=True, output_attentions=True)),
        # (session 13) tuple outputs, hidden states alone, every output of an encoder, bf16
        # weights, batch 1, a padded mask on ELECTRA, a DynamicCache passed in
        ZooModel("phi+tuple_out", "transformers", _variant(
            _hf("PhiConfig", "PhiForCausalLM", partial_rotary_factor=0.5), return_dict=False)),
        ZooModel("llama+hidden_states", "transformers", _variant(
            MODELS["llama"].build, output_hidden_states=True)),
        ZooModel("cohere+hidden_tuple", "transformers", _variant(
            _hf("CohereConfig", "CohereForCausalLM", **KV2), output_hidden_states=True,
            return_dict=False)),
        ZooModel("roberta+all_outputs", "transformers", _variant(
            _zoo_build("roberta", _attn_implementation="eager"), output_hidden_states=True,
            output_attentions=True)),
        ZooModel("llama+bf16", "transformers", _retyped(MODELS["llama"].build, bf16=True)),
        ZooModel("bert+bf16", "transformers", _retyped(MODELS["bert"].build, bf16=True)),
        ZooModel("llama+batch1", "transformers", _retyped(MODELS["llama"].build, batch1=True)),
        ZooModel("electra+padded_mask", "transformers", _variant(
            _hf("ElectraConfig", "ElectraForMaskedLM", embedding_size=16), pad=True)),
        ZooModel("llama+dynamic_cache", "transformers", _retyped(MODELS["llama"].build,
                                                                 cache=True)),
        ZooModel("qwen2+dynamic_cache", "transformers", _retyped(MODELS["qwen2"].build,
                                                                 cache=True)),
        ZooModel("modernbert+padded_mask", "transformers", _variant(
            SWEEP_MODERNBERT, pad=True)),
        ZooModel("llama+inputs_embeds", "transformers", _inputs_changed(MODELS["llama"].build,
                                                                        "embeds")),
        ZooModel("t5+encoder_outputs", "transformers", _inputs_changed(MODELS["t5"].build,
                                                                       "encoder_outputs")),
        ZooModel("bert+token_types", "transformers", _inputs_changed(MODELS["bert"].build,
                                                                     "token_types")),
        ZooModel("qwen2_moe+router_logits", "transformers", _variant(_hf(
            "Qwen2MoeConfig", "Qwen2MoeForCausalLM", num_key_value_heads=2, num_experts=4,
            num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32),
            output_router_logits=True)),
        ZooModel("mixtral+router_logits", "transformers", _variant(
            MODELS["mixtral"].build, output_router_logits=True)),
        ZooModel("gemma2+softcapping", "transformers", _hf(
            "Gemma2Config", "Gemma2ForCausalLM", num_key_value_heads=2, head_dim=8,
            sliding_window=4, attn_implementation="eager", attn_logit_softcapping=50.0,
            final_logit_softcapping=30.0)),
        ZooModel("whisper+all_outputs", "transformers", _variant(
            _whisper, output_attentions=True, output_hidden_states=True)),
        ZooModel("olmo+eager_attn", "transformers", _hf(
            "OlmoConfig", "OlmoForCausalLM", attn_implementation="eager", **KV2)),
        ZooModel("gemma3+eager_attn", "transformers", _hf(
            "Gemma3TextConfig", "Gemma3ForCausalLM", num_key_value_heads=2, head_dim=8,
            sliding_window=4, attn_implementation="eager")),
        # (--mode train) activation checkpointing of every layer
        ZooModel("llama+checkpointing", "transformers", _variant(MODELS["llama"].build,
                                                                 checkpointing=True)),
        ZooModel("bert+checkpointing", "transformers", _variant(MODELS["bert"].build,
                                                                checkpointing=True)),
        # audio
        ZooModel("wav2vec2", "transformers", _hf_audio("Wav2Vec2Config", "Wav2Vec2ForCTC",
                                                       **WAV2VEC)),
        ZooModel("hubert", "transformers", _hf_audio("HubertConfig", "HubertModel", **WAV2VEC)),
        # timm
        ZooModel("timm_resnet10t", "timm", _timm("resnet10t")),
        ZooModel("timm_efficientnet_b0", "timm", _timm("efficientnet_b0")),
        ZooModel("timm_ghostnet", "timm", _timm("ghostnet_100")),
        ZooModel("timm_mobilevitv2", "timm", _timm("mobilevitv2_050")),
        ZooModel("timm_edgenext", "timm", _timm("edgenext_xx_small")),
        ZooModel("timm_lcnet", "timm", _timm("lcnet_050")),
        ZooModel("timm_deit_distilled", "timm", _timm(
            "deit_tiny_distilled_patch16_224", img_size=32, patch_size=8)),
        ZooModel("timm_mixer", "timm", _timm("mixer_s16_224", img_size=32)),
        ZooModel("timm_beit", "timm", _timm("beit_base_patch16_224", img_size=32, patch_size=8,
                                            embed_dim=32, depth=2, num_heads=2)),
        ZooModel("timm_poolformer", "timm", _timm("poolformer_s12")),
        ZooModel("timm_densenet", "timm", _timm("densenet121")),
        ZooModel("timm_levit", "timm", _timm("levit_128s", img_size=32)),
        ZooModel("timm_fastvit", "timm", _timm("fastvit_t8")),
        ZooModel("timm_eva02", "timm", _timm("eva02_tiny_patch14_224", img_size=32,
                                             patch_size=8)),
        ZooModel("timm_vit_dynamic_size", "timm", _timm(
            "vit_tiny_patch16_224", img_size=32, patch_size=8, dynamic_img_size=True)),
        ZooModel("timm_cait", "timm", _timm("cait_xxs24_224", img_size=32, patch_size=8,
                                            depth=2)),
        ZooModel("timm_xcit", "timm", _timm("xcit_nano_12_p16_224", img_size=32, depth=2)),
        # torchvision
        ZooModel("tv_squeezenet", "torchvision", _torchvision("squeezenet1_0")),
        ZooModel("tv_shufflenet", "torchvision", _torchvision("shufflenet_v2_x0_5")),
        ZooModel("tv_mnasnet", "torchvision", _torchvision("mnasnet0_5")),
        ZooModel("tv_regnet_y", "torchvision", _torchvision("regnet_y_400mf")),
        ZooModel("tv_googlenet", "torchvision", _torchvision_custom(
            lambda m: m.googlenet(num_classes=10, aux_logits=False, init_weights=True))),
        ZooModel("tv_vit", "torchvision", _torchvision_custom(
            lambda m: m.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                                          hidden_dim=32, mlp_dim=64, num_classes=10))),
        ZooModel("tv_swin_t", "torchvision", _torchvision("swin_t")),
        ZooModel("tv_mobilenet_v2", "torchvision", _torchvision("mobilenet_v2")),
        ZooModel("tv_deeplabv3", "torchvision", _torchvision_custom(
            lambda m: m.segmentation.deeplabv3_mobilenet_v3_large(
                weights=None, weights_backbone=None, num_classes=CLASSES_SEG))),
        ZooModel("tv_maxvit", "torchvision", _torchvision_custom(
            lambda m: m.MaxVit(input_size=(32, 32), stem_channels=8, partition_size=2,
                               block_channels=[8, 16], block_layers=[1, 1], head_dim=4,
                               stochastic_depth_prob=0.0, num_classes=10))),
        # detection (eval): region proposals, NMS, RoI pooling, box (and mask) heads
        ZooModel("tv_fasterrcnn_mobilenet", "torchvision", _detection(
            "fasterrcnn_mobilenet_v3_large_320_fpn")),
        ZooModel("tv_maskrcnn", "torchvision", _detection(
            "maskrcnn_resnet50_fpn", min_size=224, max_size=224)),
    ]
}  # fmt: skip


# Causal LMs for --mode generate_*: the zoo's decoders (GPT-2 and Llama have the zoo's own
# generate cases) and the sweep's, of several attention and cache designs.
GENERATE = (
    "gpt2", "llama", "qwen2", "mistral", "gemma", "gpt_neox", "opt", "mixtral", "gpt_neo",
    "gptj", "bloom", "falcon", "phi3", "gemma2", "qwen3", "starcoder2", "gpt_bigcode",
)  # fmt: skip


def _first_line(text: str, limit: int = 140) -> str:
    return text.strip().splitlines()[0][:limit] if text.strip() else ""


def sweep_one(model: ZooModel, backend: str, mode: str = "infer") -> dict[str, Any]:
    """One model's row: Strata (``backend``) and torch.compile (eager) beside eager; ``mode``
    ``train`` runs forward with labels, the loss's backward, and compares every gradient."""
    c = Case(model, mode)
    name = model.name if mode == "infer" else f"{model.name}-{mode}"
    row: dict[str, Any] = {"model": name, "library": model.library}
    start = time.perf_counter()
    try:
        built = model.build()
        row["params"] = sum(p.numel() for p in built.model.parameters())
        expected = run_eager(c)
    except Exception as exc:  # noqa: BLE001 - a model that does not build is reported
        row.update(status="no eager", note=_first_line(f"{type(exc).__name__}: {exc}"))
        return row
    try:
        theirs = run_torch(c, "eager")
        row.update(torch_graphs=theirs.graphs, torch_breaks=theirs.breaks,
                   torch_compiles=theirs.compiles,
                   torch_reason=_first_line(theirs.reasons[0]) if theirs.reasons else "")
    except Exception as exc:  # noqa: BLE001
        row.update(torch_graphs=None, torch_breaks=None,
                   torch_reason=_first_line(f"torch.compile failed: {type(exc).__name__}: {exc}"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            ours = run_strata(c, backend)
        except Exception as exc:  # noqa: BLE001
            row.update(status="crash", note=_first_line(f"{type(exc).__name__}: {exc}"),
                       trace=traceback.format_exc()[-2000:])
            row["seconds"] = round(time.perf_counter() - start, 1)
            return row
    crashed = [str(w.message) for w in caught if "could not compile" in str(w.message)]
    row.update(graphs=ours.graphs, breaks=ours.breaks, compiles=ours.compiles,
               reason=_first_line(ours.reasons[0]) if ours.reasons else "")
    try:
        assert len(ours.tensors) == len(expected), f"{len(ours.tensors)} tensors vs {len(expected)}"
        for a, e in zip(ours.tensors, expected, strict=True):
            torch.testing.assert_close(a, e, **tolerance(backend))
        correct = True
    except AssertionError as exc:
        correct = False
        row["note"] = _first_line(str(exc))
    row["correct"] = correct
    if crashed:
        row.update(status="crash", note=_first_line(crashed[0]))
    elif not correct:
        row["status"] = "wrong"
    elif row["torch_graphs"] is None:
        row["status"] = "torch fails"
    elif mode in GENERATE_MODES and ours.compiles > row["torch_compiles"]:
        row["status"] = "more recompiles"
    elif (ours.graphs, ours.breaks) == (row["torch_graphs"], row["torch_breaks"]):
        row["status"] = "same"
    elif ours.breaks > row["torch_breaks"] or ours.graphs > row["torch_graphs"]:
        row["status"] = "more breaks"
    else:
        row["status"] = "fewer"
    row["seconds"] = round(time.perf_counter() - start, 1)
    return row


# A path up to the installed libraries or the standard library, left out of the notes.
_LIBRARY_PREFIX = re.compile(r"/\S*/(site-packages|lib/python3\.\d+)/")


def _markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| model | library | params | Strata graphs/breaks | torch graphs/breaks | matches eager "
        "| status | first Strata break / note |",
        "|---|---|---:|---|---|---|---|---|",
    ]
    for r in rows:
        ours = f"{r.get('graphs', '-')}/{r.get('breaks', '-')}"
        theirs = f"{r.get('torch_graphs', '-')}/{r.get('torch_breaks', '-')}"
        if "-generate" in r["model"]:  # and the frame compiles: the recompiles as it decodes
            ours += f" ({r.get('compiles', '-')} compiles)"
            theirs += f" ({r.get('torch_compiles', '-')} compiles)"
        note = _LIBRARY_PREFIX.sub("", r.get("note") or r.get("reason") or "")
        note = note.replace("|", "\\|")
        correct = {True: "yes", False: "**no**"}.get(r.get("correct"), "-")  # type: ignore[call-overload]
        lines.append(
            f"| {r['model']} | {r['library']} | {r.get('params', '-')} | {ours} | {theirs} "
            f"| {correct} | {r.get('status')} | {note} |"
        )
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.get("status", "?")] = counts.get(r.get("status", "?"), 0) + 1
    summary = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
    return "\n".join(lines) + f"\n\n{len(rows)} models; {summary}\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="models of SWEEP (default: all)")
    parser.add_argument("--backend", default="aot_eager")
    parser.add_argument(
        "--mode", default="infer", choices=["infer", "train", "dynamic", *GENERATE_MODES[1:]]
    )
    parser.add_argument("--json", help="append the rows to this JSON file (replacing a model's)")
    parser.add_argument("--report", help="print the Markdown table of this JSON file and exit")
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args(argv)
    if args.list:
        print(" ".join(SWEEP))
        return
    if args.report:
        print(_markdown(json.loads(Path(args.report).read_text())))
        return
    torch.set_num_threads(1)
    generating = args.mode in GENERATE_MODES
    known = {**MODELS, **SWEEP} if generating else SWEEP
    unknown = [n for n in args.names if n not in known]
    if unknown:
        parser.error(f"unknown models: {unknown}")
    rows = []
    for name in args.names or list(GENERATE if generating else SWEEP):
        row = sweep_one(known[name], args.backend, args.mode)
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "trace"}), flush=True)
        if args.json:
            path = Path(args.json)
            kept = json.loads(path.read_text()) if path.exists() else []
            kept = [r for r in kept if r["model"] != row["model"]] + [row]
            order = [*GENERATE, *SWEEP]

            def position(r: dict[str, Any]) -> tuple[int, str]:
                base = r["model"].split("-")[0]
                return (order.index(base) if base in order else 1 << 30, r["model"])

            kept.sort(key=position)
            path.write_text(json.dumps(kept, indent=1))
    print(_markdown(rows))


if __name__ == "__main__":
    main()
