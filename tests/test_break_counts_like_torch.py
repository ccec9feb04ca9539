"""Graph and op counts at graph breaks against torch.compile's, on the shapes of PyTorch's own
Dynamo tests (test_subgraphs, test_modules): each program's results equal eager's on every call,
and its graphs and graph ops number as torch 2.13's (the reference; other torch releases only
check against eager)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import compile_api

from .conftest import TORCH_2_13, GraphCounter

# The C function of torch's compiler runtime that its own tests use as "something Dynamo cannot
# trace" (it adds its two arguments). Strata took it for a torch op (it lives under torch._C)
# and put it in the graph on fake values.
_c_helper: Any = getattr(torch._C, "_dynamo").eval_frame.unsupported


@pytest.fixture(autouse=True)
def torch_fresh() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _counts(
    compile_fn: Callable[..., Any], fn: Callable[..., Any], calls: list[tuple[Any, ...]]
) -> tuple[int, int]:
    counter = GraphCounter()
    compiled = compile_fn(fn, backend=counter)
    for args in calls:
        torch.testing.assert_close(compiled(*args), fn(*args))
    ops = sum(counter.op_count(i) for i in range(counter.count))
    return counter.count, ops


def _compare(fn: Callable[..., Any], graphs: int, ops: int) -> None:
    a, b = torch.ones(4), torch.ones(4) * -2.0
    calls = [(a, b), (b, a)]
    assert _counts(compile_api.compile, fn, calls) == (graphs, ops)
    if TORCH_2_13:
        assert _counts(torch.compile, fn, calls) == (graphs, ops)


def break_on_the_compilers_c_helper(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    x = (a + b) / 2.0
    x = _c_helper(x, a)
    return x + 2.0


def helper_inside_an_expression(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    t = 1.5 * a
    return t / (b - _c_helper(a - b, b - a))


def _inner(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _c_helper(a, a + b)


def helper_in_an_inlined_call(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _inner(a - b, b - a) * 3.0


def test_the_compilers_c_helper_breaks_the_graph_as_torch() -> None:
    """Before: one graph of 4 ops with the helper as a node (torch: a break there, 2 graphs)."""
    _compare(break_on_the_compilers_c_helper, 2, 3)


def test_the_compilers_c_helper_inside_an_expression_keeps_the_stack() -> None:
    _compare(helper_inside_an_expression, 2, 5)


def test_the_compilers_c_helper_in_an_inlined_call_breaks_it() -> None:
    _compare(helper_in_an_inlined_call, 3, 4)


@torch.compiler.disable
class _DisabledLayer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(torch.sigmoid(x))


class _Outer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = _DisabledLayer()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(self.inner(torch.sin(x)))


def _doubling_pre_hook(module: torch.nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
    return (args[0].cos() * 2,)


def _graph_targets(compile_fn: Callable[..., Any], model: torch.nn.Module) -> list[list[Any]]:
    counter = GraphCounter()
    x = torch.randn(3, 4)
    torch.testing.assert_close(compile_fn(model, backend=counter)(x), model(x))
    return [[n.target for n in g.graph.nodes if n.op.startswith("call_")] for g in counter.graphs]


def test_a_module_class_under_torch_disable_runs_eagerly_with_its_hooks() -> None:
    """torch.compiler.disable on an nn.Module class (it wraps the class's __call__ and
    _call_impl): a call of an instance breaks and runs eagerly, its pre-hook too. Before, the
    VM inlined it: one graph holding the disabled layer's cos/sigmoid/linear."""
    torch.manual_seed(0)
    model = _Outer()
    model.inner.register_forward_pre_hook(_doubling_pre_hook)
    ours = _graph_targets(compile_api.compile, model)
    assert len(ours) == 2 and torch.sin in ours[0]
    assert not any(t in (torch.sigmoid, torch.cos, "cos") for g in ours for t in g)
    if TORCH_2_13:
        assert len(_graph_targets(torch.compile, model)) == len(ours)


def profiled_block_with_a_break(x: torch.Tensor) -> torch.Tensor:
    y = x**2
    with torch.profiler.profile():
        y = y + 2
        with torch.profiler.record_function("inner"):
            z = y**3
            z.tolist()  # graph break inside both blocks
            z = z + 1
    return z


def profiler_bound_and_returned(x: torch.Tensor) -> tuple[torch.Tensor, Any]:
    with torch.profiler.profile() as prof:
        y = x * 2
    return y, prof


def test_an_unbound_profiler_session_is_left_out_and_its_block_resumes_after_a_break() -> None:
    """``with torch.profiler.profile():`` (no arguments, unbound) inside the compiled code: left
    out as torch.compile does, and a break inside it and a record_function resumes inside both
    blocks (2 graphs, as torch). Before: the profiler broke the graph and the whole with
    statement ran eagerly (1 graph of 1 op)."""
    x = torch.randn(2, 2)
    counter = GraphCounter()
    got = compile_api.compile(profiled_block_with_a_break, backend=counter)(x)
    torch.testing.assert_close(got, profiled_block_with_a_break(x))
    ours = (counter.count, sum(counter.op_count(i) for i in range(counter.count)))
    assert ours == (2, 4)
    if TORCH_2_13:
        theirs = GraphCounter()
        torch.compile(profiled_block_with_a_break, backend=theirs)(x)
        assert (theirs.count, sum(theirs.op_count(i) for i in range(theirs.count))) == ours


def test_a_bound_profiler_session_still_records_what_eager_records() -> None:
    """``as prof``: the session is observable, so it is never left out: it runs eagerly and
    the object returned holds the ops of the block, as eager's does."""
    x = torch.randn(3)
    y, prof = compile_api.compile(profiler_bound_and_returned, backend=GraphCounter())(x)
    torch.testing.assert_close(y, x * 2)
    assert isinstance(prof, torch.profiler.profile)
    assert "aten::mul" in {e.key for e in prof.key_averages()}


def test_compiling_a_module_of_a_disabled_class_runs_it_eagerly() -> None:
    """``compile(model)`` where the model's class is under torch.compiler.disable: no graph, the
    result eager's, as torch.compile (Strata compiled its forward: the direct route to forward
    skipped the class's disabled __call__)."""
    torch.manual_seed(0)
    model = _DisabledLayer()
    x = torch.randn(2, 4)
    counter = GraphCounter()
    torch.testing.assert_close(compile_api.compile(model, backend=counter)(x), model(x))
    assert counter.count == 0
    if TORCH_2_13:
        theirs = GraphCounter()
        torch.compile(model, backend=theirs)(x)
        assert theirs.count == 0
