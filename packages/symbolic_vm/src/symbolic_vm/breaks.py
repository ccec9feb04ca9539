"""Graph breaks in the root frame: finish the graph before the instruction, resume after it.

The residual code and the ``__resume_at_<offset>_<n>`` functions are built by
:mod:`symbolic_vm.resume` from a BreakPlan. The plan's *helper* is a function generated like the
fullgraph transformed code (same parameters): it runs the graph captured so far, replays the side
effects and returns the values of the stack and of the live locals at the break.
"""

from __future__ import annotations

import dis
import inspect
import itertools
import types

import torch

from symbolic_vm import operations as ops
from symbolic_vm.break_policy import (
    in_loop_or_try,
    makes_with_manager,
    runs_alone,
    why_not_break_at,
    with_exit_slots,
)
from symbolic_vm.bytecode import PY_VERSION, ResumeError
from symbolic_vm.codegen import Rebuilder, build_code, effect_lines
from symbolic_vm.errors import Unsupported
from symbolic_vm.guard_api import AttrSource
from symbolic_vm.interpreter import BreakAt, Interpreter, RegionRestart
from symbolic_vm.output import CellWrite, Output
from symbolic_vm.records import GraphBreak
from symbolic_vm.region import (
    Region,
    find_region,
    inside_loop_or_try,
    region_residual,
    with_slots,
)
from symbolic_vm.resume import (
    BreakCode,
    BreakPlan,
    Const,
    Finish,
    Handoff,
    Local,
    Null,
    Reenter,
    ResumeBuilder,
    Slot,
    Value,
    positional_helper,
)
from symbolic_vm.values import (
    AutocastExitVar,
    BoundMethodVar,
    ConstVar,
    ContextExitVar,
    FunctionVar,
    GeneratorVar,
    IteratorVar,
    MethodVar,
    NewObjectVar,
    NullVar,
    ObjectVar,
    SymVar,
    TensorVar,
    Var,
)

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


Plan = tuple[Rebuilder, list[str], str, list[Slot], list[tuple[str, Slot]]]


def plan_break(out: Output, vm: Interpreter, brk: BreakAt) -> Plan:
    """Rebuild expressions for the stack and live locals at the break.

    Returns the rebuilder (graph outputs, temporaries), the side-effect writes, the helper's
    return expression, and the plan's stack and local slots. A stack value that cannot cross
    the break (a generator made in the frame, ...) makes its statement run as bytecode.
    """
    try:
        return _plan_break(out, vm, brk)
    except Unsupported:
        if brk.region is not None or not any(
            not isinstance(v, NullVar | ContextExitVar | AutocastExitVar) for v in brk.stack
        ):
            raise
        _restart_at_region(vm.code, brk, statement=True)
        raise


