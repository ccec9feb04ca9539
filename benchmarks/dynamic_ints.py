"""Int arguments under automatic dynamic: compiles and time over a sweep of values.

For ``fn(x, n) = x * n + n`` called once with each of ``--values`` distinct ints, it reports per
implementation the number of graphs compiled and the wall time of the whole sweep (capture +
backend + runs; each implementation's sweep runs once untimed first, after a reset), then the
per-call time of a cache hit (median of ``--repeats`` rounds of
``--calls`` calls each). Implementations: Strata with ``dynamic=None`` (automatic dynamic: the
int becomes a SymInt on its second value), Strata with ``dynamic=False`` (a compile per value),
and torch.compile(backend=eager) with ``dynamic=None`` as the reference; every result is checked
against eager.

    .venv/bin/python benchmarks/dynamic_ints.py --values 8 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

import compile_api


def fn(x: torch.Tensor, n: int) -> torch.Tensor:
    return x * n + n


class Counter:
    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Any) -> Callable[..., Any]:
        self.graphs += 1
        return gm.forward


def sweep(make: Callable[[Counter], Callable[..., Any]], values: list[int], x: torch.Tensor,
          repeats: int, calls: int) -> tuple[int, float, float]:
    counter = Counter()
    compiled = make(counter)
    start = time.perf_counter()
    for n in values:
        torch.testing.assert_close(compiled(x, n), fn(x, n))
    total = time.perf_counter() - start
    hit_value = values[-1]
    rounds = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            compiled(x, hit_value)
        rounds.append((time.perf_counter() - t0) / calls)
    return counter.graphs, total, statistics.median(rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--values", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    values = list(range(2, 2 + args.values))
    x = torch.randn(16)

    def strata(dynamic: bool | None) -> Callable[[Counter], Callable[..., Any]]:
        def make(counter: Counter) -> Callable[..., Any]:
            compile_api.reset()
            compile_api.config.cache_size_limit = max(8, args.values)
            return compile_api.compile(fn, backend=counter, dynamic=dynamic)

        return make

    def reference(counter: Counter) -> Callable[..., Any]:
        import torch._dynamo

        torch._dynamo.reset()
        torch._dynamo.config.cache_size_limit = max(8, args.values)
        return torch.compile(fn, backend=counter, dynamic=None)

    print(f"fn(x, n) = x * n + n, x of 16 floats, n over {values}")
    print("| implementation | graphs | sweep (ms) | cache-hit call (us) |")
    print("|---|---|---|---|")
    for name, make in [
        ("strata dynamic=None (automatic)", strata(None)),
        ("strata dynamic=False", strata(False)),
        ("torch.compile(backend=eager) dynamic=None", reference),
    ]:
        sweep(make, values, x, 1, 1)  # warm-up: first-use imports and caches, not timed
        graphs, total, per_call = sweep(make, values, x, args.repeats, args.calls)
        print(f"| {name} | {graphs} | {total * 1e3:.1f} | {per_call * 1e6:.2f} |")


if __name__ == "__main__":
    main()
