"""The frame locals that hold a module ``compile(model)`` wrapped.

With ``config.inline_inbuilt_nn_modules`` a module passed to a compiled frame is guarded by its
class and what the trace read from it, so the layers of a stack share one compiled ``forward``.
The wrapped model itself is one object called again and again: it stays guarded by identity,
which lets the transformed code take its parameters from one reader instead of reading each
at its path on every call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["pinned_locals"]


def pinned_locals(f_locals: Mapping[str, object], refs: Sequence[Any]) -> frozenset[str]:
    """The names in ``f_locals`` whose value is the referent of one of the weak ``refs``."""
    pinned = [ref() for ref in refs]
    if not pinned:
        return frozenset()
    return frozenset(
        name for name, value in f_locals.items() if any(value is m for m in pinned)
    )
