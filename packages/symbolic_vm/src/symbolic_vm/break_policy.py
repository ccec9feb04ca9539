"""Where a graph break may resume: TorchDynamo's break policy read on the bytecode.

A break inside a loop (a back edge after it, before the next return) or a ``try`` block cannot
resume right after the broken instruction (symbolic_vm.region runs that statement instead); a
break at the call making a ``with`` block's manager cannot either. The helpers here answer
those questions for one instruction of a code object, and find the ``with`` blocks active
there. Imports no torch.
"""

from __future__ import annotations

import types
from collections.abc import Sequence

from symbolic_vm.bytecode import (
    ExceptHandler,
    Instr,
    Label,
    ResumeError,
    decode,
    instructions_only,
    label_indices,
)
from symbolic_vm.resume import group_at

__all__ = [
    "in_loop_or_try",
    "makes_with_manager",
    "runs_alone",
    "why_not_break_at",
    "with_exit_slot",
    "with_exit_slots",
]

_RETURNS = ("RETURN_VALUE", "RETURN_CONST")


def why_not_break_at(code: types.CodeType, offset: int) -> str | None:
    """Why TorchDynamo would not graph-break at ``offset`` of ``code`` (None: it would).

    Its policy: no break followed by a loop back edge to an instruction before it, up to the
    next return (inside a ``for``/``while`` loop), and none inside a ``try`` block (only
    ``with`` blocks are re-entered). The VM turns those two into region-level breaks instead
    (symbolic_vm.region: the loop/try statement runs as bytecode). Nor at the call that makes
    a ``with`` block's manager (its result goes straight to BEFORE_WITH): a manager the VM
    cannot build, such as a ``contextlib.contextmanager`` generator, is one TorchDynamo traces
    as a generic context manager, and it runs the frame eagerly on a break inside one.
    """
    why = _loop_or_try(code, offset)
    if why is not None:
        return why
    if makes_with_manager(code, offset):
        return ("a graph break making a context manager (the frame runs eagerly, as in "
                "torch.compile for generic context managers)")
    return None


def makes_with_manager(code: types.CodeType, offset: int) -> bool:
    """Whether the instruction at ``offset`` makes the manager of a ``with`` statement (its
    result goes straight to BEFORE_WITH)."""
    items = decode(code)
    after = next((i for i in items[_group_end(items, offset) :] if isinstance(i, Instr)), None)
    return after is not None and after.opname == "BEFORE_WITH"


def runs_alone(code: types.CodeType, offset: int) -> bool:
    """Whether the residual code of a plain break can run the instruction at ``offset`` (and
    its call prefix) on its own (see :class:`BreakPlan`)."""
    try:
        group_at(decode(code), offset)
    except ResumeError:
        return False
    return True


def in_loop_or_try(code: types.CodeType, offset: int) -> bool:
    """Whether the instruction at ``offset`` is inside a loop or a try block (by the rules of
    :func:`why_not_break_at`): symbolic_vm.region then runs that statement as bytecode."""
    return _loop_or_try(code, offset) is not None


def _loop_or_try(code: types.CodeType, offset: int) -> str | None:
    items = decode(code)
    instrs = instructions_only(items)
    where = next((k for k, i in enumerate(instrs) if i.offset == offset), None)
    if where is None:
        raise ResumeError(f"{code.co_name} has no instruction at offset {offset}")
    label_at = label_indices(items)
    for ins in instrs[where:]:
        if ins.opname in _RETURNS:
            break
        if isinstance(ins.arg, Label) and label_at[ins.arg] <= where:
            return "a graph break inside a loop (the frame runs eagerly, as in torch.compile)"
    if _inside_try(instrs, where, label_at):
        return "a graph break inside a try block (the frame runs eagerly, as in torch.compile)"
    return None


def _handler_chain(
    instrs: Sequence[Instr], where: int, label_at: dict[Label, int]
) -> list[tuple[ExceptHandler, bool]]:
    """The exception handlers around instruction ``where``, innermost first, each with whether
    it is a ``with`` block's cleanup. The exception table gives each instruction its innermost
    handler only; the chain leads outwards: a ``with`` block's cleanup starts with
    PUSH_EXC_INFO, whose own handler (the ``lasti`` cleanup: COPY 3, POP_EXCEPT, RERAISE 1) is
    covered by the handler of the block around the ``with``. It stops at the first handler
    that is not a ``with`` block's (a ``try``)."""
    chain: list[tuple[ExceptHandler, bool]] = []
    handler = instrs[where].handler
    seen: set[Label] = set()
    while handler is not None and handler.target not in seen:
        seen.add(handler.target)
        first = instrs[label_at[handler.target]]
        then = instrs[label_at[handler.target] + 1]
        is_with = first.opname == "PUSH_EXC_INFO" and then.opname == "WITH_EXCEPT_START"
        chain.append((handler, is_with))
        if not is_with or first.handler is None:
            break
        handler = instrs[label_at[first.handler.target]].handler
    return chain


def _inside_try(instrs: Sequence[Instr], where: int, label_at: dict[Label, int]) -> bool:
    """Whether instruction ``where`` is inside a ``try`` block, however deeply nested in
    ``with`` blocks (see :func:`_handler_chain`)."""
    return any(not is_with for _, is_with in _handler_chain(instrs, where, label_at))


def _group_end(items: Sequence[Instr | Label], offset: int) -> int:
    try:
        return group_at(items, offset).next_index
    except ResumeError:  # not an instruction a break can run: the next one is what follows it
        k = next(i for i, it in enumerate(items) if isinstance(it, Instr) and it.offset == offset)
        return k + 1


def with_exit_slots(code: types.CodeType, offset: int) -> list[int]:
    """The stack indices of the ``__exit__`` of every ``with`` block active at ``offset``,
    innermost first (up to an enclosing ``try`` block, if any)."""
    items = decode(code)
    instrs = instructions_only(items)
    where = next((k for k, i in enumerate(instrs) if i.offset == offset), None)
    if where is None:
        raise ResumeError(f"{code.co_name} has no instruction at offset {offset}")
    chain = _handler_chain(instrs, where, label_indices(items))
    slots: list[int] = []
    for handler, is_with in chain:
        if not is_with:
            break
        slots.append(handler.depth - 1)
    return slots


def with_exit_slot(code: types.CodeType, offset: int) -> int | None:
    """The stack index of the innermost active ``with`` block's ``__exit__`` at ``offset``.

    None when the instruction there is not directly inside a ``with`` block (its exception
    handler, if any, is not a with block's cleanup).
    """
    slots = with_exit_slots(code, offset)
    return slots[0] if slots else None


