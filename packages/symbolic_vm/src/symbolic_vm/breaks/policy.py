"""The graph-break policy: where the trace stopped -> what to do (a Decision) -> code.

capture() hands the root frame's :class:`Stop` to :func:`handle_stop`. Read on in this order:
:func:`decide` (the checks, in order, each naming the decision it leads to), :func:`plan_crossing`
(how each stack value and live local crosses a break it allows: the :class:`Resume`), then
:func:`build` (the one place a Resume becomes the frame's transformed code and resume functions,
with symbolic_vm.breaks.resume or, at a region's start, symbolic_vm.breaks.region). The
control-flow questions (in a loop or try? which with blocks?) are answered once per code object
by symbolic_vm.breaks.flow.
"""

from __future__ import annotations

import ast
import dis
import inspect
import itertools
import logging
import types
from typing import TYPE_CHECKING, cast

import torch

from symbolic_vm import attributes, emit
from symbolic_vm.breaks.decisions import Decision, Resume, RunEagerly, RunRegion, Stop
from symbolic_vm.breaks.flow import flow_of, with_exit_slots, with_slots
from symbolic_vm.breaks.region import Region, find_region, region_residual
from symbolic_vm.breaks.resume import ResumeBuilder
from symbolic_vm.breaks.slots import (
    BreakCode,
    BreakPlan,
    Const,
    Finish,
    Handoff,
    Local,
    Null,
    Reenter,
    Slot,
    Value,
)
from symbolic_vm.bytecode import PY_VERSION, ResumeError
from symbolic_vm.codegen import Rebuilder, Transformed, build_body, cell_writes, effect_lines
from symbolic_vm.errors import FrameRunsEagerly, Unsupported
from symbolic_vm.graph_close import capture_result, close_graph
from symbolic_vm.guard_api import AttrSource, LocalSource
from symbolic_vm.made_classes import ClassEscapes
from symbolic_vm.output import Output
from symbolic_vm.records import CaptureResult, GraphBreak
from symbolic_vm.values import (
    AutocastExitVar,
    BoundMethodVar,
    ConstVar,
    ContextExitVar,
    DictVar,
    FunctionVar,
    GeneratorVar,
    IteratorVar,
    ListVar,
    MethodVar,
    NestedFunctionVar,
    NewObjectVar,
    NullVar,
    ObjectVar,
    SymVar,
    TensorVar,
    TupleVar,
    Var,
)

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter

__all__ = [
    "RESUMES",
    "break_record",
    "build",
    "decide",
    "eagerly",
    "handle_stop",
    "has_pending_iterator",
    "plan_crossing",
    "reset_resumes",
]

log = logging.getLogger("strata.symbolic_vm")


def handle_stop(
    out: Output, vm: Interpreter, stop: Stop, graph_name: str
) -> CaptureResult | RunRegion | RunEagerly:
    """What capture() does with the root frame's Stop: :func:`decide`; for a Resume, close the
    graph (named ``graph_name``) and :func:`build` the frame's code around it. A RunRegion or
    RunEagerly decision is returned as it is (capture() traces again, or runs the frame eagerly).
    """
    decision = decide(out, vm, stop)
    if not isinstance(decision, Resume):
        return decision
    graphs, graph_call, graph_args, guarded = close_graph(out, decision.rebuilder, graph_name)
    code, resume_globals = build(out, vm.code, stop, decision, (graph_call, graph_args))
    log.debug("graph break in %s: %s", vm.code.co_name, stop.error.reason)
    return capture_result(
        out, code, (graphs, guarded), [break_record(stop.error)], resume_globals
    )


