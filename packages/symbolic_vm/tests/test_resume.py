"""The bytecode half of graph breaks: residual code and resume functions built from explicit plans.

Each test writes by hand what the VM will produce at a break (the prologue helper that stands in
for the compiled graph and the plan describing the stack and live locals), builds the residual
code with :class:`ResumeBuilder`, runs it as the function's code and compares with eager.
Offsets are found by searching the decoded instructions, and call stacks are laid out for the
running Python (:func:`call_slots`), so nothing here assumes 3.11.
"""

from __future__ import annotations

import dis
import itertools
import types
from collections.abc import Callable
from typing import Any

import pytest
import torch

from symbolic_vm.breaks.resume import (
    BreakCode,
    BreakPlan,
    Const,
    Handoff,
    Null,
    ResumeBuilder,
    Slot,
    Value,
    WithExit,
    instructions_at,
)
from symbolic_vm.bytecode import PY_VERSION, ResumeError

# --- helpers -------------------------------------------------------------------------------------


def call_slots(func: Slot, *args: Slot) -> tuple[Slot, ...]:
    """The stack of a pending call of ``func(*args)``: NULL before the callable up to 3.12."""
    if PY_VERSION >= (3, 13):
        return (func, Null(), *args)
    return (Null(), func, *args)


def method_slots(method: Slot, self_: Slot, *args: Slot) -> tuple[Slot, ...]:
    """The stack of a pending method call (unbound method, then self), the same on 3.11-3.13."""
    return (method, self_, *args)


def call_offset(fn: Callable[..., Any], callee: str, nth: int = 0) -> int:
    """Offset of the call instruction of the ``nth`` call whose callable is loaded by name
    ``callee`` (its arguments must not contain calls)."""
    seen = -1
    pending = False
    for ins in instructions_at(fn.__code__):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_ATTR", "LOAD_METHOD") and ins.arg == callee:
            seen += 1
            pending = seen == nth
        elif pending and ins.opname in ("PRECALL", "CALL", "CALL_KW"):
            assert ins.offset is not None
            return ins.offset
    raise AssertionError(f"no call of {callee} in {fn.__name__}")


def first_offset(fn: Callable[..., Any], prefix: str) -> int:
    """Offset of the first instruction whose name starts with ``prefix``."""
    for ins in instructions_at(fn.__code__):
        if ins.opname.startswith(prefix):
            assert ins.offset is not None
            return ins.offset
    raise AssertionError(f"no {prefix} in {fn.__name__}")


@pytest.fixture
def builder() -> ResumeBuilder:
    counter = itertools.count(1)
    return ResumeBuilder(lambda: next(counter))


