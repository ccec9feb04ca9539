"""The zoo: real models of transformers, torchvision and timm in tiny configs with random weights.

Nothing is downloaded: every model is built from a config (or a constructor) with seeded random
weights, and every input comes from a seeded generator, so two builds of a model are identical and
an eager run and a compiled run can be compared exactly.

Each ``ZooModel`` builds a ``Built``: the module, the inputs of a forward call (and inputs of a
second sequence length or batch, for the dynamic-shape cases), and how to read the tensors to
compare out of its output. ``CASES`` lists what the tests and the benchmark run:

- ``infer``: ``model.eval()``, a compiled forward (``compile(model)``, as users write it);
- ``train``: ``model.train()`` (dropout off), a compiled forward that returns the loss, then
  ``loss.backward()``; gradients are compared;
- ``dynamic``: inference at two sequence lengths (or batch sizes) under ``dynamic=True``;
- ``generate``: greedy decoding with a KV cache, a loop of compiled steps (GPT-2, Llama and
  Mistral, whose sliding-window cache takes other code paths);
- ``generate_hf`` / ``generate_static``: transformers' own ``model.generate(...)`` (greedy, 8 new
  tokens) with the forward compiled as users write it (``model.forward = compile(model.forward)``),
  with the default dynamic cache / a ``StaticCache`` (``cache_implementation="static"``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .vision import import_timm, import_torchvision, import_transformers

__all__ = [
    "CASES",
    "GENERATE_MODES",
    "MODELS",
    "Built",
    "Case",
    "ZooModel",
    "case",
    "decode",
    "hf_generate",
    "iter_cases",
    "make_step",
    "output_tensors",
    "run_case",
]

SEED = 20261126
VOCAB = 128
SEQ, SEQ2 = 8, 12
BATCH = 2
IMAGE = 32
GENERATE_MODES = ("generate", "generate_hf", "generate_static")
NEW_TOKENS = 8  # generate_hf, generate_static
CLASSES = 10


@dataclass
class Built:
    """One fresh, deterministic copy of a zoo model and its inputs.

    ``kwargs`` is the forward call; ``kwargs2`` the same call at a second sequence length (or
    batch); ``labels`` the extra keyword arguments that make the forward return a loss (language
    models) -- vision models get their loss from ``image_loss``.
    """

    model: nn.Module
    kwargs: dict[str, Any]
    kwargs2: dict[str, Any]
    labels: dict[str, Any] = field(default_factory=dict)
    labels2: dict[str, Any] = field(default_factory=dict)
    targets: torch.Tensor | None = None  # vision classification targets


@dataclass(frozen=True)
class ZooModel:
    """A zoo entry: ``build()`` gives a fresh ``Built``; ``train``/``generate``: its extra cases."""

    name: str
    library: str  # "transformers", "torchvision" or "timm"
    build: Callable[[], Built]
    train: bool = False
    generate: bool = False


def _generator(offset: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(SEED + offset)


def _tokens(batch: int, seq: int, offset: int = 0) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, seq), generator=_generator(offset))


def _images(batch: int, offset: int = 0) -> torch.Tensor:
    return torch.randn(batch, 3, IMAGE, IMAGE, generator=_generator(offset))


def _seeded(make: Callable[[], nn.Module]) -> nn.Module:
    torch.manual_seed(SEED)
    return make()


# --------------------------------------------------------------------------- transformers


def _lm(make: Callable[[Any], nn.Module], config: Any, with_mask: bool = True) -> Built:
    """A language model: ``input_ids`` (and an attention mask), labels = the inputs."""
    model = _seeded(lambda: make(config))
    ids, ids2 = _tokens(BATCH, SEQ), _tokens(BATCH, SEQ2, 1)
    kwargs: dict[str, Any] = {"input_ids": ids}
    kwargs2: dict[str, Any] = {"input_ids": ids2}
    if with_mask:
        kwargs["attention_mask"] = torch.ones_like(ids)
        kwargs2["attention_mask"] = torch.ones_like(ids2)
    return Built(model, kwargs, kwargs2, {"labels": ids.clone()}, {"labels": ids2.clone()})


def _gpt2() -> Built:
    transformers = import_transformers()

    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2, n_head=2,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    return _lm(transformers.GPT2LMHeadModel, config)


def _bert() -> Built:
    transformers = import_transformers()

    config = transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    return _lm(transformers.BertForMaskedLM, config)


def _distilbert() -> Built:
    transformers = import_transformers()

    config = transformers.DistilBertConfig(
        vocab_size=VOCAB, dim=32, hidden_dim=64, n_layers=2, n_heads=2,
        max_position_embeddings=64, dropout=0.0, attention_dropout=0.0,
    )  # fmt: skip
    return _lm(transformers.DistilBertForMaskedLM, config)


def _llama() -> Built:
    transformers = import_transformers()

    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    return _lm(transformers.LlamaForCausalLM, config)


def _qwen2() -> Built:
    transformers = import_transformers()

    config = transformers.Qwen2Config(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    return _lm(transformers.Qwen2ForCausalLM, config)


def _t5() -> Built:
    transformers = import_transformers()

    config = transformers.T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2,
        dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0,
    )  # fmt: skip
    model = _seeded(lambda: transformers.T5ForConditionalGeneration(config))
    ids, ids2 = _tokens(BATCH, SEQ), _tokens(BATCH, SEQ2, 1)
    dec, dec2 = _tokens(BATCH, SEQ // 2, 2), _tokens(BATCH, SEQ2 // 2, 3)
    return Built(
        model,
        {"input_ids": ids, "decoder_input_ids": dec},
        {"input_ids": ids2, "decoder_input_ids": dec2},
        {"labels": dec.clone()},
        {"labels": dec2.clone()},
    )


def _bart() -> Built:
    transformers = import_transformers()

    config = transformers.BartConfig(
        vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_position_embeddings=64, dropout=0.0, attention_dropout=0.0,
        activation_dropout=0.0, pad_token_id=1, bos_token_id=0, eos_token_id=2,
        decoder_start_token_id=2,
    )  # fmt: skip
    model = _seeded(lambda: transformers.BartForConditionalGeneration(config))
    ids, ids2 = _tokens(BATCH, SEQ), _tokens(BATCH, SEQ2, 1)
    dec, dec2 = _tokens(BATCH, SEQ // 2, 2), _tokens(BATCH, SEQ2 // 2, 3)
    return Built(
        model,
        {"input_ids": ids, "attention_mask": torch.ones_like(ids), "decoder_input_ids": dec},
        {"input_ids": ids2, "attention_mask": torch.ones_like(ids2), "decoder_input_ids": dec2},
        {"labels": dec.clone()},
        {"labels": dec2.clone()},
    )


def _mistral() -> Built:
    transformers = import_transformers()

    # A sliding window shorter than the sequences, so the window mask is exercised.
    config = transformers.MistralConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        sliding_window=4,
    )  # fmt: skip
    return _lm(transformers.MistralForCausalLM, config)


def _gemma() -> Built:
    transformers = import_transformers()

    config = transformers.GemmaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=1, head_dim=8, max_position_embeddings=64,
    )  # fmt: skip
    return _lm(transformers.GemmaForCausalLM, config)


def _gpt_neox() -> Built:
    transformers = import_transformers()

    config = transformers.GPTNeoXConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=64, rotary_pct=0.5,
        hidden_dropout=0.0, attention_dropout=0.0,
    )  # fmt: skip
    return _lm(transformers.GPTNeoXForCausalLM, config)


def _opt() -> Built:
    transformers = import_transformers()

    config = transformers.OPTConfig(
        vocab_size=VOCAB, hidden_size=32, ffn_dim=64, num_hidden_layers=2,
        num_attention_heads=2, max_position_embeddings=64, word_embed_proj_dim=32,
        dropout=0.0, attention_dropout=0.0, pad_token_id=1,
    )  # fmt: skip
    return _lm(transformers.OPTForCausalLM, config)


def _roberta() -> Built:
    transformers = import_transformers()

    config = transformers.RobertaConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, pad_token_id=1,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    return _lm(transformers.RobertaForMaskedLM, config)


def _deberta_v2() -> Built:
    transformers = import_transformers()

    # Disentangled attention with relative positions (position buckets, c2p and p2c terms).
    config = transformers.DebertaV2Config(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, relative_attention=True,
        position_buckets=8, max_relative_positions=16, pos_att_type=["p2c", "c2p"],
        norm_rel_ebd="layer_norm", share_att_key=True, position_biased_input=False,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    return _lm(transformers.DebertaV2ForMaskedLM, config)


def _albert() -> Built:
    transformers = import_transformers()

    config = transformers.AlbertConfig(
        vocab_size=VOCAB, embedding_size=16, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=2, intermediate_size=64, max_position_embeddings=64,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    return _lm(transformers.AlbertForMaskedLM, config)


def _clip() -> Built:
    transformers = import_transformers()

    text = {
        "vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 2, "max_position_embeddings": 32,
        "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2,
    }  # fmt: skip
    vision = {
        "image_size": IMAGE, "patch_size": 8, "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 2,
    }  # fmt: skip
    config = transformers.CLIPConfig(text_config=text, vision_config=vision, projection_dim=16)
    model = _seeded(lambda: transformers.CLIPModel(config))
    ids, ids2 = _tokens(BATCH, SEQ), _tokens(BATCH, SEQ2, 1)
    return Built(
        model,
        {"input_ids": ids, "attention_mask": torch.ones_like(ids), "pixel_values": _images(BATCH)},
        {"input_ids": ids2, "attention_mask": torch.ones_like(ids2),
         "pixel_values": _images(BATCH, 1)},
        {"return_loss": True},
        {"return_loss": True},
    )  # fmt: skip


def _vit() -> Built:
    transformers = import_transformers()

    config = transformers.ViTConfig(
        image_size=IMAGE, patch_size=8, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=2, intermediate_size=64, num_labels=CLASSES,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    model = _seeded(lambda: transformers.ViTForImageClassification(config))
    labels = torch.randint(0, CLASSES, (BATCH,), generator=_generator(4))
    return Built(
        model,
        {"pixel_values": _images(BATCH)},
        {"pixel_values": _images(BATCH + 1, 1)},
        {"labels": labels},
        {"labels": torch.randint(0, CLASSES, (BATCH + 1,), generator=_generator(5))},
    )


def _whisper_encoder() -> Built:
    transformers = import_transformers()
    from transformers.models.whisper import modeling_whisper

    config = transformers.WhisperConfig(
        vocab_size=VOCAB, num_mel_bins=16, d_model=32, encoder_layers=2,
        encoder_attention_heads=2, decoder_layers=1, decoder_attention_heads=2,
        encoder_ffn_dim=64, decoder_ffn_dim=64, max_source_positions=16,
        max_target_positions=16, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        decoder_start_token_id=1, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
    )  # fmt: skip
    model = _seeded(lambda: modeling_whisper.WhisperEncoder(config))
    # The encoder requires exactly 2 * max_source_positions frames: the batch varies instead.
    frames = 2 * config.max_source_positions
    feats = torch.randn(BATCH, config.num_mel_bins, frames, generator=_generator())
    feats2 = torch.randn(BATCH + 1, config.num_mel_bins, frames, generator=_generator(1))
    return Built(model, {"input_features": feats}, {"input_features": feats2})


def _mixtral() -> Built:
    transformers = import_transformers()

    # Sparse mixture of experts: top-2 routing over 4 experts.
    config = transformers.MixtralConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        num_local_experts=4, num_experts_per_tok=2,
    )  # fmt: skip
    return _lm(transformers.MixtralForCausalLM, config)


def _ctrl() -> Built:
    transformers = import_transformers()

    # Scales its embeddings by np.sqrt(d_model): NumPy on constants.
    config = transformers.CTRLConfig(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, dff=64, n_positions=64,
        resid_pdrop=0.0, embd_pdrop=0.0,
    )  # fmt: skip
    return _lm(transformers.CTRLLMHeadModel, config)


def _wav2vec2() -> Built:
    transformers = import_transformers()

    # A conv feature encoder and a weight_norm (parametrized) positional convolution.
    config = transformers.Wav2Vec2Config(
        vocab_size=32, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 4), conv_kernel=(10, 4),
        num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2, hidden_dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0, feat_proj_dropout=0.0,
        mask_time_prob=0.0,
    )  # fmt: skip
    model = _seeded(lambda: transformers.Wav2Vec2ForCTC(config))
    wave = torch.randn(BATCH, 1600, generator=_generator())
    return Built(model, {"input_values": wave}, {"input_values": wave[:, :1200]})


# --------------------------------------------------------------------------- vision


def _vision(make: Callable[[], nn.Module]) -> Built:
    model = _seeded(make)
    targets = torch.randint(0, CLASSES, (BATCH,), generator=_generator(4))
    return Built(model, {"x": _images(BATCH)}, {"x": _images(BATCH + 1, 1)}, targets=targets)


def _torchvision(name: str) -> Callable[[], Built]:
    def build() -> Built:
        models = import_torchvision().models
        return _vision(lambda: getattr(models, name)(num_classes=CLASSES))

    return build


def _timm(name: str, **kwargs: Any) -> Callable[[], Built]:
    def build() -> Built:
        timm = import_timm()
        return _vision(
            lambda: timm.create_model(name, pretrained=False, num_classes=CLASSES, **kwargs)
        )

    return build


MODELS: dict[str, ZooModel] = {
    m.name: m
    for m in [
        ZooModel("gpt2", "transformers", _gpt2, train=True, generate=True),
        ZooModel("bert", "transformers", _bert, train=True),
        ZooModel("t5", "transformers", _t5, train=True),
        ZooModel("llama", "transformers", _llama, train=True, generate=True),
        ZooModel("qwen2", "transformers", _qwen2, train=True),
        ZooModel("distilbert", "transformers", _distilbert, train=True),
        ZooModel("vit", "transformers", _vit),
        ZooModel("whisper_encoder", "transformers", _whisper_encoder),
        ZooModel("resnet18", "torchvision", _torchvision("resnet18"), train=True),
        ZooModel("mobilenet_v3_small", "torchvision", _torchvision("mobilenet_v3_small")),
        ZooModel("efficientnet_b0", "torchvision", _torchvision("efficientnet_b0")),
        ZooModel("convnext_tiny", "torchvision", _torchvision("convnext_tiny")),
        ZooModel("vit_tiny", "timm", _timm("vit_tiny_patch16_224", img_size=IMAGE), train=True),
        ZooModel("convnext_atto", "timm", _timm("convnext_atto")),
        ZooModel("mobilenetv3", "timm", _timm("mobilenetv3_small_050")),
        ZooModel("bart", "transformers", _bart, train=True),
        ZooModel("mistral", "transformers", _mistral, train=True, generate=True),
        ZooModel("gemma", "transformers", _gemma),
        ZooModel("gpt_neox", "transformers", _gpt_neox),
        ZooModel("opt", "transformers", _opt, train=True),
        ZooModel("roberta", "transformers", _roberta),
        ZooModel("deberta_v2", "transformers", _deberta_v2, train=True),
        ZooModel("albert", "transformers", _albert),
        ZooModel("clip", "transformers", _clip, train=True),
        ZooModel("resnet50", "torchvision", _torchvision("resnet50")),
        ZooModel("regnet", "timm", _timm("regnetx_002")),
        ZooModel("mixtral", "transformers", _mixtral, train=True),
        ZooModel("ctrl", "transformers", _ctrl),
        ZooModel("wav2vec2", "transformers", _wav2vec2),
        ZooModel("swin", "timm", _timm("swin_tiny_patch4_window7_224", img_size=IMAGE,
                                       window_size=2, embed_dim=24, depths=(1, 1, 2, 1),
                                       num_heads=(1, 2, 2, 4))),
    ]
}


# --------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    """One way of running a zoo model: ``infer``, ``train``, ``dynamic`` or ``generate``."""

    model: ZooModel
    mode: str

    @property
    def name(self) -> str:
        return f"{self.model.name}-{self.mode}"


def _cases() -> list[Case]:
    cases = []
    for m in MODELS.values():
        cases.append(Case(m, "infer"))
        if m.train:
            cases.append(Case(m, "train"))
        cases.append(Case(m, "dynamic"))
        if m.generate:
            cases += [Case(m, mode) for mode in GENERATE_MODES]
    return cases


CASES: list[Case] = _cases()


def case(name: str) -> Case:
    """The case named ``<model>-<mode>``."""
    for c in CASES:
        if c.name == name:
            return c
    raise KeyError(name)


def output_tensors(out: Any) -> list[torch.Tensor]:
    """The tensors of a forward's output, in order: a ModelOutput's fields, tuples, lists, dicts."""
    if isinstance(out, torch.Tensor):
        return [out]
    if hasattr(out, "to_tuple"):  # transformers' ModelOutput
        out = out.to_tuple()
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, list | tuple):
        return [t for item in out for t in output_tensors(item)]
    return []  # a cache object or None: compared through the decoded tokens


def _loss(built: Built, out: Any) -> torch.Tensor:
    if built.targets is not None:
        return nn.functional.cross_entropy(out, built.targets)
    return out.loss  # type: ignore[no-any-return]


def _image_kwargs(built: Built, kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """torchvision and timm take the image positionally."""
    if built.targets is not None or list(kwargs) == ["x"]:
        return (kwargs["x"],), {}
    return (), kwargs


def decode(step: Callable[..., Any], built: Built, new_tokens: int = 4) -> list[torch.Tensor]:
    """Greedy decoding with a KV cache: one call for the prompt, then one per new token.

    ``step`` is the model or its compiled form; returns every step's logits and the tokens.
    """
    ids = built.kwargs["input_ids"]
    mask = built.kwargs["attention_mask"]
    out = step(input_ids=ids, attention_mask=mask, use_cache=True)
    logits = [out.logits]
    tokens = [ids]
    for _ in range(new_tokens):
        nxt = out.logits[:, -1:].argmax(-1)
        tokens.append(nxt)
        mask = torch.cat([mask, torch.ones_like(nxt)], dim=1)
        out = step(
            input_ids=nxt, attention_mask=mask, past_key_values=out.past_key_values, use_cache=True
        )
        logits.append(out.logits)
    return [*logits, torch.cat(tokens, dim=1)]


def hf_generate(model: nn.Module, built: Built, static: bool) -> list[torch.Tensor]:
    """``model.generate``: greedy, ``NEW_TOKENS`` tokens; every step's logits and the tokens."""
    options: dict[str, Any] = {"max_new_tokens": NEW_TOKENS, "do_sample": False,
                               "output_logits": True, "return_dict_in_generate": True}  # fmt: skip
    if static:
        options["cache_implementation"] = "static"
    with torch.no_grad():
        out = model.generate(  # type: ignore[operator]
            input_ids=built.kwargs["input_ids"],
            attention_mask=built.kwargs["attention_mask"],
            pad_token_id=0,
            **options,
        )
    return [*out.logits, out.sequences]


