"""The instruction records: Instr, Label, Position and ExceptHandler."""

from __future__ import annotations

import dis
import itertools
from collections.abc import Iterable, Sequence

import attrs

from symbolic_vm.bytecode import opcodes
from symbolic_vm.bytecode.errors import AssemblyError
from symbolic_vm.bytecode.opcodes import ArgKind

__all__ = [
    "ExceptHandler",
    "FreeVar",
    "Instr",
    "Label",
    "NO_POSITION",
    "Position",
    "format_listing",
    "instructions_only",
    "label_indices",
]

_label_ids = itertools.count()


@attrs.frozen(eq=False, repr=False)
class Label:
    """A jump target: placed in an instruction list before the instruction it names.

    Labels compare by identity. ``name`` only helps when printing listings.
    """

    name: str = ""
    uid: int = attrs.field(factory=lambda: next(_label_ids))

    def __repr__(self) -> str:
        return f"Label({self.name or self.uid})"


@attrs.frozen
class Position:
    """A PEP 657 source location; any field may be None (no line, or no column information)."""

    lineno: int | None = None
    end_lineno: int | None = None
    col_offset: int | None = None
    end_col_offset: int | None = None


NO_POSITION = Position()


@attrs.frozen
class ExceptHandler:
    """The exception-table entry covering an instruction.

    On an exception the value stack is popped to ``depth`` items, the offset of the raising
    instruction is pushed when ``lasti`` is true, then the exception, and control goes to
    ``target``.
    """

    target: Label
    depth: int
    lasti: bool = False


@attrs.frozen
class FreeVar:
    """The free-variable slot of ``name``, where the code object also has a cell of that name.

    Only class bodies do this (``__class__`` both captured from outside and provided to methods);
    everywhere else a plain ``str`` names the variable unambiguously and is what ``decode`` gives.
    """

    name: str


_INT_KINDS = (ArgKind.INT,)
_STR_KINDS = (ArgKind.NAME, ArgKind.COMPARE)
_VAR_KINDS = (ArgKind.LOCAL, ArgKind.FREE)


_EXPECTED = {
    ArgKind.NONE: "no argument (None)",
    ArgKind.INT: "an int argument >= 0",
    ArgKind.CONST: "a constant",
    ArgKind.NAME: "a name (str)",
    ArgKind.LOCAL: "a local variable name (str)",
    ArgKind.LOCAL_PAIR: "a pair of local variable names",
    ArgKind.FREE: "a cell or free variable name (str)",
    ArgKind.COMPARE: f"a comparison operator, one of {dis.cmp_op}",
    ArgKind.JUMP: "a jump target (a Label)",
}


def _check_arg(instance: Instr, _attr: attrs.Attribute[object], value: object) -> None:
    name = instance.opname
    if not (opcodes.is_real_opname(name) or name in opcodes.VIRTUAL_OPNAMES):
        raise AssemblyError(f"unknown instruction {name!r} on this Python")
    kind = opcodes.arg_kind(name)
    ok: bool
    if kind is ArgKind.NONE:
        ok = value is None
    elif kind in _INT_KINDS:
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    elif kind in _STR_KINDS:
        ok = isinstance(value, str)
        if ok and kind is ArgKind.COMPARE:
            ok = value in dis.cmp_op
    elif kind in _VAR_KINDS:
        ok = isinstance(value, str | FreeVar)
    elif kind is ArgKind.LOCAL_PAIR:
        ok = (
            isinstance(value, tuple)
            and len(value) == 2
            and all(isinstance(v, str | FreeVar) for v in value)
        )
    elif kind is ArgKind.JUMP:
        ok = isinstance(value, Label)
    else:  # CONST: any object
        ok = True
    if not ok:
        raise AssemblyError(f"{name} takes {_EXPECTED[kind]}, got {value!r}")


def _default_flags(opname: str, arg: object) -> int:
    if opname == "COMPARE_OP" and isinstance(arg, str):
        return opcodes.compare_default_flags(arg)
    return 0


