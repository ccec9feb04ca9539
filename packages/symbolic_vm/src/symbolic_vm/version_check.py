"""Whether the VM runs on this CPython, with the handler tables' knowledge of what a port lacks.

compile_api asks before compiling anything, so a user on an unported Python (3.14) gets one
error naming what is missing instead of a failure deep inside the VM.
"""

from __future__ import annotations

from collections.abc import Iterable

from symbolic_vm.versions import unsupported_python as _unsupported

__all__ = ["handled_opnames", "unsupported_python"]


def handled_opnames() -> set[str] | None:
    """The opcodes that some supported version's handler table or UNSUPPORTED names; None
    where the tables cannot be loaded (an unported interpreter may fail anywhere in them)."""
    try:
        # Lazy on purpose: on an unported Python loading the tables may fail, and that failure
        # is the answer (the module itself must import everywhere).
        import symbolic_vm.handlers  # noqa: F401 - registers the handlers
        from symbolic_vm.interpreter import SUPPORTED_VERSIONS, UNSUPPORTED, handlers_for
    except Exception:
        return None
    known = set(UNSUPPORTED)
    for version in SUPPORTED_VERSIONS:
        known.update(handlers_for(version))
    return known


def unsupported_python(
    version: tuple[int, int] | None = None, opnames: Iterable[str] | None = None
) -> str | None:
    """None when the VM interprets ``version`` (default: the running one); else what is missing,
    naming the opcodes of ``opnames`` (default: the running interpreter's) no handler covers."""
    if _unsupported(version) is None:
        return None
    return _unsupported(version, opnames, handled_opnames())