def make_step(
    c: Case,
    built: Built,
    compile_fn: Callable[[nn.Module], Callable[..., Any]] | None,
) -> Callable[[], list[torch.Tensor]]:
    """One iteration of ``c`` on ``built``, its model compiled by ``compile_fn`` (None: eagerly).

    The step returns the tensors to compare with eager: outputs (and for ``train`` the loss, every
    parameter's gradient and the float buffers; for ``dynamic`` the outputs of both calls; for
    ``generate`` every step's logits and the tokens). A training step zeroes gradients first.
    """
    model = built.model
    model.train(c.mode == "train")
    if c.mode in ("generate_hf", "generate_static"):
        if compile_fn is not None:  # generate() calls the compiled forward at every step
            model.forward = compile_fn(model.forward)  # type: ignore[method-assign, arg-type]
        return lambda: hf_generate(model, built, static=c.mode == "generate_static")
    step: Callable[..., Any] = model if compile_fn is None else compile_fn(model)

    def generate() -> list[torch.Tensor]:
        with torch.no_grad():
            return decode(step, built)

    def train() -> list[torch.Tensor]:
        model.zero_grad(set_to_none=True)
        args, kwargs = _image_kwargs(built, built.kwargs)
        out = step(*args, **kwargs, **built.labels)
        loss = _loss(built, out)
        loss.backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        buffers = [b for b in model.buffers() if b.is_floating_point()]
        return [loss.detach(), *grads, *buffers]

    def infer() -> list[torch.Tensor]:
        results = []
        calls = [built.kwargs, built.kwargs2] if c.mode == "dynamic" else [built.kwargs]
        with torch.no_grad():
            for kwargs in calls:
                args, kw = _image_kwargs(built, kwargs)
                results.extend(output_tensors(step(*args, **kw)))
        return results

    return {"generate": generate, "train": train}.get(c.mode, infer)


def run_case(
    c: Case,
    built: Built,
    compile_fn: Callable[[nn.Module], Callable[..., Any]] | None,
) -> list[torch.Tensor]:
    """One run of ``c`` (see ``make_step``)."""
    return make_step(c, built, compile_fn)()


def iter_cases(names: Sequence[str] | None = None) -> Iterator[Case]:
    """The cases named (``<model>`` or ``<model>-<mode>``), or all of them."""
    for c in CASES:
        if not names or c.name in names or c.model.name in names:
            yield c