@attrs.frozen(repr=False)
class Instr:
    """One instruction with its argument resolved.

    ``arg`` is, by the opcode's :class:`ArgKind`: the constant itself (LOAD_CONST, RETURN_CONST,
    KW_NAMES), a name (co_names, local, cell or free variable; :class:`FreeVar` in the one
    ambiguous case), a comparison operator string
    (COMPARE_OP), a :class:`Label` (jumps), a pair of local names (3.13 LOAD_FAST_LOAD_FAST...),
    a plain int, or None for argument-less opcodes. Use ``attrs.evolve`` to derive a changed copy.

    ``flags`` holds the low oparg bits some opcodes pack next to their argument: LOAD_GLOBAL's
    "push NULL" bit, 3.12+ LOAD_ATTR's "method" bit, LOAD_SUPER_ATTR's two bits, COMPARE_OP's
    specialisation mask (3.12+; bit 16 on 3.13 means "convert to bool"). None means the compiler's
    default (0, or COMPARE_OP's mask for the operator); flags equal to the default are stored as
    None.

    ``offset`` is the byte offset in the decoded code object (None for new instructions); it is
    informational and ignored by equality.
    """

    opname: str
    arg: object = attrs.field(default=None, validator=_check_arg)
    flags: int | None = None
    position: Position = NO_POSITION
    handler: ExceptHandler | None = None
    offset: int | None = attrs.field(default=None, eq=False)

    def __attrs_post_init__(self) -> None:
        # One spelling per meaning, so that equality works: flags equal to the default become None.
        if self.flags is not None and self.flags == _default_flags(self.opname, self.arg):
            object.__setattr__(self, "flags", None)

    @property
    def opcode(self) -> int:
        """This version's opcode number, or -1 for a virtual name the assembler rewrites."""
        return opcodes.opcode_of(self.opname) if opcodes.is_real_opname(self.opname) else -1

    @property
    def lineno(self) -> int | None:
        """The source line, or None."""
        return self.position.lineno

    @property
    def is_jump(self) -> bool:
        """True when ``arg`` is a jump target."""
        return opcodes.is_jump(self.opname)

    def __repr__(self) -> str:
        parts = [repr(self.opname)]
        if self.arg is not None:
            parts.append(repr(self.arg))
        if self.flags:
            parts.append(f"flags={self.flags}")
        if self.position.lineno is not None:
            parts.append(f"line={self.position.lineno}")
        if self.handler is not None:
            h = self.handler
            parts.append(f"handler=({h.target!r}, {h.depth}{', lasti' if h.lasti else ''})")
        return f"Instr({', '.join(parts)})"


def label_indices(items: Sequence[Instr | Label]) -> dict[Label, int]:
    """Map each label to the index, in ``instructions_only(items)``, of the next instruction."""
    out: dict[Label, int] = {}
    n = 0
    for item in items:
        if isinstance(item, Label):
            out[item] = n
        else:
            n += 1
    return out


def instructions_only(items: Iterable[Instr | Label]) -> list[Instr]:
    """The instructions of a decoded listing, labels dropped (use with :func:`label_indices`)."""
    return [item for item in items if isinstance(item, Instr)]


def format_listing(items: Sequence[Instr | Label]) -> str:
    """A readable listing: labels as ``L0:``, jumps and handlers naming them, one item a line."""
    names: dict[Label, str] = {}
    for item in items:
        if isinstance(item, Label):
            names[item] = item.name or f"L{len(names)}"
    lines: list[str] = []
    for item in items:
        if isinstance(item, Label):
            lines.append(f"{names[item]}:")
            continue
        text = f"    {item.opname}"
        if isinstance(item.arg, Label):
            text += f" {names.get(item.arg, repr(item.arg))}"
        elif item.arg is not None:
            text += f" {item.arg!r}"
        if item.flags:
            text += f" [flags={item.flags}]"
        if item.handler is not None:
            h = item.handler
            target = names.get(h.target, repr(h.target))
            text += f"  ; except -> {target} depth={h.depth}{' lasti' if h.lasti else ''}"
        if item.position.lineno is not None:
            text += f"  ; line {item.position.lineno}"
        lines.append(text)
    return "\n".join(lines)