def decide(out: Output, vm: Interpreter, stop: Stop) -> Decision:
    """What to do about the root frame's stop: resume after the instruction (or run the region
    it starts), run a region, or run the frame eagerly. Where a plain break is refused with
    values on the stack (one that cannot cross: a generator made in the frame, ...), the
    statement holding it runs as bytecode instead."""
    if isinstance(stop.error, FrameRunsEagerly):
        return RunEagerly(stop.error)
    if stop.region is None and _nothing_around_a_loop(out, vm, stop):
        # torch.compile gives up every frame with a break in a loop; Strata runs the loop as
        # bytecode and compiles the code around it (a region), unless there is nothing of the
        # frame's own to compile: no op in its graph yet and no tensor it holds. Then a region
        # would only make the code after the loop a resume function that breaks again at each
        # call (transformers' recursively_install_hooks: 2 breaks more than torch's), so the
        # frame runs eagerly and is not compiled again, as torch does.
        return RunEagerly(eagerly(stop, cast(str, flow_of(vm.code).dynamo_reason(stop.offset))))
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


def _nothing_around_a_loop(out: Output, vm: Interpreter, stop: Stop) -> bool:
    """A break inside a loop (TorchDynamo's reading), in a frame whose graph has no op yet and
    whose locals (read or not yet) and stack hold no tensor or symbolic number."""
    why = flow_of(vm.code).dynamo_reason(stop.offset)
    if why is None or "inside a loop" not in why:
        return False
    has_ops = any(
        n.op not in ("placeholder", "output")
        and not (n.op == "call_function" and n.target is torch._C._set_grad_enabled)
        for n in out.builder.graph.nodes
    )
    unread = (vm.frame_locals or {}).values()  # arguments the trace has not read yet
    return not has_ops and not any(
        _holds_tensor(v, set()) for v in (*stop.stack, *stop.local_vars.values())
    ) and not any(_real_holds_tensor(v, 3) for v in unread)


def _real_holds_tensor(value: object, depth: int) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if depth == 0 or type(value) not in (list, tuple, dict):
        return False
    items = value.values() if isinstance(value, dict) else value
    return any(_real_holds_tensor(v, depth - 1) for v in items)  # type: ignore[attr-defined]


def _holds_tensor(var: Var, seen: set[int]) -> bool:
    if isinstance(var, (TensorVar, SymVar)):
        return True
    if id(var) in seen:
        return False
    seen.add(id(var))
    if isinstance(var, TupleVar):
        return any(_holds_tensor(v, seen) for v in var.items)
    if isinstance(var, (ListVar, DictVar)):
        items = var.box.items if isinstance(var, ListVar) else list(var.box.items.values())
        return any(_holds_tensor(v, seen) for v in items)
    return False


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


# -- crossing: how each value crosses an allowed break --------------------------------------
# plan_crossing is decide's last step for a break it allows: it closes the graph's grad-mode,
# autocast and inference-mode blocks (re-entered on both sides as Reenter slots), passes a stack
# value that is also a user local once, under its name (Local), turns a pending ``x.mul(...)`` on
# a tensor into ``[Tensor.mul, x]`` (so the resume function traces the call into its graph), and
# numbers the helper's return values (graph outputs in graph order). It raises Unsupported where
# a value cannot cross (decide turns that into RunEagerly or a region).

