"""assemble(instructions, template=...): build a code object from :class:`Instr` records."""

from __future__ import annotations

import dis
import struct
import types
from collections.abc import Callable, Iterable, Sequence
from typing import TypedDict

import attrs
from typing_extensions import Unpack

from symbolic_vm.bytecode import opcodes
from symbolic_vm.bytecode.errors import AssemblyError
from symbolic_vm.bytecode.instr import ExceptHandler, FreeVar, Instr, Label, Position
from symbolic_vm.bytecode.opcodes import ArgKind
from symbolic_vm.bytecode.tables import (
    ExceptionTableEntry,
    encode_exception_table,
    encode_locations,
)

__all__ = ["CodeOverrides", "assemble"]

_EXTENDED_ARG = opcodes.opcode_of("EXTENDED_ARG")
_MAX_ARG = (1 << 32) - 1


class CodeOverrides(TypedDict, total=False):
    """Code-object fields ``assemble`` takes from its keyword arguments instead of the template.

    ``co_varnames``/``co_cellvars``/``co_freevars``/``co_consts``/``co_names`` are the *starting*
    tables: names and constants the instructions use and the tables lack are appended.
    ``co_stacksize`` replaces the computed depth.
    """

    co_argcount: int
    co_posonlyargcount: int
    co_kwonlyargcount: int
    co_flags: int
    co_name: str
    co_qualname: str
    co_filename: str
    co_firstlineno: int
    co_varnames: tuple[str, ...]
    co_cellvars: tuple[str, ...]
    co_freevars: tuple[str, ...]
    co_consts: tuple[object, ...]
    co_names: tuple[str, ...]
    co_stacksize: int


def _const_key(value: object) -> object:
    # Constants are shared by value and type (1, 1.0 and True stay apart; -0.0 and 0.0 too), the way
    # the compiler folds them; objects without value semantics (code objects...) by identity.
    t = type(value)
    if t is float:
        return (t, struct.pack("<d", value))
    if t is complex:
        assert isinstance(value, complex)
        return (t, struct.pack("<dd", value.real, value.imag))
    if t is tuple:
        assert isinstance(value, tuple)
        return (t, tuple(_const_key(v) for v in value))
    if t is frozenset:
        assert isinstance(value, frozenset)
        return (t, frozenset(_const_key(v) for v in value))
    if t in (int, bool, str, bytes, type(None), type(Ellipsis)):
        return (t, value)
    return (t, id(value))


def _ext_count(arg: int) -> int:
    if arg < 1 << 8:
        return 0
    if arg < 1 << 16:
        return 1
    if arg < 1 << 24:
        return 2
    return 3


class _Slot:
    """An instruction being assembled: real opname, final oparg, size in code units."""

    __slots__ = ("caches", "ext", "handler", "name", "op", "oparg", "position", "target")

    def __init__(self, ins: Instr, name: str) -> None:
        self.name = name
        self.op = opcodes.opcode_of(name)
        self.oparg = 0
        self.ext = 0
        self.caches = opcodes.cache_entries(name)
        self.target = -1  # instruction index, for jumps
        self.position: Position = ins.position
        self.handler: ExceptHandler | None = ins.handler

    @property
    def size(self) -> int:
        return 1 + self.ext + self.caches


def _where(i: int, ins: Instr) -> str:
    return f"instruction {i} ({ins!r})"


