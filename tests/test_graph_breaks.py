"""Graph breaks end to end: compile_api -> symbolic_vm (partial graphs, resume functions) -> eager.

Every test runs the function eagerly and compiled on the same inputs and compares, then checks
the graphs and breaks Strata produced; where it applies, the graph count is compared with
torch.compile's (with a counting backend) on the same function: ours must not be larger.
"""

from __future__ import annotations

import contextlib
import copy
import dis
import sys
from collections.abc import Callable, Iterator, Sequence
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


# --- with blocks of every kind: re-entered like torch.compile, or the frame runs eagerly ---------


def reference_count(fn: Callable[..., Any], ours: int, *calls: tuple[Any, ...]) -> None:
    """Our graph count equals torch.compile's on the same calls (where it can run)."""
    if sys.version_info >= (3, 13):
        return
    assert ours == torch_compile_graph_count(fn, *calls)


STATES: list[tuple[str, bool, bool, torch.dtype]] = []


def _record_state(tag: str) -> None:
    STATES.append(
        (tag, torch.is_grad_enabled(), torch.is_autocast_enabled("cpu"),
         torch.get_autocast_dtype("cpu"))
    )


# A call the VM must break at (disabled for compilation) that records the state it runs in.
record_state = compile_api.disable(_record_state)


def print_in_autocast(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = torch.mm(x, x)
        print("inside autocast")
        z = torch.mm(y, x)
    return z + 1, y


def print_in_set_grad_enabled(x: torch.Tensor) -> torch.Tensor:
    with torch.set_grad_enabled(False):
        y = x * 2
        print("inside set_grad_enabled")
        z = y * x
    return z + x


def print_in_set_grad_enabled_true_inside_no_grad(x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        a = x * 2
        with torch.set_grad_enabled(True):
            y = x * 3
            print("inside")
            z = y * x
        w = z + a
    return w * x


def print_in_autocast_in_no_grad(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.no_grad():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = torch.mm(x, x)
            print("inside both")
            z = torch.mm(y, x)
        w = z.float() * 2
    return w, x * 2


@pytest.mark.parametrize(
    "fn",
    [print_in_autocast, print_in_set_grad_enabled, print_in_set_grad_enabled_true_inside_no_grad,
     print_in_autocast_in_no_grad],
    ids=["autocast", "set_grad_enabled", "set_grad_enabled-in-no_grad", "autocast-in-no_grad"],
)
def test_break_inside_autocast_and_set_grad_enabled_resumes_inside_the_block(
    fn: Callable[..., Any], counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    x = torch.randn(3, 3, requires_grad=True)
    x2 = (x * 2).detach().requires_grad_()
    outs = run_both(fn, counter, (x,), (x2,))
    expected = fn(x2)
    for mine, theirs in zip(outs[-1] if isinstance(expected, tuple) else (outs[-1],),
                            expected if isinstance(expected, tuple) else (expected,),
                            strict=True):
        assert mine.dtype == theirs.dtype and mine.requires_grad == theirs.requires_grad
    assert torch.is_grad_enabled() and not torch.is_autocast_enabled("cpu")
    assert counter.count == 2  # the graph before the break, the resume function's: reused
    reference_count(fn, counter.count, (x,), (x2,))


def test_autocast_block_is_exited_in_the_first_graph_and_entered_again_in_the_second(
    counter: GraphCounter,
) -> None:
    run_both(print_in_autocast, counter, (torch.randn(3, 3),))
    enter, exit_ = torch.amp.autocast_mode._enter_autocast, torch.amp.autocast_mode._exit_autocast
    for gm in counter.graphs:
        targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
        assert targets.count(enter) == 1 and targets.count(exit_) == 1
        assert targets.index(enter) < targets.index(torch.mm) < targets.index(exit_)


def state_at_each_step(x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        a = x * 2
        with torch.autocast("cpu", dtype=torch.bfloat16):
            b = torch.mm(a, x)
            record_state("autocast")
            c = torch.mm(b, x)
        record_state("no_grad")
        torch.set_grad_enabled(True)  # a plain switch inside the block, kept until its exit
        d = c.float() * x
        record_state("switched")
    record_state("after")
    return d + x


def test_grad_mode_and_autocast_state_are_eagers_at_each_break() -> None:
    x = torch.randn(3, 3, requires_grad=True)
    STATES.clear()
    expected = state_at_each_step(x)
    eager_states = list(STATES)
    STATES.clear()
    counter = GraphCounter()
    out = compile_api.compile(state_at_each_step, backend=counter)(x)
    torch.testing.assert_close(out, expected)
    assert out.requires_grad == expected.requires_grad
    assert STATES == eager_states
    assert [s[0] for s in STATES] == ["autocast", "no_grad", "switched", "after"]
    assert counter.count == 4  # before each of the three breaks that compile, and the rest
    assert torch.is_grad_enabled() and not torch.is_autocast_enabled("cpu")


def raise_in_autocast(x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        y = torch.mm(x, x)
        record_state(y)  # type: ignore[arg-type]  # raises inside: x is not a str
        return y


def test_an_exception_at_the_break_leaves_the_blocks_like_eager() -> None:
    def fail(tag: object) -> None:
        raise ValueError(f"bad tag {type(tag).__name__}")

    global record_state
    saved, record_state = record_state, compile_api.disable(fail)
    try:
        x = torch.randn(2, 2)
        with pytest.raises(ValueError, match="bad tag Tensor"):
            raise_in_autocast(x)
        with pytest.raises(ValueError, match="bad tag Tensor"):
            compile_api.compile(raise_in_autocast, backend="eager")(x)
        assert torch.is_grad_enabled() and not torch.is_autocast_enabled("cpu")
    finally:
        record_state = saved


class Counting:
    """A user context manager the VM can inline (both methods are plain Python)."""

    def __init__(self) -> None:
        self.depth = 0
        self.log: list[int] = []

    def __enter__(self) -> Counting:
        self.depth += 1
        return self

    def __exit__(self, *exc: object) -> None:
        self.log.append(self.depth)
        self.depth -= 1


MANAGER = Counting()


def print_in_user_manager(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    with MANAGER:
        z = y * 2
        print("inside a user manager", MANAGER.depth)
        w = z * x
    return w - 1


@contextlib.contextmanager
def generator_manager() -> Iterator[None]:
    yield


def print_in_generator_manager(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    with generator_manager():
        z = y * 2
        print("inside a generator manager")
    return z - 1


@pytest.mark.parametrize("fn", [print_in_user_manager, print_in_generator_manager])
def test_break_inside_a_user_context_manager_runs_the_frame_eagerly_like_torch_compile(
    fn: Callable[..., Any], counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    x = torch.randn(3)
    MANAGER.log.clear()
    run_both(fn, counter, (x,))
    assert counter.count == 0  # torch.compile, too, falls back to eager for the whole frame
    assert MANAGER.depth == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == out[1]  # same depth inside, eager and compiled
    reference_count(fn, counter.count, (x,))