def _plan_break(out: Output, vm: Interpreter, brk: BreakAt) -> Plan:
    code = vm.code
    user_withs = _user_with_slots(code, brk) if brk.region is None else frozenset()
    handoffs = _handoff_managers(vm, brk, user_withs)
    if brk.region is None and _live_iterator_locals(brk):
        # An iterator or generator held in a local (the VM's iterators hold values computed
        # when they were made: resuming would compute a generator's items before the broken
        # instruction): every statement using it runs as bytecode, with the break.
        _restart_at_region(code, brk, statement=True)
    if brk.region is None and (
        handoffs is None
        or in_loop_or_try(code, brk.offset) or inside_loop_or_try(code, brk.offset)
    ):
        _restart_at_region(code, brk)  # the loop/try/user-with statement runs as bytecode
    assert handoffs is not None
    if brk.region is None and makes_with_manager(code, brk.offset):
        # The manager of a with statement cannot be made in the trace: the whole statement
        # runs as bytecode (its real __enter__/__exit__ once each).
        _restart_at_region(code, brk, statement=True)
    why = None if brk.region is not None else why_not_break_at(code, brk.offset)
    if why is not None:
        raise _eagerly(brk, why)
    if brk.region is None and (
        _has_pending_iterator(brk.stack) or not runs_alone(code, brk.offset)
    ):
        # An iterator on the stack (the VM's iterators hold values computed when they were
        # made: resuming would compute a generator's items before the instruction at the break,
        # not after it), or an instruction the residual code cannot run alone: the statement
        # holding it runs as bytecode instead (torch.compile runs a generator's frame eagerly
        # and resumes with a list iterator).
        _restart_at_region(code, brk, statement=True)
    if _in_other_with_block(code, brk, frozenset(handoffs)):
        # A user context manager (any but grad mode, autocast, inference mode) still active
        # here (its with statement should have been the region or handed on): re-entering an
        # arbitrary manager could change what it does.
        raise _eagerly(brk, "inside a user context manager (the frame runs eagerly)")
    managers = _reentered_managers(out, brk)
    live: list[tuple[str, Slot]] = []
    bound: dict[str, Var] = dict(brk.local_vars)
    for name in vm.frame_locals or {}:
        if name not in bound and name not in code.co_freevars:
            bound[name] = vm.load_local(name)
    for name in code.co_cellvars:
        # A cell's current value is passed like a local; the resume function makes the cell.
        cell = vm.cells.get(name)
        if cell is not None and cell.value is not None:
            bound[name] = cell.value
    if _has_pending_iterator(list(bound.values())):
        # The same for an iterator held in a local, with items left.
        raise _eagerly(brk, "an iterator with items left is held in a local (the frame runs "
                            "eagerly)")
    rebuilder = Rebuilder(out)
    _outputs_in_graph_order(out, rebuilder, [*brk.stack, *bound.values()])
    writes = effect_lines(rebuilder, out)
    values: list[str] = []
    stack: list[Slot] = []
    user_names = set(code.co_varnames) | set(code.co_cellvars)
    named = {id(var): name for name, var in reversed(bound.items()) if name in user_names}
    # [NULL, x.mul] (3.11/3.12) or [x.mul, NULL] (3.13) becomes [Tensor.mul, x]: the same
    # call, and the resume function's VM sees a torch method and a tensor it can trace (a
    # bound method of a real tensor could only be called opaquely, its tensor not being a
    # graph input).
    descriptors = {
        d: _tensor_method_descriptor(out, brk.stack, d) for d in range(len(brk.stack))
    }
    for depth, slot_var in enumerate(brk.stack):
        descriptor = descriptors[depth]
        if descriptor is not None:
            stack.append(Const(descriptor))
            continue
        var = slot_var
        if depth > 0 and descriptors[depth - 1] is not None:
            method = slot_var if isinstance(slot_var, MethodVar) else brk.stack[depth - 1]
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
    for name, var in bound.items():
        live.append((name, Value(len(values))))
        values.append(rebuilder.expr(var))
    return_expr = "(" + "".join(f"{v}, " for v in values) + ")"
    return rebuilder, writes, return_expr, stack, live


def _restart_at_region(code: types.CodeType, brk: BreakAt, *, statement: bool = False) -> None:
    """Raise RegionRestart for the loop/try statement around the break (TorchDynamo runs the
    whole frame eagerly there) or, with ``statement``, for the statement holding it; or the
    break's error when that region cannot run alone. The region holds the with statement of
    every user context manager active at the break (its real ``__enter__``/``__exit__`` run
    once each, as the frame's own bytecode), and every use of a local holding an iterator or
    generator with items left."""
    withs = _user_with_slots(code, brk)
    cover = _live_iterator_locals(brk)
    try:
        region = find_region(code, brk.offset, statement=statement, withs=withs, cover=cover)
    except ResumeError as err:
        what = "statement" if statement else "loop, try or with statement"
        raise _eagerly(brk, f"a graph break whose {what} cannot run on its own ({err}; the "
                            "frame runs eagerly)") from err
    first, last = region.lines
    where = f"lines {first}-{last}" if last > first else f"line {first}"
    error = brk.error
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
    raise RegionRestart(region, Unsupported(
        reason, filename=error.filename, lineno=error.lineno, source_line=error.source_line,
        hint=error.hint,
    ))


def _eagerly(brk: BreakAt, why: str) -> Unsupported:
    """The break's own error, saying why the frame runs eagerly instead of breaking there."""
    error = brk.error
    return Unsupported(
        f"{error.reason}; {why}", filename=error.filename, lineno=error.lineno,
        source_line=error.source_line, hint=error.hint,
    )


def _live_iterator_locals(brk: BreakAt) -> frozenset[str]:
    """The locals at the break holding an iterator with items left or an unfinished generator
    made in the trace."""
    return frozenset(
        name for name, var in brk.local_vars.items()
        if _has_pending_iterator([var])
        or (isinstance(var, GeneratorVar) and not var.box.done)
    )


def _has_pending_iterator(values: list[Var]) -> bool:
    """Whether one of ``values`` is an iterator with items left to produce."""
    return any(isinstance(v, IteratorVar) and v.box.index < len(v.box.items) for v in values)


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