def _choose_jumps(items: Sequence[Instr | Label]) -> list[Instr | Label]:
    """Give every jump its real, direction-correct name; expand what this version cannot encode."""
    index: dict[Label, int] = {}
    n = 0
    for item in items:
        if isinstance(item, Label):
            index[item] = n
        else:
            n += 1
    out: list[Instr | Label] = []
    i = 0
    for item in items:
        if isinstance(item, Label):
            out.append(item)
            continue
        ins = item
        if ins.opname == "LOAD_METHOD" and not opcodes.is_real_opname("LOAD_METHOD"):
            ins = attrs.evolve(ins, opname="LOAD_ATTR", flags=(ins.flags or 0) | 1)
        elif ins.is_jump:
            assert isinstance(ins.arg, Label)
            if ins.arg not in index:
                raise AssemblyError(f"{_where(i, ins)}: jump to a label not in the list")
            backward = index[ins.arg] <= i
            real = (
                opcodes.backward_variant(ins.opname)
                if backward
                else opcodes.forward_variant(ins.opname)
            )
            if real is None and backward and opcodes.negated_conditional(ins.opname):
                # 3.12+ has no backward conditional jump: jump over an unconditional backward jump
                # on the opposite condition.
                skip = Label("skip")
                negated = opcodes.negated_conditional(ins.opname)
                assert negated is not None
                out.append(attrs.evolve(ins, opname=negated, arg=skip))
                out.append(attrs.evolve(ins, opname="JUMP_BACKWARD", offset=None))
                out.append(skip)
                i += 1
                continue
            if real is None:
                way = "backward" if backward else "forward"
                raise AssemblyError(f"{_where(i, ins)}: {ins.opname} cannot jump {way}")
            if real != ins.opname:
                ins = attrs.evolve(ins, opname=real)
        out.append(ins)
        i += 1
    return out


def _place_labels(items: Sequence[Instr | Label]) -> tuple[list[Instr], dict[Label, int]]:
    """The instructions, and each label's index among them."""
    instrs: list[Instr] = []
    label_index: dict[Label, int] = {}
    for item in items:
        if isinstance(item, Label):
            if item in label_index:
                raise AssemblyError(f"{item!r} is placed twice in the instruction list")
            label_index[item] = len(instrs)
        else:
            instrs.append(item)
    if not instrs:
        raise AssemblyError("cannot assemble an empty instruction list")
    return instrs, label_index


def _pair_too_wide(ins: Instr, slot_of: Callable[[object], int]) -> bool:
    if opcodes.arg_kind(ins.opname) is not ArgKind.LOCAL_PAIR:
        return False
    assert isinstance(ins.arg, tuple)
    return any(slot_of(v) > 15 for v in ins.arg)


def _split_wide_pairs(
    items: Sequence[Instr | Label], slot_of: Callable[[object], int]
) -> list[Instr | Label]:
    """Each pair instruction with a local past slot 15 as its two plain instructions (same
    position and handler): its oparg has 4 bits per local."""
    out: list[Instr | Label] = []
    for item in items:
        if isinstance(item, Label) or not _pair_too_wide(item, slot_of):
            out.append(item)
            continue
        assert isinstance(item.arg, tuple)
        for opname, name in zip(opcodes.PAIR_PARTS[item.opname], item.arg, strict=True):
            out.append(attrs.evolve(item, opname=opname, arg=name, flags=None, offset=None))
    return out