def plan_crossing(
    out: Output, vm: Interpreter, stop: Stop, handoffs: dict[int, Var]
) -> Resume:
    """The plan of a break at ``stop``: the graph's outputs, side-effect writes, the helper's
    return expression, and a slot per stack value and live local. ``handoffs`` are the user
    managers handed on to the resume function, by stack slot (policy._handoff_managers)."""
    code = vm.code
    managers = _reentered_managers(out, stop)
    live: list[tuple[str, Slot]] = []
    bound: dict[str, Var] = dict(stop.local_vars)
    # A frame local the trace never read is passed on as it is, by name: wrapping it would
    # guard it (a tensor that is also another argument gets an "is still" guard, and the frame
    # recompiles for each way its arguments alias, as in PyTorch's test_resume_paths_join).
    untouched = [
        name for name in vm.frame_locals or {}
        if name not in bound and name not in code.co_freevars and name not in code.co_cellvars
    ]
    for name in vm.frame_locals or {}:
        if name not in bound and name not in code.co_freevars and name not in untouched:
            bound[name] = vm.load_local(name)
    for name in code.co_cellvars:
        # A cell's current value is passed like a local; the resume function makes the cell.
        cell = vm.cells.get(name)
        if cell is not None and cell.value is not None:
            bound[name] = cell.value
    shared = _rebound_shared_cell(vm, stop, [*stop.stack, *bound.values()])
    if shared is not None:
        # The resume function makes its own cells for the frame's cell variables and a function
        # made in the frame is rebuilt with fresh ones: a later rebinding on either side would
        # go unseen by the other (found by the fuzzer's py_objects family).
        raise eagerly(stop, f"a function made in the frame shares the variable {shared!r} with "
                            "it and one of them rebinds it later (the frame runs eagerly)")
    if has_pending_iterator(list(bound.values()), exact_ok=True):
        # The same for an iterator held in a local, with items left (one over a tuple or
        # range crosses: see below).
        raise eagerly(stop, "an iterator with items left is held in a local (the frame runs "
                            "eagerly)")
    rebuilder = Rebuilder(out)
    _outputs_in_graph_order(out, rebuilder, [*stop.stack, *bound.values()])
    writes = effect_lines(rebuilder, out)
    values: list[ast.expr] = []
    stack: list[Slot] = []
    user_names = set(code.co_varnames) | set(code.co_cellvars)
    named = {id(var): name for name, var in reversed(bound.items()) if name in user_names}
    # [NULL, x.mul] (3.11/3.12) or [x.mul, NULL] (3.13) becomes [Tensor.mul, x]: the same
    # call, and the resume function's VM sees a torch method and a tensor it can trace (a
    # bound method of a real tensor could only be called opaquely, its tensor not being a
    # graph input).
    descriptors = {
        d: _tensor_method_descriptor(out, stop.stack, d) for d in range(len(stop.stack))
    }
    for depth, slot_var in enumerate(stop.stack):
        descriptor = descriptors[depth]
        if descriptor is not None:
            stack.append(Const(descriptor))
            continue
        var = slot_var
        if depth > 0 and descriptors[depth - 1] is not None:
            method = slot_var if isinstance(slot_var, MethodVar) else stop.stack[depth - 1]
            assert isinstance(method, MethodVar)
            var = method.self_var
        if isinstance(var, NullVar):
            stack.append(Null())
        elif depth in handoffs:
            stack.append(Handoff(len(values)))
            values.append(rebuilder.expr(handoffs[depth]))
        elif id(var) in managers:
            stack.append(managers[id(var)])
        elif id(var) in named and not isinstance(var, ConstVar):
            # Passed once, under the user's name: the resume graph's input is named after it.
            stack.append(Local(named[id(var)]))
        else:
            stack.append(Value(len(values)))
            values.append(rebuilder.expr(var))
    iterated: list[str] = []
    for name, var in bound.items():
        if _crosses_as_items(var) and stop.region is None and name not in code.co_cellvars:
            iterated.append(name)  # last: see below
            continue
        live.append((name, Value(len(values))))
        values.append(rebuilder.expr(var))
    crossed: set[int] = set()
    for name in list(iterated):
        # An iterator over a tuple or range held in one local only: the resume function gets
        # the items left as a tuple and makes the iterator again (so its VM traces it: a real
        # iterator is opaque to it). One also reached another way (another local, a container,
        # a write) is passed as the one real iterator the rebuilt code makes for all of them.
        var = bound[name]
        assert isinstance(var, IteratorVar)
        live.append((name, Value(len(values))))
        if rebuilder.made(var.box) or id(var.box) in crossed or _shared(var, bound):
            iterated.remove(name)
            values.append(rebuilder.expr(var))
            continue
        crossed.add(id(var.box))
        values.append(emit.build(
            "tuple", [rebuilder.expr(v) for v in var.box.items[var.box.index:]]
        ))
    for name in untouched:
        live.append((name, Value(len(values))))
        values.append(rebuilder.source(LocalSource(name)))
    return Resume(
        rebuilder, writes, emit.build("tuple", values), stack, live, tuple(iterated)
    )


