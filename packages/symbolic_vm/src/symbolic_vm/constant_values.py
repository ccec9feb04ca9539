"""Which real Python values the VM folds as constants, and the stand-in for an ``id()`` it
cannot know while tracing."""

from __future__ import annotations

import enum
from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

from symbolic_vm.errors import Unsupported

# Values folded as constants; guarded by value (CONSTANT_MATCH) when read from the frame.
CONSTANT_TYPES: tuple[type, ...] = (
    int, float, bool, str, bytes, complex, type(None), type(Ellipsis), slice, range,
    torch.dtype, torch.device, torch.Size, torch.memory_format, torch.layout, enum.Enum,
    type(NotImplemented),
)


class MadeObjectId:
    """``id(obj)`` of an object whose real identity is only known when the transformed code runs
    (made while tracing: a list, an object, a graph tensor, ...), as a ConstVar's value.

    Equal only to the id of the same object, hashable (a dict key, a set element), true; any
    use that needs the number (arithmetic, ordering, printing, a comparison with a real int,
    leaving the frame: codegen refuses it) raises Unsupported, so the code runs eagerly
    rather than on a made-up number.
    """

    __slots__ = ("_of",)

    def __init__(self, of: object) -> None:
        self._of = of  # what identifies the object in the trace (its box, its graph node)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, MadeObjectId):
            return self._of is other._of
        raise Unsupported("comparing the id() of an object made in the compiled function with "
                          "another number")

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash((MadeObjectId, id(self._of)))

    def __bool__(self) -> bool:
        return True  # no object has id 0

    def _needs_the_number(self, *args: object) -> Any:
        raise Unsupported("the id() of an object made in the compiled function used as a number "
                          "(only == and hashing are known while tracing)")

    __repr__ = __str__ = __format__ = __int__ = __index__ = __float__ = _needs_the_number
    __lt__ = __le__ = __gt__ = __ge__ = __neg__ = __pos__ = __abs__ = __invert__ = (
        _needs_the_number
    )
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _needs_the_number
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = (
        _needs_the_number
    )
    __pow__ = __rpow__ = __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = (
        _needs_the_number
    )
    __lshift__ = __rlshift__ = __rshift__ = __rrshift__ = __divmod__ = __rdivmod__ = (
        _needs_the_number
    )
    __round__ = __trunc__ = __floor__ = __ceil__ = _needs_the_number

    def __getattr__(self, name: str) -> Any:  # int's methods (bit_length, to_bytes, ...)
        if name.startswith("__"):
            raise AttributeError(name)  # protocol probes (copy's __deepcopy__, ...)
        return self._needs_the_number()


def specialize(value: Any) -> Any:
    """A symbolic number's value, guarded (the ShapeEnv records it): a SymBool, SymFloat or
    SymInt as bool, float or int."""
    try:
        if isinstance(value, torch.SymBool):
            return bool(value)
        if isinstance(value, torch.SymFloat):
            return float(value)
        return int(value)
    except GuardOnDataDependentSymNode:
        # An unbacked symbol (from .item() or nonzero) has no value to specialise on.
        raise Unsupported(
            "a value read from a tensor (.item(), nonzero sizes) is used as a Python number; "
            "it is unknown while tracing"
        ) from None


def is_constant_value(value: object) -> bool:
    """True when ``value`` is tracked as a ConstVar (tuples are tracked item by item)."""
    return isinstance(value, CONSTANT_TYPES)