def assemble(
    instructions: Iterable[Instr | Label],
    *,
    template: types.CodeType,
    **overrides: Unpack[CodeOverrides],
) -> types.CodeType:
    """Assemble instructions (and labels) into a code object.

    Jump offsets and directions, EXTENDED_ARG prefixes (by fixed point), inline caches, the
    constant, name and fast-local tables, the exception table, the locations table and
    ``co_stacksize`` are all computed here. Everything else (argument counts, flags, names,
    filename, first line) comes from ``template`` unless given in ``overrides``; the tables start
    from the template's, so that decoding and reassembling a code object gives it back unchanged.
    """
    items = _choose_jumps(list(instructions))
    instrs, label_index = _place_labels(items)

    def target_of(i: int, label: Label) -> int:
        t = label_index.get(label)
        if t is None or t >= len(instrs):
            raise AssemblyError(
                f"{_where(i, instrs[i])}: label {label!r} is not placed before an instruction"
            )
        return t

    # Tables, seeded from the template (or overrides) and extended in order of first use.
    consts = list(overrides.get("co_consts", template.co_consts))
    const_index: dict[object, int] = {}
    for k, c in enumerate(consts):
        const_index.setdefault(_const_key(c), k)
    names = list(overrides.get("co_names", template.co_names))
    name_index: dict[str, int] = {}
    for k, nm in enumerate(names):
        name_index.setdefault(nm, k)
    varnames = list(overrides.get("co_varnames", template.co_varnames))
    cellvars = list(overrides.get("co_cellvars", template.co_cellvars))
    freevars = list(overrides.get("co_freevars", template.co_freevars))
    known_vars = set(varnames) | set(cellvars) | set(freevars)
    for i, ins in enumerate(instrs):
        kind = opcodes.arg_kind(ins.opname)
        if kind is ArgKind.LOCAL or kind is ArgKind.LOCAL_PAIR or kind is ArgKind.FREE:
            vs = ins.arg if kind is ArgKind.LOCAL_PAIR else (ins.arg,)
            assert isinstance(vs, tuple)
            for v in vs:
                if isinstance(v, FreeVar):
                    if v.name not in freevars:
                        raise AssemblyError(f"{_where(i, ins)}: {v.name!r} is not a free variable")
                elif kind is ArgKind.FREE:
                    # A cell may share an argument's slot; a new one is added to the cells.
                    if v not in cellvars and v not in freevars:
                        cellvars.append(v)
                        known_vars.add(v)
                elif v not in known_vars:
                    varnames.append(v)
                    known_vars.add(v)
    localsplus = varnames + [c for c in cellvars if c not in varnames] + freevars
    local_index: dict[str, int] = {}
    for k, nm in enumerate(localsplus):
        local_index.setdefault(nm, k)
    free_base = len(localsplus) - len(freevars)

    def slot_of(v: object) -> int:
        if isinstance(v, FreeVar):
            return free_base + freevars.index(v.name)
        assert isinstance(v, str)
        return local_index[v]

    # A 3.13 pair whose locals moved past slot 15 (new locals before them) becomes two
    # instructions; the tables do not change, so this needs no second pass over them.
    if any(_pair_too_wide(ins, slot_of) for ins in instrs):
        items = _split_wide_pairs(items, slot_of)
        instrs, label_index = _place_labels(items)

    slots: list[_Slot] = []
    for i, ins in enumerate(instrs):
        slot = _Slot(ins, ins.opname)
        kind = opcodes.arg_kind(ins.opname)
        flags: int = ins.flags or 0
        arg = ins.arg
        oparg: int
        if kind is ArgKind.NONE:
            oparg = 0
        elif kind is ArgKind.INT:
            assert isinstance(arg, int)
            oparg = arg
        elif kind is ArgKind.CONST:
            key = _const_key(arg)
            if key not in const_index:
                const_index[key] = len(consts)
                consts.append(arg)
            oparg = const_index[key]
        elif kind is ArgKind.NAME:
            assert isinstance(arg, str)
            shift = opcodes.NAME_SHIFTS.get(ins.opname, 0)
            if flags >> shift:
                raise AssemblyError(f"{_where(i, ins)}: flags must fit in {shift} bit(s)")
            if arg not in name_index:
                name_index[arg] = len(names)
                names.append(arg)
            oparg = name_index[arg] << shift | flags
            flags = 0
        elif kind is ArgKind.LOCAL or kind is ArgKind.FREE:
            oparg = slot_of(arg)
        elif kind is ArgKind.LOCAL_PAIR:
            assert isinstance(arg, tuple)
            a, b = (slot_of(v) for v in arg)
            assert a <= 15 and b <= 15  # wider pairs were split above
            oparg = a << 4 | b
        elif kind is ArgKind.COMPARE:
            assert isinstance(arg, str)
            flags = opcodes.compare_default_flags(arg) if ins.flags is None else ins.flags
            if flags >> opcodes.COMPARE_SHIFT:
                bits = opcodes.COMPARE_SHIFT
                raise AssemblyError(f"{_where(i, ins)}: flags must fit in {bits} bits")
            oparg = dis.cmp_op.index(arg) << opcodes.COMPARE_SHIFT | flags
            flags = 0
        else:  # JUMP: resolved below
            assert isinstance(arg, Label)
            slot.target = target_of(i, arg)
            oparg = 0
        if flags:
            raise AssemblyError(f"{_where(i, ins)}: {ins.opname} takes no flags")
        if oparg > _MAX_ARG:
            raise AssemblyError(f"{_where(i, ins)}: argument {oparg} does not fit in 32 bits")
        slot.oparg = oparg
        slot.ext = _ext_count(oparg)
        if ins.handler is not None:
            target_of(i, ins.handler.target)
        slots.append(slot)

    _check_adjacency(items, instrs, label_index)
    offsets = _resolve_jumps(slots, instrs)
    code_bytes = _emit(slots)
    exception_table = _exception_table(slots, offsets, label_index)
    firstlineno = overrides.get("co_firstlineno", template.co_firstlineno)
    linetable = encode_locations(
        [(s.position, s.size) for s in slots], firstlineno, merge=opcodes.PY_VERSION >= (3, 12)
    )
    if "co_stacksize" in overrides:
        stacksize = overrides["co_stacksize"]
    else:
        stacksize = _stacksize(slots, offsets, label_index)

    fields: dict[str, object] = {k: v for k, v in overrides.items()}
    fields.update(
        co_code=code_bytes,
        co_consts=tuple(consts),
        co_names=tuple(names),
        co_varnames=tuple(varnames),
        co_cellvars=tuple(cellvars),
        co_freevars=tuple(freevars),
        co_nlocals=len(varnames),
        co_stacksize=stacksize,
        co_linetable=linetable,
        co_exceptiontable=exception_table,
    )
    return template.replace(**fields)  # type: ignore[arg-type]


