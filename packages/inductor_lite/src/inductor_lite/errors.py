"""Exceptions of the inductor_lite layer."""

from __future__ import annotations

__all__ = ["CompilerError", "InductorError", "LoweringError", "UnsupportedGraph"]


class InductorError(Exception):
    """Base class of every error raised by inductor_lite."""


class LoweringError(InductorError):
    """An aten node could not be lowered to the loop IR."""


class UnsupportedGraph(InductorError):
    """The whole graph is outside what this layer compiles (symbolic shapes, mutation, ...)."""


class CompilerError(InductorError):
    """The C++ compiler failed, timed out, or its output could not be loaded."""
