"""Region-level graph breaks: run a whole loop or try statement of a frame as its own bytecode.

A graph break inside a ``for``/``while`` loop or a ``try`` block cannot resume right after the
broken instruction: the rest of the loop body would have to be re-entered on every iteration.
Instead the *region* -- the outermost loop/try statement around the break, from the start of
its statement -- runs as the frame's original bytecode, in Python (the functions it calls are
still fresh frames the hook captures), between a graph for the code before it and resume
functions for the code after it:

1. :func:`find_region` works out the region on the bytecode: its first instruction (the VM
   traces the frame again and stops there), every instruction it runs (loop bodies, ``try``
   bodies and their handlers, wherever the compiler placed them), and its exits (the
   instructions after it, reached with the stack as it was at the start).
2. :func:`region_residual` builds the broken frame's transformed code: the prologue helper
   (graph + side effects), the stack and the locals at the region's start restored, the
   region's instructions copied one to one (jumps, exception handlers and source positions
   kept; a handler of a ``with`` block around the region becomes the re-entered block's), and
   at each exit a call of ``__resume_at_<exit>_<n>`` with every local the region may have
   bound -- one call per exit of the region, never per iteration.

A local the region may or may not have bound (a loop variable of a loop that might not run)
is passed as :data:`symbolic_vm.resume.UNBOUND` when unbound, and the resume function deletes
it again (see ``ResumeBuilder.resume_at``). Imports no torch.
"""

from __future__ import annotations

import types
from collections.abc import Sequence

import attrs

from symbolic_vm.breaks.flow import TRY, WITH, CodeFlow, flow_of
from symbolic_vm.breaks.resume import (
    UNBOUND,
    BreakCode,
    BreakPlan,
    Null,
    Reenter,
    ResumeBuilder,
    ResumeFunction,
    exit_with,
    inline_helper,
    load_slot,
    pop_null,
    restore_stack,
    slot_tag,
    with_cleanups,
)
from symbolic_vm.bytecode import (
    PY_VERSION,
    ExceptHandler,
    Instr,
    Label,
    ResumeError,
    Signature,
    assemble,
    codegen,
)
from symbolic_vm.bytecode.codegen import with_position
from symbolic_vm.bytecode.opcodes import NO_FALLTHROUGH, PAIR_PARTS

__all__ = ["Region", "find_region", "region_residual"]

Items = list[Instr | Label]

_STORES = frozenset({"STORE_FAST", "STORE_DEREF"})
_DELETES = frozenset({"DELETE_FAST", "DELETE_DEREF", "LOAD_FAST_AND_CLEAR"})
# Instructions a region must not hold: the residual frame is a plain function.
_REFUSED = frozenset({"YIELD_VALUE", "RETURN_GENERATOR", "SEND", "GET_AWAITABLE"})
_RETURNS = frozenset({"RETURN_VALUE", "RETURN_CONST"})
_MAX_STARTS = 8  # statement starts tried per region


@attrs.frozen
class Region:
    """The instructions of one loop/try statement that run as bytecode (see the module doc).

    ``start`` is the offset of its first instruction (where the VM stops), ``members`` the
    offsets of every instruction it runs, ``exits`` the offsets it can continue at afterwards
    (each reached with ``base`` values on the stack, as at ``start``), ``lines`` its first and
    last source line, ``kind`` "loop", "try block" or "loop and try block".
    """

    start: int
    members: frozenset[int]
    exits: tuple[int, ...]
    base: int
    lines: tuple[int, int]
    kind: str


def _uses(flow: CodeFlow, names: frozenset[str]) -> list[int]:
    """The main-line instructions reading, writing or deleting one of the variables ``names``."""
    out = []
    for i in sorted(flow.main):
        arg = flow.instrs[i].arg
        args = arg if isinstance(arg, tuple) else (arg,)  # 3.13's LOAD_FAST_LOAD_FAST
        if flow.instrs[i].opname in _VARIABLE_OPS and any(a in names for a in args):
            out.append(i)
    return out


_VARIABLE_OPS = frozenset({
    "LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "STORE_FAST", "DELETE_FAST",
    "LOAD_FAST_LOAD_FAST", "STORE_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST", "LOAD_DEREF",
    "STORE_DEREF", "DELETE_DEREF", "LOAD_CLOSURE",
})