def _check_adjacency(
    items: Sequence[Instr | Label], instrs: Sequence[Instr], label_index: dict[Label, int]
) -> None:
    """Refuse layouts the interpreter would misrun (it assumes some instructions adjacent)."""
    for k, item in enumerate(items):
        if not isinstance(item, Instr):
            continue
        follower = opcodes.MUST_BE_FOLLOWED_BY.get(item.opname)
        if follower is None:
            continue
        nxt = items[k + 1] if k + 1 < len(items) else None
        if not (isinstance(nxt, Instr) and nxt.opname == follower):
            raise AssemblyError(
                f"{item!r} must be directly followed by {follower} (no label or other "
                f"instruction between), found {nxt!r}"
            )
    if opcodes.FOR_ITER_TARGET is not None:
        for i, ins in enumerate(instrs):
            if ins.opname == "FOR_ITER":
                assert isinstance(ins.arg, Label)
                t = label_index.get(ins.arg)
                if (
                    t is not None
                    and t < len(instrs)
                    and instrs[t].opname != opcodes.FOR_ITER_TARGET
                ):
                    raise AssemblyError(
                        f"{_where(i, ins)}: FOR_ITER must jump to an {opcodes.FOR_ITER_TARGET} "
                        f"(it skips the instruction at its target), found {instrs[t]!r}"
                    )


def _resolve_jumps(slots: list[_Slot], instrs: Sequence[Instr]) -> list[int]:
    """Set jump opargs and EXTENDED_ARG counts to a fixed point; return offsets in code units.

    Where a jump sits right at the 255/256 boundary two layouts can both be consistent; CPython
    picks one by where its iteration starts. 3.11/3.12 start from jumps without prefixes and only
    grow; 3.13 starts from each jump's target *index* as its oparg and lets sizes move both ways.
    Both are mirrored (3.13's only for a bounded number of rounds, then growing only, so the loop
    always ends), which keeps reassembled code byte-identical.
    """
    jumps = [i for i, s in enumerate(slots) if s.target >= 0]
    two_way_rounds = 0
    if opcodes.PY_VERSION >= (3, 13):
        two_way_rounds = 16
        for i in jumps:
            slots[i].ext = _ext_count(slots[i].target)
    rounds = 0
    while True:
        offsets = [0] * (len(slots) + 1)
        for i, s in enumerate(slots):
            offsets[i + 1] = offsets[i] + s.size
        changed = False
        for i in jumps:
            s = slots[i]
            after = offsets[i + 1]
            target = offsets[s.target]
            delta = after - target if opcodes.is_backward_jump(s.name) else target - after
            if delta < 0:
                raise AssemblyError(f"{_where(i, instrs[i])}: jump goes the wrong way")
            s.oparg = delta
            need = _ext_count(delta)
            if need > s.ext or (need < s.ext and rounds < two_way_rounds):
                s.ext = need
                changed = True
        if not changed:
            return offsets
        rounds += 1