def _user_with_slots(code: types.CodeType, brk: BreakAt) -> frozenset[int]:
    """The stack slots of the ``__exit__`` of the user context managers (any but grad mode,
    autocast, inference mode) active at the break, through try blocks too. Raises the break's
    error (the frame runs eagerly) where the stack does not have the layout expected."""
    slots = with_slots(code, brk.offset)
    user: set[int] = set()
    for slot in slots:
        if slot >= len(brk.stack):
            raise _eagerly(brk, "inside a with block whose stack layout is unknown (the frame "
                                "runs eagerly)")
        if not isinstance(brk.stack[slot], (ContextExitVar, AutocastExitVar)):
            user.add(slot)
    for k, var in enumerate(brk.stack):
        if k not in slots and _is_bound_exit(var):
            raise _eagerly(brk, "an __exit__ method on the stack outside a with block (the "
                                "frame runs eagerly)")
    return frozenset(user)


def _is_bound_exit(var: Var) -> bool:
    return (
        isinstance(var, BoundMethodVar)
        and isinstance(var.func, FunctionVar)
        and var.func.fn.__name__ == "__exit__"
    )


def _in_other_with_block(
    code: types.CodeType, brk: BreakAt, handed: frozenset[int] = frozenset()
) -> bool:
    """True when a with block other than grad mode / autocast is active at the break, other
    than those at the stack slots ``handed`` (user managers handed on to the resume function).

    Its ``__exit__`` is on the stack: at the slot of an active with block (found through the
    exception table's handler chain) or, as a bound ``__exit__`` method, anywhere.
    """
    if any(_is_bound_exit(var) for k, var in enumerate(brk.stack) if k not in handed):
        return True
    for slot in with_exit_slots(code, brk.offset):
        if slot >= len(brk.stack):
            return True  # not the stack layout we know: be safe
        if slot not in handed and not isinstance(
            brk.stack[slot], (ContextExitVar, AutocastExitVar)
        ):
            return True
    return False


def _handoff_managers(
    vm: Interpreter, brk: BreakAt, slots: frozenset[int]
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
        var = brk.stack[slot]
        if not isinstance(var, BoundMethodVar):
            return None
        manager = var.self_var
        if isinstance(manager, ObjectVar) and isinstance(manager.value, Finish):
            if manager.source is None:
                return None
            manager = vm.out.wrap(manager.value.manager, AttrSource(manager.source, "manager"))
            try:
                exit_var = ops.getattr_var(vm, manager, "__exit__")  # guards its resolution
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


def _reentered_managers(out: Output, brk: BreakAt) -> dict[int, Reenter]:
    """The manager to re-enter for each grad-mode / autocast block on the stack (by var id).

    The graph is closed in the state outside those blocks (autocast and inference mode exited,
    grad mode restored), and re-entering the managers bottom first must give exactly eager's
    state at the break and on each block's exit. For grad mode each block's manager is chosen so
    that entering it gives the mode the next block was entered in (its ``restore``), the
    innermost one the mode at the break; autocast and inference-mode blocks are re-entered with
    their own arguments.
    """
    grad = [v for v in brk.stack if isinstance(v, ContextExitVar)]
    autocasts = [v for v in brk.stack if isinstance(v, AutocastExitVar)]
    managers: dict[int, Reenter] = {}
    inference = [v for v in autocasts if _is_inference_mode(v)]
    if inference and (grad or _switches_grad_after(out, inference[0].enter_node)):
        # Inference mode switches grad mode off by itself: mixed with grad-mode blocks or
        # switches, the mode to restore outside and at the break is not known. Run eagerly.
        raise _eagerly(brk, "inside inference_mode mixed with grad-mode changes (the frame runs "
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


def residual_code(  # noqa: PLR0917 - the parts of one break
    out: Output,
    code: types.CodeType,
    brk: BreakAt,
    helper: tuple[str | None, list[str], Rebuilder, list[str], str],
    stack: list[Slot],
    live: list[tuple[str, Slot]],
) -> tuple[types.CodeType, dict[str, object]]:
    """The broken frame's transformed code and the globals it needs."""
    graph_call, graph_args, rebuilder, writes, return_expr = helper
    nonlocals = sorted({e.name for e in out.side_effects if isinstance(e, CellWrite)})
    helper_code = build_code(
        code, graph_call, graph_args, rebuilder.lines, writes, return_expr, nonlocals
    )
    flat, names = positional_helper(helper_code)
    plan = BreakPlan(
        code, brk.offset, tuple(stack), tuple(live), helper="", helper_args=names,
        helper_code=flat,
    )
    if brk.region is not None:
        built = _region_code(plan, brk, brk.region)
    else:
        built = RESUMES.residual(plan)
    return built.code, built.globals_to_install(out.f_globals)


def _region_code(plan: BreakPlan, brk: BreakAt, region: Region) -> BreakCode:
    try:
        return region_residual(RESUMES, plan, region)
    except ResumeError as err:
        raise _eagerly(brk, f"its region cannot run on its own ({err}; the frame runs "
                            "eagerly)") from err
