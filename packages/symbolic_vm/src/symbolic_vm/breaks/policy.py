"""The graph-break policy: where the trace stopped -> what to do (a Decision) -> code.

Read in this order: :func:`decide` (the checks, in order, each naming the decision it leads to),
symbolic_vm.breaks.crossing.plan_crossing (how each value crosses an allowed break), :func:`build`
(the one place a Resume decision becomes the frame's transformed code and resume functions, with
symbolic_vm.breaks.resume or, at a region's start, symbolic_vm.breaks.region). The control-flow
questions (in a loop or try? which with blocks?) are answered once per code object by
symbolic_vm.breaks.flow.
"""

from __future__ import annotations

import ast
import dis
import inspect
import itertools
import types
from typing import TYPE_CHECKING

from symbolic_vm import attributes
from symbolic_vm.breaks.crossing import eagerly, has_pending_iterator, plan_crossing
from symbolic_vm.breaks.decisions import Decision, Resume, RunEagerly, RunRegion, Stop
from symbolic_vm.breaks.flow import flow_of, with_exit_slots, with_slots
from symbolic_vm.breaks.region import Region, find_region, region_residual
from symbolic_vm.breaks.resume import ResumeBuilder
from symbolic_vm.breaks.slots import BreakCode, BreakPlan, Finish
from symbolic_vm.bytecode import ResumeError
from symbolic_vm.codegen import Transformed, build_body, cell_writes
from symbolic_vm.errors import FrameRunsEagerly, Unsupported
from symbolic_vm.guard_api import AttrSource
from symbolic_vm.made_classes import ClassEscapes
from symbolic_vm.output import Output
from symbolic_vm.records import GraphBreak
from symbolic_vm.values import (
    AutocastExitVar,
    BoundMethodVar,
    ContextExitVar,
    FunctionVar,
    GeneratorVar,
    NewObjectVar,
    NullVar,
    ObjectVar,
    Var,
)

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter

__all__ = ["RESUMES", "break_record", "build", "decide", "reset_resumes"]


def decide(out: Output, vm: Interpreter, stop: Stop) -> Decision:
    """What to do about the root frame's stop: resume after the instruction (or run the region
    it starts), run a region, or run the frame eagerly. Where a plain break is refused with
    values on the stack (one that cannot cross: a generator made in the frame, ...), the
    statement holding it runs as bytecode instead."""
    if isinstance(stop.error, FrameRunsEagerly):
        return RunEagerly(stop.error)
    try:
        decision = _decide(out, vm, stop)
    except ClassEscapes:  # capture() traces again to break at the class statement
        raise
    except Unsupported as exc:  # a value that cannot cross the break (from the plan)
        # Without its traceback: it holds this frame, which holds the decision (a reference
        # cycle keeping the user's frame and locals alive until a garbage collection).
        decision = RunEagerly(exc.with_traceback(None))
    if isinstance(decision, RunEagerly) and stop.region is None and any(
        not isinstance(v, NullVar | ContextExitVar | AutocastExitVar) for v in stop.stack
    ):
        return _region(vm.code, stop, statement=True)
    return decision


def _decide(out: Output, vm: Interpreter, stop: Stop) -> Decision:
    code = vm.code
    flow = flow_of(code)
    plain = stop.region is None  # not at the start of a region chosen by an earlier trace
    user_withs = _user_with_slots(code, stop) if plain else frozenset()
    handoffs = _handoff_managers(vm, stop, user_withs)
    if plain and _live_iterator_locals(stop):
        # An iterator or generator held in a local (the VM's iterators hold values computed
        # when they were made: resuming would compute a generator's items before the broken
        # instruction): every statement using it runs as bytecode, with the break.
        return _region(code, stop, statement=True)
    if plain and (handoffs is None or flow.in_loop_or_try(stop.offset)):
        return _region(code, stop)  # the loop/try/user-with statement runs as bytecode
    assert handoffs is not None
    if plain and flow.makes_with_manager(stop.offset):
        # The manager of a with statement cannot be made in the trace: the whole statement
        # runs as bytecode (its real __enter__/__exit__ once each).
        return _region(code, stop, statement=True)
    if plain and (has_pending_iterator(stop.stack) or not flow.runs_alone(stop.offset)):
        # An iterator on the stack (the VM's iterators hold values computed when they were
        # made: resuming would compute a generator's items before the instruction at the break,
        # not after it), or an instruction the residual code cannot run alone: the statement
        # holding it runs as bytecode instead (torch.compile runs a generator's frame eagerly
        # and resumes with a list iterator).
        return _region(code, stop, statement=True)
    if _in_other_with_block(code, stop, frozenset(handoffs)):
        # A user context manager (any but grad mode, autocast, inference mode) still active
        # here (its with statement should have been the region or handed on): re-entering an
        # arbitrary manager could change what it does.
        return RunEagerly(eagerly(stop, "inside a user context manager (the frame runs eagerly)"))
    return plan_crossing(out, vm, stop, handoffs)