def _span(
    flow: CodeFlow, where: int, withs: frozenset[int] = frozenset(),
    cover: frozenset[str] = frozenset(),
) -> tuple[int, int, set[str], set[int], frozenset[int]]:
    """The outermost loop/try statement around instruction ``where`` (or ``with`` statement
    whose ``__exit__`` sits at a stack slot in ``withs``): its first and last main-line
    instruction index, which kinds of statement it is, the handlers (target indices) of
    its try blocks and of those with blocks, and the instructions of its loops outside that
    range (cold code after the return, see CodeFlow.cold_loops)."""
    main = sorted(flow.main)
    back_edges = flow.back_edges
    held = {
        flow.handler_index(h) for h, kind in flow.handler_kinds(where)
        if kind == WITH and h.depth - 1 in withs
    }
    covered: dict[int, list[int]] = {}
    for i in main:
        for handler, kind in flow.handler_kinds(i):
            if kind == TRY or flow.handler_index(handler) in held:
                covered.setdefault(flow.handler_index(handler), []).append(i)
    lo = hi = where
    # A loop closed from cold code: its main-line part is a range, the rest a set.
    cold = [(t, max(b for b in body if b in flow.main), body - flow.main)
            for t, _, body in flow.cold_loops]
    extra: set[int] = set()
    if where not in flow.main:
        lo, hi = next(((t, last) for t, last, rest in cold if where in rest), (lo, hi))
    uses = _uses(flow, cover)
    if uses:
        lo, hi = min(lo, uses[0]), max(hi, uses[-1])
    kinds: set[str] = set()
    tries: set[int] = set()
    changed = True
    while changed:
        changed = False
        for target, source in back_edges:
            if target <= hi and source >= lo and (target < lo or source > hi):
                lo, hi, changed = min(lo, target), max(hi, source), True
            if target <= hi and source >= lo:
                kinds.add("loop")
        for target, last, rest in cold:
            if (target <= hi and last >= lo) or where in rest or extra & rest:
                kinds.add("loop")
                if target < lo or last > hi or not rest <= extra:
                    lo, hi, changed = min(lo, target), max(hi, last), True
                    extra |= rest
        for target, members in covered.items():
            first, last = min(members), max(members)
            if first <= hi and last >= lo:
                kinds.add("with block" if target in held else "try block")
                tries.add(target)
                if first < lo or last > hi:
                    lo, hi, changed = min(lo, first), max(hi, last), True
    return lo, hi, kinds, tries, frozenset(extra)


def find_region(
    code: types.CodeType, offset: int, *, statement: bool = False,
    withs: frozenset[int] = frozenset(), cover: frozenset[str] = frozenset(),
) -> Region:
    """The region around the instruction at ``offset``: the outermost loop or try statement
    containing it, or ``with`` statement whose ``__exit__`` is at a stack slot in ``withs``
    (a user context manager: its real ``__enter__``/``__exit__`` then run once, as bytecode);
    with ``statement``, outside any, the statement holding it (kind "statement": for an
    instruction a plain break cannot run on its own). The region also spans every use of the
    variables ``cover`` (an iterator or generator held in a local: it then lives and dies in
    the region; kind "statements" when that is all). Raises ResumeError when there is none or
    it cannot run on its own."""
    flow = flow_of(code)
    where = next((k for k, i in enumerate(flow.instrs) if i.offset == offset), None)
    if where is None or where not in flow.depth:
        raise ResumeError(f"no traced instruction at offset {offset} of {code.co_name}")
    lo, hi, kinds, tries, extra = _span(flow, where, withs, cover)
    if not kinds and _uses(flow, cover):
        kinds = {"statements"}
    if not kinds and statement:
        kinds = {"statement"}
    if not kinds:
        raise ResumeError("the break is not inside a loop or a try block")
    # Start at the statement: where the stack holds only the with blocks around it (a for
    # loop's iterable is made before its FOR_ITER; a 3.12 inlined comprehension sits inside an
    # expression, whose statement is then the region).
    target = max(
        (h.depth for h, kind in flow.handler_kinds(lo)
         if kind == WITH and flow.handler_index(h) not in tries),
        default=0,
    )
    first_resume = next(
        (k for k, i in enumerate(flow.instrs) if i.opname == "RESUME"), len(flow.instrs)
    )
    # The nearest instruction at that depth usually starts the statement; a branch inside
    # the statement (a conditional expression) can sit at that depth too, and then the copy
    # would be entered in its middle: the next candidate further up is tried (a few at most).
    candidates = [k for k in range(lo, first_resume, -1) if flow.depth.get(k) == target]
    if not candidates:
        raise ResumeError("no statement start before the region, after the frame's prologue")
    failure = ResumeError("no statement start before the region")
    for start in candidates[:_MAX_STARTS]:
        try:
            members, exits = _grown_members(flow, start, (hi, extra), target, tries)
            break
        except ResumeError as err:
            failure = err
    else:
        raise failure
    base = target
    _check_cells(flow, members, frozenset(code.co_cellvars) | frozenset(code.co_freevars))
    lines = [
        line for i in members if (line := flow.instrs[i].position.lineno) is not None
    ]
    offsets = {flow.instrs[i].offset for i in members}
    exit_offsets = sorted(o for o in (flow.instrs[i].offset for i in exits) if o is not None)
    start_offset = flow.instrs[start].offset
    assert start_offset is not None
    return Region(
        start=start_offset,
        members=frozenset(o for o in offsets if o is not None),
        exits=tuple(exit_offsets),
        base=base,
        lines=(min(lines, default=0), max(lines, default=0)),
        kind=" and ".join(sorted(kinds)),
    )


