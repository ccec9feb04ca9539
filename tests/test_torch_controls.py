"""torch's own compiler controls keep their meaning under Strata.

Code written for torch.compile uses ``torch.compiler.disable``, torch's ``graph_break()``,
``is_compiling()``, ``allow_in_graph``, ``mark_dynamic``/``maybe_mark_dynamic``/``mark_static``
and ``torch.compiler.set_stance``. Each test runs the same code eagerly, under Strata and under
torch.compile (both with a counting backend) and compares results and graph counts.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
import torch
import torch._dynamo

import compile_api

from .conftest import GraphCounter


@pytest.fixture(autouse=True)
def default_stance() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch.compiler.set_stance("default")
    torch._dynamo.reset()


def torch_graphs(fn: Callable[..., Any], *calls: tuple[Any, ...]) -> tuple[list[Any], int]:
    """torch.compile's outputs over ``calls`` and its graph count (the reference)."""
    graphs: list[torch.fx.GraphModule] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=backend)
    outs = [compiled(*copy.deepcopy(args)) for args in calls]
    torch._dynamo.reset()
    return outs, len(graphs)


def ours(fn: Callable[..., Any], counter: GraphCounter, *calls: tuple[Any, ...]) -> list[Any]:
    compiled = compile_api.compile(fn, backend=counter)
    return [compiled(*copy.deepcopy(args)) for args in calls]


def eager(fn: Callable[..., Any], *calls: tuple[Any, ...]) -> list[Any]:
    return [fn(*copy.deepcopy(args)) for args in calls]


def test_torch_disabled_function_runs_eagerly_as_a_break_with_is_compiling_false(
    counter: GraphCounter,
) -> None:
    seen: list[bool] = []

    @torch.compiler.disable
    def helper(x: torch.Tensor) -> torch.Tensor:
        seen.append(torch.compiler.is_compiling())
        return x.sin()

    def f(x: torch.Tensor) -> torch.Tensor:
        return helper(x * 2) + 1

    x = torch.randn(5)
    expected = eager(f, (x,))
    seen.clear()
    theirs, torch_count = torch_graphs(f, (x,))
    assert seen == [False]
    seen.clear()
    got = ours(f, counter, (x,))
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(theirs, expected)
    assert seen == [False]
    assert counter.count == torch_count == 2
    for gm in counter.graphs:  # the disabled function is never traced into a graph
        assert "sin" not in gm.code


def test_torch_disable_of_the_compiled_function_itself_compiles_nothing(
    counter: GraphCounter,
) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x.cos() + 1

    x = torch.randn(4)
    got = ours(torch.compiler.disable(f), counter, (x,))
    torch.testing.assert_close(got, eager(f, (x,)))
    assert counter.count == 0


def test_torch_graph_break_splits_the_graph_as_torch_does(counter: GraphCounter) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        torch._dynamo.graph_break()
        return y * 2

    x = torch.randn(3)
    theirs, torch_count = torch_graphs(f, (x,))
    got = ours(f, counter, (x,))
    torch.testing.assert_close(got, eager(f, (x,)))
    assert counter.count == torch_count == 2
    with pytest.raises(compile_api.Unsupported, match="graph_break"):
        compile_api.compile(f, backend="eager", fullgraph=True)(x)


@pytest.mark.parametrize(
    "is_compiling",
    [torch.compiler.is_compiling, torch._dynamo.is_compiling],
    ids=["torch.compiler", "frontend"],
)
def test_is_compiling_is_true_in_the_graph_and_false_eagerly(
    counter: GraphCounter, is_compiling: Callable[[], bool]
) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        if is_compiling():
            return x + 1
        return x - 1

    x = torch.randn(3)
    theirs, torch_count = torch_graphs(f, (x,))
    got = ours(f, counter, (x,))
    torch.testing.assert_close(got, theirs)
    torch.testing.assert_close(got, [x + 1])
    assert counter.count == torch_count == 1
    torch.testing.assert_close(f(x), x - 1)


def test_torch_allow_in_graph_function_is_one_node(counter: GraphCounter) -> None:
    def scale(x: torch.Tensor) -> torch.Tensor:
        return x * 3 + 1

    torch.compiler.allow_in_graph(scale)

    def f(x: torch.Tensor) -> torch.Tensor:
        return scale(x).relu()

    x = torch.randn(4)
    theirs, torch_count = torch_graphs(f, (x,))
    got = ours(f, counter, (x,))
    torch.testing.assert_close(got, eager(f, (x,)))
    assert counter.count == torch_count == 1
    targets = [n.target for n in counter.graphs[0].graph.nodes if n.op == "call_function"]
    assert scale in targets


