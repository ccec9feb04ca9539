"""The control flow of one code object, analysed once: what a graph break there needs to know.

:func:`flow_of` decodes a code object once (cached per code object) and answers, for one
instruction: is it inside a loop or a ``try`` block (a break there cannot resume right after it,
symbolic_vm.breaks.region runs the statement instead), which ``with`` blocks are active (their
``__exit__`` stack slots), does it make a ``with`` block's manager, can the residual code run it
alone. The region finder reads the same facts (stack depths, main-line instructions, handler
chains). Imports no torch.
"""

from __future__ import annotations

import dis
import functools
import types
import weakref
from collections.abc import Sequence

from symbolic_vm.breaks.resume import group_at
from symbolic_vm.bytecode import (
    ExceptHandler,
    Instr,
    Label,
    ResumeError,
    decode,
    instructions_only,
    label_indices,
)
from symbolic_vm.bytecode.opcodes import NO_FALLTHROUGH

__all__ = [
    "CodeFlow",
    "clear_flows",
    "flow_of",
    "in_loop_or_try",
    "makes_with_manager",
    "runs_alone",
    "why_not_break_at",
    "with_exit_slot",
    "with_exit_slots",
    "with_slots",
]

_RETURNS = frozenset({"RETURN_VALUE", "RETURN_CONST"})
# A handler's kind (see CodeFlow.handler_kinds).
WITH, TRY, OTHER = "with", "try", "other"


def _oparg(ins: Instr) -> int | None:
    if not dis.opmap.get(ins.opname, 0) >= dis.HAVE_ARGUMENT:
        return None
    if isinstance(ins.arg, int) and not isinstance(ins.arg, bool):
        return ins.arg
    return ins.flags or 0  # name-indexed ops keep their stack-changing bits in flags


