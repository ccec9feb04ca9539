"""decode(code): a code object's bytecode as Instr records, with Labels for jump targets."""

from __future__ import annotations

import dis
import types

from symbolic_vm.bytecode import opcodes
from symbolic_vm.bytecode.errors import DecodeError
from symbolic_vm.bytecode.instr import ExceptHandler, FreeVar, Instr, Label, Position
from symbolic_vm.bytecode.opcodes import ArgKind
from symbolic_vm.bytecode.tables import decode_exception_table

__all__ = ["decode", "localsplus_names"]

_EXTENDED_ARG = opcodes.opcode_of("EXTENDED_ARG")
_OPNAME = dis.opname


def localsplus_names(code: types.CodeType) -> tuple[str, ...]:
    """The names of a code object's fast locals in slot order: locals, then cells, then free vars.

    A cell variable that is also an argument shares the argument's slot (CPython merges them).
    """
    varnames = code.co_varnames
    cells = tuple(c for c in code.co_cellvars if c not in varnames)
    return varnames + cells + code.co_freevars


class _RawInstr:
    """One instruction as read from co_code, EXTENDED_ARG folded in."""

    __slots__ = ("end", "name", "offset", "oparg", "start")

    def __init__(self, start: int, offset: int, name: str, oparg: int, end: int) -> None:
        self.start = start  # first byte, including EXTENDED_ARG prefixes
        self.offset = offset  # byte offset of the opcode itself
        self.name = name
        self.oparg = oparg
        self.end = end  # byte offset after the inline caches


def _scan(code: types.CodeType) -> list[_RawInstr]:
    raw = code.co_code
    out: list[_RawInstr] = []
    i = 0
    ext = 0
    start = 0
    n = len(raw)
    while i < n:
        op = raw[i]
        oparg = raw[i + 1] | ext
        if op == _EXTENDED_ARG:
            ext = oparg << 8
            i += 2
            continue
        name = _OPNAME[op]
        if not opcodes.is_real_opname(name):
            raise DecodeError(f"{code.co_name}: unknown opcode {op} at byte {i}")
        end = i + 2 + 2 * opcodes.cache_entries(name)
        out.append(_RawInstr(start, i, name, oparg, end))
        ext = 0
        i = end
        start = i
    return out


def _jump_target(r: _RawInstr) -> int:
    if opcodes.is_backward_jump(r.name):
        return r.end - 2 * r.oparg
    return r.end + 2 * r.oparg


def decode(code: types.CodeType) -> list[Instr | Label]:
    """Decode ``code`` (3.11+) into instructions, with a :class:`Label` before each jump target.

    EXTENDED_ARG prefixes are folded into the instruction they extend, inline CACHE units are
    dropped (the assembler re-emits them), jump opargs become Labels, name/constant/variable indices
    become the names and constants themselves (packed flag bits go to ``Instr.flags``), and the
    exception table becomes each instruction's ``handler``. ``assemble(decode(c), template=c)``
    rebuilds ``c``.
    """
    raws = _scan(code)
    by_unit: dict[int, int] = {}  # byte offset of any unit of an instruction -> its index
    for idx, r in enumerate(raws):
        for off in range(r.start, r.end, 2):
            by_unit[off] = idx

    labels: dict[int, Label] = {}  # instruction index -> label

    def label_at(byte_offset: int) -> Label:
        try:
            idx = by_unit[byte_offset]
        except KeyError:
            raise DecodeError(
                f"{code.co_name}: jump or handler target {byte_offset} is outside the code"
            ) from None
        lab = labels.get(idx)
        if lab is None:
            lab = labels[idx] = Label()
        return lab

    handlers: list[ExceptHandler | None] = [None] * len(raws)
    for entry in decode_exception_table(code.co_exceptiontable):
        handler = ExceptHandler(label_at(entry.target * 2), entry.depth, entry.lasti)
        for off in range(entry.start * 2, entry.end * 2, 2):
            covered = by_unit.get(off)
            if covered is not None:
                handlers[covered] = handler

    positions = list(code.co_positions())
    localsplus = localsplus_names(code)
    first_free = len(localsplus) - len(code.co_freevars)
    # A variable is named by a plain string unless a class body has the same name as a cell too.
    variables: list[str | FreeVar] = [
        FreeVar(name) if k >= first_free and name in localsplus[:first_free] else name
        for k, name in enumerate(localsplus)
    ]
    consts = code.co_consts
    names = code.co_names
    instrs: list[Instr] = []
    for idx, r in enumerate(raws):
        kind = opcodes.arg_kind(r.name)
        flags: int = 0
        arg: object
        if kind is ArgKind.NONE:
            arg = None
        elif kind is ArgKind.INT:
            arg = r.oparg
        elif kind is ArgKind.CONST:
            arg = consts[r.oparg]
        elif kind is ArgKind.NAME:
            shift = opcodes.NAME_SHIFTS.get(r.name, 0)
            arg = names[r.oparg >> shift]
            flags = r.oparg & ((1 << shift) - 1)
        elif kind is ArgKind.LOCAL or kind is ArgKind.FREE:
            arg = variables[r.oparg]
        elif kind is ArgKind.LOCAL_PAIR:
            arg = (variables[r.oparg >> 4], variables[r.oparg & 15])
        elif kind is ArgKind.COMPARE:
            arg = dis.cmp_op[r.oparg >> opcodes.COMPARE_SHIFT]
            flags = r.oparg & ((1 << opcodes.COMPARE_SHIFT) - 1)
        else:  # JUMP
            arg = label_at(_jump_target(r))
        line, end_line, col, end_col = positions[r.offset // 2]  # the opcode's unit, not a prefix
        instrs.append(
            Instr(
                r.name,
                arg,
                flags,
                Position(line, end_line, col, end_col),
                handlers[idx],
                offset=r.offset,
            )
        )

    out: list[Instr | Label] = []
    for idx, ins in enumerate(instrs):
        lab = labels.get(idx)
        if lab is not None:
            out.append(lab)
        out.append(ins)
    return out
