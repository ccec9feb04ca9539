"""What the running CPython's opcodes take as arguments, and how those arguments are packed.

Every version difference of the instruction *encoding* sits here, in tables computed once at import,
so the decoder and the assembler stay version-neutral.
"""

from __future__ import annotations

import dis
import enum
import opcode
import sys

from symbolic_vm.bytecode.errors import UnsupportedPythonError

__all__ = [
    "PY_VERSION",
    "ArgKind",
    "arg_kind",
    "backward_variant",
    "cache_entries",
    "compare_default_flags",
    "COMPARE_SHIFT",
    "forward_variant",
    "has_arg",
    "is_backward_jump",
    "is_jump",
    "is_real_opname",
    "FOR_ITER_TARGET",
    "MUST_BE_FOLLOWED_BY",
    "NAME_SHIFTS",
    "negated_conditional",
    "NO_FALLTHROUGH",
    "opcode_of",
    "PAIR_PARTS",
    "VIRTUAL_OPNAMES",
]

PY_VERSION: tuple[int, int] = (sys.version_info.major, sys.version_info.minor)
if PY_VERSION < (3, 11) or PY_VERSION > (3, 13):
    from symbolic_vm.versions import unsupported_python

    raise UnsupportedPythonError(unsupported_python(PY_VERSION) or "CPython 3.11 to 3.13 only")


class ArgKind(enum.Enum):
    """How an instruction's resolved ``arg`` relates to its integer oparg."""

    NONE = "none"  # no argument
    INT = "int"  # the oparg itself (counts, flags, BINARY_OP's operator index, ...)
    CONST = "const"  # a constant, stored in co_consts
    NAME = "name"  # a name in co_names (low bits of some opcodes carry flags)
    LOCAL = "local"  # a local variable name, a localsplus index
    LOCAL_PAIR = "local_pair"  # 3.13 superinstructions: two localsplus indices in 4 bits each
    FREE = "free"  # a cell or free variable name, a localsplus index
    COMPARE = "compare"  # a comparison operator from dis.cmp_op (low bits carry flags)
    JUMP = "jump"  # a Label


# Compiler pseudo-instructions never reach co_code; CPython >= 3.12 numbers them from 256.
_FIRST_PSEUDO = 256

_REAL_OPS: dict[str, int] = {
    name: op
    for name, op in dis.opmap.items()
    if op < _FIRST_PSEUDO and not name.startswith("INSTRUMENTED_") and name != "CACHE"
}

#: Names the assembler accepts although they are not real opcodes of this version: it picks the
#: real instruction(s) once jump directions are known (``JUMP``, directionless conditional jumps on
#: 3.11) or from the version (``LOAD_METHOD`` on 3.12+ becomes ``LOAD_ATTR`` with the method bit).
VIRTUAL_OPNAMES: frozenset[str] = frozenset(
    {"JUMP", "JUMP_NO_INTERRUPT"}
    | (
        {"POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE", "POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE"}
        if PY_VERSION == (3, 11)
        else {"LOAD_METHOD"}
    )
)


def is_real_opname(name: str) -> bool:
    """True when ``name`` is an opcode that can appear in this version's ``co_code``."""
    return name in _REAL_OPS


def opcode_of(name: str) -> int:
    """The opcode number of a real instruction name (``KeyError`` for unknown or virtual names)."""
    return _REAL_OPS[name]


def _cache_table() -> dict[str, int]:
    raw: object = opcode._inline_cache_entries  # type: ignore[attr-defined]
    if isinstance(raw, dict):  # 3.13: keyed by name
        return {str(k): int(v) for k, v in raw.items()}
    assert isinstance(raw, list)
    return {dis.opname[op]: int(n) for op, n in enumerate(raw) if n}


_CACHES: dict[str, int] = _cache_table()


def cache_entries(name: str) -> int:
    """How many inline CACHE code units follow instruction ``name``."""
    return _CACHES.get(name, 0)


