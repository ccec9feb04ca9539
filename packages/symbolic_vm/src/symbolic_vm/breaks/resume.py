"""Graph breaks in bytecode: the residual code of a broken frame and its resume functions.

When the VM meets an instruction it cannot trace (at byte offset X of the frame's code), the frame's
transformed code is built from a :class:`BreakPlan`:

1. it calls a *prologue helper* (a global function the VM generated: it runs the graph captured so
   far, replays the recorded side effects and returns a tuple of the values to restore);
2. it rebuilds the Python value stack of offset X from that tuple (NULLs included, ``with`` blocks
   re-entered) and runs the original instruction X for real;
3. for each successor of X (the next instruction, and a conditional jump's target) it unwinds the
   stack (exiting the ``with`` blocks, dropping NULLs) and returns
   ``__resume_at_<offset>_<n>(stack values..., live locals...)``.

A resume function is a new code object derived from the *original* code: its prologue pushes the
stack values (NULLs where the stack had them), re-enters the active ``with`` blocks, then jumps to
the resume offset in the rest of the original code. It runs as a new frame, so the frame hook
captures it in turn. Resume code objects are cached per (code, offset, stack shape, live locals).

This module only builds bytecode (with :mod:`symbolic_vm.bytecode`); it imports no torch.
"""

from __future__ import annotations

import inspect
import logging
import types
import weakref
from collections.abc import Callable, Sequence

import attrs

from symbolic_vm.breaks.slots import (
    NULL_TAG as _NULL,
)
from symbolic_vm.breaks.slots import (
    UNBOUND,
    BreakCode,
    BreakPlan,
    Const,
    Finish,
    Handoff,
    HandOn,
    Local,
    Null,
    Reenter,
    ResumeFunction,
    Slot,
    Tag,
    Unbound,
    Value,
    WithExit,
    resume_name,
    slot_tag,
)
from symbolic_vm.breaks.slots import (
    VALUE_TAG as _VALUE,
)
from symbolic_vm.breaks.slots import (
    WITH_TAG as _WITH,
)
from symbolic_vm.bytecode import (
    NO_POSITION,
    PY_VERSION,
    ExceptHandler,
    Instr,
    Label,
    ResumeError,
    Signature,
    assemble,
    codegen,
    decode,
    instructions_only,
)
from symbolic_vm.bytecode.codegen import with_position
from symbolic_vm.bytecode.opcodes import PAIR_PARTS

__all__ = [
    "BreakCode",
    "BreakPlan",
    "Const",
    "Finish",
    "HandOn",
    "Handoff",
    "Local",
    "Null",
    "Reenter",
    "ResumeBuilder",
    "ResumeFunction",
    "Slot",
    "UNBOUND",
    "Value",
    "WithExit",
    "instructions_at",
    "exit_with",
    "inline_helper",
    "load_slot",
    "pop_null",
    "group_at",
    "positional_helper",
    "restore_stack",
    "slot_tag",
    "with_cleanups",
    "resume_name",
]

log = logging.getLogger("strata.symbolic_vm")

Items = list[Instr | Label]


_CO_UNSUPPORTED = (
    inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
    | inspect.CO_ITERABLE_COROUTINE
)
_VALS = "___strata_vals"


def _discard() -> None:
    """Called with nothing to consume a NULL from the stack (POP_TOP cannot pop a NULL)."""


def _build_manager(manager: Reenter) -> Items:
    """Push ``manager.factory(*args, **kwargs)``, every part a constant."""
    return codegen.call_function(
        [codegen.load_const(manager.factory)],
        [[codegen.load_const(a)] for a in manager.args],
        {k: [codegen.load_const(v)] for k, v in manager.kwargs},
    )


@attrs.frozen
class _Group:
    """The instruction(s) run for real at the break, and how they change the stack."""

    instrs: tuple[Instr, ...]
    pops: int
    pushes: int
    jump_target: Label | None  # the conditional jump's target, if any
    next_index: int  # index in the decoded items of the instruction after the group
    # 3.11's JUMP_IF_TRUE/FALSE_OR_POP (``and``/``or``): the jump keeps the value it tested,
    # so its target starts with one more stack value than the next instruction.
    jump_keeps: bool = False


