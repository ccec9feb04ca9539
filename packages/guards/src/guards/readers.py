"""params_reader: hand a guarded frame's parameters to its transformed code in one call.

A transformed frame that feeds a module's parameters to its graph reads each one through the
module tree (``self._modules['0']._parameters['weight']``: three subscripts or attribute reads
per parameter, ~2 us for 50).  The entry's guard already proves, on every call, which object
sits at each of those paths: MODULE_PARAMS compares each step with a weak reference to the
object the trace saw (or an ID_MATCH does, per path).  So, on a call whose guard passed,
reading the path and dereferencing that weak reference give the same object, and the reader
returns them all at once: one C call building one tuple (``WeakTuple`` in the extension), or a
Python loop over the references without it.

Sound only under that condition, which the caller must keep: every object handed to
``params_reader`` must have its identity at the path the code would read guarded in the same
cache entry.  Metadata is not involved (MODULE_PARAMS re-reads it on every call: ``p.data =``
changes it behind the same object, and the reader hands over that same object).  A referent
that died raises ``ReferenceError`` (its guard fails first, so the code never runs then).
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from guards.native import native_module

__all__ = ["params_reader"]


def params_reader(objects: Sequence[object]) -> Callable[[], tuple[Any, ...]]:
    """A no-argument callable returning ``tuple(objects)`` through weak references.

    Uses the C++ ``WeakTuple`` when guards' extension is loaded (and
    ``STRATA_GUARDS_PURE_PYTHON`` is not "1"), else a Python closure.  The caller guarantees
    that the guard of the code calling it checks each object's identity (see module doc).
    """
    mod = native_module()
    if mod is not None:
        reader: Callable[[], tuple[Any, ...]] = mod.WeakTuple(
            tuple(weakref.ref(obj) for obj in objects)
        )
        return reader
    # Python: one C-level map over the references; a death is noted by the references'
    # callbacks (one flag to test per call instead of one compare per item).
    dead: list[bool] = []

    def died(_: object) -> None:
        dead.append(True)

    refs = tuple(weakref.ref(obj, died) for obj in objects)
    call = operator.call

    def read() -> tuple[Any, ...]:
        if dead:
            raise ReferenceError("params_reader: a referent no longer exists")
        return tuple(map(call, refs))

    return read
