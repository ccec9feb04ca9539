"""Graph breaks end to end: compile_api -> symbolic_vm (partial graphs, resume functions) -> eager.

Every test runs the function eagerly and compiled on the same inputs and compares, then checks
the graphs and breaks Strata produced; where it applies, the graph count is compared with
torch.compile's (with a counting backend) on the same function: ours must not be larger.
"""

from __future__ import annotations

import copy
import dis
import sys
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch

import compile_api
import symbolic_vm

from .conftest import GraphCounter


def torch_compile_graph_count(fn: Callable[..., Any], *calls: tuple[Any, ...]) -> int:
    """How many graphs torch.compile (the reference) makes of ``fn`` over ``calls``."""
    import torch._dynamo

    graphs: list[torch.fx.GraphModule] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=backend)
    for args in calls:
        compiled(*copy.deepcopy(args))
    torch._dynamo.reset()
    return len(graphs)


def run_both(
    fn: Callable[..., Any], counter: GraphCounter, *calls: tuple[Any, ...]
) -> list[Any]:
    """Run ``fn`` eagerly and compiled on copies of each call's arguments; compare outputs and
    in-place changes to the arguments. Returns the compiled outputs."""
    compiled = compile_api.compile(fn, backend=counter)
    outs = []
    for args in calls:
        eager_args = copy.deepcopy(args)
        our_args = copy.deepcopy(args)
        expected = fn(*eager_args)
        out = compiled(*our_args)
        torch.testing.assert_close(out, expected)
        for mine, theirs in zip(our_args, eager_args, strict=True):
            if isinstance(theirs, torch.Tensor):
                torch.testing.assert_close(mine, theirs)
            elif isinstance(theirs, list):
                assert mine == theirs
        outs.append(out)
    return outs


def reference_limit(fn: Callable[..., Any], ours: int, *calls: tuple[Any, ...]) -> None:
    """Our graph count is at most torch.compile's on the same calls."""
    if sys.version_info >= (3, 13):  # no torch.compile reference to compare with there
        return
    assert ours <= torch_compile_graph_count(fn, *calls)


# --- the TorchDynamo README example --------------------------------------------------------------