def _add_sub_add(a: torch.Tensor) -> torch.Tensor:
    x = torch.add(a, 1)
    x = torch.sub(x, 1)
    return torch.add(x, 1)


def test_torch_disallow_in_graph_op_is_a_break_as_torch_does(counter: GraphCounter) -> None:
    # torch's test_decorators::test_disallow_in_graph: read from torch's registry by identity
    torch._dynamo.disallow_in_graph(torch.sub)
    try:
        x = torch.randn(4)
        theirs, torch_count = torch_graphs(_add_sub_add, (x,))
        got = ours(_add_sub_add, counter, (x,))
    finally:
        torch._dynamo.allow_in_graph(torch.sub)
    torch.testing.assert_close(got, eager(_add_sub_add, (x,)))
    torch.testing.assert_close(theirs, got)
    assert counter.count == torch_count == 2
    assert all(torch.sub not in [n.target for n in g.graph.nodes] for g in counter.graphs)


@pytest.mark.parametrize("mark", ["mark_dynamic", "maybe_mark_dynamic"])
def test_torch_mark_dynamic_compiles_that_dim_symbolic_from_the_first_call(
    counter: GraphCounter, mark: str
) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x.sum(0) * x.shape[0]

    calls = []
    for n in (4, 6, 9):
        x = torch.randn(n, 3)
        getattr(torch._dynamo, mark)(x, 0)
        calls.append((x,))
    theirs, torch_count = torch_graphs(f, *calls)
    got = ours(f, counter, *calls)
    torch.testing.assert_close(got, eager(f, *calls))
    assert counter.count == torch_count == 1


def test_torch_mark_static_keeps_automatic_dynamic_from_that_dim(counter: GraphCounter) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    calls = []
    for n in (4, 6, 9):
        x = torch.randn(n)
        torch._dynamo.mark_static(x, 0)
        calls.append((x,))
    theirs, torch_count = torch_graphs(f, *calls)
    got = ours(f, counter, *calls)
    torch.testing.assert_close(got, eager(f, *calls))
    assert counter.count == torch_count == 3


class Spy:
    """A backend whose compiled graphs count their calls."""

    def __init__(self) -> None:
        self.compiles = 0
        self.runs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        self.compiles += 1

        def run(*args: Any) -> Any:
            self.runs += 1
            return gm.forward(*args)

        return run


def f_sin(x: torch.Tensor) -> torch.Tensor:
    return x.sin() + 1


def test_set_stance_force_eager_runs_no_compiled_code_and_compiles_nothing() -> None:
    spy = Spy()
    compiled = compile_api.compile(f_sin, backend=spy)
    x, y = torch.randn(4), torch.randn(7)
    torch.testing.assert_close(compiled(x), f_sin(x))
    assert (spy.compiles, spy.runs) == (1, 1)
    with torch.compiler.set_stance("force_eager"):
        torch.testing.assert_close(compiled(x), f_sin(x))  # cached code is not run
        torch.testing.assert_close(compiled(y), f_sin(y))  # a new size compiles nothing
    assert (spy.compiles, spy.runs) == (1, 1)
    torch.testing.assert_close(compiled(x), f_sin(x))  # back to the cached code
    assert (spy.compiles, spy.runs) == (1, 2)


def test_set_stance_eager_on_recompile_runs_misses_eagerly_and_keeps_the_cache() -> None:
    spy = Spy()
    compiled = compile_api.compile(f_sin, backend=spy, dynamic=False)
    x, y = torch.randn(4), torch.randn(7)
    compiled(x)
    with torch.compiler.set_stance("eager_on_recompile"):
        torch.testing.assert_close(compiled(y), f_sin(y))
        torch.testing.assert_close(compiled(x), f_sin(x))
    assert (spy.compiles, spy.runs) == (1, 2)


def test_set_stance_fail_on_recompile_raises_on_a_recompile_as_torch_does() -> None:
    x, y = torch.randn(4), torch.randn(7)
    theirs = torch.compile(f_sin, backend="eager", dynamic=False)
    theirs(x)
    compiled = compile_api.compile(f_sin, backend="eager", dynamic=False)
    compiled(x)
    with torch.compiler.set_stance("fail_on_recompile"):
        torch.testing.assert_close(compiled(x), f_sin(x))
        with pytest.raises(RuntimeError, match="fail_on_recompile"):
            theirs(y)
        with pytest.raises(RuntimeError, match="fail_on_recompile"):
            compiled(y)