# dis.hasarg only exists from 3.12 (where some low opcodes ignore their oparg).
_HAS_ARG: frozenset[int] = frozenset(
    getattr(dis, "hasarg", None) or (op for op in range(256) if op >= opcode.HAVE_ARGUMENT)
)


def has_arg(name: str) -> bool:
    """True when instruction ``name`` uses its oparg."""
    return _REAL_OPS[name] in _HAS_ARG


def _names(ops: list[int]) -> set[str]:
    return {dis.opname[op] for op in ops if op < _FIRST_PSEUDO and dis.opname[op] in _REAL_OPS}


_JUMPS = _names(dis.hasjrel) | _names(dis.hasjabs)
_KIND: dict[str, ArgKind] = {}
for _name in _REAL_OPS:
    if not has_arg(_name):
        _KIND[_name] = ArgKind.NONE
    else:
        _KIND[_name] = ArgKind.INT
for _name in _names(dis.hasconst):
    _KIND[_name] = ArgKind.CONST
for _name in _names(dis.hasname):
    _KIND[_name] = ArgKind.NAME
for _name in _names(dis.haslocal):
    _KIND[_name] = ArgKind.LOCAL
for _name in _names(dis.hasfree):
    _KIND[_name] = ArgKind.FREE
for _name in _names(dis.hascompare):
    _KIND[_name] = ArgKind.COMPARE
for _name in _JUMPS:
    _KIND[_name] = ArgKind.JUMP
# 3.13's superinstructions on two locals, as the plain instructions they stand for, in order
# (the assembler splits a pair whose locals do not fit in 4 bits each).
PAIR_PARTS: dict[str, tuple[str, str]] = {
    "LOAD_FAST_LOAD_FAST": ("LOAD_FAST", "LOAD_FAST"),
    "STORE_FAST_STORE_FAST": ("STORE_FAST", "STORE_FAST"),
    "STORE_FAST_LOAD_FAST": ("STORE_FAST", "LOAD_FAST"),
}
for _name in PAIR_PARTS:
    if _name in _REAL_OPS:
        _KIND[_name] = ArgKind.LOCAL_PAIR
for _name in VIRTUAL_OPNAMES:
    _KIND[_name] = ArgKind.NAME if _name == "LOAD_METHOD" else ArgKind.JUMP


def arg_kind(name: str) -> ArgKind:
    """The kind of resolved argument instruction ``name`` takes (real or virtual name)."""
    return _KIND[name]


def is_jump(name: str) -> bool:
    """True for instructions whose argument is a jump target (real or virtual)."""
    return _KIND.get(name) is ArgKind.JUMP


def is_backward_jump(name: str) -> bool:
    """True for real jumps whose oparg counts backwards from the next instruction."""
    return "BACKWARD" in name


#: Opcodes whose low oparg bits carry flags next to a co_names index: name index = oparg >> shift.
NAME_SHIFTS: dict[str, int] = {"LOAD_GLOBAL": 1}
if PY_VERSION >= (3, 12):
    NAME_SHIFTS.update({"LOAD_ATTR": 1, "LOAD_SUPER_ATTR": 2})

#: COMPARE_OP: operator index = oparg >> COMPARE_SHIFT; the low bits are specialisation masks.
COMPARE_SHIFT: int = {(3, 11): 0, (3, 12): 4}.get(PY_VERSION, 5)


def _compare_defaults() -> dict[str, int]:
    # Ask the running compiler which mask bits it packs for each operator, rather than copying its
    # tables: the specialised COMPARE_OP_* instructions read these bits, so they must be right.
    out: dict[str, int] = {}
    mask = (1 << COMPARE_SHIFT) - 1
    for op in dis.cmp_op:
        code = compile(f"x = a {op} b", "<compare>", "exec")
        raw = code.co_code
        for i in range(0, len(raw), 2):
            if raw[i] == _REAL_OPS["COMPARE_OP"]:
                out[op] = raw[i + 1] & mask
                break
    return out


