"""inductor_lite on real models (torchvision, timm, transformers), CPU inference: eager vs
Strata vs torch.compile's inductor, side by side in one process.

Implementations: ``eager``; ``ours``: ``torch.compile(backend=compile_fx)`` (our backend under
torch's frontend: its graphs reach us with fake inputs and go through aot's runtime);
``strata``: ``compile_api.compile`` (Strata's own frontend with its default backend,
inductor_lite); ``torch``: ``torch.compile`` with its inductor.

Each model gets one random input (batch 1, tiny images and short sequences so that a run
stays short on a small machine); the implementations are timed interleaved (eager, ours,
inductor, eager, ...) with the process CPU clock (``--threads 1`` makes that the kernel
time), and the medians are reported with each compile time and the largest error against
eager (relative to eager's largest output).

    python benchmarks/inductor_cpu_models.py [--size 96] [--reps 10] [--only resnet18,...]
        [--impl eager,ours,strata,torch]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from zoo.vision import import_timm, import_torchvision, import_transformers  # noqa: E402

MODELS: dict[str, tuple[str, str]] = {
    "tv_efficientnet_b0": ("torchvision", "efficientnet_b0"),
    "tv_mobilenet_v3_small": ("torchvision", "mobilenet_v3_small"),
    "tv_regnet_y_400mf": ("torchvision", "regnet_y_400mf"),
    "tv_resnet18": ("torchvision", "resnet18"),
    "timm_mobilenetv3": ("timm", "mobilenetv3_small_100"),
    "timm_resnet18": ("timm", "resnet18"),
    "timm_vit_tiny": ("timm", "vit_tiny_patch16_224"),
    "timm_convnext_atto": ("timm", "convnext_atto"),
    # transformers, random weights, small configs of the real architectures
    "hf_gpt2": ("transformers", "gpt2"),
    "hf_bert": ("transformers", "bert"),
    "hf_vit": ("transformers", "vit"),
}
# tokens per sequence for the language models
SEQ = 128


def _hf(arch: str, size: int) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    tf = import_transformers()
    common: dict[str, Any] = {"num_hidden_layers": 4, "num_attention_heads": 4}
    if arch == "gpt2":
        cfg = tf.GPT2Config(
            vocab_size=1024, n_positions=SEQ, n_embd=256, n_layer=4, n_head=4,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
            use_cache=False, bos_token_id=0, eos_token_id=0,
        )  # fmt: skip
        ids = torch.randint(0, 1024, (1, SEQ))
        return tf.GPT2LMHeadModel(cfg).eval(), (ids,)
    if arch == "bert":
        cfg = tf.BertConfig(
            vocab_size=1024, hidden_size=256, intermediate_size=1024,
            max_position_embeddings=SEQ, **common,
        )  # fmt: skip
        return tf.BertModel(cfg).eval(), (torch.randint(0, 1024, (1, SEQ)),)
    cfg = tf.ViTConfig(
        image_size=size, patch_size=16, hidden_size=192, intermediate_size=768, **common
    )
    return tf.ViTModel(cfg).eval(), (torch.randn(1, 3, size, size),)


def first_tensor(out: Any) -> torch.Tensor:
    """The model's main output: a tensor, a ModelOutput's first field, a tuple's first item."""
    while not isinstance(out, torch.Tensor):
        out = out[0]
    return out


def build(name: str, size: int) -> torch.nn.Module:
    """A vision model (for the transformers ones use ``build_with_inputs``)."""
    return build_with_inputs(name, size)[0]


def build_with_inputs(name: str, size: int) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    lib, arch = MODELS[name]
    if lib == "transformers":
        return _hf(arch, size)
    image = (torch.randn(1, 3, size, size),)
    if lib == "torchvision":
        return getattr(import_torchvision().models, arch)().eval(), image
    kwargs: dict[str, Any] = {"img_size": size} if "vit" in arch else {}
    return import_timm().create_model(arch, pretrained=False, **kwargs).eval(), image


def compiled(impl: str, model: torch.nn.Module) -> Callable[..., Any]:
    if impl == "eager":
        return model
    if impl == "ours":
        from inductor_lite import compile_fx

        return torch.compile(copy.deepcopy(model), backend=compile_fx)  # type: ignore[no-any-return]
    if impl == "strata":
        import compile_api

        return compile_api.compile(copy.deepcopy(model))  # type: ignore[no-any-return]
    return torch.compile(copy.deepcopy(model), backend="inductor")  # type: ignore[no-any-return]


def _grads(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]