_resume_counter = itertools.count()
RESUMES = ResumeBuilder(lambda: next(_resume_counter))


def reset_resumes() -> None:
    """Forget cached resume functions and restart their numbering."""
    global _resume_counter
    _resume_counter = itertools.count()
    RESUMES.clear()


def break_record(error: Unsupported) -> GraphBreak:
    """The GraphBreak entry explain() reports for ``error``."""
    callers = tuple(getattr(error, "callers", ()))
    return GraphBreak(error.reason, error.filename, error.lineno, error.source_line, callers)


def _region(code: types.CodeType, stop: Stop, *, statement: bool = False) -> Decision:
    """Run the loop/try statement around the break as bytecode (TorchDynamo runs the whole
    frame eagerly there) or, with ``statement``, the statement holding it; or the frame
    eagerly when that region cannot run alone. The region holds the with statement of every
    user context manager active at the break (its real ``__enter__``/``__exit__`` run once
    each, as the frame's own bytecode), and every use of a local holding an iterator or
    generator with items left."""
    try:
        withs = _user_with_slots(code, stop)
    except Unsupported as exc:
        return RunEagerly(exc)
    cover = _live_iterator_locals(stop)
    try:
        region = find_region(code, stop.offset, statement=statement, withs=withs, cover=cover)
    except ResumeError as err:
        what = "statement" if statement else "loop, try or with statement"
        return RunEagerly(eagerly(stop, f"a graph break whose {what} cannot run on its own ({err}; "
                                        "the frame runs eagerly)"))
    first, last = region.lines
    where = f"lines {first}-{last}" if last > first else f"line {first}"
    error = stop.error
    inside = "in a statement" if region.kind == "statement" else f"inside a {region.kind}"
    what = f"the {region.kind} ({where}) runs"
    if region.kind == "statements":
        names = ", ".join(sorted(cover))
        inside = f"while {names} holds an iterator or generator with items left"
        what = f"the statements using it ({where}) run"
    reason = (
        f"{error.reason}; a graph break {inside} at {error.filename}:{error.lineno}: {what} "
        "eagerly as Python, the code before and after it is compiled"
    )
    return RunRegion(region, Unsupported(
        reason, filename=error.filename, lineno=error.lineno, source_line=error.source_line,
        hint=error.hint,
    ))


def _live_iterator_locals(stop: Stop) -> frozenset[str]:
    """The locals at the break holding an iterator with items left or an unfinished generator
    made in the trace."""
    return frozenset(
        name for name, var in stop.local_vars.items()
        if has_pending_iterator([var], exact_ok=True)
        or (isinstance(var, GeneratorVar) and not var.box.done)
    )


def _user_with_slots(code: types.CodeType, stop: Stop) -> frozenset[int]:
    """The stack slots of the ``__exit__`` of the user context managers (any but grad mode,
    autocast, inference mode) active at the break, through try blocks too. Raises the break's
    error (the frame runs eagerly) where the stack does not have the layout expected."""
    slots = with_slots(code, stop.offset)
    user: set[int] = set()
    for slot in slots:
        if slot >= len(stop.stack):
            raise eagerly(stop, "inside a with block whose stack layout is unknown (the frame "
                                "runs eagerly)")
        if not isinstance(stop.stack[slot], (ContextExitVar, AutocastExitVar)):
            user.add(slot)
    for k, var in enumerate(stop.stack):
        if k not in slots and _is_bound_exit(var):
            raise eagerly(stop, "an __exit__ method on the stack outside a with block (the "
                                "frame runs eagerly)")
    return frozenset(user)


def _is_bound_exit(var: Var) -> bool:
    return (
        isinstance(var, BoundMethodVar)
        and isinstance(var.func, FunctionVar)
        and var.func.fn.__name__ == "__exit__"
    )


