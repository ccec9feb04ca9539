"""timm CNNs outside the zoo, CPU inference: eager vs Strata vs torch inductor, one process.

Each model is built with random weights, ``eval()``, one random ``1x3xSxS`` image; Strata
(``compile_api.compile``) and torch inductor (``torch.compile``) each compile a deep copy.
The three are timed interleaved (eager, Strata, torch, eager, ...) with the process CPU
clock, ``--reps`` rounds after two warm calls each, and the medians are printed with the
speedups over eager, each compile time and the largest error against eager (over eager's
largest output). ``--profile`` prints, instead, the top aten ops of ``--reps`` calls under
``torch.profiler`` (with input shapes) for each implementation.

    python benchmarks/outside_cnn_cpu.py [--models resnet50,densenet121] [--size 96]
        [--reps 9] [--threads 1] [--impl eager,strata,torch] [--profile] [--top 25]
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from zoo.vision import import_timm  # noqa: E402

DEFAULT = (
    "resnet50,densenet121,dla34,repvgg_a0,mixnet_s,tf_efficientnetv2_b0,efficientvit_b0,"
    "efficientnet_b1,regnety_002,ghostnet_100,rexnet_100"
)


def compiled(impl: str, model: torch.nn.Module) -> Callable[..., Any]:
    if impl == "eager":
        return model
    if impl == "strata":
        import compile_api

        return compile_api.compile(copy.deepcopy(model))  # type: ignore[no-any-return]
    return torch.compile(copy.deepcopy(model), backend="inductor")  # type: ignore[no-any-return]


def _profile(fns: dict[str, Callable[..., Any]], x: torch.Tensor, reps: int, top: int) -> None:
    from torch.profiler import ProfilerActivity, profile

    for impl, fn in fns.items():
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            for _ in range(reps):
                fn(x)
        print(f"--- {impl}: {reps} calls")
        table = prof.key_averages(group_by_input_shape=True).table(
            sort_by="self_cpu_time_total", row_limit=top, max_name_column_width=40
        )
        print(table, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default=DEFAULT)
    parser.add_argument("--size", type=int, default=96)
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--impl", default="eager,strata,torch")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    timm = import_timm()
    impls = args.impl.split(",")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"torch {torch.__version__}, timm {timm.__version__}, {torch.get_num_threads()} "
        f"threads, 1x3x{args.size}x{args.size}, load {load:.1f}"
    )
    head = [f"{k + ' ms':>10s}" for k in impls] + [f"{k + ' x':>9s}" for k in impls[1:]]
    head += [f"{k + ' comp s':>13s}" for k in impls[1:]]
    print(f"{'model':22s} " + " ".join(head) + "  max rel err")
    for name in args.models.split(","):
        torch.manual_seed(0)
        torch.compiler.reset()
        model = timm.create_model(name, pretrained=False).eval()
        x = torch.randn(1, 3, args.size, args.size)
        with torch.no_grad():
            ref = model(x)
        fns: dict[str, Callable[..., Any]] = {}
        ctime: dict[str, float] = {}
        errs: list[str] = []
        for impl in impls:
            fn = compiled(impl, model)
            t0 = time.perf_counter()
            with torch.no_grad():
                out = fn(x)
            ctime[impl] = time.perf_counter() - t0
            if impl != "eager":
                errs.append(f"{((out - ref).abs().max() / ref.abs().max()).item():.1e}")
            fns[impl] = fn
        with torch.no_grad():
            for fn in fns.values():
                fn(x)
                fn(x)
            if args.profile:
                _profile(fns, x, args.reps, args.top)
                continue
            times: dict[str, list[float]] = {k: [] for k in impls}
            for _ in range(args.reps):
                for impl, fn in fns.items():
                    t0 = time.process_time()
                    fn(x)
                    times[impl].append(time.process_time() - t0)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        cells = [f"{med[k]:10.2f}" for k in impls]
        cells += [f"{med[impls[0]] / med[k]:9.2f}" for k in impls[1:]]
        cells += [f"{ctime[k]:13.1f}" for k in impls[1:]]
        print(f"{name:22s} " + " ".join(cells) + "  " + "/".join(errs), flush=True)


if __name__ == "__main__":
    main()
