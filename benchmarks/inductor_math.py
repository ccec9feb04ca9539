"""Single kernels of inductor_lite against eager: vector math, masked softmax, variance.

Each case is compiled with ``compile_fx`` (inference route), checked against eager on the same
inputs, then timed: the minimum over ``--reps`` samples of this process's CPU time, with
torch and the kernels on one thread (as the harness runs with ``--threads 1``).

    .venv/bin/python benchmarks/inductor_math.py --reps 40
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F

from inductor_lite import InductorConfig, compile_fx


def _min_ms(fn: Callable[..., Any], args: tuple[torch.Tensor, ...], reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        t = time.process_time()
        fn(*args)
        best = min(best, time.process_time() - t)
    return best * 1e3


def _cases() -> list[tuple[str, Callable[..., Any], tuple[torch.Tensor, ...], float]]:
    g = torch.Generator().manual_seed(0)
    big = torch.randn(1024, 1024, generator=g)
    scores = torch.randn(8, 4, 128, 128, generator=g)
    mask = torch.tril(torch.ones(128, 128, dtype=torch.bool))
    rows = torch.randn(16, 262144, generator=g) * 1e-2 + 1e4
    ln_x, ln_w, ln_b = torch.randn(1024, 256, generator=g), torch.randn(256), torch.randn(256)
    return [
        ("sin(x) * cos(x) 1M", lambda x: torch.sin(x) * torch.cos(x), (big,), 1e-5),
        ("exp 1M", lambda x: torch.exp(x), (big,), 1e-5),
        ("erf 1M", lambda x: torch.erf(x), (big,), 1e-5),
        ("gelu 1M", lambda x: F.gelu(x), (big,), 1e-5),
        ("log1p(|x|) 1M", lambda x: torch.log1p(x.abs()), (big,), 1e-5),
        (
            "masked softmax 8x4x128x128",
            lambda s, m: torch.softmax((s * 0.125).masked_fill(~m, float("-inf")), -1),
            (scores, mask),
            1e-5,
        ),
        ("var_mean 16x262144 (mean 1e4)", lambda x: torch.var_mean(x, dim=-1), (rows,), 1e-4),
        (
            "layer_norm 1024x256",
            lambda x, w, b: F.layer_norm(x, (256,), w, b),
            (ln_x, ln_w, ln_b),
            1e-4,
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=40)
    opts = parser.parse_args()
    torch.set_num_threads(1)
    config = InductorConfig(use_aot=False, num_threads=1, fallback="raise")
    print(f"torch {torch.__version__}, 1 thread, min of {opts.reps} samples (process CPU time)")
    print(f"{'case':34s} {'eager ms':>9s} {'ours ms':>9s} {'speedup':>8s}")
    for name, fn, args, tol in _cases():
        compiled = compile_fx(torch.fx.symbolic_trace(fn), list(args), config=config)
        with torch.no_grad():
            torch.testing.assert_close(compiled(*args), fn(*args), rtol=tol, atol=tol)
            eager = _min_ms(fn, args, opts.reps)
            ours = _min_ms(compiled, args, opts.reps)
        print(f"{name:34s} {eager:9.3f} {ours:9.3f} {eager / ours:7.2f}x")


if __name__ == "__main__":
    main()
