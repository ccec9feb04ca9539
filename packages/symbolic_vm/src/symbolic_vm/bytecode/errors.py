"""Exceptions of the bytecode toolkit."""

from __future__ import annotations

__all__ = ["AssemblyError", "BytecodeError", "DecodeError", "UnsupportedPythonError"]


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
