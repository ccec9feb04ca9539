"""Per-call overhead of a compiled graph with many parameter inputs (CPU).

A module with ``--params`` small parameters whose forward is a chain of tiny adds: the work is
negligible, so a call's time is what each implementation spends around its kernels (guards,
aot's runtime, input checks, the wrapper). Under ``torch.compile`` the parameters are graph
inputs, as for a real model (resnet18 has ~100, mobilenet_v3_small ~210).

Implementations, timed interleaved in one process (median per call over ``--reps`` samples
of ``--calls`` calls each, process CPU time, one thread): ``eager``; ``ours``:
``torch.compile(backend=compile_fx)`` (our backend behind torch's frontend: aot's runtime and
our wrapper); ``strata``: ``compile_api.compile`` (our frontend and backend); ``torch``:
``torch.compile``'s inductor. ``--profile IMPL`` prints a cProfile of that implementation's
calls instead.

    python benchmarks/inductor_cpu_overhead.py [--params 200] [--reps 7] [--calls 200]
        [--impl eager,ours,strata,torch] [--modules] [--grad] [--profile ours]

``--modules`` puts each parameter in its own submodule of a Sequential (the layout of real
models) instead of one ParameterList.
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import pstats
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch


class ManyParams(torch.nn.Module):
    """``x + p0 + p1 + ...`` over ``n`` parameters of 8 elements."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.ps = torch.nn.ParameterList(torch.nn.Parameter(torch.randn(8)) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for p in self.ps:
            x = x + p
        return x


class AddParam(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.weight


def many_modules(n: int) -> torch.nn.Module:
    """The same chain as ``ManyParams``, each parameter in its own submodule of a Sequential
    (as real models hold them: read through named submodules, not a ParameterList)."""
    return torch.nn.Sequential(*(AddParam() for _ in range(n)))


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--params", type=int, default=200)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--impl", default="eager,ours,strata,torch")
    parser.add_argument(
        "--modules", action="store_true", help="parameters in submodules, not a ParameterList"
    )
    parser.add_argument("--grad", action="store_true", help="calls with grad on (training route)")
    parser.add_argument("--profile", default=None, help="cProfile this implementation's calls")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = many_modules(args.params) if args.modules else ManyParams(args.params)
    x = torch.randn(8)
    impls = args.impl.split(",")
    grad = torch.enable_grad() if args.grad else torch.no_grad()
    with grad:
        ref = model(x)
        fns: dict[str, Callable[..., Any]] = {}
        for impl in impls:
            fn = compiled(impl, model)
            out = fn(x)
            torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
            fn(x)
            fns[impl] = fn
        if args.profile:
            fn = fns[args.profile]
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(args.calls):
                fn(x)
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(18)
            return
        times: dict[str, list[float]] = {k: [] for k in impls}
        for _ in range(args.reps):
            for impl, fn in fns.items():
                t0 = time.process_time()
                for _ in range(args.calls):
                    fn(x)
                times[impl].append((time.process_time() - t0) / args.calls)
    med = {k: statistics.median(v) * 1e6 for k, v in times.items()}
    print(
        f"torch {torch.__version__}, 1 thread, {args.params} parameters,"
        f" {'in submodules' if args.modules else 'in a ParameterList'},"
        f" grad {'on' if args.grad else 'off'}; us per call (median of {args.reps}"
        f" x {args.calls} calls), ratio to eager"
    )
    for k in impls:
        print(f"  {k:8s} {med[k]:9.1f} us  {med[k] / med['eager']:6.2f}x eager's time")


if __name__ == "__main__":
    main()