def _grown_members(
    flow: CodeFlow, start: int, span: tuple[int, frozenset[int]], base: int, tries: set[int]
) -> tuple[set[int], set[int]]:
    """:func:`_members`, with every exit from which control comes back into the region made a
    member (a branch of a conditional expression sits at the statement's depth too), until the
    region is entered only at ``start``; ResumeError when that cannot be reached."""
    forced: set[int] = set()
    for _ in range(len(flow.instrs)):
        members, exits = _members(flow, start, span, base, tries, forced)
        entries = _entries(flow, start, members)
        if not entries:
            return members, exits
        grow = {x for x in exits if _reaches(flow, x, entries, members)}
        if not grow:
            raise ResumeError(f"the region is entered from offset "
                              f"{flow.instrs[min(entries)].offset}, not only at its start")
        forced |= grow
    raise ResumeError("the region does not settle")


def _entries(flow: CodeFlow, start: int, members: set[int]) -> set[int]:
    """The non-members with an edge into the region other than into its start."""
    out: set[int] = set()
    for i, ins in enumerate(flow.instrs):
        if i in members or i not in flow.depth:
            continue
        targets = flow.successors(i)
        if ins.handler is not None:
            targets.append(flow.handler_index(ins.handler))
        if any(t in members and t != start for t in targets):
            out.add(i)
    return out


def _reaches(flow: CodeFlow, source: int, goals: set[int], members: set[int]) -> bool:
    """Whether control from ``source`` reaches one of ``goals`` outside ``members``."""
    seen: set[int] = set()
    work = [source]
    while work:
        i = work.pop()
        if i in goals:
            return True
        if i in seen or i in members:
            continue
        seen.add(i)
        work.extend(flow.successors(i))
    return False


def _members(  # noqa: PLR0917 - the parts of one region
    flow: CodeFlow, start: int, span: tuple[int, frozenset[int]], base: int, tries: set[int],
    forced: set[int],
) -> tuple[set[int], set[int]]:
    """The instructions a region starting at ``start`` runs, and its exits (see find_region);
    ``span`` is its last main-line instruction and its cold loop code (see _span),
    ``forced`` are exits kept as members."""
    hi, extra = span
    outer_targets = _outer_handlers(flow, start)
    members: set[int] = set()
    exits: set[int] = set()
    work = [start]
    while work:
        i = work.pop()
        if i in members:
            continue
        members.add(i)
        ins = flow.instrs[i]
        if ins.opname in _REFUSED:
            raise ResumeError(f"the region holds {ins.opname}")
        if ins.handler is not None and flow.handler_index(ins.handler) not in outer_targets:
            work.append(flow.handler_index(ins.handler))
        for s in flow.successors(i):
            # Outside the statement, back at its stack depth and under none of its try
            # blocks: the statement is over (a handler's code runs above that depth, with the
            # exception state pushed, or still under the statement's finally).
            # A return's epilogue is never an exit: on its path the with blocks around it
            # are being exited, so a point of it at the base depth holds the return value
            # where an exit expects a with's __exit__ (a return inside re-entered with blocks).
            if (
                not start <= s <= hi and s not in extra and flow.depth.get(s) == base
                and s not in forced
                and not any(flow.handler_index(h) in tries for h, _ in flow.handler_kinds(s))
                and not _plain_jump(flow, s) and not _return_epilogue(flow, s)
                and not _unbinds_except_name(flow, s)
            ):
                exits.add(s)
            else:
                work.append(s)
    return members, exits


