"""Float transcendental kernels on CPU: eager vs inductor_lite vs torch.compile's inductor.

One 1024x1024 float32 input (``* 3``, so tanh's whole curve is used); each function is compiled
by ``compile_fx`` (inference route) and by ``torch.compile`` (inductor), checked against eager,
and timed interleaved: median over ``--reps`` samples of this process's CPU time, one thread.
Also printed: each implementation's largest error in float ulps against float64.

    python benchmarks/inductor_cpu_math.py [--reps 30]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F

from inductor_lite import InductorConfig, compile_fx

CASES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "tanh": lambda x: torch.tanh(x),
    "sigmoid": lambda x: torch.sigmoid(x),
    "exp": lambda x: torch.exp(x),
    "gelu(tanh)": lambda x: F.gelu(x, approximate="tanh"),
}


def _ulps(y: torch.Tensor, exact: torch.Tensor) -> float:
    """Largest error of ``y`` in ulps of float32 at the exact value (where it is finite)."""
    e = exact.float().abs()
    ulp = (e.nextafter(torch.tensor(float("inf"))) - e).double()
    return float(((y.double() - exact).abs() / ulp)[exact.isfinite()].max())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(1)
    x = torch.randn(1024, 1024, generator=torch.Generator().manual_seed(0)) * 3
    config = InductorConfig(use_aot=False, num_threads=1, fallback="raise")
    print(f"torch {torch.__version__}, 1 thread, 1024x1024 float32, median of {args.reps}")
    print(f"{'case':12s} {'eager ms':>9s} {'ours ms':>9s} {'torch ms':>9s} {'ours x':>7s}"
          f" {'torch x':>7s}  ulp eager/ours/torch")
    for name, fn in CASES.items():
        impls: dict[str, Any] = {
            "eager": fn,
            "ours": compile_fx(torch.fx.symbolic_trace(fn), [x], config=config),
            "torch": torch.compile(fn, backend="inductor"),
        }
        exact = fn(x.double())
        ulps = {}
        with torch.no_grad():
            for k, f in impls.items():
                y = f(x)
                torch.testing.assert_close(y, fn(x), rtol=1e-5, atol=1e-5)
                # gelu's left tail (1 + tanh near 0) cancels in every implementation: ulps
                # there say nothing, so it gets none
                ulps[k] = _ulps(y, exact) if "gelu" not in name else float("nan")
            times: dict[str, list[float]] = {k: [] for k in impls}
            for _ in range(args.reps):
                for k, f in impls.items():
                    t = time.process_time()
                    f(x)
                    times[k].append(time.process_time() - t)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        print(
            f"{name:12s} {med['eager']:9.3f} {med['ours']:9.3f} {med['torch']:9.3f}"
            f" {med['eager'] / med['ours']:6.2f}x {med['eager'] / med['torch']:6.2f}x"
            f"  {ulps['eager']:.1f}/{ulps['ours']:.1f}/{ulps['torch']:.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
