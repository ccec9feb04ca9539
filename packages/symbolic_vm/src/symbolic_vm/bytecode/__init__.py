"""The bytecode toolkit: decode a code object into instruction records, edit, assemble it back.

Works on CPython 3.11 and 3.12 (3.13 best effort) and never imports torch.
"""

from symbolic_vm.bytecode import codegen
from symbolic_vm.bytecode.assemble import CodeOverrides, assemble
from symbolic_vm.bytecode.codegen import Signature, function_from_code, make_code
from symbolic_vm.bytecode.decode import decode, localsplus_names
from symbolic_vm.bytecode.errors import (
    AssemblyError,
    BytecodeError,
    DecodeError,
    ResumeError,
    UnsupportedPythonError,
)
from symbolic_vm.bytecode.instr import (
    NO_POSITION,
    ExceptHandler,
    FreeVar,
    Instr,
    Label,
    Position,
    format_listing,
    instructions_only,
    label_indices,
)
from symbolic_vm.bytecode.opcodes import (
    MUST_BE_FOLLOWED_BY,
    PY_VERSION,
    ArgKind,
    arg_kind,
    cache_entries,
)

__all__ = [
    # records
    "Instr",
    "Label",
    "Position",
    "NO_POSITION",
    "ExceptHandler",
    "FreeVar",
    # decode / assemble
    "decode",
    "assemble",
    "CodeOverrides",
    "localsplus_names",
    "instructions_only",
    "label_indices",
    "format_listing",
    # code generation (the module holds the instruction helpers)
    "codegen",
    "Signature",
    "make_code",
    "function_from_code",
    # opcode facts
    "PY_VERSION",
    "ArgKind",
    "arg_kind",
    "cache_entries",
    "MUST_BE_FOLLOWED_BY",
    # errors
    "BytecodeError",
    "DecodeError",
    "AssemblyError",
    "ResumeError",
    "UnsupportedPythonError",
]