def _in_other_with_block(
    code: types.CodeType, stop: Stop, handed: frozenset[int] = frozenset()
) -> bool:
    """True when a with block other than grad mode / autocast is active at the break, other
    than those at the stack slots ``handed`` (user managers handed on to the resume function).

    Its ``__exit__`` is on the stack: at the slot of an active with block (found through the
    exception table's handler chain) or, as a bound ``__exit__`` method, anywhere.
    """
    if any(_is_bound_exit(var) for k, var in enumerate(stop.stack) if k not in handed):
        return True
    for slot in with_exit_slots(code, stop.offset):
        if slot >= len(stop.stack):
            return True  # not the stack layout we know: be safe
        if slot not in handed and not isinstance(
            stop.stack[slot], (ContextExitVar, AutocastExitVar)
        ):
            return True
    return False


def _handoff_managers(
    vm: Interpreter, stop: Stop, slots: frozenset[int]
) -> dict[int, Var] | None:
    """The manager of each user with block at ``slots`` to hand on to the resume function (see
    resume.Handoff), or None when one cannot be: the with statement then runs as a region.

    Its ``__enter__`` ran in the trace (so its effects are replayed by the graph's helper); it
    must be an object the helper can pass on (made in the frame, or read from a source), and
    its class's ``__exit__`` a plain function that never suppresses an exception (the residual
    code re-raises an exception of the broken instruction after calling it). A resume
    function's own :class:`Finish` hands on the manager inside it.
    """
    found: dict[int, Var] = {}
    for slot in sorted(slots):
        var = stop.stack[slot]
        if not isinstance(var, BoundMethodVar) or vm.out.block_may_raise(var):
            # (A block whose graph ops may raise on data: eager calls __exit__ with the error,
            # but the graph would raise before the residual code hands the manager on.)
            return None
        manager = var.self_var
        if isinstance(manager, ObjectVar) and isinstance(manager.value, Finish):
            if manager.source is None:
                return None
            manager = vm.out.wrap(manager.value.manager, AttrSource(manager.source, "manager"))
            try:
                exit_var = attributes.getattr_var(vm, manager, "__exit__")  # guards its resolution
            except Unsupported:
                return None
        elif isinstance(manager, NewObjectVar) or (
            isinstance(manager, ObjectVar) and manager.source is not None
        ):
            exit_var = var
        else:
            return None
        if not (
            isinstance(exit_var, BoundMethodVar) and isinstance(exit_var.func, FunctionVar)
            and _never_suppresses(exit_var.func.fn.__code__)
        ):
            return None
        vm.out.depend(manager)
        found[slot] = manager
    return found


def _never_suppresses(code: types.CodeType) -> bool:
    """Whether every return of ``code`` (an ``__exit__``) returns None or False, read on its
    bytecode: a plain function whose returns all load one of those constants right before."""
    if code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE
                        | inspect.CO_ASYNC_GENERATOR):
        return False
    instructions = list(dis.get_instructions(code))
    for k, ins in enumerate(instructions):
        if ins.opname == "RETURN_CONST" and not (ins.argval is None or ins.argval is False):
            return False
        if ins.opname == "RETURN_VALUE":
            before = instructions[k - 1] if k else None
            if (
                ins.is_jump_target or before is None or before.opname != "LOAD_CONST"
                or not (before.argval is None or before.argval is False)
            ):
                return False
    return True


def build(
    out: Output,
    code: types.CodeType,
    stop: Stop,
    resume: Resume,
    graph: tuple[str | None, list[ast.expr]],
) -> tuple[types.CodeType, dict[str, object]]:
    """The one place a decision becomes code: the broken frame's transformed code (the graph
    call ``graph`` = (global name, argument expressions) and side effects inlined as its
    prologue, then the broken instruction or the region, then resume functions) and the
    globals it needs."""
    graph_call, graph_args = graph
    helper = build_body(code, Transformed(
        graph_call, graph_args, resume.rebuilder.lines, resume.writes, resume.return_expr,
        cell_writes(out),
    ))
    plan = BreakPlan(
        code, stop.offset, tuple(resume.stack), tuple(resume.live), helper="",
        helper_code=tuple(helper), iterated=resume.iterated,
    )
    if stop.region is not None:
        built = _region_code(plan, stop, stop.region)
    else:
        built = RESUMES.residual(plan)
    return built.code, built.globals_to_install(out.f_globals)


def _region_code(plan: BreakPlan, stop: Stop, region: Region) -> BreakCode:
    try:
        return region_residual(RESUMES, plan, region)
    except ResumeError as err:
        raise eagerly(stop, f"its region cannot run on its own ({err}; the frame runs "
                            "eagerly)") from err