def test_recompile_limit_is_cache_size_limit(counter: GraphCounter) -> None:
    compile_api.config.recompile_limit = 2
    assert compile_api.config.cache_size_limit == 2
    compiled = compile_api.compile(f_sin, backend=counter, dynamic=False)
    for n in (2, 3, 4, 5):
        x = torch.randn(n)
        with pytest.warns(RuntimeWarning, match="cache_size_limit") if n == 4 else _nothing():
            torch.testing.assert_close(compiled(x), f_sin(x))
    assert counter.count == 2


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.mark.parametrize(
    "record_function",
    [torch.autograd.profiler.record_function, torch.profiler.record_function],
    ids=["autograd.profiler", "profiler"],
)
def test_profiler_range_is_ignored_without_a_break(
    counter: GraphCounter, record_function: Any
) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        with record_function("block"):
            y = x.sin()
        return y + 1

    x = torch.randn(3)
    theirs, torch_count = torch_graphs(f, (x,))
    got = ours(f, counter, (x,))
    torch.testing.assert_close(got, eager(f, (x,)))
    assert counter.count == torch_count == 1
    compile_api.compile(f, backend="eager", fullgraph=True)(x)


# Strata follows torch.compiler.reset() through a side table torch's reset replaces
# (compile_api.torch_controls); a torch without it (2.11 on the GPU machine) is not followed.
# (A bool: holding the table itself would keep it alive through torch's reset.)
_HAS_RESET_TABLE = (
    getattr(
        getattr(sys.modules.get("torch._higher_order_ops.wrap"), "inductor_code_side_table", None),
        "id_to_callable",
        None,
    )
    is not None
)
_reset_followed = pytest.mark.skipif(
    not _HAS_RESET_TABLE, reason="this torch has no side table for Strata to follow its reset"
)


def _call_reset_call(compiled: Callable[..., Any], x: torch.Tensor) -> list[Any]:
    first = compiled(x)
    torch.compiler.reset()
    return [first, compiled(x)]


@_reset_followed
def test_torch_compiler_reset_outside_compiled_code_recompiles_as_torch_does(
    counter: GraphCounter,
) -> None:
    x = torch.randn(3)
    theirs = GraphCounter()
    _call_reset_call(torch.compile(f_sin, backend=theirs), x)
    got = _call_reset_call(compile_api.compile(f_sin, backend=counter), x)
    torch.testing.assert_close(got, [f_sin(x), f_sin(x)])
    # Each compiles again after the reset: the cached entry was forgotten.
    assert counter.count == theirs.count == 2


@_reset_followed
def test_torch_compiler_reset_inside_compiled_code_runs_eagerly_and_recompiles(
    counter: GraphCounter,
) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x.cos() * 2
        torch.compiler.reset()
        return y + 1

    calls = [(torch.randn(3),), (torch.randn(3),)]
    theirs, torch_count = torch_graphs(f, *calls)
    got = ours(f, counter, *calls)
    torch.testing.assert_close(got, eager(f, *calls))
    # Two graphs around the reset per call: the reset forgets the frame's entry each time.
    assert counter.count == torch_count == 4


def test_torch_mark_static_under_dynamic_true_keeps_that_dim_static(
    counter: GraphCounter,
) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x.sin() * x.shape[0]

    calls = []
    for n in (3, 5):
        x = torch.randn(n, 4)
        torch._dynamo.mark_static(x, 0)
        calls.append((x,))
    theirs = GraphCounter()
    compiled = torch.compile(f, backend=theirs, dynamic=True)
    for args in calls:
        compiled(*args)
    torch._dynamo.reset()
    compiled_ours = compile_api.compile(f, backend=counter, dynamic=True)
    got = [compiled_ours(*args) for args in calls]
    torch.testing.assert_close(got, eager(f, *calls))
    assert counter.count == theirs.count == 2  # a recompile per size of the static dim
    for gm, n in zip(counter.graphs, (3, 5), strict=True):
        shape = next(p.meta["example_value"].shape for p in gm.graph.find_nodes(op="placeholder"))
        assert shape[0] == n and isinstance(shape[1], torch.SymInt)


def test_the_frontend_package_is_found_from_torch_compiler_without_naming_it() -> None:
    # Strata finds torch's frontend by the module torch.compiler.set_stance imports (its source
    # never names it); that must be the package whose graph_break and stance it recognises.
    import symbolic_vm

    assert symbolic_vm.torch_frontend_module() is torch._dynamo
    assert symbolic_vm.torch_frontend_module("eval_frame") is torch._dynamo.eval_frame