def _crosses_as_items(var: Var) -> bool:
    """An iterator with items left whose items are exactly what the real one would yield."""
    return isinstance(var, IteratorVar) and var.box.exact and var.box.index < len(var.box.items)


def _shared(var: IteratorVar, bound: dict[str, Var]) -> bool:
    """Whether another live local holds the same iterator."""
    return sum(1 for v in bound.values() if isinstance(v, IteratorVar) and v.box is var.box) > 1


def _rebound_shared_cell(vm: Interpreter, stop: Stop, values: list[Var]) -> str | None:
    """The name of a frame cell variable that a live function made in the frame closes over
    and that the function (``nonlocal``) or the frame after ``stop`` rebinds; else None."""
    own = {id(cell): name for name, cell in vm.cells.items()}
    later = {
        str(inst.argval) for inst in dis.get_instructions(vm.code)
        if inst.offset >= stop.offset and inst.opname in ("STORE_DEREF", "DELETE_DEREF")
    }
    for var in values:
        if not isinstance(var, NestedFunctionVar):
            continue
        rebinds = _stores_to_freevars(var.code)
        for free, cell in zip(var.code.co_freevars, var.closure, strict=False):
            name = own.get(id(cell))
            if name is not None and (free in rebinds or name in later):
                return name
    return None


def _stores_to_freevars(code: types.CodeType) -> set[str]:
    """Free variables that ``code`` (or a function nested in it) rebinds."""
    names = {
        str(inst.argval) for inst in dis.get_instructions(code)
        if inst.opname in ("STORE_DEREF", "DELETE_DEREF") and inst.argval in code.co_freevars
    }
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _stores_to_freevars(const) & set(code.co_freevars)
    return names


def eagerly(stop: Stop, why: str) -> Unsupported:
    """The break's own error, saying why the frame runs eagerly instead of breaking there."""
    error = stop.error
    return Unsupported(
        f"{error.reason}; {why}", filename=error.filename, lineno=error.lineno,
        source_line=error.source_line, hint=error.hint,
    )


def has_pending_iterator(values: list[Var], *, exact_ok: bool = False) -> bool:
    """Whether one of ``values`` is an iterator that may still produce items (with
    ``exact_ok``: other than one over a tuple or range, which can cross a break). One over a
    container at its end is not done: an append after the break shows in it."""
    return any(
        isinstance(v, IteratorVar) and not v.box.done
        and (v.box.index < len(v.box.items) or not v.box.exact)
        and not (exact_ok and v.box.exact)
        for v in values
    )


def _tensor_method_descriptor(out: Output, stack: list[Var], depth: int) -> object | None:
    """``torch.Tensor.<name>`` when ``stack[depth:depth + 2]`` are the two slots of a pending
    ``x.<name>(...)`` call on a tensor whose class does not override it, else None."""
    if depth + 1 >= len(stack) or (depth > 0 and _is_method_pair(stack, depth - 1)):
        return None
    if not _is_method_pair(stack, depth):
        return None
    first, second = stack[depth], stack[depth + 1]
    method = second if isinstance(first, NullVar) else first
    if not (isinstance(method, MethodVar) and isinstance(method.self_var, TensorVar)):
        return None
    if out.tensor_type(method.self_var) not in (torch.Tensor, torch.nn.Parameter):
        return None  # a subclass may define its own <name>: keep the bound method
    found = getattr(torch.Tensor, method.name, None)
    if isinstance(found, (types.MethodDescriptorType, types.WrapperDescriptorType)):
        return found
    return None


def _is_method_pair(stack: list[Var], depth: int) -> bool:
    """[NULL, method] on 3.11/3.12, [method, NULL] on 3.13."""
    first, second = stack[depth], stack[depth + 1]
    if PY_VERSION >= (3, 13):
        return isinstance(first, MethodVar) and isinstance(second, NullVar)
    return isinstance(first, NullVar) and isinstance(second, MethodVar)