_JUMPS = frozenset({"JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT"})
# What a return's path runs between its value and the return: exits of the with blocks around
# it (SWAP 2; None, None, None; CALL 2; POP_TOP) and popping a for loop's iterator.
_EPILOGUE = frozenset({"SWAP", "POP_TOP", "LOAD_CONST", "PRECALL", "CALL", "NOP"})


def _return_epilogue(flow: CodeFlow, i: int) -> bool:
    """Whether instruction ``i`` only leads, straight on, through with exits to a return."""
    for _ in range(64):
        ins = flow.instrs[i]
        if ins.opname in _RETURNS:
            return True
        following = flow.successors(i)
        if ins.opname not in _EPILOGUE or len(following) != 1:
            return False
        i = following[0]
    return False


def _plain_jump(flow: CodeFlow, i: int) -> bool:
    """Whether instruction ``i`` only jumps forward (a with/try statement's paths meeting after
    it): the region takes it, so both paths leave at its target, through one resume function."""
    ins = flow.instrs[i]
    return ins.opname in _JUMPS and isinstance(ins.arg, Label) and flow.label_at[ins.arg] > i


def _unbinds_except_name(flow: CodeFlow, i: int) -> bool:
    """Whether instruction ``i`` starts the ``e = None; del e`` that ends an ``except E as e``
    handler: the region runs it (an exit there passed ``e`` on alive, and its traceback kept
    the frame, and what the frame holds, alive in a cycle)."""
    window = flow.instrs[i : i + 3]
    if len(window) != 3:
        return False
    load, store, delete = window
    return (
        load.opname == "LOAD_CONST" and load.arg is None
        and store.opname in ("STORE_FAST", "STORE_DEREF", "STORE_NAME")
        and delete.opname == "DELETE" + store.opname.removeprefix("STORE")
        and store.arg == delete.arg
    )


def _outer_handlers(flow: CodeFlow, start: int) -> set[int]:
    """The handlers (by target index) of the with blocks around a region starting at
    ``start``: not part of it. A try block covering the start is the region's own (the region
    holds every try block around the break, and starts at or before its first instruction)."""
    return {flow.handler_index(h) for h, kind in flow.handler_kinds(start) if kind != TRY}


_CELL_OPS = frozenset({
    "LOAD_DEREF", "STORE_DEREF", "DELETE_DEREF", "LOAD_CLOSURE", "LOAD_CLASSDEREF",
    "LOAD_FROM_DICT_OR_DEREF",
})


def _check_cells(flow: CodeFlow, members: set[int], cell_names: frozenset[str]) -> None:
    """A cell captured by a function made inside the region must not be used outside it: the
    resume function gets the cell's value in a cell of its own, which that function (alive
    after the region) would not share. (3.13 loads a cell for a closure with LOAD_FAST.)"""
    captured = {
        ins.arg for i in members
        if (ins := flow.instrs[i]).opname == "LOAD_CLOSURE"
        or (ins.opname == "LOAD_FAST" and ins.arg in cell_names)
    }
    for i, ins in enumerate(flow.instrs):
        if i not in members and ins.opname in _CELL_OPS and ins.arg in captured:
            raise ResumeError(f"a function made in the region captures {ins.arg!r}, which the "
                              "code outside the region uses too")


# --- definedness of locals at the exits ------------------------------------------------------


def _stored(ins: Instr) -> tuple[str, ...]:
    """The variables ``ins`` stores: a 3.13 pair (``STORE_FAST_LOAD_FAST``,
    ``STORE_FAST_STORE_FAST``) stores one or two (missing them, a resume function after a
    region did not get a local the region bound, and read it unbound: a crash on 3.13)."""
    if ins.opname in _STORES and isinstance(ins.arg, str):
        return (ins.arg,)
    parts = PAIR_PARTS.get(ins.opname)
    if parts is None or not isinstance(ins.arg, tuple):
        return ()
    return tuple(n for op, n in zip(parts, ins.arg, strict=True) if op in _STORES)