def install(
    fn: types.FunctionType, built: BreakCode, helpers: dict[str, object]
) -> types.FunctionType:
    """``fn`` with the residual code, in a copy of its globals holding helper and resumes."""
    g: dict[str, object] = dict(fn.__globals__)
    g.update(helpers)
    g.update(built.globals_to_install(g))
    new = types.FunctionType(built.code, g, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    return new


def break_at(
    builder: ResumeBuilder,
    fn: Callable[..., Any],
    helper: Callable[..., Any],
    *,
    offset: int,
    stack: tuple[Slot, ...],
    live: tuple[tuple[str, Slot], ...],
    helper_args: tuple[str, ...],
) -> tuple[types.FunctionType, BreakCode]:
    assert isinstance(fn, types.FunctionType)
    plan = BreakPlan(fn.__code__, offset, stack, live, "__strata_prologue_0", helper_args)
    built = builder.residual(plan)
    return install(fn, built, {"__strata_prologue_0": helper}), built


def global_names(code: types.CodeType) -> list[str]:
    return [i.argval for i in dis.get_instructions(code) if i.opname == "LOAD_GLOBAL"]


# --- the TorchDynamo README example -------------------------------------------------------------


def toy_example(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


def toy_prologue(a: torch.Tensor, b: torch.Tensor) -> tuple[object, ...]:
    # What __compiled_fn_0 computes: (truediv, lt); b passes through unchanged.
    return (a / (torch.abs(a) + 1), b.sum() < 0, b)


def test_toy_example_branches_into_two_resume_functions(builder: ResumeBuilder) -> None:
    new, built = break_at(
        builder,
        toy_example,
        toy_prologue,
        offset=first_offset(toy_example, "POP_JUMP"),
        stack=(Value(1),),
        live=(("x", Value(0)), ("b", Value(2))),
        helper_args=("a", "b"),
    )
    assert len(built.resumes) == 2
    fall, target = built.resumes
    assert fall.name.startswith("__resume_at_") and target.name.startswith("__resume_at_")
    assert fall.offset != target.offset
    assert fall.code.co_filename == toy_example.__code__.co_filename
    names = global_names(built.code)
    assert names.index("__strata_prologue_0") < names.index(fall.name)
    assert target.name in names
    torch.manual_seed(0)
    for sign in (1.0, -1.0):
        a, b = torch.randn(8), sign * torch.rand(8)
        torch.testing.assert_close(new(a, b), toy_example(a, b))


def test_resume_function_takes_the_stack_values_then_the_live_locals(
    builder: ResumeBuilder,
) -> None:
    _, built = break_at(
        builder,
        toy_example,
        toy_prologue,
        offset=first_offset(toy_example, "POP_JUMP"),
        stack=(Value(1),),
        live=(("x", Value(0)), ("b", Value(2))),
        helper_args=("a", "b"),
    )
    code = built.resumes[0].code
    assert code.co_varnames[: code.co_argcount] == ("x", "b")  # the jump popped the stack
    assert code.co_name == built.resumes[0].name


# --- values left on the stack --------------------------------------------------------------------


def len_of_print(x: torch.Tensor) -> torch.Tensor:
    x = x * 2
    y = x + len(str(print("hi")))
    return y * 3


def test_break_mid_expression_restores_the_pending_calls(
    builder: ResumeBuilder, capsys: pytest.CaptureFixture[str]
) -> None:
    stack = (
        Value(0),
        *call_slots(Const(len)),
        *call_slots(Const(str)),
        *call_slots(Const(print), Const("hi")),
    )
    new, _ = break_at(
        builder,
        len_of_print,
        lambda x: (x * 2,),
        offset=call_offset(len_of_print, "print"),
        stack=stack,
        live=(("x", Value(0)),),
        helper_args=("x",),
    )
    x = torch.randn(3)
    expected = len_of_print(x)
    eager_out = capsys.readouterr().out
    torch.testing.assert_close(new(x), expected)
    assert capsys.readouterr().out == eager_out == "hi\n"


def combine(a: torch.Tensor, unused: object, b: torch.Tensor) -> torch.Tensor:
    return a * 10 + b


def print_among_arguments(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    c = a + 1
    return combine(c, print(c.shape), b)


def test_break_between_arguments_drops_and_restores_a_null(
    builder: ResumeBuilder, capsys: pytest.CaptureFixture[str]
) -> None:
    stack = (
        *call_slots(Const(combine), Value(0)),
        *call_slots(Const(print), Value(1)),
    )
    new, built = break_at(
        builder,
        print_among_arguments,
        lambda a, b: (a + 1, (a + 1).shape, b),
        offset=call_offset(print_among_arguments, "print"),
        stack=stack,
        live=(("c", Value(0)), ("b", Value(2))),
        helper_args=("a", "b"),
    )
    a, b = torch.randn(4), torch.randn(4)
    expected = print_among_arguments(a, b)
    eager_out = capsys.readouterr().out
    torch.testing.assert_close(new(a, b), expected)
    assert capsys.readouterr().out == eager_out
    # The resume function's entry stack still has the call's NULL: it takes 3 stack values.
    resume = built.resumes[0].code
    assert resume.co_argcount == 3 + 2


def item_then_more(x: torch.Tensor) -> torch.Tensor:
    y = x.sum() * 2
    v = y.item()
    return x * v


def test_data_dependent_item_call_runs_in_the_residual_code(builder: ResumeBuilder) -> None:
    new, _ = break_at(
        builder,
        item_then_more,
        lambda x: (x.sum() * 2, x),
        offset=call_offset(item_then_more, "item"),
        stack=method_slots(Const(torch.Tensor.item), Value(0)),
        live=(("x", Value(1)), ("y", Value(0))),
        helper_args=("x",),
    )
    x = torch.randn(5)
    torch.testing.assert_close(new(x), item_then_more(x))


def tolist_then_sum(x: torch.Tensor) -> int:
    values = x.tolist()
    return len(values) + int(x.sum() > 0)


def test_data_dependent_tolist_call_runs_in_the_residual_code(builder: ResumeBuilder) -> None:
    new, _ = break_at(
        builder,
        tolist_then_sum,
        lambda x: (x,),
        offset=call_offset(tolist_then_sum, "tolist"),
        stack=method_slots(Const(torch.Tensor.tolist), Value(0)),
        live=(("x", Value(0)),),
        helper_args=("x",),
    )
    x = torch.randn(6)
    assert new(x) == tolist_then_sum(x)


# --- with blocks ---------------------------------------------------------------------------------


def print_in_no_grad(x: torch.Tensor) -> tuple[torch.Tensor, bool, bool]:
    with torch.no_grad():
        y = x * 2
        print("inside")
        inside = torch.is_grad_enabled()
        z = y * x
    return z, inside, torch.is_grad_enabled()


def no_grad_prologue(x: torch.Tensor) -> tuple[object, ...]:
    with torch.no_grad():
        y = x * 2
    return (torch.no_grad(), y, x)


def test_break_inside_no_grad_keeps_grad_mode_on_both_sides(
    builder: ResumeBuilder, capsys: pytest.CaptureFixture[str]
) -> None:
    new, built = break_at(
        builder,
        print_in_no_grad,
        no_grad_prologue,
        offset=call_offset(print_in_no_grad, "print"),
        stack=(WithExit(0), *call_slots(Const(print), Const("inside"))),
        live=(("x", Value(2)), ("y", Value(1))),
        helper_args=("x",),
    )
    x = torch.randn(3, requires_grad=True)
    z, inside, after = new(x)
    ez, einside, eafter = print_in_no_grad(x)
    torch.testing.assert_close(z, ez)
    assert z.requires_grad is ez.requires_grad is False
    assert (inside, after) == (einside, eafter) == (False, True)
    assert torch.is_grad_enabled()
    assert capsys.readouterr().out == "inside\ninside\n"
    # The resume function receives the manager (to enter again) and print's result, then x, y.
    assert built.resumes[0].code.co_argcount == 2 + 2


def grad_mode_seen_by(log: list[bool]) -> None:
    log.append(torch.is_grad_enabled())


def enable_grad_inside_no_grad(x: torch.Tensor, log: list[bool]) -> torch.Tensor:
    with torch.no_grad():
        with torch.enable_grad():
            y = x * 3
            grad_mode_seen_by(log)
            z = y + 1
        w = z * 2
    return w


def test_break_inside_nested_with_blocks_runs_the_call_under_both(
    builder: ResumeBuilder,
) -> None:
    def prologue(x: torch.Tensor, log: list[bool]) -> tuple[object, ...]:
        return (torch.no_grad(), torch.enable_grad(), x * 3, x, log)

    new, _ = break_at(
        builder,
        enable_grad_inside_no_grad,
        prologue,
        offset=call_offset(enable_grad_inside_no_grad, "grad_mode_seen_by"),
        stack=(WithExit(0), WithExit(1), *call_slots(Const(grad_mode_seen_by), Value(4))),
        live=(("x", Value(3)), ("log", Value(4)), ("y", Value(2))),
        helper_args=("x", "log"),
    )
    x = torch.randn(2, requires_grad=True)
    log: list[bool] = []
    eager_log: list[bool] = []
    out = new(x, log)
    expected = enable_grad_inside_no_grad(x, eager_log)
    torch.testing.assert_close(out, expected)
    assert out.requires_grad is expected.requires_grad
    assert log == eager_log == [True]
    assert torch.is_grad_enabled()


def fail(message: str) -> None:
    raise KeyError(message)


def raising_in_no_grad(x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        y = x * 2
        fail("boom")
    return y


def test_exception_from_the_broken_call_exits_the_with_block(builder: ResumeBuilder) -> None:
    new, _ = break_at(
        builder,
        raising_in_no_grad,
        lambda x: (torch.no_grad(), x * 2, x),
        offset=call_offset(raising_in_no_grad, "fail"),
        stack=(WithExit(0), *call_slots(Const(fail), Const("boom"))),
        live=(("x", Value(2)), ("y", Value(1))),
        helper_args=("x",),
    )
    with pytest.raises(KeyError, match="boom") as info:
        new(torch.randn(2))
    assert torch.is_grad_enabled()
    # The traceback points at the user's line of the call.
    tb = info.tb
    lines = []
    while tb is not None:
        lines.append(tb.tb_lineno)
        tb = tb.tb_next
    assert raising_in_no_grad.__code__.co_firstlineno + 3 in lines



class Once:
    """A user context manager logging its calls and the exception its ``__exit__`` saw."""

    def __init__(self, log: list[object]) -> None:
        self.log = log

    def __enter__(self) -> Once:
        self.log.append("enter")
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        self.log.append(("exit", kind.__name__ if kind else None))


def maybe_fail(kind: type[Exception] | None) -> None:
    if kind is not None:
        raise kind("boom")


def call_in_user_with(x: int, log: list[object], kind: type[Exception] | None) -> int:
    with Once(log):
        y = x * 2
        maybe_fail(kind)
        y = y + 1
    return y


def entered_prologue(x: int, log: list[object], kind: type[Exception] | None) -> tuple[object, ...]:
    manager = Once(log)  # stands for the graph's helper: made and entered (effects replayed)
    manager.__enter__()
    return (manager, x * 2, x, log, kind)


@pytest.mark.parametrize("kind", [None, ValueError])
def test_a_handed_on_manager_is_entered_once_and_exited_once_by_the_resume_function(
    builder: ResumeBuilder, kind: type[Exception] | None
) -> None:
    fn = call_in_user_with
    new, built = break_at(
        builder,
        fn,
        entered_prologue,
        offset=call_offset(fn, "maybe_fail"),
        stack=(Handoff(0), *call_slots(Const(maybe_fail), Value(4))),
        live=(("x", Value(2)), ("log", Value(3)), ("kind", Value(4)), ("y", Value(1))),
        helper_args=("x", "log", "kind"),
    )
    log: list[object] = []
    eager_log: list[object] = []
    if kind is None:
        assert new(3, log, kind) == fn(3, eager_log, kind) == 7
    else:
        # Raised by the broken call: HandOn passes it to the manager's __exit__, then it
        # propagates, as in eager.
        with pytest.raises(kind):
            new(3, log, kind)
        with pytest.raises(kind):
            fn(3, eager_log, kind)
    assert log == eager_log
    assert len(log) == 2
    # The resume function is entered with a Finish around the manager, as a "with" slot.
    assert built.resumes[0].code.co_varnames[0] == "___stack0"


# --- loops ---------------------------------------------------------------------------------------


def print_in_range_loop(x: torch.Tensor, n: int) -> torch.Tensor:
    for i in range(n):
        x = x + i
        print(i)
        x = x * 2
    return x


def test_break_in_first_iteration_of_a_range_loop_continues_the_loop(
    builder: ResumeBuilder, capsys: pytest.CaptureFixture[str]
) -> None:
    def prologue(x: torch.Tensor, n: int) -> tuple[object, ...]:
        it = iter(range(n))
        i = next(it)
        return (it, x + i, i, n)

    new, _ = break_at(
        builder,
        print_in_range_loop,
        prologue,
        offset=call_offset(print_in_range_loop, "print"),
        stack=(Value(0), *call_slots(Const(print), Value(2))),
        live=(("x", Value(1)), ("n", Value(3)), ("i", Value(2))),
        helper_args=("x", "n"),
    )
    x = torch.randn(3)
    expected = print_in_range_loop(x, 4)
    eager_out = capsys.readouterr().out
    torch.testing.assert_close(new(x, 4), expected)
    assert capsys.readouterr().out == eager_out == "0\n1\n2\n3\n"


def scale_over_list(x: torch.Tensor, factors: list[float]) -> torch.Tensor:
    for f in factors:
        x = x * f
        print(f)
    return x + 1


def test_break_in_a_loop_over_a_list(
    builder: ResumeBuilder, capsys: pytest.CaptureFixture[str]
) -> None:
    def prologue(x: torch.Tensor, factors: list[float]) -> tuple[object, ...]:
        it = iter(factors)
        f = next(it)
        return (it, x * f, f)

    new, _ = break_at(
        builder,
        scale_over_list,
        prologue,
        offset=call_offset(scale_over_list, "print"),
        stack=(Value(0), *call_slots(Const(print), Value(2))),
        live=(("x", Value(1)), ("f", Value(2))),
        helper_args=("x", "factors"),
    )
    x = torch.randn(3)
    expected = scale_over_list(x, [2.0, 3.0, 0.5])
    eager_out = capsys.readouterr().out
    torch.testing.assert_close(new(x, [2.0, 3.0, 0.5]), expected)
    assert capsys.readouterr().out == eager_out


def while_loop_with_print(x: torch.Tensor) -> torch.Tensor:
    i = 0
    while i < 3:
        x = x + 1
        print(i)
        i += 1
    return x


def test_break_in_a_while_loop(
    builder: ResumeBuilder, capsys: pytest.CaptureFixture[str]
) -> None:
    new, _ = break_at(
        builder,
        while_loop_with_print,
        lambda x: (x + 1, 0),
        offset=call_offset(while_loop_with_print, "print"),
        stack=call_slots(Const(print), Value(1)),
        live=(("x", Value(0)), ("i", Value(1))),
        helper_args=("x",),
    )
    x = torch.randn(2)
    expected = while_loop_with_print(x)
    eager_out = capsys.readouterr().out
    torch.testing.assert_close(new(x), expected)
    assert capsys.readouterr().out == eager_out


# --- try/finally ---------------------------------------------------------------------------------


def print_in_try_finally(x: torch.Tensor, log: list[str], fail_after: bool) -> torch.Tensor:
    try:
        x = x + 1
        print("t")
        if fail_after:
            raise ValueError("after the break")
        x = x * 2
    finally:
        log.append("finally")
    return x


def test_break_inside_try_finally_runs_the_finally_in_the_resume_function(
    builder: ResumeBuilder, capsys: pytest.CaptureFixture[str]
) -> None:
    new, _ = break_at(
        builder,
        print_in_try_finally,
        lambda x, log, fail_after: (x + 1, log, fail_after),
        offset=call_offset(print_in_try_finally, "print"),
        stack=call_slots(Const(print), Const("t")),
        live=(("x", Value(0)), ("log", Value(1)), ("fail_after", Value(2))),
        helper_args=("x", "log", "fail_after"),
    )
    x = torch.randn(2)
    log: list[str] = []
    torch.testing.assert_close(new(x, log, False), print_in_try_finally(x, [], False))
    assert log == ["finally"]
    log.clear()
    with pytest.raises(ValueError, match="after the break"):
        new(x, log, True)
    assert log == ["finally"]
    assert capsys.readouterr().out == "t\nt\nt\n"


# --- closures ------------------------------------------------------------------------------------


def make_closure(scale: float) -> Callable[[torch.Tensor], torch.Tensor]:
    offset = torch.ones(2)

    def inner(x: torch.Tensor) -> torch.Tensor:
        y = x * scale
        print("mid")
        return y + offset * scale

    return inner


def test_break_in_a_closure_builds_the_resume_function_with_its_cells(
    builder: ResumeBuilder, capsys: pytest.CaptureFixture[str]
) -> None:
    inner = make_closure(3.0)
    assert isinstance(inner, types.FunctionType)
    new, built = break_at(
        builder,
        inner,
        lambda x, scale: (x * scale,),
        offset=call_offset(inner, "print"),
        stack=call_slots(Const(print), Const("mid")),
        live=(("y", Value(0)),),
        helper_args=("x", "scale"),
    )
    assert built.resumes[0].has_closure
    assert built.globals_to_install({}) == {}
    x = torch.randn(2)
    torch.testing.assert_close(new(x), inner(x))
    assert capsys.readouterr().out == "mid\nmid\n"


def cell_local(x: torch.Tensor) -> torch.Tensor:
    k = x.sum()
    print("cell")
    get_k = lambda: k  # noqa: E731 - a closure over k makes k a cell variable
    return x * get_k()


def test_live_local_that_is_a_cell_is_wrapped_again_in_the_resume_function(
    builder: ResumeBuilder,
) -> None:
    new, _ = break_at(
        builder,
        cell_local,
        lambda x: (x.sum(), x),
        offset=call_offset(cell_local, "print"),
        stack=call_slots(Const(print), Const("cell")),
        live=(("x", Value(1)), ("k", Value(0))),
        helper_args=("x",),
    )
    x = torch.randn(3)
    torch.testing.assert_close(new(x), cell_local(x))


# --- cache and refusals --------------------------------------------------------------------------


def test_same_break_reuses_the_cached_resume_functions(builder: ResumeBuilder) -> None:
    plan = BreakPlan(
        toy_example.__code__,
        first_offset(toy_example, "POP_JUMP"),
        (Value(1),),
        (("x", Value(0)), ("b", Value(2))),
        "__strata_prologue_0",
        ("a", "b"),
    )
    first = builder.residual(plan)
    second = builder.residual(plan)
    assert [r.code for r in first.resumes] == [r.code for r in second.resumes]
    assert [r.name for r in first.resumes] == [r.name for r in second.resumes]
    assert len(builder) == 2
    other = builder.residual(attrs_evolve_locals(plan, (("x", Value(0)), ("b", Value(2)),
                                                         ("a", Value(0)))))
    assert len(builder) == 4
    assert other.resumes[0].name != first.resumes[0].name
    builder.clear()
    assert len(builder) == 0


def attrs_evolve_locals(plan: BreakPlan, live: tuple[tuple[str, Slot], ...]) -> BreakPlan:
    return BreakPlan(plan.code, plan.offset, plan.stack, live, plan.helper, plan.helper_args)


def gen(x: int) -> Any:
    print(x)
    yield x


def test_generators_are_refused(builder: ResumeBuilder) -> None:
    plan = BreakPlan(gen.__code__, call_offset(gen, "print"),
                     call_slots(Const(print), Value(0)), (), "h", ("x",))
    with pytest.raises(ResumeError, match="generators"):
        builder.residual(plan)


def loop_only(xs: list[int]) -> int:
    total = 0
    for v in xs:
        total += v
    return total


def test_break_at_an_instruction_without_a_residual_form_is_refused(
    builder: ResumeBuilder,
) -> None:
    plan = BreakPlan(loop_only.__code__, first_offset(loop_only, "FOR_ITER"),
                     (Value(0),), (), "h", ("xs",))
    with pytest.raises(ResumeError, match="FOR_ITER"):
        builder.residual(plan)


def test_stack_shorter_than_the_instruction_needs_is_refused(builder: ResumeBuilder) -> None:
    plan = BreakPlan(toy_example.__code__, first_offset(toy_example, "POP_JUMP"), (),
                     (), "h", ("a", "b"))
    with pytest.raises(ResumeError, match="pops 1"):
        builder.residual(plan)