class CodeFlow:
    """Control-flow facts of one code object, by instruction index (see the module doc)."""

    def __init__(self, code: types.CodeType) -> None:
        # No reference to ``code`` itself: it is the weak key this analysis is cached under.
        self.name = code.co_name
        self.items: list[Instr | Label] = decode(code)
        self.instrs: list[Instr] = instructions_only(self.items)
        self.label_at: dict[Label, int] = label_indices(self.items)
        self.index: dict[int, int] = {
            ins.offset: k for k, ins in enumerate(self.instrs) if ins.offset is not None
        }
        self.depth, self.main = self._depths()
        self._kinds: dict[int, tuple[tuple[ExceptHandler, str], ...]] = {}
        self._reasons: dict[int, str | None] = {}

    def _depths(self) -> tuple[dict[int, int], frozenset[int]]:
        """The stack depth before each reachable instruction, and those reachable from the
        entry without an exception (the main line)."""
        depth: dict[int, int] = {}
        main: set[int] = set()
        work: list[tuple[int, int, bool]] = [(0, 0, True)]
        while work:
            i, d, normal = work.pop()
            if i >= len(self.instrs):
                continue
            if i in depth and (i in main or not normal):
                continue
            depth.setdefault(i, d)
            if normal:
                main.add(i)
            ins = self.instrs[i]
            op = dis.opmap[ins.opname]
            arg = _oparg(ins)
            if ins.handler is not None:
                h = ins.handler
                work.append((self.label_at[h.target], h.depth + int(h.lasti) + 1, False))
            if isinstance(ins.arg, Label):
                work.append((self.label_at[ins.arg], d + dis.stack_effect(op, arg, jump=True),
                             normal))
                if ins.opname not in NO_FALLTHROUGH:
                    work.append((i + 1, d + dis.stack_effect(op, arg, jump=False), normal))
            elif ins.opname not in NO_FALLTHROUGH:
                work.append((i + 1, d + dis.stack_effect(op, arg), normal))
        return depth, frozenset(main)

    def at(self, offset: int) -> int:
        """The index of the instruction at ``offset``; ResumeError when there is none."""
        where = self.index.get(offset)
        if where is None:
            raise ResumeError(f"{self.name} has no instruction at offset {offset}")
        return where

    def successors(self, i: int) -> list[int]:
        """Where control goes after instruction ``i`` without an exception."""
        ins = self.instrs[i]
        out: list[int] = []
        if isinstance(ins.arg, Label):
            out.append(self.label_at[ins.arg])
        if ins.opname not in NO_FALLTHROUGH and i + 1 < len(self.instrs):
            out.append(i + 1)
        return out

    def handler_index(self, handler: ExceptHandler) -> int:
        return self.label_at[handler.target]

    def handler_kinds(self, i: int) -> tuple[tuple[ExceptHandler, str], ...]:
        """Every exception handler around instruction ``i``, innermost first, with its kind:
        "with" (a with block's cleanup: PUSH_EXC_INFO, WITH_EXCEPT_START), "try" (an
        except/finally clause) or "other" (3.12's comprehension restore). The exception table
        gives each instruction its innermost handler only; the chain leads outwards: a clause's
        own cleanup (the ``lasti`` block after PUSH_EXC_INFO) is covered by the handler of the
        statement around it."""
        found = self._kinds.get(i)
        if found is None:
            found = self._kinds[i] = self._handler_chain(i)
        return found

    def _handler_chain(self, i: int) -> tuple[tuple[ExceptHandler, str], ...]:
        out: list[tuple[ExceptHandler, str]] = []
        handler = self.instrs[i].handler
        seen: set[int] = set()
        while handler is not None:
            t = self.handler_index(handler)
            if t in seen:
                break
            seen.add(t)
            first = self.instrs[t]
            kind = OTHER
            if first.opname == "PUSH_EXC_INFO":
                then = self.instrs[t + 1] if t + 1 < len(self.instrs) else first
                kind = WITH if then.opname == "WITH_EXCEPT_START" else TRY
            out.append((handler, kind))
            handler = first.handler
            if first.opname == "PUSH_EXC_INFO" and handler is not None:
                handler = self.instrs[self.handler_index(handler)].handler  # past the cleanup
        return tuple(out)

    @functools.cached_property
    def back_edges(self) -> list[tuple[int, int]]:
        """(target, source) of every main-line jump back to an instruction at or before it that
        the target's own flow reaches again (a loop). 3.12+ put an except clause after the
        function's return, jumping back to the code after the ``try``: in a resume function that
        enters there, that jump is main-line but closes no loop."""
        return [
            (self.label_at[ins.arg], i) for i in sorted(self.main)
            if isinstance((ins := self.instrs[i]).arg, Label) and self.label_at[ins.arg] <= i
            and self._reaches(self.label_at[ins.arg], i)
        ]

    @functools.cached_property
    def cold_loops(self) -> list[tuple[int, int, frozenset[int]]]:
        """(header, source, body) of every loop closed by a jump back from code reached only
        through an exception handler: a loop body whose ``try`` raises, the code after the
        ``except`` clause then carrying the back edge. 3.12+ move such code (cold) after the
        function's return, so the loop is no range of instructions: ``body`` (the natural
        loop: the header and everything reaching the source without passing it, through
        handlers too) names its instructions. Only loops whose header is on the main line."""
        preds: dict[int, list[int]] = {}
        for i in self.depth:
            ins = self.instrs[i]
            targets = self.successors(i)
            if ins.handler is not None:
                targets.append(self.handler_index(ins.handler))
            for j in targets:
                preds.setdefault(j, []).append(i)
        out: list[tuple[int, int, frozenset[int]]] = []
        for i in sorted(set(self.depth) - self.main):
            arg = self.instrs[i].arg
            if not isinstance(arg, Label) or (head := self.label_at[arg]) > i:
                continue
            if head not in self.main:
                continue
            body = {head}
            work = [i]
            while work:
                k = work.pop()
                if k not in body:
                    body.add(k)
                    work.extend(preds.get(k, ()))
            if 0 in body and head != 0:
                continue  # reached from the entry around the header: no loop (an except
                # clause jumping back to the code after its try)
            out.append((head, i, frozenset(body)))
        return out

    def _reaches(self, start: int, goal: int) -> bool:
        """Whether ``goal`` is reached from ``start`` without an exception."""
        seen = {start}
        work = [start]
        while work:
            i = work.pop()
            if i == goal:
                return True
            for j in self.successors(i):
                if j not in seen:
                    seen.add(j)
                    work.append(j)
        return False

    @functools.cached_property
    def try_ranges(self) -> list[tuple[int, int]]:
        """(first, last) main-line instruction covered by each ``try`` handler."""
        covered: dict[int, list[int]] = {}
        for i in sorted(self.main):
            for handler, kind in self.handler_kinds(i):
                if kind == TRY:
                    covered.setdefault(self.handler_index(handler), []).append(i)
        return [(min(m), max(m)) for m in covered.values()]

    # --- the questions a graph break asks ----------------------------------------------------

    def dynamo_reason(self, offset: int) -> str | None:
        """TorchDynamo's reading of "inside a loop or a try block" at ``offset`` (None: not):
        a jump back to an instruction at or before it, met before the next return in code
        order; a ``try`` handler (not a ``with`` cleanup) on its handler chain."""
        if offset not in self._reasons:
            self._reasons[offset] = self._dynamo_reason(self.at(offset))
        return self._reasons[offset]

    def _dynamo_reason(self, where: int) -> str | None:
        for ins in self.instrs[where:]:
            if ins.opname in _RETURNS:
                break
            if isinstance(ins.arg, Label) and self.label_at[ins.arg] <= where:
                return "a graph break inside a loop (the frame runs eagerly, as in torch.compile)"
        if any(kind != WITH for _, kind in self.handler_kinds(where)):
            return ("a graph break inside a try block (the frame runs eagerly, as in "
                    "torch.compile)")
        return None

    def in_loop_or_try(self, offset: int) -> bool:
        """Whether a break at ``offset`` cannot resume right after the instruction: TorchDynamo's
        reading (:meth:`dynamo_reason`), or the flow's: a main-line back edge spanning it (a loop
        whose back edge sits after a return in code order) or the main-line range of a ``try``
        handler spanning it (an instruction between two covered parts of a ``try`` body)."""
        if self.dynamo_reason(offset) is not None:
            return True
        where = self.at(offset)
        return where in self.depth and (
            any(t <= where <= s for t, s in self.back_edges)
            or any(first <= where <= last for first, last in self.try_ranges)
        )

    def makes_with_manager(self, offset: int) -> bool:
        """Whether the instruction at ``offset`` makes the manager of a ``with`` statement (its
        result goes straight to BEFORE_WITH)."""
        end = _group_end(self.items, offset)
        after = next((i for i in self.items[end:] if isinstance(i, Instr)), None)
        return after is not None and after.opname == "BEFORE_WITH"

    def runs_alone(self, offset: int) -> bool:
        """Whether the residual code of a plain break can run the instruction at ``offset`` (and
        its call prefix) on its own (see symbolic_vm.breaks.resume.group_at)."""
        try:
            group_at(self.items, offset)
        except ResumeError:
            return False
        return True

    def with_slots(self, offset: int, *, through_try: bool = True) -> list[int]:
        """The stack slots of the ``__exit__`` of every ``with`` block active at ``offset``,
        innermost first: through try blocks too, or (``through_try=False``) up to the first."""
        slots: list[int] = []
        for handler, kind in self.handler_kinds(self.at(offset)):
            if kind == WITH:
                slots.append(handler.depth - 1)
            elif not through_try:
                break
        return slots