_CALL_PREFIX = ("KW_NAMES", "PRECALL")
_ONE_IN_ONE_OUT = {"UNARY_NEGATIVE", "UNARY_NOT", "UNARY_INVERT", "GET_ITER", "GET_LEN", "TO_BOOL"}
_TWO_IN_ONE_OUT = {"BINARY_OP", "BINARY_SUBSCR", "COMPARE_OP", "CONTAINS_OP", "IS_OP"}
_TRUTH_JUMPS = frozenset({"POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE"})
_OR_POP_JUMPS = frozenset({"JUMP_IF_TRUE_OR_POP", "JUMP_IF_FALSE_OR_POP"})


def _plain_jump_name(opname: str) -> str:
    # 3.11's directed names map to the virtual undirected ones the assembler accepts.
    return opname.replace("FORWARD_", "").replace("BACKWARD_", "")


def _pops_pushes(ins: Instr) -> tuple[int, int]:
    name = ins.opname
    arg = ins.arg
    if name == "CALL" and isinstance(arg, int):
        return arg + 2, 1
    if name == "CALL_KW" and isinstance(arg, int):
        return arg + 3, 1
    if name == "CALL_FUNCTION_EX" and isinstance(arg, int):
        return 3 + (arg & 1), 1
    if (name.startswith("POP_JUMP") and "IF_" in name) or name in _OR_POP_JUMPS:
        return 1, 0  # (an _OR_POP jump pops only on the fall-through: see _Group.jump_keeps)
    if name in _ONE_IN_ONE_OUT or (name == "LOAD_ATTR" and not ins.flags):
        return 1, 1
    if name in _TWO_IN_ONE_OUT:
        return 2, 1
    if name == "STORE_ATTR":
        return 2, 0
    if name == "STORE_SUBSCR":
        return 3, 0
    if name == "POP_TOP":
        return 1, 0
    raise ResumeError(f"cannot resume after a graph break at {name}: not an instruction the "
                      "residual code knows how to run on its own")


def group_at(items: Sequence[Instr | Label], offset: int) -> _Group:
    k = next(
        (i for i, it in enumerate(items) if isinstance(it, Instr) and it.offset == offset), None
    )
    if k is None:
        raise ResumeError(f"no instruction at offset {offset}")
    start = k
    end = k
    first = items[k]
    assert isinstance(first, Instr)
    # A call is KW_NAMES? PRECALL? CALL (3.11/3.12), TO_BOOL before a conditional jump (3.13):
    # whichever of them the VM stopped at, the whole group runs.
    if first.opname in _CALL_PREFIX or first.opname == "TO_BOOL":
        while True:
            nxt = items[end + 1]
            if not isinstance(nxt, Instr):
                break
            end += 1
            if nxt.opname in _CALL_PREFIX:
                continue
            break
    if first.opname == "CALL" or (first.opname == "PRECALL" and start == k):
        while start > 0:
            prev = items[start - 1]
            if isinstance(prev, Instr) and prev.opname in _CALL_PREFIX:
                start -= 1
            else:
                break
    group = [it for it in items[start : end + 1] if isinstance(it, Instr)]
    last = group[-1]
    if first.opname == "TO_BOOL" and not last.opname.startswith("POP_JUMP"):
        group, end = [first], k
        last = first
    pops, pushes = _pops_pushes(last)
    jump_target = last.arg if isinstance(last.arg, Label) else None
    if (
        jump_target is not None and not last.opname.startswith("POP_JUMP")
        and last.opname not in _OR_POP_JUMPS
    ):
        raise ResumeError(f"cannot resume after a graph break at {last.opname}")
    if PY_VERSION >= (3, 13) and last.opname in _TRUTH_JUMPS and first.opname != "TO_BOOL":
        # 3.13's conditional jumps take an exact bool: the VM stopped at the jump with the
        # value a COMPARE_OP would have made a bool (a tensor), so the residual code does it.
        group = [attrs.evolve(last, opname="TO_BOOL", arg=None, offset=None), *group]
    cleaned: list[Instr] = []
    for ins in group:
        opname = _plain_jump_name(ins.opname) if ins.is_jump else ins.opname
        cleaned.append(attrs.evolve(ins, opname=opname, handler=None, offset=None))
    return _Group(
        tuple(cleaned), pops, pushes, jump_target, end + 1, last.opname in _OR_POP_JUMPS
    )


