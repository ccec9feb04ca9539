"""Graph breaks end to end: compile_api -> symbolic_vm (partial graphs, resume functions) -> eager.

Every test runs the function eagerly and compiled on the same inputs and compares, then checks
the graphs and breaks Strata produced; where it applies, the graph count is compared with
torch.compile's (with a counting backend) on the same function: ours must not be larger.
"""

from __future__ import annotations

import contextlib
import copy
import dis
import inspect
import operator
import random
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
import torch

import compile_api
import symbolic_vm

from .conftest import GraphCounter


def torch_compile_graph_count(fn: Callable[..., Any], *calls: tuple[Any, ...]) -> int:
    """How many graphs torch.compile (the reference) makes of ``fn`` over ``calls``."""
    return len(torch_compile_graphs(fn, *calls))


def torch_compile_graphs(
    fn: Callable[..., Any], *calls: tuple[Any, ...]
) -> list[torch.fx.GraphModule]:
    """The graphs torch.compile (the reference) makes of ``fn`` over ``calls``."""
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
    return graphs


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


def reference_ops_at_least(
    fn: Callable[..., Any], counter: GraphCounter, *calls: tuple[Any, ...]
) -> int:
    """We compile at least as many ops as torch.compile on the same calls (where it runs);
    returns torch.compile's op count (-1 where it cannot run)."""
    if sys.version_info >= (3, 13):
        return -1
    theirs = sum(
        1 for gm in torch_compile_graphs(fn, *calls) for n in gm.graph.nodes
        if n.op.startswith("call_")
    )
    ours = sum(counter.op_count(i) for i in range(counter.count))
    assert ours >= theirs
    return theirs


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


# torch.compile runs a frame whose break is followed by a loop back edge eagerly (0 graphs); the
# VM runs only the loop as bytecode (the region tests below): the results must match eager.
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
    reference_ops_at_least(fn, counter, args)


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
    """Our graph count equals torch.compile's on the same calls (where it can run).

    Older torch breaks more often (2.11 breaks around a nonstrict_trace call that returns a
    pytree; 2.13 does not): there, never more graphs than torch.compile is the promise.
    """
    if sys.version_info >= (3, 13):
        return
    reference = torch_compile_graph_count(fn, *calls)
    if torch.__version__ >= "2.13":
        assert ours == reference
    else:
        assert ours <= reference


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