# Weak keys: a code object compiled and discarded takes its analysis with it.
_FLOWS: weakref.WeakKeyDictionary[types.CodeType, CodeFlow] = weakref.WeakKeyDictionary()


def flow_of(code: types.CodeType) -> CodeFlow:
    """The control-flow analysis of ``code``, made once."""
    flow = _FLOWS.get(code)  # an equal code object (same bytecode) has the same analysis
    if flow is None:
        flow = _FLOWS[code] = CodeFlow(code)
    return flow


def clear_flows() -> None:
    """Forget every analysis (symbolic_vm.reset())."""
    _FLOWS.clear()


def _group_end(items: Sequence[Instr | Label], offset: int) -> int:
    try:
        return group_at(items, offset).next_index
    except ResumeError:  # not an instruction a break can run: the next one is what follows it
        k = next(i for i, it in enumerate(items) if isinstance(it, Instr) and it.offset == offset)
        return k + 1


# --- the same questions by code and offset (tests, README) -----------------------------------


def in_loop_or_try(code: types.CodeType, offset: int) -> bool:
    """Whether a break at ``offset`` of ``code`` is inside a loop or a try block."""
    return flow_of(code).in_loop_or_try(offset)


def why_not_break_at(code: types.CodeType, offset: int) -> str | None:
    """Why TorchDynamo would not graph-break at ``offset`` of ``code`` (None: it would): inside
    a loop or a ``try`` block, or at the call making a ``with`` block's manager (a manager the
    VM cannot build, such as a ``contextlib.contextmanager`` generator, is one TorchDynamo runs
    the frame eagerly for). The VM runs the statement as bytecode instead (a region)."""
    flow = flow_of(code)
    why = flow.dynamo_reason(offset)
    if why is not None:
        return why
    if flow.makes_with_manager(offset):
        return ("a graph break making a context manager (the frame runs eagerly, as in "
                "torch.compile for generic context managers)")
    return None


def makes_with_manager(code: types.CodeType, offset: int) -> bool:
    """See :meth:`CodeFlow.makes_with_manager`."""
    return flow_of(code).makes_with_manager(offset)


def runs_alone(code: types.CodeType, offset: int) -> bool:
    """See :meth:`CodeFlow.runs_alone`."""
    return flow_of(code).runs_alone(offset)


def with_slots(code: types.CodeType, offset: int) -> list[int]:
    """The ``__exit__`` stack slots of every ``with`` block at ``offset``, through try blocks."""
    return flow_of(code).with_slots(offset)


def with_exit_slots(code: types.CodeType, offset: int) -> list[int]:
    """The ``__exit__`` stack slots of the ``with`` blocks at ``offset`` up to a ``try``."""
    return flow_of(code).with_slots(offset, through_try=False)


def with_exit_slot(code: types.CodeType, offset: int) -> int | None:
    """The innermost active ``with`` block's ``__exit__`` slot at ``offset``, or None."""
    slots = with_exit_slots(code, offset)
    return slots[0] if slots else None
