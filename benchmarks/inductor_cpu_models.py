"""inductor_lite on real CNN/ViT models (torchvision, timm), CPU inference: eager vs
compile_fx vs torch.compile's inductor, side by side in one process.

Each model gets one random input (batch 1, tiny images so that a run stays short on a small
machine); the three implementations are timed interleaved (eager, ours, inductor, eager, ...)
with the process CPU clock (``--threads 1`` makes that the kernel time), and the medians are
reported with each compile time and the largest error against eager (relative to eager's
largest output).

    python benchmarks/inductor_cpu_models.py [--size 96] [--reps 10] [--only resnet18,...]
        [--impl eager,ours,torch]
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

from zoo.vision import import_timm, import_torchvision  # noqa: E402

MODELS: dict[str, tuple[str, str]] = {
    "tv_efficientnet_b0": ("torchvision", "efficientnet_b0"),
    "tv_mobilenet_v3_small": ("torchvision", "mobilenet_v3_small"),
    "tv_regnet_y_400mf": ("torchvision", "regnet_y_400mf"),
    "tv_resnet18": ("torchvision", "resnet18"),
    "timm_mobilenetv3": ("timm", "mobilenetv3_small_100"),
    "timm_resnet18": ("timm", "resnet18"),
    "timm_vit_tiny": ("timm", "vit_tiny_patch16_224"),
    "timm_convnext_atto": ("timm", "convnext_atto"),
}


def build(name: str, size: int) -> torch.nn.Module:
    lib, arch = MODELS[name]
    if lib == "torchvision":
        return getattr(import_torchvision().models, arch)().eval()  # type: ignore[no-any-return]
    kwargs: dict[str, Any] = {"img_size": size} if "vit" in arch else {}
    return import_timm().create_model(arch, pretrained=False, **kwargs).eval()  # type: ignore[no-any-return]


def compiled(impl: str, model: torch.nn.Module) -> Callable[..., Any]:
    if impl == "eager":
        return model
    if impl == "ours":
        from inductor_lite import compile_fx

        return torch.compile(copy.deepcopy(model), backend=compile_fx)  # type: ignore[no-any-return]
    return torch.compile(copy.deepcopy(model), backend="inductor")  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=96)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", default=None)
    parser.add_argument("--impl", default="eager,ours,torch")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    impls = args.impl.split(",")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.size}x{args.size}")
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
        model = build(name, args.size)
        x = torch.randn(1, 3, args.size, args.size)
        with torch.no_grad():
            ref = model(x)
        fns, ctime, errs = {}, {}, []
        for impl in impls:
            fn = compiled(impl, model)
            t0 = time.perf_counter()
            with torch.no_grad():
                out = fn(x)
            ctime[impl] = time.perf_counter() - t0
            errs.append(((out - ref).abs().max() / ref.abs().max()).item())
            fns[impl] = fn
        times: dict[str, list[float]] = {k: [] for k in impls}
        with torch.no_grad():
            for fn in fns.values():
                fn(x)
                fn(x)
            for _ in range(args.reps):
                for impl, fn in fns.items():
                    t0 = time.process_time()
                    fn(x)
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
