"""Exceptions of the bytecode toolkit."""

from __future__ import annotations

__all__ = [
    "AssemblyError",
    "BytecodeError",
    "DecodeError",
    "ResumeError",
    "UnsupportedPythonError",
]


class BytecodeError(Exception):
    """Base class of every error raised by ``symbolic_vm.bytecode``."""


class UnsupportedPythonError(BytecodeError):
    """The running CPython's bytecode format is not one this toolkit knows (3.11 to 3.13)."""


class DecodeError(BytecodeError):
    """A code object's bytecode could not be decoded (malformed or from an unknown opcode)."""


class AssemblyError(BytecodeError):
    """An instruction list cannot be assembled into a valid code object.

    The message names the offending instruction (its index and repr) and what to fix.
    """


class ResumeError(BytecodeError):
    """A graph-break plan cannot be turned into residual code and resume functions.

    Raised by ``symbolic_vm.breaks.resume`` for a break at an instruction it cannot run on its
    own (the message names it), a generator, or a malformed stack description.
    """