def toy_example(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


def test_readme_toy_example_gives_three_graphs_over_both_branches(counter: GraphCounter) -> None:
    torch.manual_seed(0)
    a = torch.randn(10)
    calls = [(a, torch.rand(10)), (a, -torch.rand(10)), (a, torch.rand(10))]
    run_both(toy_example, counter, *calls)
    assert counter.count == 3
    first = counter.graphs[0]
    out_node = next(n for n in first.graph.nodes if n.op == "output")
    assert [n.name for n in out_node.args[0]] == ["truediv", "lt"]
    reference_limit(toy_example, counter.count, *calls)


def test_readme_toy_example_bytecode_calls_the_graph_then_a_resume_function() -> None:
    compiled = compile_api.compile(toy_example, backend="eager")
    compiled(torch.randn(10), torch.randn(10))
    import evalframe

    (entry,) = evalframe.cache_entries(toy_example.__code__)
    names = [i.argval for i in dis.get_instructions(entry.code) if i.opname == "LOAD_GLOBAL"]
    graph_calls = [n for n in names if n.startswith("__compiled_fn_")]
    assert graph_calls, names
    resumes = [c.co_name for c in entry.code.co_consts if hasattr(c, "co_name")] + names
    assert sum(1 for n in set(resumes) if n.startswith("__resume_at_")) == 2


def test_explain_reports_the_break_with_its_source_line() -> None:
    a, b = torch.randn(10), torch.randn(10)
    report = compile_api.explain(toy_example)(a, b)
    assert report.graph_count == 2  # one run takes one branch
    assert report.graph_break_count == 1
    (brk,) = report.break_reasons
    assert brk.filename == __file__
    assert brk.source_line.strip() == "if b.sum() < 0:"
    assert brk.lineno == toy_example.__code__.co_firstlineno + 2


# --- unsupported calls ---------------------------------------------------------------------------


def print_between(x: torch.Tensor) -> torch.Tensor:
    y = x.sin() + 1
    print("between")
    return y.cos() * 2


def test_print_splits_the_function_into_two_graphs(
    counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    x = torch.randn(4)
    run_both(print_between, counter, (x,), (x + 1,))
    assert counter.count == 2
    assert capsys.readouterr().out == "between\n" * 4  # eager and compiled, twice each
    reference_limit(print_between, counter.count, (x,))


def explicit_breaks(x: torch.Tensor) -> torch.Tensor:
    x = x + 1
    compile_api.graph_break()
    x = x * 2
    symbolic_vm.graph_break()
    return x - 3


def test_graph_break_functions_of_both_layers_split_the_graph(counter: GraphCounter) -> None:
    x = torch.randn(3)
    run_both(explicit_breaks, counter, (x,))
    assert counter.count == 3
    report = compile_api.explain(explicit_breaks)(x)
    assert report.graph_break_count == 2


def item_in_the_middle(x: torch.Tensor) -> torch.Tensor:
    scale = x.abs().sum().item()
    return x * scale + 1


def tolist_in_the_middle(x: torch.Tensor) -> torch.Tensor:
    values = (x * 2).tolist()
    return x + len(values)


@pytest.mark.parametrize("fn", [item_in_the_middle, tolist_in_the_middle])
def test_data_dependent_calls_break_and_resume(
    fn: Callable[..., Any], counter: GraphCounter
) -> None:
    x = torch.randn(5)
    run_both(fn, counter, (x,))
    assert counter.count == 2
    reference_limit(fn, counter.count, (x,))


def combine(a: torch.Tensor, unused: object, b: torch.Tensor) -> torch.Tensor:
    return a * 10 + b


def print_among_arguments(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    c = a + 1
    return combine(c, print(c.shape), b) - 1


def len_of_print(x: torch.Tensor) -> torch.Tensor:
    x = x * 2
    y = x + len(str(print("hi")))
    return y * 3


@pytest.mark.parametrize("fn", [print_among_arguments, len_of_print])
def test_break_with_values_left_on_the_stack(
    fn: Callable[..., Any], counter: GraphCounter
) -> None:
    args = (torch.randn(3), torch.randn(3))[: fn.__code__.co_argcount]
    run_both(fn, counter, args)
    assert counter.count >= 2  # the graph before the break, and the rest


def append_then_print(x: torch.Tensor, log: list[int]) -> torch.Tensor:
    log.append(len(log))
    print(list(log))
    return x + len(log)


def test_side_effects_are_applied_before_the_unsupported_call(
    counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    x = torch.randn(2)
    run_both(append_then_print, counter, (x, [7]))
    assert capsys.readouterr().out == "[7, 1]\n[7, 1]\n"


# --- loops ---------------------------------------------------------------------------------------


def print_in_range_loop(x: torch.Tensor, n: int) -> torch.Tensor:
    for i in range(n):
        x = x + i
        print(i)
        x = x * 2
    return x


def print_in_list_loop(x: torch.Tensor, factors: list[float]) -> torch.Tensor:
    for f in factors:
        x = x * f
        print(f)
    return x + 1


def print_in_while_loop(x: torch.Tensor) -> torch.Tensor:
    i = 0
    while i < 3:
        x = x + 1
        print(i)
        i += 1
    return x


# torch.compile runs a frame whose break is followed by a loop back edge eagerly (0 graphs), and
# so does the VM: the results must still match eager.
@pytest.mark.parametrize(
    ("fn", "extra"),
    [(print_in_range_loop, (3,)), (print_in_list_loop, ([2.0, 0.5, 3.0],)),
     (print_in_while_loop, ())],
)
def test_break_inside_a_loop_matches_eager(
    fn: Callable[..., Any], extra: tuple[Any, ...], counter: GraphCounter,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = (torch.randn(3), *extra)
    run_both(fn, counter, args)
    eager_half = capsys.readouterr().out
    lines = eager_half.splitlines()
    assert lines[: len(lines) // 2] == lines[len(lines) // 2 :]
    reference_limit(fn, counter.count, args)


# --- with blocks and try/finally -----------------------------------------------------------------


def print_in_no_grad(x: torch.Tensor) -> tuple[torch.Tensor, bool]:
    with torch.no_grad():
        y = x * 2
        print("inside")
        inside = torch.is_grad_enabled()
        z = y * x
    return z + x, inside


def print_in_enable_grad(x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        with torch.enable_grad():
            y = x * 3
            print("inner")
            z = y + 1
        w = z * 2
    return w


@pytest.mark.parametrize("fn", [print_in_no_grad, print_in_enable_grad])
def test_break_inside_grad_mode_blocks_keeps_grad_mode(
    fn: Callable[..., Any], counter: GraphCounter
) -> None:
    x = torch.randn(3, requires_grad=True)
    compiled = compile_api.compile(fn, backend=counter)
    out = compiled(x)
    expected = fn(x)
    torch.testing.assert_close(out, expected)
    first = out[0] if isinstance(out, tuple) else out
    first_expected = expected[0] if isinstance(expected, tuple) else expected
    assert first.requires_grad == first_expected.requires_grad
    assert torch.is_grad_enabled()
    assert counter.count == 2  # the break is inside the block: the graph before it, the rest
    reference_limit(fn, counter.count, (x,))


def print_in_try_finally(x: torch.Tensor, log: list[str]) -> torch.Tensor:
    try:
        x = x + 1
        print("try")
        x = x * 2
    finally:
        log.append("finally")
    return x


def test_break_inside_try_finally_runs_the_finally_once(counter: GraphCounter) -> None:
    run_both(print_in_try_finally, counter, (torch.randn(2), []))


def test_break_inside_try_finally_makes_no_more_graphs_than_torch_compile(
    counter: GraphCounter,
) -> None:
    args = (torch.randn(2), [])
    run_both(print_in_try_finally, counter, args)
    reference_limit(print_in_try_finally, counter.count, args)


# --- inlined functions ---------------------------------------------------------------------------


def inner_with_print(x: torch.Tensor) -> torch.Tensor:
    print("inner")
    return x * 2


def outer_calls_inner(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    z = inner_with_print(y)
    return z - 1


def test_break_inside_an_inlined_call_breaks_at_the_call_site(counter: GraphCounter) -> None:
    x = torch.randn(3)
    run_both(outer_calls_inner, counter, (x,))
    ops = [n for g in counter.graphs for n in g.graph.nodes if n.op == "call_function"]
    # add (outer, before the call), mul (inner, its own frame), sub (outer's resume function):
    # each captured once, none replayed.
    assert len(ops) == 3
    assert counter.count == 3
    reference_limit(outer_calls_inner, counter.count, (x,))


# --- more shapes of breaks -----------------------------------------------------------------------


def keyword_print(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    print("value", end="!\n", sep="")
    return y * 2


def two_prints(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    print("one")
    z = y * 2
    print("two")
    return z - 3


def make_scaled(scale: float) -> Callable[[torch.Tensor], torch.Tensor]:
    offset = torch.ones(3)

    def scaled(x: torch.Tensor) -> torch.Tensor:
        y = x * scale
        print("closure")
        return y + offset

    return scaled


@pytest.mark.parametrize(
    ("fn", "graphs"),
    [(keyword_print, 2), (two_prints, 3), (make_scaled(1.5), 2)],
    ids=["keyword-arguments", "break-in-resume-function", "closure"],
)
def test_breaks_at_keyword_calls_in_resume_functions_and_closures(
    fn: Callable[..., Any], graphs: int, counter: GraphCounter,
    capsys: pytest.CaptureFixture[str],
) -> None:
    x = torch.randn(3)
    run_both(fn, counter, (x,), (x * 2,))
    assert counter.count == graphs  # compiled once, reused by the second call
    out = capsys.readouterr().out.splitlines()
    assert out[: len(out) // 2] == out[len(out) // 2 :]
    reference_limit(fn, counter.count, (x,), (x * 2,))