def _offset_after(items: Sequence[Instr | Label], index: int) -> int:
    for it in items[index:]:
        if isinstance(it, Instr):
            assert it.offset is not None
            return it.offset
    raise ResumeError("the broken instruction is the last one: nothing to resume")


def _offset_of_label(items: Sequence[Instr | Label], label: Label) -> int:
    return _offset_after(items, items.index(label))


def _split_prologue(items: Sequence[Instr | Label]) -> Items:
    """The original code after its RESUME (the prologue is rebuilt for each new code object)."""
    for k, it in enumerate(items):
        if isinstance(it, Instr) and it.opname == "RESUME":
            return list(items[k + 1 :])
    raise ResumeError("code without RESUME")


def _load_var(code: types.CodeType, name: str) -> Instr:
    if name in code.co_cellvars or name in code.co_freevars:
        return codegen.load_deref(name)
    return codegen.load_fast(name)


def _check_code(code: types.CodeType) -> None:
    if code.co_flags & _CO_UNSUPPORTED:
        raise ResumeError(f"graph breaks in generators and coroutines ({code.co_name}) "
                          "are not supported")


class ResumeBuilder:
    """Builds residual code and resume functions; caches resume code objects.

    ``next_index`` gives the number ``n`` of each new ``__resume_at_<offset>_<n>`` (share the
    counter of ``__compiled_fn_<n>`` to number them the way TorchDynamo does). ``clear()`` empties
    the cache (call it from the VM's ``reset()``).
    """

    def __init__(self, next_index: Callable[[], int]) -> None:
        self._next_index = next_index
        self._cache: dict[tuple[object, ...], ResumeFunction] = {}
        # Each resume code object -> (the original code, resume offset -> original offset).
        self._origins: dict[types.CodeType, tuple[types.CodeType, dict[int, int]]] = {}

    def clear(self) -> None:
        """Forget every cached resume function."""
        self._cache.clear()
        _DECODED.clear()
        self._origins.clear()

    def original_of(self, code: types.CodeType, offset: int) -> tuple[types.CodeType, int]:
        """The original code and offset that ``offset`` of ``code`` stands for.

        ``code`` itself unless it is a resume function this builder made: resume functions are
        always derived from the original code, never from another resume function.
        """
        origin = self._origins.get(code)
        if origin is None:
            return code, offset
        original, offsets = origin
        if offset not in offsets:
            raise ResumeError(f"offset {offset} of {code.co_name} is in its generated prologue")
        return original, offsets[offset]

    def __len__(self) -> int:
        return len(self._cache)

    # --- resume functions ------------------------------------------------------------------

    def resume_at(
        self,
        code: types.CodeType,
        offset: int,
        stack: Sequence[Tag],
        local_names: Sequence[str],
        *,
        maybe_unbound: Sequence[str] = (),
        iterated: Sequence[str] = (),
    ) -> ResumeFunction:
        """The resume function of ``code`` at ``offset``.

        ``stack`` tags each stack slot (bottom first) ``"null"``, ``"value"``, ``"with"`` (a
        context manager to enter, passed in), a :class:`Reenter` (a manager the function builds
        and enters itself) or a :class:`Local` (the value of one of ``local_names``); its
        arguments are the ``"value"`` and ``"with"`` slots' values, then ``local_names``.
        A local of ``maybe_unbound`` passed as :data:`UNBOUND` is deleted before the jump (the
        caller could not tell at build time whether it would be bound: see ``region.py``).
        A local of ``iterated`` is passed as a tuple of items and made an iterator over them
        before the jump (see symbolic_vm.breaks.policy.plan_crossing).
        """
        _check_code(code)
        code, offset = self.original_of(code, offset)
        key = (
            code, offset, tuple(stack), tuple(local_names), tuple(maybe_unbound), tuple(iterated)
        )
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        name = resume_name(offset, self._next_index())
        resume_code, offsets = _resume_code(
            code, offset, stack, local_names, name, maybe_unbound, iterated
        )
        built = ResumeFunction(name, resume_code, offset, _lead_argument(code, local_names))
        self._cache[key] = built
        self._origins[resume_code] = (code, offsets)
        log.debug("resume function %s for %s at offset %d", name, code.co_name, offset)
        return built

    # --- residual code ---------------------------------------------------------------------

    def residual(self, plan: BreakPlan) -> BreakCode:
        """The transformed code of the broken frame (same argument layout as ``plan.code``)."""
        code = plan.code
        _check_code(code)
        for name, slot in plan.live_locals:
            if not isinstance(slot, Value | Const):
                raise ResumeError(f"local {name!r} must be a Value or a Const, not {slot!r}")
        local_slots = dict(plan.live_locals)
        for slot in plan.stack:
            if isinstance(slot, Local) and slot.name not in local_slots:
                raise ResumeError(f"stack slot {slot!r} names no live local")
        items = _decoded(code)
        group = group_at(items, plan.offset)
        if group.pops > len(plan.stack):
            raise ResumeError(
                f"the instruction at offset {plan.offset} pops {group.pops} values; "
                f"the plan's stack has {len(plan.stack)}"
            )
        consumed = plan.stack[len(plan.stack) - group.pops :]
        if any(isinstance(s, WithExit | Reenter | Handoff) for s in consumed):
            raise ResumeError("the broken instruction would consume a with block's exit")
        after = [*plan.stack[: len(plan.stack) - group.pops], *([Value(-1)] * group.pushes)]
        position = group.instrs[-1].position

        body: Items = []
        if plan.helper_code is not None:
            body.extend(inline_helper(code, plan.helper_code))
        else:
            helper_args = [[_load_var(code, n)] for n in plan.helper_args]
            body.extend(codegen.call_global(plan.helper, helper_args))
            body.append(codegen.store_fast(_VALS))
        handler, cleanups = restore_stack(body, plan.stack, local_slots)
        ran = [attrs.evolve(i, handler=handler) for i in group.instrs]

        successors: list[tuple[int, Label | None, list[Slot]]] = [
            (_offset_after(items, group.next_index), None, after)
        ]
        if group.jump_target is not None:
            target = Label("jump_target")
            ran[-1] = attrs.evolve(ran[-1], arg=target)
            kept = list(plan.stack) if group.jump_keeps else after
            successors.append((_offset_of_label(items, group.jump_target), target, kept))
        body.extend(ran)
        # A resume function's own entry arguments (___stack<d>) are dead once it has started:
        # only the original code's variables are passed on.
        origin = self._origins.get(code)
        original = origin[0] if origin is not None else code
        names = set(original.co_varnames) | set(original.co_cellvars)
        live = [(n, s) for n, s in plan.live_locals if n in names]
        resumes: list[ResumeFunction] = []
        for offset, label, stack_after in successors:
            if label is not None:
                body.append(label)
            # A stack value named after a local the resume function does not get is passed
            # as is.
            after = [
                local_slots[s.name] if isinstance(s, Local) and s.name not in names else s
                for s in stack_after
            ]
            resume = self.resume_at(
                code, offset, [slot_tag(s) for s in after], [n for n, _ in live],
                iterated=[n for n in plan.iterated if n in names],
            )
            resumes.append(resume)
            body.extend(_call_resume(code, resume, after, live, local_slots))
        body.extend(with_cleanups(cleanups))

        head = codegen.prologue(Signature(freevars=code.co_freevars, cellvars=code.co_cellvars))
        residual = assemble([*head, *with_position(body, position)], template=code)
        return BreakCode(residual, tuple(resumes))


