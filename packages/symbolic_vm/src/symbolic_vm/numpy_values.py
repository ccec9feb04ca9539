"""NumPy scalars among the values the VM tracks: the Python number one holds, and its guard.

NumPy itself is read from ``sys.modules`` (torch imports it where it is installed), so the VM
works without it.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from symbolic_vm.values import ObjectVar

if TYPE_CHECKING:
    from symbolic_vm.output import Output

_NUMPY: Any = sys.modules.get("numpy")


def numpy_scalar_value(value: object) -> object | None:
    """The Python number a NumPy scalar holds (``np.float32(1.5)`` -> 1.5), else None."""
    if _NUMPY is None or not isinstance(value, _NUMPY.number | _NUMPY.bool_):
        return None
    item = value.item()
    return item if isinstance(item, (bool, int, float, complex)) else None


def depend_numpy_scalar(out: Output, var: ObjectVar) -> None:
    """Guard a NumPy scalar read from the frame by its type and value (an object's own guard
    is its identity or its type: a new equal scalar on every call would recompile, or a
    different value pass)."""
    if var.source is not None:
        out.request("TYPE_MATCH", var.source, var.value)
        held = repr(numpy_scalar_value(var.value))  # repr tells nan, -0.0 and 1 vs 1.0 apart
        out.predicate(
            f"repr(s.item()) == {held!r}", f"{var.source.describe()} holds {held}", s=var.source
        )


__all__ = ["depend_numpy_scalar", "numpy_scalar_value"]