def _bound_at_exits(
    flow: CodeFlow, region: Region, bound: frozenset[str], names: frozenset[str]
) -> dict[int, tuple[frozenset[str], frozenset[str]]]:
    """For each exit offset: the variables surely bound there, and those maybe bound."""
    index = {ins.offset: k for k, ins in enumerate(flow.instrs)}
    members = {index[o] for o in region.members}
    def named(opnames: frozenset[str]) -> frozenset[str]:
        return frozenset(
            arg for i in members
            if flow.instrs[i].opname in opnames and isinstance(arg := flow.instrs[i].arg, str)
        )

    cleared = named(frozenset({"LOAD_FAST_AND_CLEAR"}))
    stored = frozenset(name for i in members for name in _stored(flow.instrs[i]))
    maybe = (bound | stored) & names
    must_in: dict[int, frozenset[str]] = {index[region.start]: bound}
    work = [index[region.start]]
    at_exit: dict[int, frozenset[str]] = {}

    def meet(where: dict[int, frozenset[str]], i: int, state: frozenset[str]) -> bool:
        old = where.get(i)
        new = state if old is None else old & state
        if new != old:
            where[i] = new
            return True
        return False

    while work:
        i = work.pop()
        state = must_in[i]
        ins = flow.instrs[i]
        if ins.handler is not None and flow.handler_index(ins.handler) in members:
            t = flow.handler_index(ins.handler)
            if meet(must_in, t, state):
                work.append(t)
        after = state
        if _stored(ins):
            after = state | set(_stored(ins))
        elif ins.opname in _DELETES and isinstance(ins.arg, str):
            after = state - {ins.arg}
        for s in flow.successors(i):
            if s in members:
                if meet(must_in, s, after):
                    work.append(s)
            else:
                meet(at_exit, s, after)
    out: dict[int, tuple[frozenset[str], frozenset[str]]] = {}
    for i, must in at_exit.items():
        offset = flow.instrs[i].offset
        assert offset is not None
        sure = (must & names) - cleared
        out[offset] = (sure, maybe - sure)
    return out


# --- the residual code --------------------------------------------------------------------------


def _load_maybe_unbound(code: types.CodeType, name: str, into: str) -> Items:
    """``into = name``, or ``into = UNBOUND`` when ``name`` is unbound (caught, not tested)."""
    caught, done = Label("unbound"), Label("bound")
    if name in code.co_cellvars:
        load = codegen.load_deref(name)
    else:
        load = Instr("LOAD_FAST_CHECK" if PY_VERSION >= (3, 12) else "LOAD_FAST", name)
    # An exception handler at depth 0 (the stack is empty here): the UnboundLocalError is
    # dropped without touching the thread's handled exception (no PUSH_EXC_INFO).
    guard = ExceptHandler(caught, 0)
    return [
        attrs.evolve(load, handler=guard), codegen.store_fast(into), codegen.jump(done),
        caught, Instr("POP_TOP"), codegen.load_const(UNBOUND), codegen.store_fast(into), done,
    ]


def _call_exit_resume(
    code: types.CodeType,
    resume: ResumeFunction,
    plan: BreakPlan,
    sure: Sequence[str],
    maybe: Sequence[str],
) -> Items:
    """Leave the restored stack (exit the re-entered with blocks) and return the resume
    function's result for the locals as the region left them."""
    out: Items = []
    for slot in reversed(plan.stack):
        if isinstance(slot, Null):
            out.extend(pop_null())
        else:
            out.extend(exit_with())
    for name in maybe:
        out.extend(_load_maybe_unbound(code, name, f"___strata_unbound_{name}"))
    args: list[Items] = []
    for name in resume_locals(code, sure, maybe):
        if name in maybe:
            args.append([codegen.load_fast(f"___strata_unbound_{name}")])
        elif name in code.co_cellvars:
            args.append([codegen.load_deref(name)])
        else:
            args.append([codegen.load_fast(name)])
    if resume.has_closure:
        func = codegen.make_function(resume.code, closure=code.co_freevars)
        out.extend(codegen.call_function(func, args))
    else:
        out.extend(codegen.call_global(resume.name, args))
    out.append(codegen.return_value())
    return out


def resume_locals(code: types.CodeType, sure: Sequence[str], maybe: Sequence[str]) -> list[str]:
    """The resume function's local parameters, in the original's variable order: its first
    argument stays first (zero-argument ``super()`` reads it)."""
    order = {name: k for k, name in enumerate((*code.co_varnames, *code.co_cellvars))}
    return sorted({*sure, *maybe}, key=lambda name: (order.get(name, len(order)), name))