def load_slot(slot: Slot, locals_: dict[str, Slot] | None = None) -> Items:
    if isinstance(slot, Local):
        if locals_ is None:
            raise ResumeError(f"{slot!r} outside a plan's stack")
        return load_slot(locals_[slot.name])
    if isinstance(slot, Reenter):
        return _build_manager(slot)
    if isinstance(slot, Handoff):
        return codegen.call_function([codegen.load_const(HandOn)], [load_slot(Value(slot.index))])
    if isinstance(slot, Const):
        return [codegen.load_const(slot.value)]
    if isinstance(slot, Value | WithExit):
        return [codegen.load_fast(_VALS), codegen.load_const(slot.index), Instr("BINARY_SUBSCR")]
    return [Instr("PUSH_NULL")]


@attrs.frozen
class _WithCleanup:
    """The exception path of one with block the residual code entered."""

    handler: Label
    cleanup: Label
    depth: int  # stack depth below the __exit__ slot
    outer: ExceptHandler | None


def restore_stack(
    body: Items, stack: Sequence[Slot], locals_: dict[str, Slot]
) -> tuple[ExceptHandler | None, list[_WithCleanup]]:
    """Push ``stack``; enter its with blocks, each with an exception handler.

    Returns the handler that covers code run on top of the restored stack (the innermost with
    block's, or None) and the with blocks' exception paths to emit.
    """
    handler: ExceptHandler | None = None
    cleanups: list[_WithCleanup] = []
    for depth, slot in enumerate(stack):
        loads = load_slot(slot, locals_)
        if isinstance(slot, WithExit | Reenter | Handoff):
            # BEFORE_WITH pushes __exit__ and __enter__'s result; the result is dropped.
            enter = codegen.enter_with(loads)
            body.extend(
                attrs.evolve(i, handler=handler) if isinstance(i, Instr) else i for i in enter
            )
            entry = _WithCleanup(Label("with_exc"), Label("with_cleanup"), depth, handler)
            cleanups.append(entry)
            handler = ExceptHandler(entry.handler, depth + 1, lasti=True)
        else:
            body.extend(attrs.evolve(i, handler=handler) if isinstance(i, Instr) else i
                        for i in loads)
    return handler, cleanups