def print_in_cpu_amp_autocast(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.cpu.amp.autocast(dtype=torch.bfloat16):  # the deprecated per-device spelling
        y = torch.mm(x, x)
        print("inside cpu.amp.autocast")
        z = torch.mm(y, x)
    return z + 1, y


def print_in_inference_mode(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.inference_mode():
        y = x * 2
        print("inside inference_mode")
        z = y * x
    return z + 1, z


@pytest.mark.parametrize(
    "fn",
    [print_in_autocast, print_in_set_grad_enabled, print_in_set_grad_enabled_true_inside_no_grad,
     print_in_autocast_in_no_grad, print_in_inference_mode, print_in_cpu_amp_autocast],
    ids=["autocast", "set_grad_enabled", "set_grad_enabled-in-no_grad", "autocast-in-no_grad",
         "inference_mode", "cpu.amp.autocast"],
)
@pytest.mark.filterwarnings("ignore:.*torch.cpu.amp.autocast.*:FutureWarning")
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
        assert mine.is_inference() == theirs.is_inference()
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


def inference_mode_in_no_grad(x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        with torch.inference_mode():
            y = x * 2
            print("inference_mode in no_grad")
            z = y * x
    return z + x


def no_grad_in_inference_mode(x: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        with torch.no_grad():
            y = x * 2
            print("no_grad in inference_mode")
            z = y * x
        w = z * 2
    return w + x


@pytest.mark.parametrize("fn", [inference_mode_in_no_grad, no_grad_in_inference_mode])
def test_inference_mode_mixed_with_grad_mode_blocks_runs_the_frame_eagerly(
    fn: Callable[..., Any], counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    # inference_mode switches grad mode by itself: which mode to restore is not tracked.
    x = torch.randn(3, requires_grad=True)
    out = compile_api.compile(fn, backend=counter)(x)
    expected = fn(x)
    torch.testing.assert_close(out, expected)
    assert out.requires_grad == expected.requires_grad
    assert counter.count == 0
    assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
    reference_limit(fn, counter.count, (x,))


def uses_inference_mode(x: torch.Tensor) -> tuple[torch.Tensor, bool]:
    with torch.inference_mode():
        y = x * 2
        inside = torch.is_inference_mode_enabled()
    return y + 1, inside


def test_inference_mode_block_is_captured_whole(counter: GraphCounter) -> None:
    x = torch.randn(3, requires_grad=True)
    compiled = compile_api.compile(uses_inference_mode, backend=counter, fullgraph=True)
    out, inside = compiled(x)
    expected, inside_eager = uses_inference_mode(x)
    torch.testing.assert_close(out, expected)
    assert inside is inside_eager is True
    assert out.requires_grad == expected.requires_grad
    assert not torch.is_inference_mode_enabled()
    targets = [n.target for n in counter.graphs[0].graph.nodes if n.op == "call_function"]
    assert targets[0] is torch.autograd.grad_mode._enter_inference_mode
    assert torch.autograd.grad_mode._exit_inference_mode in targets


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


def print_in_maybe_suppressing_manager(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    with MaySuppress():
        z = y * 2
        print("inside a manager that may suppress")
    return z - 1


@pytest.mark.parametrize("fn", [print_in_maybe_suppressing_manager, print_in_generator_manager])
def test_break_inside_a_user_context_manager_runs_its_with_statement_as_a_region(
    fn: Callable[..., Any], counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    # torch.compile runs the whole frame eagerly (0 graphs). A manager that is not handed on
    # (a @contextmanager generator; an __exit__ that may suppress): the code before the with
    # statement is one graph, the statement runs as the frame's bytecode (the real __enter__
    # and __exit__ once each), the code after it is a resume function's graph.
    x = torch.randn(3)
    run_both(fn, counter, (x,))
    assert [counter.op_count(i) for i in range(counter.count)] == [1, 1]  # add | sub
    out = capsys.readouterr().out.splitlines()
    assert out[0] == out[1]
    reference_ops_at_least(fn, counter, (x,))


def two_prints_in_user_manager(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    with MANAGER:
        z = y * 2
        print("inside a user manager", MANAGER.depth)
        w = z * x
        print("again", MANAGER.depth)
        w = w + 1
    return w - 1


@pytest.mark.parametrize("fn", [print_in_user_manager, two_prints_in_user_manager])
def test_break_inside_a_traced_user_manager_keeps_compiling_inside_the_block(
    fn: Callable[..., Any], counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    # The manager's __enter__/__exit__ are traced (attribute writes on it): the graph runs up
    # to the break inside the block, the resume function finishes the block and its exit
    # calls the real manager's __exit__ -- entered once, exited once per call.
    x = torch.randn(3)
    MANAGER.log.clear()
    run_both(fn, counter, (x,), (x,))
    assert MANAGER.depth == 0
    assert MANAGER.log == [1] * 4  # one exit per call, eager and compiled, two calls each
    out = capsys.readouterr().out.splitlines()
    assert out[: len(out) // 2] == out[len(out) // 2 :]  # the same depth seen inside
    ops = [counter.op_count(i) for i in range(counter.count)]
    if fn is print_in_user_manager:
        assert ops[:2] == [2, 2]  # add, mul | mul, sub: the block's ops compiled
    else:
        assert ops[:3] == [2, 1, 2]  # add, mul | mul | add, sub
    reference_ops_at_least(fn, counter, (x,))


class Recorder:
    """A user context manager that logs its calls, the exception its ``__exit__`` saw and the
    grad mode at each; it suppresses exceptions when asked (``__exit__`` returns True)."""

    def __init__(self, log: list[object], suppress: bool = False) -> None:
        self.log = log
        self.suppress = suppress

    def __enter__(self) -> Recorder:
        self.log.append(("enter", torch.is_grad_enabled()))
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> bool:
        self.log.append(("exit", kind.__name__ if kind else None, torch.is_grad_enabled()))
        return self.suppress


class GradOff:
    """A user context manager switching grad mode itself (not torch.no_grad)."""

    def __init__(self, log: list[object]) -> None:
        self.log = log
        self.before = True

    def __enter__(self) -> None:
        self.before = torch.is_grad_enabled()
        torch.set_grad_enabled(False)
        self.log.append("enter")

    def __exit__(self, *exc: object) -> None:
        torch.set_grad_enabled(self.before)
        self.log.append("exit")


def raise_in_user_manager(x: torch.Tensor, log: list[object], mode: str) -> torch.Tensor:
    y = x * 2
    with Recorder(log, suppress=mode == "suppress") as rec:
        z = y.sin()
        print("inside", rec.suppress)
        if mode != "none":
            raise ValueError("raised inside the block")
        y = z + 1
    return y.cos() - 1


def outcome(fn: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    """``("value", result)`` or ``("raised", exception type and message)``."""
    try:
        return ("value", fn(*args))
    except Exception as exc:  # noqa: BLE001 - compared as an outcome
        return ("raised", (type(exc), str(exc)))


@pytest.mark.parametrize("mode", ["none", "raise", "suppress"])
def test_an_exception_inside_a_user_manager_reaches_its_exit_like_eager(
    mode: str, counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    # The with statement runs as bytecode: __exit__ sees the exception and either lets it
    # propagate (returns False) or suppresses it (returns True), exactly as in eager.
    x = torch.randn(3)
    compiled = compile_api.compile(raise_in_user_manager, backend=counter)
    eager_log: list[object] = []
    our_log: list[object] = []
    expected = outcome(raise_in_user_manager, x, eager_log, mode)
    got = outcome(compiled, x, our_log, mode)
    assert got[0] == expected[0]
    if expected[0] == "value":
        torch.testing.assert_close(got[1], expected[1])
    else:
        assert got[1] == expected[1]
    assert our_log == eager_log
    assert [entry[0] for entry in our_log] == ["enter", "exit"]  # entered once, exited once
    # The graph before the statement (mul); after it (cos, sub) unless the exception escaped.
    assert [counter.op_count(i) for i in range(counter.count)] == (
        [1] if mode == "raise" else [1, 2]
    )
    if mode != "raise":
        reference_ops_at_least(raise_in_user_manager, counter, (x, [], mode))


def grad_off_in_user_manager(x: torch.Tensor, log: list[object]) -> tuple[torch.Tensor, bool]:
    y = x * 2
    with GradOff(log):
        z = y * 3
        log.append(torch.is_grad_enabled())
        print("grad off by a user manager")
        w = z + y
    return w * x, torch.is_grad_enabled()


def test_a_user_manager_switching_grad_mode_leaves_eagers_grad_mode(
    counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    x = torch.randn(3, requires_grad=True)
    compiled = compile_api.compile(grad_off_in_user_manager, backend=counter)
    eager_log: list[object] = []
    our_log: list[object] = []
    expected = grad_off_in_user_manager(x, eager_log)
    got = compiled(x, our_log)
    torch.testing.assert_close(got[0], expected[0])
    assert got[0].requires_grad == expected[0].requires_grad
    assert got[1] == expected[1] is True
    assert torch.is_grad_enabled()
    assert our_log == eager_log == ["enter", False, "exit"]
    got[0].sum().backward()
    assert x.grad is not None
    # Handed on: mul, the traced __enter__'s grad switch, mul | add, the traced __exit__'s
    # grad switch, mul.
    assert [counter.op_count(i) for i in range(counter.count)] == [3, 3]
    reference_ops_at_least(grad_off_in_user_manager, counter, (x.detach(), []))


def user_manager_in_no_grad_in_loop(
    x: torch.Tensor, log: list[object], n: int
) -> torch.Tensor:
    y = x + 1
    with torch.no_grad():
        for k in range(n):
            with Recorder(log):
                y = y * 2
                print("loop", k)
    with Recorder(log):
        with Recorder(log):
            y = y - x
            print("nested user managers")
    return y + x


def test_user_managers_in_loops_and_nested_ones_enter_and_exit_like_eager(
    counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    x = torch.randn(3, requires_grad=True)
    compiled = compile_api.compile(user_manager_in_no_grad_in_loop, backend=counter)
    eager_log: list[object] = []
    our_log: list[object] = []
    expected = user_manager_in_no_grad_in_loop(x, eager_log, 3)
    got = compiled(x, our_log, 3)
    torch.testing.assert_close(got, expected)
    assert got.requires_grad == expected.requires_grad
    assert our_log == eager_log  # grad mode at each enter/exit included
    assert len(our_log) == 10
    assert torch.is_grad_enabled()
    # add | (the loop region, in no_grad) the resume function's re-entered no_grad, left
    # before the nested statement: two grad switches alone, not compiled | add
    assert [counter.op_count(i) for i in range(counter.count)] == [3, 1]
    reference_ops_at_least(user_manager_in_no_grad_in_loop, counter, (x, [], 3))


class Logs:
    """A traced user manager that never suppresses: logs its calls, the exception its
    ``__exit__`` saw, and an attribute its ``__enter__`` set."""

    def __init__(self, log: list[object]) -> None:
        self.log = log
        self.entered = 0

    def __enter__(self) -> Logs:
        self.entered += 1
        self.log.append("enter")
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        self.log.append(("exit", kind.__name__ if kind else None, self.entered))


def untraceable_raise(x: torch.Tensor) -> None:
    print("about to raise")
    raise ValueError("raised by the broken call")


def raise_at_the_break(x: torch.Tensor, log: list[object]) -> torch.Tensor:
    y = x + 1
    with Logs(log):
        y = y * 2
        untraceable_raise(y)
        y = y - 1
    return y


def raise_after_the_break(
    x: torch.Tensor, log: list[object], n: int
) -> tuple[torch.Tensor, int]:
    y = x + 1
    with Logs(log) as m:
        y = y * 2
        print("handed on")
        for k in range(n):  # a loop in the resume function's part of the block: a region
            y = y + k
            print("in the loop", k)
        if n > 2:
            raise KeyError(n)
        y = y * m.entered
    return y, m.entered


@pytest.mark.parametrize(
    ("fn", "extra"),
    [(raise_at_the_break, ()), (raise_after_the_break, (2,)), (raise_after_the_break, (3,))],
)
def test_exceptions_inside_a_handed_on_user_manager_reach_its_exit_like_eager(
    fn: Callable[..., Any], extra: tuple[Any, ...], counter: GraphCounter,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Raised by the broken call itself (in the residual code: HandOn passes it to the real
    # __exit__, which does not suppress, and it propagates), or later in the block (in the
    # resume function, whose with block is the real bytecode's).
    x = torch.randn(3)
    compiled = compile_api.compile(fn, backend=counter)
    eager_log: list[object] = []
    our_log: list[object] = []
    expected = outcome(fn, x, eager_log, *extra)
    got = outcome(compiled, x, our_log, *extra)
    assert got[0] == expected[0]
    if expected[0] == "value":
        torch.testing.assert_close(got[1], expected[1])
    else:
        assert got[1] == expected[1]
    assert our_log == eager_log
    assert our_log[0] == "enter"
    assert len(our_log) == 2  # entered once, exited once
    assert counter.op_count(0) == 2  # add, mul: the block's first op is compiled
    if expected[0] == "value":
        reference_ops_at_least(fn, counter, (x, [], *extra))


class Noisy:
    """A manager whose construction the VM cannot trace (it prints)."""

    def __init__(self, log: list[object]) -> None:
        print("making a manager")
        self.log = log

    def __enter__(self) -> None:
        self.log.append("enter")

    def __exit__(self, *exc: object) -> None:
        self.log.append("exit")


class NoisyEnter(Noisy):
    """A manager whose ``__enter__`` the VM cannot trace."""

    def __init__(self, log: list[object]) -> None:
        self.log = log

    def __enter__(self) -> None:
        print("entering")
        self.log.append("enter")


def with_noisy_manager(x: torch.Tensor, log: list[object]) -> torch.Tensor:
    y = x * 2
    with Noisy(log):
        y = y + 1
    return y.sin()


def with_noisy_enter(x: torch.Tensor, log: list[object]) -> torch.Tensor:
    y = x * 2
    with NoisyEnter(log):
        y = y + 1
    return y.sin()


@pytest.mark.parametrize("fn", [with_noisy_manager, with_noisy_enter])
def test_a_manager_the_vm_cannot_make_or_enter_runs_its_with_statement_as_bytecode(
    fn: Callable[..., Any], counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    # torch.compile runs these frames eagerly; here the with statement alone does.
    x = torch.randn(3)
    compiled = compile_api.compile(fn, backend=counter)
    eager_log: list[object] = []
    our_log: list[object] = []
    torch.testing.assert_close(compiled(x, our_log), fn(x, eager_log))
    assert our_log == eager_log == ["enter", "exit"]
    assert [counter.op_count(i) for i in range(counter.count)] == [1, 1]  # mul | sin
    reference_ops_at_least(fn, counter, (x, []))



# --- .grad assignments: side effects after the graph, no break -----------------------------------


def sgd_step(
    params: list[torch.nn.Parameter], model: torch.nn.Module, x: torch.Tensor, t: torch.Tensor
) -> torch.Tensor:
    for p in params:
        p.grad = None
    loss = torch.nn.functional.mse_loss(model(x), t)
    loss.backward()  # type: ignore[no-untyped-call]
    with torch.no_grad():
        for p in params:
            p.sub_(0.1 * p.grad)  # type: ignore[operator]
    return loss.detach()


def test_setting_grads_to_none_in_a_training_step_does_not_break_the_graph(
    counter: GraphCounter,
) -> None:
    # The benchmark's training step: `p.grad = None` for each parameter is recorded and
    # replayed before backward() runs; the only break is backward() (torch.compile: the same).
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))
    ours = copy.deepcopy(model)
    x, t = torch.randn(5, 4), torch.randn(5, 4)
    compiled = compile_api.compile(sgd_step, backend=counter)
    eager_params, our_params = list(model.parameters()), list(ours.parameters())
    for _ in range(3):
        torch.testing.assert_close(
            compiled(our_params, ours, x, t), sgd_step(eager_params, model, x, t)
        )
        for mine, theirs in zip(our_params, eager_params, strict=True):
            torch.testing.assert_close(mine, theirs)
            torch.testing.assert_close(mine.grad, theirs.grad)
    assert counter.count == 2  # forward + loss | the update
    report = compile_api.explain(sgd_step)(our_params, ours, x, t)
    assert report.graph_break_count == 1
    assert "backward" in report.break_reasons[0].reason
    reference_count(sgd_step, counter.count, (eager_params, model, x, t))


def assign_and_read_grads(
    w: torch.Tensor, v: torch.Tensor, g: torch.Tensor, x: torch.Tensor, log: list[object]
) -> tuple[torch.Tensor, torch.Tensor, bool]:
    log.append(w.grad is None)
    w.grad = None
    log.append(w.grad is None)
    y = x * 2
    w.grad = y  # a tensor the graph makes
    v.grad = g  # a graph input
    log.append(len(log))
    return w.grad * 3 + v.grad, y, w.grad is None


def test_grad_assignments_are_replayed_in_order_and_seen_by_later_reads(
    counter: GraphCounter,
) -> None:
    def make() -> tuple[torch.Tensor, ...]:
        w = torch.randn(3, requires_grad=True)
        w.grad = torch.ones(3)  # an old gradient, replaced
        return w, torch.randn(3, requires_grad=True), torch.randn(3), torch.randn(3)

    torch.manual_seed(1)
    eager_args, our_args = make(), make()
    our_args = tuple(a.detach().clone().requires_grad_(a.requires_grad) for a in eager_args)
    our_args[0].grad = torch.ones(3)
    eager_log: list[object] = []
    our_log: list[object] = []
    expected = assign_and_read_grads(*eager_args, eager_log)
    got = compile_api.compile(assign_and_read_grads, backend=counter)(*our_args, our_log)
    torch.testing.assert_close(got, expected)
    assert our_log == eager_log == [False, True, 2]
    w, v, g, _ = our_args
    assert w.grad is got[1]  # the very tensor the function assigned and returned
    assert v.grad is g
    assert counter.count == 1  # no break
    reference_count(assign_and_read_grads, counter.count, (*make(), []))


def grad_none_then_print(w: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, bool]:
    y = w * x
    w.grad = None
    print("grad is", w.grad)  # the assignment is replayed before the break runs
    return y + 1, w.grad is None


def wrong_grad_shape(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    y = x.sum()
    w.grad = y  # eager raises: a gradient of another shape
    return y


@pytest.mark.parametrize("fn", [grad_none_then_print, wrong_grad_shape])
def test_grad_assignments_around_breaks_and_refused_ones_match_eager(
    fn: Callable[..., Any], counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    def make() -> tuple[torch.Tensor, torch.Tensor]:
        w = torch.ones(3, requires_grad=True)
        w.grad = torch.full((3,), 2.0)
        return w, torch.arange(3.0)

    eager_args, our_args = make(), make()
    expected = outcome(fn, *eager_args)
    got = outcome(compile_api.compile(fn, backend=counter), *our_args)
    assert got[0] == expected[0]
    if expected[0] == "value":
        torch.testing.assert_close(got[1], expected[1])
    else:
        assert got[1][0] is expected[1][0]
    torch.testing.assert_close(our_args[0].grad, eager_args[0].grad)
    out = capsys.readouterr().out.splitlines()
    assert out[:1] == out[1:]



# --- names of resume graphs' inputs --------------------------------------------------------------


def placeholders(graphs: Sequence[torch.fx.GraphModule]) -> list[list[str]]:
    return [[n.name for n in gm.graph.nodes if n.op == "placeholder"] for gm in graphs]


def method_call_pending(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    return OBJ.scale(y, print("pending method call")) + 1


def keyword_call_pending(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    return keyword_only(y, b=2.0, c=len(str(print("pending keyword call")))) * 2


def keyword_only(a: torch.Tensor, *, b: float, c: int) -> torch.Tensor:
    return a * b + c


class Scaler:
    def __init__(self) -> None:
        self.k = 3

    def scale(self, t: torch.Tensor, unused: object) -> torch.Tensor:
        return t * self.k


OBJ = Scaler()


def test_resume_graph_inputs_are_named_after_the_users_variables(
    counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = torch.randn(4), torch.randn(4)
    run_both(toy_example, counter, (a, b))
    ours = [sorted(names) for names in placeholders(counter.graphs)]
    assert ours == [["a", "b"], ["b", "x"]]
    if sys.version_info < (3, 13):
        # torch.compile names the same inputs l_<name>_ (its style for every input).
        theirs = [sorted(n) for n in placeholders(torch_compile_graphs(toy_example, (a, b)))]
        assert theirs == [[f"l_{n}_" for n in names] for names in ours]


@pytest.mark.parametrize(
    "fn", [len_of_print, print_among_arguments, method_call_pending, keyword_call_pending]
)
def test_a_value_left_on_the_stack_is_named_after_the_local_holding_it(
    fn: Callable[..., Any], counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    # torch.compile names these l_stack<n>_ (its resume functions' ___stack<n> arguments); the
    # value is also a local of the frame, so Strata passes it once, under the local's name.
    args = (torch.randn(3), torch.randn(3))[: fn.__code__.co_argcount]
    run_both(fn, counter, args)
    assert counter.count == 2
    resumed = placeholders(counter.graphs)[1]
    assert not any(name.startswith("___stack") for name in resumed), resumed
    assert resumed[0] in fn.__code__.co_varnames
    reference_count(fn, counter.count, args)


def temporary_on_the_stack(x: torch.Tensor) -> torch.Tensor:
    return (x * 2) + len(str(print("temporary")))


def test_a_temporary_on_the_stack_keeps_its_stack_name(
    counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    x = torch.randn(3)
    run_both(temporary_on_the_stack, counter, (x,))
    assert placeholders(counter.graphs) == [["x"], ["___stack0"]]
    if sys.version_info < (3, 13):
        theirs = placeholders(torch_compile_graphs(temporary_on_the_stack, (x,)))
        assert theirs == [["l_x_"], ["l_stack0_"]]


# --- torch.library custom ops and nonstrict_trace ------------------------------------------------


@torch.library.custom_op("strata_breaks::scale_add", mutates_args=())
def scale_add(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    return x * alpha + y


@scale_add.register_fake
def _scale_add_fake(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("strata_breaks::no_fake", mutates_args=())
def no_fake(x: torch.Tensor) -> torch.Tensor:
    return x.clone() + 1


def uses_custom_op(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    a = x.sin()
    b = scale_add(a, y, 2.0)
    return b.cos()


def uses_custom_op_through_torch_ops(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.ops.strata_breaks.scale_add(x.sin(), y, 3.0).cos()


@pytest.mark.parametrize("fn", [uses_custom_op, uses_custom_op_through_torch_ops])
def test_a_custom_op_with_a_fake_kernel_is_one_opaque_node(
    fn: Callable[..., Any], counter: GraphCounter
) -> None:
    args = (torch.randn(3), torch.randn(3))
    run_both(fn, counter, args)
    assert counter.count == 1
    targets = [n.target for n in counter.graphs[0].graph.nodes if n.op == "call_function"]
    custom = [t for t in targets if "strata_breaks" in str(t)]
    assert len(custom) == 1, targets
    reference_count(fn, counter.count, args)


def uses_custom_op_without_fake(x: torch.Tensor) -> torch.Tensor:
    a = x.sin()
    b = no_fake(a)
    return b.cos()


def test_a_custom_op_without_a_fake_kernel_breaks_with_the_reason() -> None:
    x = torch.randn(3)
    counter = GraphCounter()
    compiled = compile_api.compile(uses_custom_op_without_fake, backend=counter)
    torch.testing.assert_close(compiled(x), uses_custom_op_without_fake(x))
    report = compile_api.explain(uses_custom_op_without_fake)(x)
    (brk,) = report.break_reasons
    assert "no fake impl registered" in brk.reason and "register_fake" in brk.reason
    assert brk.source_line.strip() == "b = no_fake(a)"
    # torch.compile raises here (TorchRuntimeError) instead of breaking: no count to compare.


def nonstrict_body(d: dict[str, torch.Tensor], k: float) -> torch.Tensor:
    SEEN.append(type(d["a"]).__name__)
    return d["a"] * k + d["b"]


SEEN: list[str] = []
nonstrict_helper = compile_api.nonstrict_trace(nonstrict_body)


def uses_nonstrict(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nonstrict_helper({"a": x + 1, "b": y}, 3.0) - 1


def test_nonstrict_trace_is_one_node_run_on_fakes_while_tracing_and_on_tensors_after(
    counter: GraphCounter,
) -> None:
    SEEN.clear()
    x, y = torch.randn(3), torch.randn(3)
    compiled = compile_api.compile(uses_nonstrict, backend=counter)
    torch.testing.assert_close(compiled(x, y), nonstrict_body({"a": x + 1, "b": y}, 3.0) - 1)
    assert counter.count == 1
    calls = [n for n in counter.graphs[0].graph.nodes if n.op == "call_function"]
    assert [n.target for n in calls].count(nonstrict_helper) == 1
    # Traced non-strictly (its Python ran on fake tensors, not through the VM), then run for
    # real by the graph: the eager call appended "Tensor".
    assert SEEN == ["FakeTensor", "Tensor", "Tensor"]


# --- loops, try blocks, other with blocks: the frame runs eagerly, callees still compile ---------


def callee(x: torch.Tensor) -> torch.Tensor:
    return x.sin() * 2


def break_in_for_calls_callee(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    for i in range(3):
        y = callee(y)
        print(i)
    return y - 1


def break_in_while_calls_callee(x: torch.Tensor) -> torch.Tensor:
    i = 0
    while i < 2:
        x = callee(x)
        print(i)
        i += 1
    return x


def break_in_try_except_calls_callee(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    try:
        y = callee(y)
        print("try")
    except ValueError:
        y = y * 0
    return y - 1


def break_in_with_inside_try(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    try:
        with torch.no_grad():
            y = callee(y)
            print("with in try")
            y = y * 2
    except ValueError:
        pass
    return y - 1


class Plain:
    def __enter__(self) -> Plain:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class MaySuppress:
    """A manager whose ``__exit__`` could suppress an exception (it returns an attribute): it
    is not handed on to a resume function, its with statement runs as a region."""

    def __init__(self) -> None:
        self.suppress = False

    def __enter__(self) -> MaySuppress:
        return self

    def __exit__(self, *exc: object) -> bool:
        return self.suppress


def break_in_user_with_calls_callee(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    with MaySuppress():
        y = callee(y)
        print("user with")
    return y - 1


def test_a_with_statement_run_as_bytecode_still_compiles_its_callees(
    counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    # A break inside a user context manager: its with statement runs as bytecode, and the
    # callee it calls is captured as its own frame.
    fn = break_in_user_with_calls_callee
    x = torch.randn(3)
    run_both(fn, counter, (x,), (x + 1,))
    # Three graphs, each compiled once and reused: the code before the with statement (add),
    # the callee's own frame (sin, mul) and the code after the statement (sub).
    assert counter.count == 3
    targets = [
        [n.target for n in gm.graph.nodes if n.op == "call_method" or n.op == "call_function"]
        for gm in counter.graphs
    ]
    assert targets[1][0] == "sin"
    assert len(targets[0]) == len(targets[2]) == 1
    reference_ops_at_least(fn, counter, (x,), (x + 1,))


def break_before_a_loop(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    print("before the loop")
    for _ in range(2):
        y = y * 2
    return y


def break_after_a_loop(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    for _ in range(2):
        y = y * 2
    print("after the loop")
    return y + 1


@pytest.mark.parametrize("fn", [break_before_a_loop, break_after_a_loop])
def test_a_break_outside_a_loop_compiles_the_loop_unrolled(
    fn: Callable[..., Any], counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    x = torch.randn(3)
    run_both(fn, counter, (x,))
    assert counter.count == 2
    ops = sum(counter.op_count(i) for i in range(2))
    assert ops == (3 if fn is break_before_a_loop else 4)  # each op once, the loop unrolled
    reference_count(fn, counter.count, (x,))


# --- what the stack holds at the break -----------------------------------------------------------


def take_first(a: Any, unused: object, c: object) -> Any:
    return a


def iterator_on_the_stack(x: torch.Tensor, values: list[float]) -> torch.Tensor:
    y = x + 1
    it = take_first(iter(values), print("iterator"), 0)
    return y * next(it)


def generator_on_the_stack(x: torch.Tensor, values: list[float]) -> torch.Tensor:
    y = x + 1
    gen = take_first((v * 2 for v in values), print("generator"), 0)
    return y * sum(gen)


def generator_reads_its_list_when_consumed(x: torch.Tensor, values: list[float]) -> torch.Tensor:
    y = x + 1
    gen = take_first((v * 2 for v in values), print("generator"), 0)
    values.append(10.0)  # eager's generator sees it: it reads the list when sum() consumes it
    return y * sum(gen)


@pytest.mark.parametrize(
    "fn", [iterator_on_the_stack, generator_on_the_stack, generator_reads_its_list_when_consumed]
)
def test_a_break_with_an_iterator_on_the_stack_runs_its_statement_as_bytecode(
    fn: Callable[..., Any], counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    # The VM's iterators hold values computed when they were made: resuming right after the
    # call would compute a generator's items before it (the third case appends to the list
    # before the generator is consumed: 842aaff's rebuild of the generator at the resume summed
    # the old list, and was reverted). The statement holding the break runs as bytecode instead
    # (a statement region): y = x + 1 before it, y * <item> after it (the real iterator is a
    # local of the resume function, whose next() breaks again). torch.compile resumes the
    # list-iterator case (2 graphs) and runs the generator's frame eagerly (0 graphs).
    args = (torch.randn(3), [1.0, 2.0])
    run_both(fn, counter, args)
    assert counter.count == 2
    report = compile_api.explain(fn)(*args)
    assert "in a statement at" in report.break_reasons[0].reason
    assert report.break_reasons[0].source_line.startswith(("it = ", "gen = "))
    reference_ops_at_least(fn, counter, args)


def deep3(t: torch.Tensor) -> torch.Tensor:
    t = t * 3
    print("three calls deep")
    return t + 3


def deep2(t: torch.Tensor) -> torch.Tensor:
    return deep3(t * 2) + 2


def deep1(t: torch.Tensor) -> torch.Tensor:
    return deep2(t + 1) - 1


def three_deep(x: torch.Tensor) -> torch.Tensor:
    return deep1(x * 5) / 2


def test_a_break_three_inlined_calls_deep_breaks_at_each_call_site(
    counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    x = torch.randn(3)
    run_both(three_deep, counter, (x,), (x + 1,))
    # Each frame breaks at its call: the graph before it and its resume function's, for
    # three_deep, deep1, deep2 and deep3 (the print) -- 8 graphs, each op once, reused.
    assert counter.count == 8
    ops = [n for gm in counter.graphs for n in gm.graph.nodes if n.op == "call_function"]
    assert len(ops) == 8
    reference_count(three_deep, counter.count, (x,), (x + 1,))


def tensor_method_pending(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    return y.mul(len(str(print("pending tensor method")))) + 1


def test_a_break_under_a_pending_tensor_method_call(
    counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    # 3.11's LOAD_METHOD/PRECALL/CALL and 3.12's LOAD_ATTR method layout: the pending
    # ``y.mul`` crosses the break as ``Tensor.mul`` and ``y``, so the resume function traces the
    # call into its graph. torch.compile makes 1 graph here (it does not compile the resume
    # function); Strata compiles it: the same single break.
    x = torch.randn(3)
    run_both(tensor_method_pending, counter, (x,))
    assert counter.count == 2
    assert counter.op_count(1) == 2  # mul, add
    assert placeholders(counter.graphs)[1] == ["y"]
    report = compile_api.explain(tensor_method_pending)(x)
    assert report.graph_break_count == 1


def print_in_set_grad_enabled_by_keyword(x: torch.Tensor) -> torch.Tensor:
    with torch.set_grad_enabled(mode=False):
        y = x * 2
        print("inside set_grad_enabled(mode=False)")
        z = y * x
    return z + x


def test_set_grad_enabled_by_keyword_breaks_and_resumes_like_the_positional_form(
    counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    x = torch.randn(3, requires_grad=True)
    out = compile_api.compile(print_in_set_grad_enabled_by_keyword, backend=counter)(x)
    expected = print_in_set_grad_enabled_by_keyword(x)
    torch.testing.assert_close(out, expected)
    assert out.requires_grad == expected.requires_grad
    assert counter.count == 2
    assert torch.is_grad_enabled()
    # torch.compile (2.13) runs this frame eagerly (0 graphs): it does not take mode= there.


def mutate_in_place(values: list[float]) -> None:
    values.append(100.0)
    print("mutated")


def generator_in_a_local_across_a_break(x: torch.Tensor, values: list[float]) -> torch.Tensor:
    LOG.clear()
    gen = (LOG.append(v) or v * 2 for v in values)
    mutate_in_place(values)  # untraceable: breaks here; eager's generator then sees 100.0
    return x * sum(gen)


def exhausted_iterator_in_a_local(x: torch.Tensor, values: list[float]) -> torch.Tensor:
    it = iter(values)
    total = sum(it)
    print("after the iterator ran out")
    return x * total + len(list(it))


LOG: list[float] = []


def test_a_break_with_a_live_generator_in_a_local_runs_the_statements_using_it_as_python(
    counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    args = (torch.randn(3), [1.0, 2.0])
    run_both(generator_in_a_local_across_a_break, counter, args)
    assert LOG == [1.0, 2.0, 100.0]  # the compiled run's generator ran after the call, too
    # From the generator's statement to its last use (the return) the code runs as Python;
    # before it there is no tensor op: no graph.
    assert counter.count == 0


def iterator_in_a_local(x: torch.Tensor, xs: list[float]) -> torch.Tensor:
    y = x * 2
    it = iter(xs)
    a = next(it)
    print("between the two next() calls")
    b = next(it)
    return y * a + b


def generator_in_a_local_then_more(x: torch.Tensor, values: list[float]) -> torch.Tensor:
    y = x.sin()
    gen = (LOG.append(v) or v * 2 for v in values)
    first = next(gen)
    print("between", first)
    rest = sum(gen)
    return (y * rest + first).cos()


@pytest.mark.parametrize(
    ("fn", "ops"), [(iterator_in_a_local, [1, 2]), (generator_in_a_local_then_more, [1, 3])]
)
def test_a_break_with_a_live_iterator_in_a_local_compiles_the_code_around_its_uses(
    fn: Callable[..., Any], ops: list[int], counter: GraphCounter,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The statements from the iterator's creation to its last use run as Python (the real
    # iterator advances exactly as in eager); the code before and after them is compiled.
    args = (torch.randn(3), [1.0, 2.0, 3.0])
    LOG.clear()
    run_both(fn, counter, args)
    assert LOG == ([1.0, 2.0, 3.0] * 2 if fn is generator_in_a_local_then_more else [])
    assert [counter.op_count(i) for i in range(counter.count)] == ops
    report = compile_api.explain(fn)(*args)
    (reason,) = [b.reason for b in report.break_reasons]
    assert "holds an iterator or generator with items left" in reason
    assert "the statements using it (lines" in reason
    reference_ops_at_least(fn, counter, args)


def test_an_exhausted_iterator_in_a_local_does_not_stop_the_break(
    counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    args = (torch.randn(3), [1.0, 2.0])
    run_both(exhausted_iterator_in_a_local, counter, args)  # same result as eager
    assert counter.count == 2
    # No graph-count comparison: torch.compile 2.13 makes 1 graph here but rebuilds the
    # exhausted iterator over the whole list after the break, so len(list(it)) is 2 instead
    # of eager's 0 (x * 3 + 2 instead of x * 3).


def test_explain_says_the_with_statement_around_a_break_runs_as_python(
    capsys: pytest.CaptureFixture[str]
) -> None:
    fn = break_in_user_with_calls_callee
    report = compile_api.explain(fn)(torch.randn(3))
    (reason,) = [b.reason for b in report.break_reasons]
    lines = inspect.getsourcelines(fn)[1]
    assert reason.startswith("call to a builtin with effects outside the program")
    assert (
        f"a graph break inside a with block at {__file__}:{lines + 4}: the with block "
        f"(lines {lines + 2}-{lines + 4}) runs eagerly as Python" in reason
    ), reason


def two_breaks_in_nested_blocks(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.no_grad():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            a = torch.mm(x, x)
            print("first")
            b = torch.mm(a, x)
            print("second")
            c = torch.mm(b, x)
        d = c.float() * 2
    return d + x, a


def test_two_breaks_in_nested_blocks_resume_in_a_resume_function(
    counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    x = torch.randn(3, 3, requires_grad=True)
    outs = run_both(two_breaks_in_nested_blocks, counter, (x,))
    expected = two_breaks_in_nested_blocks(x)
    assert [o.dtype for o in outs[0]] == [e.dtype for e in expected]
    assert [o.requires_grad for o in outs[0]] == [e.requires_grad for e in expected]
    assert counter.count == 3
    assert torch.is_grad_enabled() and not torch.is_autocast_enabled("cpu")
    reference_count(two_breaks_in_nested_blocks, counter.count, (x,))


def no_grad_inside_a_user_manager(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    with Plain():
        with torch.no_grad():
            z = callee(y)
            print("no_grad inside a user manager")
    return z - 1


def test_a_grad_block_inside_a_handed_on_user_manager_is_reentered(
    counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    x = torch.randn(3, requires_grad=True)
    outs = run_both(no_grad_inside_a_user_manager, counter, (x,))
    assert not outs[0].requires_grad  # the callee ran under no_grad, as in eager
    assert torch.is_grad_enabled()
    # add, no_grad in, the callee inlined (sin, mul), no_grad out | no_grad re-entered and
    # left, sub
    assert [counter.op_count(i) for i in range(counter.count)] == [5, 3]
    reference_ops_at_least(no_grad_inside_a_user_manager, counter, (x,))


def nonstrict_pytree_body(x: torch.Tensor) -> dict[str, Any]:
    return {"double": x * 2, "parts": [x + 1, (x - 1, 3)]}


nonstrict_pytree = compile_api.nonstrict_trace(nonstrict_pytree_body)


def uses_nonstrict_pytree(x: torch.Tensor) -> torch.Tensor:
    out = nonstrict_pytree(x.sin())
    first, (second, k) = out["parts"]
    return out["double"] + first * second + k


def test_nonstrict_trace_returns_any_pytree_without_a_break(counter: GraphCounter) -> None:
    # As torch.compile's nonstrict_trace: a dict/list/tuple result of tensors and constants
    # (torch 2.13 refuses None in it; Strata accepts it). The node returns the flat leaves;
    # the structure is rebuilt around them.
    x = torch.randn(3)
    run_both(uses_nonstrict_pytree, counter, (x,))
    assert counter.count == 1
    report = compile_api.explain(uses_nonstrict_pytree)(x)
    assert report.graph_break_count == 0
    targets = [n.target for n in counter.graphs[0].graph.nodes if n.op == "call_function"]
    assert sum(1 for t in targets if getattr(t, "__name__", "").startswith("nonstrict_pytree")) == 1
    if sys.version_info < (3, 13):
        from torch import _dynamo

        global torch_nonstrict_pytree
        torch_nonstrict_pytree = _dynamo.nonstrict_trace(nonstrict_pytree_body)
        reference_count(uses_nonstrict_pytree_reference, counter.count, (x,))


torch_nonstrict_pytree: Callable[..., Any] = nonstrict_pytree_body  # torch's, set by the test


def uses_nonstrict_pytree_reference(x: torch.Tensor) -> torch.Tensor:
    out = torch_nonstrict_pytree(x.sin())
    first, (second, k) = out["parts"]
    return out["double"] + first * second + k


# --- region-level breaks: a loop or try statement runs as bytecode, the rest is compiled ----
# TorchDynamo (2.13) runs a frame whose break is inside a loop or a try block eagerly. Strata
# compiles the code before the outermost loop/try statement around the break, runs that
# statement's own bytecode in Python (its callees are still captured as their own frames) and
# resumes after it in a function that is captured in turn. Each case has ops before and after
# the region: our graph count is above torch.compile's, our compiled ops never fewer.


def region_range(x: torch.Tensor, n: int) -> torch.Tensor:
    y = x * 2
    for i in range(n):
        y = y + i
        print("range", i)
        t = y * i  # defined inside the region, used after it
    return y.sin() + t


def region_list(x: torch.Tensor, factors: list[float]) -> torch.Tensor:
    y = x * 2
    for f in factors:
        y = y * f
        print("list", f)
    return y.sin()


def region_dict_items(x: torch.Tensor, d: dict[str, float]) -> torch.Tensor:
    y = x * 2
    for k, v in d.items():
        y = y + v
        print("dict", k)
    return y.sin()


def region_zip_enumerate(x: torch.Tensor, xs: list[float], ws: list[float]) -> torch.Tensor:
    y = x * 2
    for i, (a, w) in enumerate(zip(xs, ws, strict=True)):
        y = y + a * w + i
        print("zip", i)
    return y.sin()


def region_while(x: torch.Tensor, n: int) -> torch.Tensor:
    y = x * 2
    i = 0
    while i < n:
        y = y + 1
        print("while", i)
        i += 1
    return y.sin() * i


def region_nested_loops(x: torch.Tensor, n: int) -> torch.Tensor:
    y = x * 2
    for i in range(n):
        for j in range(2):
            y = y + i * j
            print("inner", i, j)
        y = y * 0.5
    return y.sin()


def region_break_continue(x: torch.Tensor, xs: list[float]) -> torch.Tensor:
    y = x * 2
    for v in xs:
        if v < 0:
            continue
        if v > 10:
            break
        print("value", v)
        y = y + v
    return y.sin()


def region_return_inside(x: torch.Tensor, xs: list[float]) -> torch.Tensor:
    # The return comes before the print: torch.compile sees the loop's back edge after the
    # break and runs the frame eagerly. (With the return between the break and the back edge it
    # resumes inside the loop over a list iterator, once per iteration, which the VM does not.)
    y = x * 2
    for v in xs:
        if v > 1:
            return y * v
        print("value", v)
        y = y + v
    return y.sin()


def region_mutates_containers(
    x: torch.Tensor, n: int, log: list[object]
) -> tuple[torch.Tensor, dict[int, int]]:
    log.append("before")  # a side effect before the region: replayed before it runs
    acc = [x * 2]
    seen: dict[int, int] = {}
    for i in range(n):
        acc.append(acc[-1] + i)
        seen[i] = i * 2
        log.append(i)
        print("mutate", i)
    log.append("after")
    return torch.stack(acc).sum(0) + len(seen), seen


def region_try_finally(x: torch.Tensor, log: list[object]) -> torch.Tensor:
    y = x * 2
    try:
        y = y + 1
        print("try")
    finally:
        log.append("finally")
    return y.sin()


def region_try_except_no_raise(x: torch.Tensor, log: list[object]) -> torch.Tensor:
    y = x * 2
    try:
        y = y + 1
        print("try")
    except ValueError as e:
        log.append(str(e))
        y = y * 3
    return y.sin()


def region_try_except_raised_inside(x: torch.Tensor, log: list[object]) -> torch.Tensor:
    y = x * 2
    try:
        y = y + 1
        print("try")
        raise ValueError("boom")
    except ValueError as e:
        log.append(str(e))
        y = y * 3
    return y.sin()


def region_in_no_grad(x: torch.Tensor) -> tuple[torch.Tensor, bool]:
    y = x * 2
    with torch.no_grad():
        z = y + 1
        for i in range(2):
            z = z * 2
            print("no_grad", i, torch.is_grad_enabled())
        w = z + 1
    return y.sin() + w, torch.is_grad_enabled()


def region_with_inside_the_loop(x: torch.Tensor, n: int) -> torch.Tensor:
    y = x * 2
    for i in range(n):
        with torch.no_grad():
            y = y + i
            print("with inside", i)
    return y.sin()


def region_at_the_start(x: torch.Tensor, n: int) -> torch.Tensor:
    for i in range(n):
        print("start", i)
        x = x + i
    return x.sin()


def region_at_the_end(x: torch.Tensor) -> torch.Tensor:
    y = x.cos()
    try:
        print("end")
        return y + 1
    finally:
        pass


def region_generator_expression(x: torch.Tensor, xs: list[float]) -> torch.Tensor:
    y = x * 2
    for i in range(2):
        s = sum(v * i for v in xs)
        print("generator", s)
        y = y + s
    return y.sin()


def region_two_loops(x: torch.Tensor, n: int) -> torch.Tensor:
    y = x * 2
    for i in range(n):
        print("first", i)
        y = y + i
    y = y.cos()
    for j in range(n):
        print("second", j)
        y = y * j
    return y.sin()


REGION_CASES: list[tuple[Callable[..., Any], tuple[Any, ...], tuple[Any, ...], str]] = [
    (region_range, (3,), (2,), "loop"),
    (region_list, ([2.0, 0.5, 3.0],), ([1.5],), "loop"),
    (region_dict_items, ({"a": 1.0, "b": 2.0},), ({"c": 3.0},), "loop"),
    (region_zip_enumerate, ([1.0, 2.0], [3.0, 4.0]), ([5.0], [6.0]), "loop"),
    (region_while, (3,), (1,), "loop"),
    (region_nested_loops, (2,), (3,), "loop"),
    (region_break_continue, ([1.0, -2.0, 3.0, 20.0, 4.0],), ([5.0],), "loop"),
    (region_return_inside, ([0.5, 2.0, 3.0],), ([0.5],), "loop"),
    (region_mutates_containers, (3, []), (1, ["x"]), "loop"),
    (region_try_finally, ([],), ([1],), "try block"),
    (region_try_except_no_raise, ([],), ([1],), "try block"),
    (region_try_except_raised_inside, ([],), ([1],), "try block"),
    (region_with_inside_the_loop, (2,), (3,), "loop"),
    (region_at_the_start, (3,), (1,), "loop"),
    (region_at_the_end, (), (), "try block"),
    (region_generator_expression, ([1.0, 2.0],), ([3.0],), "loop"),
]


def _break_line(fn: Callable[..., Any]) -> int:
    """The line of the first print() in ``fn`` (where the VM breaks)."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(k for k, line in enumerate(lines) if "print(" in line)


@pytest.mark.parametrize(("fn", "first", "second", "kind"), REGION_CASES,
                         ids=[c[0].__name__ for c in REGION_CASES])
def test_a_break_inside_a_loop_or_try_runs_only_that_statement_eagerly(
    fn: Callable[..., Any], first: tuple[Any, ...], second: tuple[Any, ...], kind: str,
    counter: GraphCounter, capsys: pytest.CaptureFixture[str],
) -> None:
    x = torch.randn(3)
    calls = [(x, *first), (x + 1, *second)]
    run_both(fn, counter, *calls)
    printed = capsys.readouterr().out.splitlines()
    assert printed[: len(printed) // 2] == printed[len(printed) // 2 :] or len(calls) == 2
    report = compile_api.explain(fn)(*copy.deepcopy(calls[0]))
    capsys.readouterr()
    region_breaks = [b for b in report.break_reasons if f"inside a {kind}" in b.reason]
    assert region_breaks, [b.reason for b in report.break_reasons]
    brk = region_breaks[0]
    assert brk.filename == __file__ and brk.lineno == _break_line(fn)
    assert f"{__file__}:{brk.lineno}" in brk.reason and "runs eagerly" in brk.reason
    assert "print(" in brk.source_line
    # The code before the region (if it has ops) and after it (if any) is compiled.
    ends_early = [region_at_the_start, region_at_the_end, region_return_inside]
    if sys.version_info >= (3, 12):
        # CPython 3.12 copies the small `return y.sin()` block after the loop onto the `break`
        # path, inside the loop statement: taken here (20.0 > 10), it runs in the region,
        # eagerly, and the resume function after the loop is not reached.
        ends_early.append(region_break_continue)
    assert report.graph_count == (1 if fn in ends_early else 2)
    theirs = reference_ops_at_least(fn, counter, *calls)
    ours = sum(counter.op_count(i) for i in range(counter.count))
    if theirs >= 0:
        assert ours > theirs  # torch.compile compiles none of the frame's own ops here


def test_a_region_inside_no_grad_runs_in_no_grad_and_restores_grad_mode(
    counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    x = torch.randn(3, requires_grad=True)
    compiled = compile_api.compile(region_in_no_grad, backend=counter)
    out, mode = compiled(x)
    ours_printed = capsys.readouterr().out
    expected, eager_mode = region_in_no_grad(x)
    assert capsys.readouterr().out == ours_printed == "no_grad 0 False\nno_grad 1 False\n"
    torch.testing.assert_close(out, expected)
    assert out.requires_grad == expected.requires_grad and mode == eager_mode
    assert torch.is_grad_enabled()
    out.sum().backward()
    grad = x.grad
    x.grad = None
    expected.sum().backward()
    torch.testing.assert_close(grad, x.grad)
    assert counter.count == 2  # y = x * 2 (+ z = y + 1), then w = z + 1 and the sum
    reference_ops_at_least(region_in_no_grad, counter, (x.detach().requires_grad_(),))


def test_the_code_after_a_region_is_compiled_and_the_region_callees_too(
    counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    x = torch.randn(3)
    run_both(break_in_for_calls_callee, counter, (x,), (x + 1,))
    ops = [
        [str(n.target) for n in gm.graph.nodes if n.op.startswith("call_")]
        for gm in counter.graphs
    ]
    # before the loop, the callee's own frame (called three times, compiled once), after it
    add, mul, sub = (str(f) for f in (operator.add, operator.mul, operator.sub))
    assert sorted(map(tuple, ops)) == sorted([(add,), ("sin", mul), (sub,)])
    reference_ops_at_least(break_in_for_calls_callee, counter, (x,), (x + 1,))


@pytest.mark.parametrize(
    "fn", [break_in_while_calls_callee, break_in_try_except_calls_callee,
           break_in_with_inside_try]
)
def test_a_region_calling_a_callee_compiles_the_callee_and_the_code_around(
    fn: Callable[..., Any], counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    x = torch.randn(3)
    run_both(fn, counter, (x,), (x + 1,))
    targets = {str(n.target) for gm in counter.graphs for n in gm.graph.nodes}
    assert "sin" in targets
    reference_ops_at_least(fn, counter, (x,), (x + 1,))


def region_unbound_loop_variable(x: torch.Tensor, n: int) -> torch.Tensor:
    y = x * 2
    for i in range(n):
        print("maybe", i)
    if n > 0:
        y = y + i
    return y.sin()


def region_reads_unbound_variable(x: torch.Tensor, n: int) -> torch.Tensor:
    y = x * 2
    for i in range(n):
        print("reads", i)
    return y * i


def test_a_loop_variable_the_loop_may_not_bind_is_passed_on_only_when_bound(
    counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    x = torch.randn(3)
    run_both(region_unbound_loop_variable, counter, (x, 2), (x, 0), (x + 1, 3))
    compiled = compile_api.compile(region_reads_unbound_variable, backend=counter)
    torch.testing.assert_close(compiled(x, 2), region_reads_unbound_variable(x, 2))
    with pytest.raises(UnboundLocalError):
        region_reads_unbound_variable(x, 0)
    with pytest.raises(UnboundLocalError):
        compiled(x, 0)


def region_raises_through_finally(x: torch.Tensor, log: list[object]) -> torch.Tensor:
    y = x * 2
    log.append("before")
    try:
        print("try")
        if len(log) > 0:
            raise KeyError("out")
    finally:
        log.append("finally")
    return y


def test_an_exception_leaving_a_region_runs_its_finally_once_like_eager(
    counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    x = torch.randn(3)
    eager_log: list[object] = []
    our_log: list[object] = []
    with pytest.raises(KeyError):
        region_raises_through_finally(x, eager_log)
    compiled = compile_api.compile(region_raises_through_finally, backend=counter)
    with pytest.raises(KeyError):
        compiled(x, our_log)
    assert our_log == eager_log == ["before", "finally"]
    assert counter.count == 1  # y = x * 2


def test_two_loops_with_breaks_become_two_regions(
    counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    x = torch.randn(3)
    run_both(region_two_loops, counter, (x, 2), (x + 1, 3))
    report = compile_api.explain(region_two_loops)(x, 2)
    assert sum("inside a loop" in b.reason for b in report.break_reasons) == 2
    assert report.graph_count == 3  # x * 2 | y.cos() | y.sin()
    reference_ops_at_least(region_two_loops, counter, (x, 2), (x + 1, 3))


def region_many_iterations(x: torch.Tensor, n: int) -> torch.Tensor:
    y = x * 2
    total = 0
    for i in range(n):
        total += id(i) % 2 + i  # id(): a builtin the VM does not trace
    return y + total


def test_a_long_loop_runs_in_one_frame_without_recursion(counter: GraphCounter) -> None:
    x = torch.randn(3)
    run_both(region_many_iterations, counter, (x, 20_000))
    assert counter.count == 2


def scale_and_print(t: torch.Tensor, i: int) -> torch.Tensor:
    t = t * (i + 1)
    print("inlined", i)
    return t + 1


def region_break_in_an_inlined_call(x: torch.Tensor, n: int) -> torch.Tensor:
    y = x.cos()
    for i in range(n):
        y = scale_and_print(y, i)
    return y.sin()


def test_a_break_inside_a_call_inlined_in_a_loop_runs_the_loop_and_compiles_the_callee(
    counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    # The failed inlined call changed the trace: traced again to stop at the call, then again
    # to stop at the loop (three traces, bounded); the callee is then a frame of its own,
    # breaking at its print.
    x = torch.randn(3)
    run_both(region_break_in_an_inlined_call, counter, (x, 2), (x + 1, 3))
    targets = [str(n.target) for gm in counter.graphs for n in gm.graph.nodes]
    assert "cos" in targets and "sin" in targets
    assert str(operator.mul) in targets and str(operator.add) in targets  # the callee's ops
    reference_ops_at_least(region_break_in_an_inlined_call, counter, (x, 2), (x + 1, 3))


def region_in_autocast(x: torch.Tensor) -> tuple[torch.Tensor, bool]:
    y = x @ x
    with torch.autocast("cpu", dtype=torch.bfloat16):
        z = y @ x
        for i in range(2):
            z = z @ x
            print("autocast", i, torch.is_autocast_enabled("cpu"), z.dtype)
        w = z @ x
    return w.float() + y, torch.is_autocast_enabled("cpu")


def region_nested_try_in_loop(x: torch.Tensor, xs: list[float]) -> torch.Tensor:
    y = x * 2
    try:
        for v in xs:
            try:
                print("divide by", v)
                y = y * (1 / v)  # 1 / 0.0 raises in Python
            except ZeroDivisionError:
                y = y + 100
    finally:
        y = y + 1
    return y.sin()


def region_varargs(x: torch.Tensor, *args: float, scale: float = 2.0, **kw: int) -> torch.Tensor:
    y = x * scale
    for a in args:
        print("vararg", a)
        y = y + a
    return y + len(kw)


def test_regions_in_autocast_nested_try_and_varargs_frames_match_eager(
    counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    x = torch.randn(3, 3)
    run_both(region_in_autocast, counter, (x,))
    assert counter.count == 2
    capsys.readouterr()
    run_both(region_in_autocast, counter, (x,))
    assert capsys.readouterr().out.count("autocast 1 True torch.bfloat16") == 2
    counter.graphs.clear()
    run_both(region_nested_try_in_loop, counter, (torch.ones(2), [1.0, 0.0, 2.0]),
             (torch.ones(2), [4.0]))
    report = compile_api.explain(region_nested_try_in_loop)(torch.ones(2), [1.0, 0.0, 2.0])
    assert report.graph_count == 2
    assert "inside a loop and try block" in report.break_reasons[0].reason
    counter.graphs.clear()
    compiled = compile_api.compile(region_varargs, backend=counter)
    torch.testing.assert_close(compiled(x, 1.0, 2.0, scale=3.0, k=1),
                               region_varargs(x, 1.0, 2.0, scale=3.0, k=1))
    assert counter.count == 2


class LoopModule(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        for i in range(2):
            y = self.lin(y)
            print("module", i)
        assert super().forward is not None  # zero-argument super() in the resume function
        return y.relu()


def test_a_region_in_a_module_forward_resumes_with_self_first(
    counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    model = LoopModule()
    x = torch.randn(2, 3)
    compiled = compile_api.compile(model, backend=counter)
    torch.testing.assert_close(compiled(x), model(x))
    assert counter.count == 2


def region_closure_outlives(x: torch.Tensor) -> torch.Tensor:
    fs = []
    y = x * 2
    for i in range(3):
        fs.append(lambda: i)
        print("closure", i)
    i = 10
    return y + sum(f() for f in fs)


def region_closure_inside(x: torch.Tensor, xs: list[float]) -> torch.Tensor:
    y = x * 2
    for i in range(2):
        s = sum(v * i for v in xs)  # captures the cell of i, used only in the loop
        print("closure inside", s)
        y = y + s
    return y.sin()


def test_a_function_made_in_a_region_keeps_sharing_its_cells(
    counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    # The lambdas made in the loop see i = 10 in eager: the resume function could not share the
    # cell, so this frame runs eagerly; the generator expression's cell is not used after the
    # loop, so that loop is a region.
    x = torch.zeros(1)
    run_both(region_closure_outlives, counter, (x,))
    assert counter.count == 0
    report = compile_api.explain(region_closure_outlives)(x)
    assert any("captures 'i'" in b.reason for b in report.break_reasons)
    run_both(region_closure_inside, counter, (x, [1.0, 2.0]))
    assert counter.count == 2


NOTED: list[object] = []


def note_value(v: object) -> None:
    NOTED.append(v if not isinstance(v, torch.Tensor) else float(v.sum()))


def test_an_automatic_dynamic_int_no_graph_uses_is_still_guarded_as_an_int(
    counter: GraphCounter,
) -> None:
    # Found by fuzzing region-level breaks (a callee called from a region with ints, then with
    # a tensor): after two ints v becomes a SymInt input that no graph uses; the entry assumed
    # an int (isinstance) and must not be reused for a tensor.
    compiled = compile_api.compile(note_value, backend=counter)
    for value in (0, 1, torch.ones(3), 2):
        NOTED.clear()
        note_value(value)
        expected = list(NOTED)
        NOTED.clear()
        compiled(value)
        assert not any(isinstance(v, torch.Tensor) for v in NOTED)
        assert NOTED == expected


# --- random programs: loops, try blocks, with blocks and breaks, compiled vs eager ---------------

FUZZ_LOG: list[object] = []


def fuzz_note(v: object) -> None:
    """Breaks when given a tensor (float() of it); records what it saw."""
    FUZZ_LOG.append(v if not isinstance(v, torch.Tensor) else round(float(v.sum()), 4))


def _fuzz_block(rng: random.Random, depth: int, names: list[str], in_loop: bool) -> list[str]:
    lines: list[str] = []
    for _ in range(rng.randint(1, 3)):
        k = rng.random()
        if k < 0.25:
            lines.append(f"y = y {rng.choice('+*-')} {rng.choice([*names, '1', '0.5'])}")
        elif k < 0.4:  # a break inside a block half the time (note(y) or id())
            arg = "y" if depth > 0 and rng.random() < 0.5 else rng.choice([*names, "y"])
            lines.append(f"note({arg})")
        elif k < 0.5 and in_loop:
            lines += [f"if {rng.choice(names)} > {rng.randint(0, 3)}:",
                      f"    {rng.choice(['break', 'continue', 'return y * 3'])}"]
        elif k < 0.55:
            lines.append(rng.choice(["acc.append(len(acc))", "z = id(acc) * 0",
                                     "compile_api.graph_break()", f"d[{rng.randint(0, 3)}] = 1"]))
        elif k < 0.58 and depth < 3:
            lines += ["if len(acc) % 3 == 1:", "    raise ValueError(len(acc))"]
        elif depth < 3:
            v = f"i{depth}"
            kind = rng.choice(["for", "while", "try", "finally", "no_grad", "enumerate"])
            if kind == "for":
                head, body = [f"for {v} in range({rng.randint(0, 3)}):"], [v]
            elif kind == "enumerate":
                head, body = [f"for {v}, w{depth} in enumerate(xs):"], [v, f"w{depth}"]
            elif kind == "while":
                head, body = [f"{v} = 0", f"while {v} < {rng.randint(0, 3)}:"], [v]
            elif kind == "no_grad":
                head, body = ["with torch.no_grad():"], []
            else:
                head, body = ["try:"], []
            lines += head
            inner = _fuzz_block(rng, depth + 1, names + body, in_loop or kind not in
                                ("try", "finally", "no_grad"))
            if kind == "while":
                inner = [f"{v} += 1", *inner]
            lines += ["    " + line for line in inner]
            if kind == "try":
                lines += ["except ValueError as e:", "    note(str(e))", "    y = y + 100"]
            elif kind == "finally":
                lines += ["finally:", "    note('finally')", "    acc.append(-1)"]
        else:
            lines.append(f"y = y.sin() + {rng.choice([*names, '1'])}")
    return lines


def _fuzz_program(seed: int) -> Callable[..., Any]:
    rng = random.Random(seed)
    body = ["y = x * 2", "acc = []", "d = {}", *_fuzz_block(rng, 0, ["1"], False),
            "note(y)", "return y + len(acc) + len(d)"]
    source = f"def fuzz_{seed}(x, xs):\n" + "".join(f"    {line}\n" for line in body)
    namespace: dict[str, Any] = {"torch": torch, "note": fuzz_note, "compile_api": compile_api}
    exec(compile(source, f"<fuzz {seed}>", "exec"), namespace)
    fn: Callable[..., Any] = namespace[f"fuzz_{seed}"]
    return fn


def _fuzz_run(fn: Callable[..., Any], x: torch.Tensor, xs: list[float]) -> tuple[Any, ...]:
    FUZZ_LOG.clear()
    try:
        out: tuple[Any, ...] = ("returned", fn(x, xs))
    except ValueError as e:
        out = ("raised", str(e))
    return (*out, list(FUZZ_LOG))


@pytest.mark.parametrize("seed", range(24))
def test_random_programs_with_loops_try_blocks_and_breaks_match_eager(
    seed: int, counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    fn = _fuzz_program(seed)
    compiled = compile_api.compile(fn, backend=counter)
    for xs in ([1.0, 2.0], [0.5], [3.0, 1.0, 2.0]):
        x = torch.randn(3, requires_grad=bool(seed % 2))
        expected = _fuzz_run(fn, x, xs)
        ours = _fuzz_run(compiled, x, xs)
        assert ours[0] == expected[0] and ours[-1] == expected[-1]
        if expected[0] == "returned":
            torch.testing.assert_close(ours[1], expected[1], equal_nan=True)
            assert ours[1].requires_grad == expected[1].requires_grad
        else:
            assert ours[1] == expected[1]


# --- statement regions: an instruction a plain break cannot run alone ----------------------------


class Attrs:
    def __delattr__(self, name: str) -> None:  # on a frame object: the VM does not trace it
        object.__delattr__(self, name)


def statement_deletes_an_attribute(x: torch.Tensor, obj: Attrs) -> torch.Tensor:
    y = x * 2
    del obj.a  # DELETE_ATTR via a user __delattr__: not traced, nor run alone at a plain break
    return y + 1


def statement_defines_a_class(x: torch.Tensor) -> torch.Tensor:
    y = x * 2

    class Local:  # a body calling a function (not one the trace runs at trace time): the
        k = len("abc")  # class statement runs as bytecode; its body is a frame run eagerly

    return y + Local.k


def statement_raises(x: torch.Tensor, flag: bool) -> torch.Tensor:
    y = x * 2
    if flag:
        raise ValueError("raised after a graph")
    return y + 1


def test_an_untraceable_instruction_runs_its_statement_as_bytecode(
    counter: GraphCounter,
) -> None:
    x = torch.randn(3)
    obj = Attrs()
    obj.a = 1  # type: ignore[attr-defined]
    compiled = compile_api.compile(statement_deletes_an_attribute, backend=counter)
    torch.testing.assert_close(compiled(x, obj), x * 2 + 1)
    assert not hasattr(obj, "a")
    assert counter.count == 2  # x * 2 | y + 1
    counter.graphs.clear()
    run_both(statement_defines_a_class, counter, (x,))
    assert counter.count == 2
    report = compile_api.explain(statement_defines_a_class)(x)
    assert "the class statement runs as Python" in report.break_reasons[0].reason
    counter.graphs.clear()
    compiled = compile_api.compile(statement_raises, backend=counter)
    with pytest.raises(ValueError, match="raised after a graph"):
        compiled(x, True)
    torch.testing.assert_close(compiled(x, False), x * 2 + 1)


def region_with_a_list_comprehension(x: torch.Tensor, d: dict[int, int]) -> torch.Tensor:
    y = x * 2
    for _ in range(2):
        y = y + len([print("comprehension", v) for v in d])
    return y.sin()


def test_a_comprehension_frame_run_from_a_region_runs_eagerly_without_an_internal_error(
    counter: GraphCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    # On 3.11 the comprehension is a function of its own (parameter `.0`), captured as a
    # frame when the region calls it: it never breaks (no resume code can name `.0`).
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_both(region_with_a_list_comprehension, counter, (torch.randn(3), {1: 2, 3: 4}))
    assert not [w for w in caught if "could not compile" in str(w.message)]
    assert counter.count == 2
