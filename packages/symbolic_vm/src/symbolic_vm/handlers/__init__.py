"""Opcode handlers, one function per opcode, registered with the Python versions they serve."""

from symbolic_vm.handlers import calls, containers, control, exceptions, loads, operators

__all__ = ["calls", "containers", "control", "exceptions", "loads", "operators"]