def with_cleanups(cleanups: Sequence[_WithCleanup]) -> Items:
    """Exception paths of the with blocks the residual code entered: call ``__exit__`` with the
    exception, then re-raise it (a manager that suppresses the exception is not honoured: the
    rest of its block is in the resume function, which is not reached)."""
    out: Items = []
    for entry in cleanups:
        inner = ExceptHandler(entry.cleanup, entry.depth + 3, lasti=True)
        out.append(entry.handler)
        out.append(Instr("PUSH_EXC_INFO", handler=inner))
        out.append(Instr("WITH_EXCEPT_START", handler=inner))
        out.append(Instr("POP_TOP", handler=inner))
        out.append(Instr("RERAISE", 2, handler=inner))
        out.append(entry.cleanup)
        out.append(Instr("COPY", 3, handler=entry.outer))
        out.append(Instr("POP_EXCEPT", handler=entry.outer))
        out.append(Instr("RERAISE", 1, handler=entry.outer))
    return out


def pop_null() -> list[Instr]:
    # Call a no-op with the NULL as its "self" slot: the only way to drop a NULL.
    out = [codegen.load_const(_discard)]
    if PY_VERSION >= (3, 13):
        out.append(Instr("SWAP", 2))
    return [*out, *codegen.call(0), Instr("POP_TOP")]


def exit_with() -> list[Instr]:
    # __exit__(None, None, None): its slot acts as the callable of a method-style call.
    return [codegen.load_const(None), codegen.load_const(None), codegen.load_const(None),
            *codegen.call(2), Instr("POP_TOP")]


def _call_resume(
    code: types.CodeType,
    resume: ResumeFunction,
    after: Sequence[Slot],
    live_locals: Sequence[tuple[str, Slot]],
    locals_: dict[str, Slot],
) -> Items:
    """Unwind the stack left by the broken instruction and return the resume function's result."""
    out: Items = []
    args: list[Items] = []
    for depth in reversed(range(len(after))):
        slot = after[depth]
        if isinstance(slot, Null):
            out.extend(pop_null())
        elif isinstance(slot, WithExit):
            out.extend(exit_with())
            args.append(load_slot(slot))
        elif isinstance(slot, Reenter):
            out.extend(exit_with())  # the resume function builds and enters its own
        elif isinstance(slot, Handoff):
            out.extend(exit_with())  # HandOn: nothing; the resume function exits the manager
            args.append(codegen.call_function(
                [codegen.load_const(Finish)], [load_slot(Value(slot.index))]
            ))
        elif isinstance(slot, Local):
            out.append(Instr("POP_TOP"))  # the resume function reads the local instead
        else:
            tmp = f"___strata_stack{depth}"
            out.append(codegen.store_fast(tmp))
            args.append([codegen.load_fast(tmp)])
    args.reverse()
    args.extend(load_slot(slot, locals_) for _, slot in live_locals)
    if resume.lead is not None:
        names = [name for name, _ in live_locals]
        args.insert(0, args.pop(len(args) - len(names) + names.index(resume.lead)))
    if resume.has_closure:
        func = codegen.make_function(resume.code, closure=code.co_freevars)
        out.extend(codegen.call_function(func, args))
    else:
        out.extend(codegen.call_global(resume.name, args))
    out.append(codegen.return_value())
    return out


