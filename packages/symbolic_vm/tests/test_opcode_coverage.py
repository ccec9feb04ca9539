"""Every opcode the running CPython's compiler emits has a handler or a stated reason not to."""

from __future__ import annotations

import dis
import sys

import pytest

import symbolic_vm.handlers  # noqa: F401 - registers the handlers
from symbolic_vm.interpreter import SUPPORTED_VERSIONS, UNSUPPORTED, handler, handlers_for

# Opcodes at or above this number are pseudo-instructions of the compiler: never in a code object.
_FIRST_PSEUDO = 256


def _emitted_opnames() -> set[str]:
    specialised: set[str] = set()
    for forms in getattr(dis, "_specializations", {}).values():
        specialised.update(forms)
    return {
        name for name, number in dis.opmap.items()
        if number < _FIRST_PSEUDO
        and name not in specialised
        and not name.startswith("INSTRUMENTED_")
    }


def test_the_running_version_is_supported() -> None:
    assert sys.version_info[:2] in SUPPORTED_VERSIONS


def test_every_opcode_has_a_handler_or_a_reason() -> None:
    table = handlers_for(sys.version_info[:2])
    missing = sorted(
        name for name in _emitted_opnames() if name not in table and name not in UNSUPPORTED
    )
    assert missing == []


def test_no_opcode_is_both_handled_and_listed_as_unsupported() -> None:
    table = handlers_for(sys.version_info[:2])
    assert sorted(set(table) & set(UNSUPPORTED)) == []
    assert all(reason for reason in UNSUPPORTED.values())


def test_registration_refuses_an_opcode_the_version_does_not_have() -> None:
    running = float(f"{sys.version_info[0]}.{sys.version_info[1]}")
    with pytest.raises(AssertionError, match="no opcode"):
        handler("NOT_AN_OPCODE", versions=(running,))(lambda vm, inst: None)


def test_registration_refuses_a_second_handler_for_one_opcode() -> None:
    running = float(f"{sys.version_info[0]}.{sys.version_info[1]}")
    with pytest.raises(AssertionError, match="twice"):
        handler("BINARY_OP", versions=(running,))(lambda vm, inst: None)


def test_an_unported_python_is_refused_naming_the_opcodes_no_handler_covers() -> None:
    from symbolic_vm.version_check import unsupported_python
    from symbolic_vm.versions import emitted_opnames

    assert unsupported_python() is None
    new = {"LOAD_SMALL_INT", "POP_ITER"}  # two of 3.14's new opcodes
    message = unsupported_python((3, 14), emitted_opnames() | new)
    assert message is not None
    assert "not 3.14" in message and "symbolic_vm/bytecode/opcodes.py" in message
    assert message.endswith("opcodes of 3.14 no handler covers: LOAD_SMALL_INT, POP_ITER")


def test_an_unported_python_without_its_opcodes_names_what_is_known_to_change() -> None:
    from symbolic_vm.version_check import unsupported_python

    message = unsupported_python((3, 14))
    assert message is not None and "LOAD_FAST_BORROW" in message
    older = unsupported_python((3, 10))
    assert older is not None and "predates" in older