def region_residual(builder: ResumeBuilder, plan: BreakPlan, region: Region) -> BreakCode:
    """The broken frame's transformed code: ``plan``'s helper, then ``region`` as bytecode,
    then a resume function at each exit. ``plan.offset`` is the region's start."""
    code = plan.code
    if plan.offset != region.start:
        raise ResumeError("the plan does not start at the region")
    if not all(isinstance(s, Reenter | Null) for s in plan.stack):
        raise ResumeError("values on the stack at the region's start")
    if len(plan.stack) != region.base:
        raise ResumeError(f"the stack at the region's start holds {len(plan.stack)} values, "
                          f"the bytecode {region.base}")
    flow = flow_of(code)
    local_slots = dict(plan.live_locals)
    names = frozenset(code.co_varnames) | frozenset(code.co_cellvars)
    bound_at = _bound_at_exits(flow, region, frozenset(local_slots) & names, names)

    body: Items = []
    if plan.helper_code is None:
        raise ResumeError("a region needs an inlined helper")
    body.extend(inline_helper(code, plan.helper_code))
    handler, cleanups = restore_stack(body, plan.stack, local_slots)
    setup: Items = []
    for name, slot in plan.live_locals:
        if name not in names:
            continue
        setup.extend(load_slot(slot))
        setup.append(codegen.store_deref(name) if name in code.co_cellvars
                     else codegen.store_fast(name))
    nargs = code.co_argcount + code.co_kwonlyargcount
    nargs += bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)
    for name in code.co_varnames[:nargs]:
        if name not in local_slots and name not in code.co_cellvars:
            setup.append(Instr("DELETE_FAST", name))  # deleted before the region, as in eager
    body.extend(attrs.evolve(i, handler=handler) if isinstance(i, Instr) else i for i in setup)

    order = sorted(_index_of(flow, o) for o in region.members)
    labels = {i: Label(f"r{i}") for i in order}
    # A handler of a with block around the region becomes the re-entered block's (same depth).
    outer = _outer_handlers(flow, _index_of(flow, region.start))
    mine = {c.depth + 1: ExceptHandler(c.handler, c.depth + 1, lasti=True) for c in cleanups}

    def remap(h: ExceptHandler | None) -> ExceptHandler | None:
        if h is None:
            return None
        target = flow.handler_index(h)
        if target in outer:
            found = mine.get(h.depth)
            if found is None or not h.lasti:
                raise ResumeError(f"no re-entered with block at depth {h.depth}")
            return found
        return ExceptHandler(labels[target], h.depth, h.lasti)
    exit_labels = {o: Label(f"exit_{o}") for o in region.exits}

    def label_for(i: int) -> Label:
        if i in labels:
            return labels[i]
        offset = flow.instrs[i].offset
        assert offset is not None
        return exit_labels[offset]

    targeted = {flow.handler_index(ins.handler) for ins in map(flow.instrs.__getitem__, order)
                if ins.handler is not None}
    targeted |= {flow.label_at[ins.arg] for ins in map(flow.instrs.__getitem__, order)
                 if isinstance(ins.arg, Label)}
    targeted |= {i + 1 for k, i in enumerate(order) if k + 1 == len(order) or order[k + 1] != i + 1}
    for k, i in enumerate(order):
        ins = flow.instrs[i]
        if i in targeted:  # a label only where needed: PRECALL must be followed by its CALL
            body.append(labels[i])
        arg = ins.arg
        if isinstance(arg, Label):
            arg = label_for(flow.label_at[arg])
        body.append(attrs.evolve(ins, arg=arg, handler=remap(ins.handler), offset=None))
        falls = ins.opname not in NO_FALLTHROUGH and i + 1 < len(flow.instrs)
        if falls and (k + 1 == len(order) or order[k + 1] != i + 1):
            body.append(codegen.jump(label_for(i + 1)))

    resumes: list[ResumeFunction] = []
    tags = [slot_tag(s) for s in plan.stack]
    for offset in region.exits:
        sure, maybe = bound_at.get(offset, (frozenset(), frozenset()))
        resume = builder.resume_at(
            code, offset, tags, resume_locals(code, sorted(sure), sorted(maybe)),
            maybe_unbound=tuple(sorted(maybe)),
        )
        resumes.append(resume)
        body.append(exit_labels[offset])
        body.extend(_call_exit_resume(code, resume, plan, sorted(sure), sorted(maybe)))
    body.extend(with_cleanups(cleanups))
    position = flow.instrs[_index_of(flow, region.start)].position
    head = codegen.prologue(Signature(freevars=code.co_freevars, cellvars=code.co_cellvars))
    residual = assemble([*head, *with_position(body, position)], template=code)
    return BreakCode(residual, tuple(resumes))


def _index_of(flow: CodeFlow, offset: int) -> int:
    return flow.index[offset]