def _lead_argument(code: types.CodeType, local_names: Sequence[str]) -> str | None:
    """The first argument of ``code`` when it must stay the resume function's first argument:
    zero-argument ``super()`` (``__class__`` is a free variable) reads the frame's first local
    as its ``self``. None otherwise, or when that argument is not passed on."""
    if "__class__" not in code.co_freevars or not code.co_argcount:
        return None  # (super() needs a positional first argument: eager raises without one)
    first = code.co_varnames[0]
    return first if first in local_names else None


def _resume_code(  # noqa: PLR0917 - one resume function's parts
    code: types.CodeType,
    offset: int,
    stack: Sequence[Tag],
    local_names: Sequence[str],
    name: str,
    maybe_unbound: Sequence[str] = (),
    iterated: Sequence[str] = (),
) -> tuple[types.CodeType, dict[int, int]]:
    items = _decoded(code)
    rest = _split_prologue(items)
    k = next(
        (i for i, it in enumerate(rest) if isinstance(it, Instr) and it.offset == offset), None
    )
    if k is None:
        raise ResumeError(f"{code.co_name} has no instruction at offset {offset} to resume at")
    entry_label = Label(f"resume_at_{offset}")
    rest.insert(k, entry_label)
    stack_args = [f"___stack{d}" for d, tag in enumerate(stack) if tag in (_VALUE, _WITH)]
    lead = _lead_argument(code, local_names)
    argnames = (
        *(() if lead is None else (lead,)),
        *stack_args,
        *(n for n in local_names if n != lead),
    )
    if len(set(argnames)) != len(argnames):
        raise ResumeError(f"duplicate live local names in {local_names}")
    entry: Items = []
    for var in maybe_unbound:
        if var not in local_names:
            raise ResumeError(f"{var!r} may be unbound but is not a live local")
        bound = Label(f"bound_{var}")
        # isinstance, not ``is``: the VM answers it for tensors and objects alike.
        entry.extend([
            *codegen.call_function(
                [codegen.load_const(isinstance)],
                [[_load_var(code, var)], [codegen.load_const(Unbound)]],
            ),
            *codegen.pop_jump_if(False, bound),
            Instr("DELETE_DEREF" if var in code.co_cellvars else "DELETE_FAST", var), bound,
        ])
    for var in iterated:
        if var not in local_names or var in code.co_cellvars or var in code.co_freevars:
            raise ResumeError(f"{var!r} cannot be passed as the items of an iterator")
        entry.extend([codegen.load_fast(var), Instr("GET_ITER"), codegen.store_fast(var)])
    for d, tag in enumerate(stack):
        if isinstance(tag, Reenter):
            entry.extend(codegen.enter_with(_build_manager(tag)))
        elif isinstance(tag, Local):
            if tag.name not in local_names:
                raise ResumeError(f"stack slot {tag!r} names no live local of {local_names}")
            entry.append(_load_var(code, tag.name))
        elif tag == _NULL:
            entry.append(Instr("PUSH_NULL"))
        elif tag == _WITH:
            entry.extend(codegen.enter_with([codegen.load_fast(f"___stack{d}")]))
        else:
            entry.append(codegen.load_fast(f"___stack{d}"))
    entry.append(codegen.jump(entry_label))
    head = codegen.prologue(Signature(freevars=code.co_freevars, cellvars=code.co_cellvars))
    varnames = (*argnames, *(v for v in code.co_varnames if v not in argnames))
    flags = code.co_flags & ~(inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)
    built = assemble(
        [*head, *entry, *rest],
        template=code,
        co_argcount=len(argnames),
        co_posonlyargcount=0,
        co_kwonlyargcount=0,
        co_flags=flags,
        co_name=name,
        co_qualname=name,
        co_varnames=varnames,
    )
    # The rest of the original assembles one to one (decode/assemble round-trip), after the
    # generated prologue and entry: pair the offsets up. A 3.13 pair of locals pushed past
    # slot 15 by the new arguments comes back as its two plain instructions (both map to it).
    mine = instructions_only(decode(built))[len(instructions_only([*head, *entry])):]
    offsets: dict[int, int] = {}
    k = 0
    for old in instructions_only(rest):
        parts = PAIR_PARTS.get(old.opname)
        span = 2 if parts and k < len(mine) and mine[k].opname == parts[0] else 1
        news = mine[k:k + span]
        expected = list(parts) if span == 2 and parts else [old.opname]
        if [n.opname for n in news] != expected or old.offset is None or any(
            n.offset is None for n in news
        ):
            raise ResumeError(f"{name}: cannot map offsets back to {code.co_name}")
        for new in news:
            assert new.offset is not None
            offsets[new.offset] = old.offset
        k += span
    if k != len(mine):
        raise ResumeError(f"{name}: cannot map offsets back to {code.co_name}")
    return built, offsets