def train(args: argparse.Namespace, impls: list[str], names: list[str]) -> None:
    """One training step per call (train mode, forward, ``(out * probe).sum()`` with a fixed
    random probe, backward; gradients set to None before each call): times and the worst
    parameter gradient's error against eager's first step, relative to that gradient's
    largest value, for every implementation (eager's float32 too) against the same step in
    float64. (``out.mean()`` would not do: through a training batch norm its gradient cancels
    to rounding noise in some layers, for every implementation.)"""
    print(
        f"{'model (train step)':24s} "
        + " ".join(f"{k + ' ms':>10s}" for k in impls)
        + " "
        + " ".join(f"{k + ' x':>8s}" for k in impls[1:])
        + " "
        + " ".join(f"{k + ' compile s':>14s}" for k in impls[1:])
        + "  worst grad err vs float64 "
        + "/".join(impls)
    )
    for name in names:
        torch.manual_seed(0)
        torch.compiler.reset()
        model, x = build_with_inputs(name, args.size)
        model.train()
        # batch 2 (batch norm trains), the second sample independent of the first (a scaled
        # copy makes the late batch norms' variances nearly degenerate: float32 eager was then
        # 1e-1 off float64)
        x = tuple(torch.cat([t, torch.randn_like(t)]) for t in x)

        with torch.no_grad():
            shape = first_tensor(model(*x)).shape
        probe = torch.randn(shape, generator=torch.Generator().manual_seed(1))

        def step(fn: Callable[..., Any], module: torch.nn.Module) -> None:
            for p in module.parameters():
                p.grad = None
            (first_tensor(fn(*x)).float() * probe).sum().backward()

        exact = copy.deepcopy(model).double()
        for p in exact.parameters():
            p.grad = None
        (first_tensor(exact(*(t.double() for t in x))) * probe.double()).sum().backward()
        reference = _grads(exact)
        fns: dict[str, Callable[[], None]] = {}
        ctime, grads = {}, {}
        for impl in impls:
            fn = compiled(impl, model)
            # compiled() compiles a copy (torch's and Strata's OptimizedModule keep it)
            module = model if impl == "eager" else fn._orig_mod  # type: ignore[attr-defined]
            t0 = time.perf_counter()
            step(fn, module)
            ctime[impl] = time.perf_counter() - t0
            grads[impl] = _grads(module)
            fns[impl] = lambda fn=fn, module=module: step(fn, module)
        errs = []
        for impl in impls:
            worst = 0.0
            for g, r in zip(grads[impl], reference, strict=True):
                worst = max(worst, ((g - r).abs().max() / r.abs().max().clamp_min(1e-30)).item())
            errs.append(f"{worst:.1e}")
        times: dict[str, list[float]] = {k: [] for k in impls}
        for f in fns.values():
            f()
        for _ in range(args.reps):
            for impl, f in fns.items():
                t0 = time.process_time()
                f()
                times[impl].append(time.process_time() - t0)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        print(
            f"{name:24s} "
            + " ".join(f"{med[k]:10.2f}" for k in impls)
            + " "
            + " ".join(f"{med['eager'] / med[k]:8.2f}" for k in impls[1:])
            + " "
            + " ".join(f"{ctime[k]:14.1f}" for k in impls[1:])
            + "  "
            + "/".join(errs),
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=96)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", default=None)
    parser.add_argument("--impl", default="eager,ours,strata,torch")
    parser.add_argument("--train", action="store_true", help="time a training step instead")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    impls = args.impl.split(",")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.size}x{args.size}")
    if args.train:
        train(args, impls, args.only.split(",") if args.only else ["tv_resnet18"])
        return
    print(
        f"{'model':24s} "
        + " ".join(f"{k + ' ms':>10s}" for k in impls)
        + " "
        + " ".join(f"{k + ' x':>8s}" for k in impls[1:])
        + " "
        + " ".join(f"{k + ' compile s':>14s}" for k in impls[1:])
        + "  max rel err"
    )
    names = args.only.split(",") if args.only else list(MODELS)
    for name in names:
        torch.manual_seed(0)
        torch.compiler.reset()
        model, x = build_with_inputs(name, args.size)
        with torch.no_grad():
            ref = first_tensor(model(*x))
        fns, ctime, errs = {}, {}, []
        for impl in impls:
            fn = compiled(impl, model)
            t0 = time.perf_counter()
            with torch.no_grad():
                out = first_tensor(fn(*x))
            ctime[impl] = time.perf_counter() - t0
            errs.append(((out - ref).abs().max() / ref.abs().max()).item())
            fns[impl] = fn
        times: dict[str, list[float]] = {k: [] for k in impls}
        with torch.no_grad():
            for fn in fns.values():
                fn(*x)
                fn(*x)
            for _ in range(args.reps):
                for impl, fn in fns.items():
                    t0 = time.process_time()
                    fn(*x)
                    times[impl].append(time.process_time() - t0)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        print(
            f"{name:24s} "
            + " ".join(f"{med[k]:10.2f}" for k in impls)
            + " "
            + " ".join(f"{med['eager'] / med[k]:8.2f}" for k in impls[1:])
            + " "
            + " ".join(f"{ctime[k]:14.1f}" for k in impls[1:])
            + f"  {max(errs):.1e}",
            flush=True,
        )


if __name__ == "__main__":
    main()
