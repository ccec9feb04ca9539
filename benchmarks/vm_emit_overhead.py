"""Per-call overhead of what symbolic_vm emits (transformed code + guards), end to end.

    .venv/bin/python benchmarks/vm_emit_overhead.py [--number N] [--repeat R] [--no-torch-compile]
    .venv/bin/python benchmarks/vm_emit_overhead.py --compile-time [--repeat R]

Cases (issue 6's targets: whole overhead <= 1.5 us for (a), <= 5 us for (b)):
  (a) one tensor: ``def add_one(x): return x + 1`` called with an (8, 8) tensor;
  (b) a 50-parameter module: ``nn.Sequential(*[nn.Linear(8, 8) for _ in range(25)])`` called
      with one (2, 8) tensor.
For each: the eager call, the compiled graph called directly, ``compile_api.compile(...,
backend="eager")`` (the overhead is compiled call - graph call), the same overhead with a
backend whose compiled function returns the graph's outputs at once ("constant graph": for (b)
the 100 us graph makes the first difference noisy; this one is the figure to read), its
guard check alone (the entry's guard on the frame's f_locals), and
``torch.compile(..., backend="eager")`` as the yardstick (its graph is kept by a backend that
returns ``gm.forward``, as "eager" does).

``--compile-time`` instead times compiling a break-heavy function (:func:`break_heavy`: 8 graph
breaks, so 9 captures and 8 resume functions): the first call of ``compile_api.compile(fn,
backend="eager")`` after ``compile_api.reset()``, and the same for ``torch.compile`` (process CPU
time, median and min over R repeats, in ms; both must make 9 graphs). To compare two versions
of the code emitter, run it with each ``packages/symbolic_vm/src`` first on PYTHONPATH,
alternating.

Every figure is the median (and min) over R repeats of (process CPU time of N calls) / N, in
ns; torch runs on one thread. To compare with the code symbolic_vm emitted before, run the
same script with an older ``packages/symbolic_vm/src`` first on PYTHONPATH (see the README).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import timeit
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

TIMER = time.process_time  # CPU time: on a shared machine wall time measures the neighbours


def per_call_ns(
    fn: Callable[..., object], args: tuple[object, ...], number: int, repeat: int
) -> tuple[float, float]:
    times = timeit.repeat(
        "fn(*args)", globals={"fn": fn, "args": args}, number=number, repeat=repeat, timer=TIMER
    )
    per_call = [t / number * 1e9 for t in times]
    return statistics.median(per_call), min(per_call)


def paired_overhead_ns(
    compiled: Callable[..., object], compiled_args: tuple[object, ...],
    graph: Callable[..., object], graph_args: tuple[object, ...], number: int, repeat: int,
) -> tuple[float, float]:
    """Median and min over ``repeat`` rounds of (compiled - graph) per call, the two timed
    back to back in each round, so load drifting between rounds cancels out."""
    diffs = []
    for _ in range(repeat):
        g = timeit.timeit(
            "fn(*args)", globals={"fn": graph, "args": graph_args}, number=number, timer=TIMER
        )
        c = timeit.timeit(
            "fn(*args)", globals={"fn": compiled, "args": compiled_args}, number=number,
            timer=TIMER,
        )
        diffs.append((c - g) / number * 1e9)
    return statistics.median(diffs), min(diffs)


def add_one(x: torch.Tensor) -> torch.Tensor:
    return x + 1


class Grab:
    """A backend like "eager" (returns gm.forward) that keeps the graph to call it directly."""

    def __init__(self) -> None:
        self.forwards: list[Callable[..., Any]] = []
        self.inputs: list[list[object]] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        self.forwards.append(gm.forward)
        self.inputs.append(list(example_inputs))
        return gm.forward


class Const:
    """A backend whose compiled function returns the graph's outputs for the example inputs at
    once (run once here): calling it costs about nothing, so (compiled call - calling it
    directly) is the per-call overhead without the noise of a ~100 us graph in both terms."""

    def __init__(self) -> None:
        self.fns: list[Callable[..., Any]] = []
        self.inputs: list[list[object]] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        outs = gm.forward(*example_inputs)

        def const(*args: object) -> Any:
            return outs

        self.fns.append(const)
        self.inputs.append(list(example_inputs))
        return const


def const_overhead(
    compile_fn: Callable[..., Callable[..., object]], fn: Callable[..., object],
    args: tuple[object, ...], number: int, repeat: int,
) -> tuple[float, float]:
    """Median and min over ``repeat`` rounds of (compiled call - the constant function called
    directly with the graph's inputs), per call, with the Const backend."""
    backend = Const()
    compiled = compile_fn(fn, backend=backend)
    torch.testing.assert_close(compiled(*args), fn(*args))
    compiled(*args)
    assert len(backend.fns) == 1, "one graph, no recompile"
    return paired_overhead_ns(
        compiled, args, backend.fns[0], tuple(backend.inputs[0]), number, repeat
    )


def _minus(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    return a[0] - b[0], a[1] - b[1]


def strata_rows(
    label: str, fn: Callable[..., object], args: tuple[object, ...], code: Any,
    f_locals: dict[str, object], number: int, repeat: int,
) -> list[tuple[str, tuple[float, float]]]:
    import compile_api
    import evalframe

    compile_api.reset()
    grab = Grab()
    grabbed = compile_api.compile(fn, backend=grab)
    grabbed(*args)
    grabbed(*args)
    assert len(grab.forwards) == 1, "one graph, no recompile"
    graph = per_call_ns(grab.forwards[0], tuple(grab.inputs[0]), number, repeat)
    compile_api.reset()
    compiled = compile_api.compile(fn, backend="eager")
    want, got = fn(*args), compiled(*args)
    torch.testing.assert_close(got, want)
    whole = per_call_ns(compiled, args, number, repeat)
    entries = evalframe.cache_entries(code)
    assert len(entries) == 1, f"{len(entries)} cache entries"
    guard = entries[0].guard
    assert guard(f_locals)
    paired = paired_overhead_ns(
        compiled, args, grab.forwards[0], tuple(grab.inputs[0]), number, repeat
    )
    guard_only = per_call_ns(guard, (f_locals,), number, repeat)
    code_only = per_call_ns(_code_without_graph(entries[0].code, fn), args, number, repeat)
    compile_api.reset()
    const = const_overhead(compile_api.compile, fn, args, max(number, 20000), repeat)
    compile_api.reset()
    return [
        (f"{label}: graph called directly", graph),
        (f"{label}: compile_api(backend='eager') call", whole),
        (f"{label}: **Strata overhead** (compiled - graph)", _minus(whole, graph)),
        (f"{label}: **Strata overhead, paired** (per-round compiled - graph)", paired),
        (f"{label}: **Strata overhead, constant graph** (compiled - the constant fn; "
         "low noise)", const),
        (f"{label}:   of which the guard check", guard_only),
        (f"{label}:   the transformed code alone, graph replaced by a no-op", code_only),
    ]


def _code_without_graph(code: Any, fn: Callable[..., object]) -> Callable[..., object]:
    """The transformed code as a function whose ``__compiled_fn_<n>`` returns Nones at once:
    what its reads (arguments, module state), the call and the result rebuild cost."""
    import types

    func: Any = type(fn).forward if isinstance(fn, nn.Module) else fn
    namespace = dict(func.__globals__)
    for name in code.co_names:
        if name.startswith("__compiled_fn"):
            namespace[name] = lambda *args: (None,) * 8
    plain = types.FunctionType(code, namespace)
    if isinstance(fn, nn.Module):
        return lambda *args: plain(fn, *args)
    return plain


def torch_rows(
    label: str, fn: Callable[..., object], args: tuple[object, ...], number: int, repeat: int
) -> list[tuple[str, tuple[float, float]]]:
    # Reference only: torch.compile runs here as the yardstick, never inside Strata.
    torch._dynamo.reset()
    grab = Grab()
    compiled = torch.compile(fn, backend=grab)
    compiled(*args)
    compiled(*args)
    graph = per_call_ns(grab.forwards[0], tuple(grab.inputs[0]), number, repeat)
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="eager")
    compiled(*args)
    whole = per_call_ns(compiled, args, number, repeat)
    torch._dynamo.reset()
    const = const_overhead(torch.compile, fn, args, max(number, 20000), repeat)
    torch._dynamo.reset()
    return [
        (f"{label}: torch.compile(backend='eager') call", whole),
        (f"{label}: **torch.compile overhead** (compiled - its graph)", _minus(whole, graph)),
        (f"{label}: **torch.compile overhead, constant graph**", const),
    ]


def break_heavy(x: torch.Tensor, n: int) -> torch.Tensor:
    """Eight graph breaks in straight-line code (``print`` runs eagerly), each with tensors,
    a list and an int live across it."""
    acc = [x]
    x = torch.relu(x * 2) + acc[-1]
    print("", end="")
    acc.append(x.sum(0, keepdim=True) / n)
    x = torch.relu(x * 3) + acc[-1]
    print("", end="")
    acc.append(x.sum(0, keepdim=True) / n)
    x = torch.relu(x * 4) + acc[-1]
    print("", end="")
    acc.append(x.sum(0, keepdim=True) / n)
    x = torch.relu(x * 5) + acc[-1]
    print("", end="")
    acc.append(x.sum(0, keepdim=True) / n)
    x = torch.relu(x * 6) + acc[-1]
    print("", end="")
    acc.append(x.sum(0, keepdim=True) / n)
    x = torch.relu(x * 7) + acc[-1]
    print("", end="")
    acc.append(x.sum(0, keepdim=True) / n)
    x = torch.relu(x * 8) + acc[-1]
    print("", end="")
    acc.append(x.sum(0, keepdim=True) / n)
    x = torch.relu(x * 9) + acc[-1]
    print("", end="")
    acc.append(x.sum(0, keepdim=True) / n)
    return x + acc[-1]


def compile_time_rows(repeat: int, with_torch: bool) -> list[tuple[str, tuple[float, float]]]:
    import compile_api

    x = torch.randn(4, 4)

    def first_call_ms(compile_fn: Callable[..., Any], reset: Callable[[], object]) -> list[float]:
        times = []
        for _ in range(repeat):
            reset()
            grab = Grab()  # returns gm.forward, as backend="eager" does, and counts graphs
            compiled = compile_fn(break_heavy, backend=grab)
            start = TIMER()
            got = compiled(x, 4)
            times.append((TIMER() - start) * 1e3)
            torch.testing.assert_close(got, break_heavy(x, 4))
            assert len(grab.forwards) == 9, f"{len(grab.forwards)} graphs, not 9"
        return times

    rows = []
    ours = first_call_ms(compile_api.compile, compile_api.reset)
    rows.append(("break-heavy: compile_api first call, ms", (statistics.median(ours), min(ours))))
    if with_torch:
        # Reference only: torch.compile runs here as the yardstick, never inside Strata.
        theirs = first_call_ms(torch.compile, torch._dynamo.reset)
        rows.append(
            ("break-heavy: torch.compile first call, ms", (statistics.median(theirs), min(theirs)))
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=11)
    parser.add_argument("--no-torch-compile", action="store_true")
    parser.add_argument("--compile-time", action="store_true")
    opts = parser.parse_args()
    n, r = opts.number, opts.repeat
    torch.set_num_threads(1)
    torch.manual_seed(0)

    import symbolic_vm

    if opts.compile_time:
        _print(compile_time_rows(r, not opts.no_torch_compile), symbolic_vm, r, n, n, "ms")
        return

    x = torch.randn(8, 8)
    model = nn.Sequential(*[nn.Linear(8, 8) for _ in range(25)])
    assert sum(1 for _ in model.parameters()) == 50
    xb = torch.randn(2, 8)
    rows: list[tuple[str, tuple[float, float]]] = []
    rows.append(("(a) x + 1: eager call", per_call_ns(add_one, (x,), n, r)))
    rows += strata_rows("(a) x + 1", add_one, (x,), add_one.__code__, {"x": x}, n, r)
    if not opts.no_torch_compile:
        rows += torch_rows("(a) x + 1", add_one, (x,), n, r)
    nb = max(n // 10, 1)
    rows.append(("(b) 25 x Linear(8, 8): eager call", per_call_ns(model, (xb,), nb, r)))
    rows += strata_rows(
        "(b) 25 x Linear(8, 8)", model, (xb,), nn.Sequential.forward.__code__,
        {"self": model, "input": xb}, nb, r,
    )
    if not opts.no_torch_compile:
        rows += torch_rows("(b) 25 x Linear(8, 8)", model, (xb,), nb, r)

    _print(rows, symbolic_vm, r, n, nb, "ns/call")


def _print(
    rows: list[tuple[str, tuple[float, float]]], symbolic_vm: Any, r: int, n: int, nb: int,
    unit: str,
) -> None:
    print(
        f"torch {torch.__version__}; symbolic_vm from {os.path.dirname(symbolic_vm.__file__)}; "
        f"guards pure Python: {os.environ.get('STRATA_GUARDS_PURE_PYTHON', '0')}; process CPU "
        f"time; median and min of {r} repeats x {n} calls ({nb} for (b)); load "
        f"average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    print(f"| case | median {unit} | min {unit} |")
    print("| --- | ---: | ---: |")
    digits = 1 if unit == "ms" else 0
    for name, (med, low) in rows:
        print(f"| {name} | {med:.{digits}f} | {low:.{digits}f} |")


if __name__ == "__main__":
    main()