def inline_helper(
    code: types.CodeType, helper: types.CodeType | Sequence[Instr | Label]
) -> Items:
    """The body of ``helper`` as residual code: each return stores the tuple and jumps on.

    ``helper`` is a code object with the frame's parameters and free variables, or the
    instructions of such a function's body (no prologue), as the transformed-code emitter
    builds them for ``code`` itself.
    """
    if isinstance(helper, types.CodeType):
        _check_code(helper)
        nargs = _total_args(helper)
        if helper.co_varnames[:nargs] != code.co_varnames[: _total_args(code)]:
            raise ResumeError(
                f"the helper's parameters {helper.co_varnames[:nargs]} are not the frame's "
                f"{code.co_varnames[: _total_args(code)]}"
            )
        if not set(helper.co_freevars) <= set(code.co_freevars):
            raise ResumeError(
                f"the helper's free variables {helper.co_freevars} are not the frame's "
                f"{code.co_freevars}"
            )
        body = _split_prologue(decode(helper))
    else:
        body = list(helper)
    done = Label("helper_done")
    out: Items = []
    for item in body:
        if isinstance(item, Label):
            out.append(item)
            continue
        ins = attrs.evolve(item, position=NO_POSITION, offset=None)
        if ins.opname == "RETURN_CONST":
            out.append(codegen.load_const(ins.arg))
        if ins.opname in ("RETURN_VALUE", "RETURN_CONST"):
            out.extend([codegen.store_fast(_VALS), codegen.jump(done)])
        else:
            out.append(ins)
    out.append(done)
    return out


def _total_args(code: types.CodeType) -> int:
    total = code.co_argcount + code.co_kwonlyargcount
    total += bool(code.co_flags & inspect.CO_VARARGS)
    return total + bool(code.co_flags & inspect.CO_VARKEYWORDS)


def positional_helper(helper: types.CodeType) -> tuple[types.CodeType, tuple[str, ...]]:
    """``helper`` taking all its parameters positionally, and their names in call order.

    A parameter keeps its slot: keyword-only ones become positional, ``*args`` receives the
    tuple and ``**kwargs`` the dict. So a helper generated with the original's signature is
    called by the residual code with the frame's own variables, whatever that signature is.
    """
    total = _total_args(helper)
    flat = helper.replace(
        co_argcount=total,
        co_posonlyargcount=0,
        co_kwonlyargcount=0,
        co_flags=helper.co_flags & ~(inspect.CO_VARARGS | inspect.CO_VARKEYWORDS),
    )
    return flat, helper.co_varnames[:total]


def instructions_at(code: types.CodeType) -> list[Instr]:
    """The decoded instructions of ``code`` (offsets set): for finding a break's offset."""
    return instructions_only(_decoded(code))


# Decoded code objects, by weak key: a frame's code is decoded for its residual code and again
# for each of its resume functions, and a resume function's own code when it breaks in turn.
_DECODED: weakref.WeakKeyDictionary[types.CodeType, tuple[Instr | Label, ...]] = (
    weakref.WeakKeyDictionary()
)


def _decoded(code: types.CodeType) -> list[Instr | Label]:
    """``decode(code)``, decoded once per code object (a fresh list: callers insert labels)."""
    items = _DECODED.get(code)
    if items is None:
        items = _DECODED[code] = tuple(decode(code))
    return list(items)