def _reentered_managers(out: Output, stop: Stop) -> dict[int, Reenter]:
    """The manager to re-enter for each grad-mode / autocast block on the stack (by var id).

    The graph is closed in the state outside those blocks (autocast and inference mode exited,
    grad mode restored), and re-entering the managers bottom first must give exactly eager's
    state at the break and on each block's exit. For grad mode each block's manager is chosen so
    that entering it gives the mode the next block was entered in (its ``restore``), the
    innermost one the mode at the break; autocast and inference-mode blocks are re-entered with
    their own arguments.
    """
    grad = [v for v in stop.stack if isinstance(v, ContextExitVar)]
    autocasts = [v for v in stop.stack if isinstance(v, AutocastExitVar)]
    managers: dict[int, Reenter] = {}
    inference = [v for v in autocasts if _is_inference_mode(v)]
    if inference and (grad or _switches_grad_after(out, inference[0].enter_node)):
        # Inference mode switches grad mode off by itself: mixed with grad-mode blocks or
        # switches, the mode to restore outside and at the break is not known. Run eagerly.
        raise eagerly(stop, "inside inference_mode mixed with grad-mode changes (the frame runs "
                            "eagerly)")
    if grad:
        modes = [v.restore for v in grad[1:]] + [_grad_mode_at_break(out)]
        for var, mode in zip(grad, modes, strict=True):
            managers[id(var)] = Reenter(torch.enable_grad if mode else torch.no_grad)
    for block in autocasts:
        if _is_inference_mode(block):
            managers[id(block)] = Reenter(torch.inference_mode, tuple(block.enter_node.args))
            continue
        device, dtype, enabled, cache = block.enter_node.args
        managers[id(block)] = Reenter(
            torch.autocast, (device,),
            (("dtype", dtype), ("enabled", enabled), ("cache_enabled", cache)),
        )
    graph = out.builder.graph
    for block in reversed(autocasts):
        # Not run in the tracer (its state was already left): only recorded.
        leave = (
            torch.autograd.grad_mode._exit_inference_mode
            if _is_inference_mode(block)
            else torch.amp.autocast_mode._exit_autocast
        )
        node = graph.call_function(leave, (block.enter_node,))
        node.meta["example_value"] = None
    if grad:
        node = graph.call_function(torch._C._set_grad_enabled, (grad[0].restore,))
        node.meta["example_value"] = None
    return managers


def _switches_grad_after(out: Output, start: object) -> bool:
    """Whether the graph switches grad mode after node ``start``."""
    seen = False
    for node in out.builder.graph.nodes:
        seen = seen or node is start
        if seen and node.op == "call_function" and node.target is torch._C._set_grad_enabled:
            return True
    return False


def _is_inference_mode(block: AutocastExitVar) -> bool:
    """An inference_mode block (its exit is kept like autocast's, on its enter node)."""
    return bool(block.enter_node.target is torch.autograd.grad_mode._enter_inference_mode)


def _grad_mode_at_break(out: Output) -> bool:
    """Grad mode where the break happened: the graph's last switch, else the frame's entry mode
    (the tracer is back at the entry mode by now; the graph switches only on changes)."""
    mode = torch.is_grad_enabled()
    for node in out.builder.graph.nodes:
        if node.op == "call_function" and node.target is torch._C._set_grad_enabled:
            mode = bool(node.args[0])
    return mode


def _outputs_in_graph_order(out: Output, rebuilder: Rebuilder, live: list[Var]) -> None:
    """Number the graph outputs that are live values in the order the graph computed them.

    TorchDynamo's README toy example returns ``(truediv, lt)``: graph order, not stack order.
    """
    position = {node: i for i, node in enumerate(out.builder.graph.nodes)}
    produced = [
        v for v in live
        if isinstance(v, TensorVar | SymVar) and v.node.op != "placeholder" and v.node in position
    ]
    for var in sorted(produced, key=lambda v: position[v.node]):
        rebuilder.expr(var)


# -- the code ------------------------------------------------------------------------------

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
