"""Which CPython versions the VM interprets, and what a port to another one needs.

Torch-free and import-light (the bytecode toolkit uses it for its own import-time refusal);
symbolic_vm.version_check adds the handler tables' knowledge for compile_api.
"""

from __future__ import annotations

import dis
import sys
from collections.abc import Iterable

__all__ = ["SUPPORTED", "emitted_opnames", "unsupported_python"]

SUPPORTED: tuple[tuple[int, int], ...] = ((3, 11), (3, 12), (3, 13))
RUNNING: tuple[int, int] = (sys.version_info[0], sys.version_info[1])

# Opcode numbers from here up are the compiler's pseudo-instructions: never in a code object.
_FIRST_PSEUDO = 256

# What is known to change in a version not yet ported (from its "What's New" and dis docs); the
# exact opcode list comes from the running interpreter when it is that version.
_PORT_NOTES: dict[tuple[int, int], str] = {
    (3, 14): (
        "3.14 adds LOAD_SMALL_INT, LOAD_FAST_BORROW, LOAD_FAST_BORROW_LOAD_FAST_BORROW, "
        "POP_ITER, NOT_TAKEN, LOAD_SPECIAL, LOAD_COMMON_CONSTANT, BUILD_TEMPLATE and "
        "BUILD_INTERPOLATION; subscripts become BINARY_OP; RETURN_CONST and BEFORE_WITH are gone"
    ),
}


def emitted_opnames(opmap: dict[str, int] | None = None) -> set[str]:
    """The opcodes a compiler can put in a code object (no specialised, instrumented or
    pseudo forms), of ``opmap`` (default: the running interpreter's)."""
    specialised: set[str] = set()
    for forms in getattr(dis, "_specializations", {}).values():
        specialised.update(forms)
    opmap = dis.opmap if opmap is None else opmap
    return {
        name for name, number in opmap.items()
        if number < _FIRST_PSEUDO and name not in specialised
        and not name.startswith("INSTRUMENTED_")
    }


def unsupported_python(
    version: tuple[int, int] | None = None,
    opnames: Iterable[str] | None = None,
    handled: Iterable[str] | None = None,
) -> str | None:
    """None when the VM interprets ``version`` (default: the running one); else what is missing.

    ``opnames``: that version's opcodes (default: the running interpreter's, when ``version``
    is the running one); ``handled``: the opcodes some handler table or UNSUPPORTED names
    (symbolic_vm.version_check passes them). With both, the message names the opcodes no
    handler covers.
    """
    version = RUNNING if version is None else version
    if version in SUPPORTED:
        return None
    name = f"{version[0]}.{version[1]}"
    if version < SUPPORTED[0]:
        return (
            f"symbolic_vm interprets CPython 3.11 to 3.13 bytecode; {name} predates the 3.11 "
            "frame and bytecode layout it is built on (use 3.11, 3.12 or 3.13)"
        )
    parts = [
        f"symbolic_vm interprets CPython 3.11 to 3.13 bytecode, not {name}. A port needs the "
        f"bytecode toolkit's encoding tables for {name} (symbolic_vm/bytecode/opcodes.py), a "
        f"handler for each new opcode registered with versions=(..., {name}) or an UNSUPPORTED "
        "reason (symbolic_vm/handlers), and a review of the opcodes whose meaning changed"
    ]
    if opnames is None and version == (sys.version_info[0], sys.version_info[1]):
        opnames = emitted_opnames()
    missing = (
        sorted(set(opnames) - set(handled)) if opnames is not None and handled is not None else None
    )
    if missing:
        parts.append(f"opcodes of {name} no handler covers: {', '.join(missing)}")
    elif version in _PORT_NOTES:
        parts.append(_PORT_NOTES[version])
    return "; ".join(parts)