_COMPARE_DEFAULTS = _compare_defaults()


def compare_default_flags(op: str) -> int:
    """The low COMPARE_OP bits the compiler uses for ``op`` in a plain comparison."""
    return _COMPARE_DEFAULTS[op]


#: Real instructions after which control never falls through to the next one.
NO_FALLTHROUGH: frozenset[str] = frozenset(
    n
    for n in (
        "JUMP_FORWARD",
        "JUMP_BACKWARD",
        "JUMP_BACKWARD_NO_INTERRUPT",
        "RETURN_VALUE",
        "RETURN_CONST",
        "RAISE_VARARGS",
        "RERAISE",
    )
    if n in _REAL_OPS
)

#: Instruction pairs the interpreter assumes adjacent (first -> what must come right after it):
#: 3.11's PRECALL specialisations skip over the CALL after them, generator code finds "suspended
#: in yield from/await" by reading the RESUME after the YIELD_VALUE, 3.13's FOR_ITER skips two.
MUST_BE_FOLLOWED_BY: dict[str, str] = {"YIELD_VALUE": "RESUME"}
if PY_VERSION == (3, 11):
    MUST_BE_FOLLOWED_BY["PRECALL"] = "CALL"
if PY_VERSION >= (3, 13):
    # An exhausted FOR_ITER pops the iterator and skips both END_FOR and the POP_TOP after it.
    MUST_BE_FOLLOWED_BY["END_FOR"] = "POP_TOP"

#: 3.12+: FOR_ITER, on exhaustion, skips the instruction at its target, which must be END_FOR.
FOR_ITER_TARGET: str | None = "END_FOR" if PY_VERSION >= (3, 12) else None

_CONDITIONS = ("TRUE", "FALSE", "NONE", "NOT_NONE")
_NEGATED = {"TRUE": "FALSE", "FALSE": "TRUE", "NONE": "NOT_NONE", "NOT_NONE": "NONE"}


def _condition(name: str) -> str | None:
    for cond in sorted(_CONDITIONS, key=len, reverse=True):
        if name.endswith("_IF_" + cond):
            return cond
    return None


def forward_variant(name: str) -> str | None:
    """The real forward-jumping instruction for jump ``name``, or None when there is none."""
    if name in ("JUMP", "JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_NO_INTERRUPT"):
        return "JUMP_FORWARD"
    if name == "JUMP_BACKWARD_NO_INTERRUPT":
        return "JUMP_FORWARD"
    cond = _condition(name)
    if cond is not None and name.startswith("POP_JUMP_"):
        real = f"POP_JUMP_FORWARD_IF_{cond}" if PY_VERSION == (3, 11) else f"POP_JUMP_IF_{cond}"
        return real if real in _REAL_OPS else None
    return name if name in _REAL_OPS and not is_backward_jump(name) else None


def backward_variant(name: str) -> str | None:
    """The real backward-jumping instruction for jump ``name``, or None when there is none.

    On 3.12+ conditional jumps only go forward; the assembler then expands them (see
    :func:`negated_conditional`).
    """
    if name in ("JUMP", "JUMP_FORWARD", "JUMP_BACKWARD"):
        return "JUMP_BACKWARD"
    if name in ("JUMP_NO_INTERRUPT", "JUMP_BACKWARD_NO_INTERRUPT"):
        return "JUMP_BACKWARD_NO_INTERRUPT"
    cond = _condition(name)
    if cond is not None and name.startswith("POP_JUMP_") and PY_VERSION == (3, 11):
        return f"POP_JUMP_BACKWARD_IF_{cond}"
    return None


def negated_conditional(name: str) -> str | None:
    """For a conditional POP_JUMP, the forward instruction jumping on the opposite condition."""
    cond = _condition(name)
    if cond is None or not name.startswith("POP_JUMP_"):
        return None
    return forward_variant(f"POP_JUMP_IF_{_NEGATED[cond]}")