def _emit(slots: Sequence[_Slot]) -> bytes:
    out = bytearray()
    for s in slots:
        for k in range(s.ext, 0, -1):
            out.append(_EXTENDED_ARG)
            out.append((s.oparg >> (8 * k)) & 0xFF)
        out.append(s.op)
        out.append(s.oparg & 0xFF)
        out.extend(b"\x00\x00" * s.caches)
    return bytes(out)


def _exception_table(
    slots: Sequence[_Slot], offsets: Sequence[int], label_index: dict[Label, int]
) -> bytes:
    entries: list[ExceptionTableEntry] = []
    current: ExceptHandler | None = None
    start = 0
    for i in range(len(slots) + 1):
        handler = slots[i].handler if i < len(slots) else None
        if handler != current:
            if current is not None:
                entries.append(
                    ExceptionTableEntry(
                        start,
                        offsets[i],
                        offsets[label_index[current.target]],
                        current.depth,
                        current.lasti,
                    )
                )
            current = handler
            start = offsets[i]
    return encode_exception_table(entries)


_RETURN_GENERATOR = opcodes.opcode_of("RETURN_GENERATOR")


def _effect(op: int, oparg: int | None) -> int:
    if op == _RETURN_GENERATOR:
        # The generator's first resumption finds the sent value on the stack (the POP_TOP after
        # RETURN_GENERATOR drops it); 3.11 and 3.12 report 0 here because their compilers add the
        # prefix after computing the depth.
        return 1
    return dis.stack_effect(op, oparg)


def _stacksize(
    slots: Sequence[_Slot], offsets: Sequence[int], label_index: dict[Label, int]
) -> int:
    """Maximum stack depth over every reachable path, by ``dis.stack_effect``.

    A handler is entered at its table depth, plus one for ``lasti``, plus one for the exception.
    """
    n = len(slots)
    depth_at: list[int] = [-1] * n
    max_depth = 0
    work: list[int] = []

    def push(i: int, depth: int) -> None:
        nonlocal max_depth
        if depth < 0:
            raise AssemblyError(f"instruction {i}: stack underflow (depth {depth})")
        max_depth = max(max_depth, depth)
        if i < n and depth > depth_at[i]:
            depth_at[i] = depth
            work.append(i)

    push(0, 0)
    # Every handler named in the table is also analysed, even one only dead code can reach, and
    # so is a dead handler block (an unreached PUSH_EXC_INFO, entered with just the exception
    # above its cleanup depth): CPython's compiler sizes the stack before it drops dead code, and
    # a larger size is harmless.
    for s in slots:
        if s.handler is not None:
            h = s.handler
            push(label_index[h.target], h.depth + int(h.lasti) + 1)
    while True:
        _flow(slots, depth_at, work, push, label_index)
        for i, s in enumerate(slots):
            if depth_at[i] < 0 and s.name == "PUSH_EXC_INFO" and s.handler is not None:
                push(i, s.handler.depth)
        if not work:
            break
    return max_depth


def _flow(
    slots: Sequence[_Slot],
    depth_at: list[int],
    work: list[int],
    push: Callable[[int, int], None],
    label_index: dict[Label, int],
) -> None:
    while work:
        i = work.pop()
        depth = depth_at[i]
        s = slots[i]
        oparg = s.oparg if opcodes.has_arg(s.name) else None
        if s.handler is not None:
            h = s.handler
            push(label_index[h.target], h.depth + int(h.lasti) + 1)
        if s.target >= 0:
            push(s.target, depth + dis.stack_effect(s.op, oparg, jump=True))
            if s.name in opcodes.NO_FALLTHROUGH:
                continue
            push(i + 1, depth + dis.stack_effect(s.op, oparg, jump=False))
        else:
            after = depth + _effect(s.op, oparg)
            if s.name in opcodes.NO_FALLTHROUGH:
                push(len(slots), after)  # only counts towards the maximum
                continue
            push(i + 1, after)
