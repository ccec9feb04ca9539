"""Exceptions of the guards layer."""

from __future__ import annotations

__all__ = ["GuardError", "UnsupportedGuardValue", "ShapeGuardError"]


class GuardError(Exception):
    """Base class for errors raised while building or compiling guards."""


class UnsupportedGuardValue(GuardError):
    """A guard was asked for a value it cannot check faithfully.

    For example CONSTANT_MATCH on a list, or an ItemSource index that is not hashable.
    The tracer should fall back to a coarser guard (TYPE_MATCH, ID_MATCH) or graph-break.
    """


class ShapeGuardError(GuardError):
    """A ShapeEnv guard mentions a symbol with no source, or an expression we cannot render."""
