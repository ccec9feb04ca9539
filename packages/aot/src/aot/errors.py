"""Exceptions raised by the aot layer."""

from __future__ import annotations

__all__ = [
    "AotError",
    "AotTracingError",
    "AotUnsupportedError",
    "DoubleBackwardError",
    "PartitionError",
]


class AotError(Exception):
    """Base class of every error the aot layer raises on purpose."""


class AotTracingError(AotError):
    """The function could not be traced to an aten graph (with fake tensors)."""


class AotUnsupportedError(AotError):
    """The function uses something this layer does not handle yet; the message says what."""


class PartitionError(AotError):
    """A joint graph could not be split into a forward and a backward graph."""


class DoubleBackwardError(AotError, RuntimeError):
    """Differentiating through the backward of a compiled region (create_graph=True)."""
