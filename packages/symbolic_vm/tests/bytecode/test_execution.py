"""Reassembled functions run exactly like the originals, also after every offset has moved."""

from __future__ import annotations

import traceback
import types
from collections.abc import Callable
from typing import Any

import attrs
import pytest
from bytecode_testing import rebuild_function
from sample_functions import SAMPLES, Recorder

from symbolic_vm.bytecode import MUST_BE_FOLLOWED_BY, Instr, Label, assemble, decode

Transform = Callable[[list[Instr | Label]], list[Instr | Label]]


def identity(items: list[Instr | Label]) -> list[Instr | Label]:
    return items


def spread_nops(count: int) -> Transform:
    """Insert ``count`` NOPs after each instruction (same position and handler)."""

    def transform(items: list[Instr | Label]) -> list[Instr | Label]:
        out: list[Instr | Label] = []
        for item in items:
            out.append(item)
            if isinstance(item, Instr) and item.opname not in MUST_BE_FOLLOWED_BY:
                nop = Instr("NOP", position=item.position, handler=item.handler)
                out.extend([nop] * count)
        return out

    return transform


def transform_code(code: types.CodeType, transform: Transform) -> types.CodeType:
    """Apply ``transform`` to ``code`` and, recursively, to every code object nested in it."""
    replaced: dict[int, types.CodeType] = {}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            replaced[id(const)] = transform_code(const, transform)
    items = [
        attrs.evolve(i, arg=replaced[id(i.arg)])
        if isinstance(i, Instr) and id(i.arg) in replaced
        else i
        for i in transform(decode(code))
    ]
    consts = tuple(replaced.get(id(c), c) for c in code.co_consts)
    return assemble(items, template=code, co_consts=consts)


def outcome(fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[str, object, list[int]]:
    """What a call did: its result or its exception, and the traceback's line numbers."""
    try:
        return ("returned", fn(*args), [])
    except Exception as e:
        lines = [f.lineno or 0 for f in traceback.extract_tb(e.__traceback__)[1:]]
        return ("raised", (type(e), e.args), lines)


TRANSFORMS = {
    "identity": identity,
    "nop-after-each": spread_nops(1),
    # 130 NOPs per instruction push every jump past 255 code units: all need EXTENDED_ARG.
    "extended-args": spread_nops(130),
}


@pytest.mark.parametrize("transform", list(TRANSFORMS), ids=list(TRANSFORMS))
@pytest.mark.parametrize("sample", SAMPLES, ids=[fn.__name__ for fn, _ in SAMPLES])
def test_reassembled_function_behaves_like_original(
    sample: tuple[Callable[..., Any], list[tuple[Any, ...]]], transform: str
) -> None:
    fn, calls = sample
    assert isinstance(fn, types.FunctionType)
    new_code = transform_code(fn.__code__, TRANSFORMS[transform])
    if transform == "identity":
        assert new_code == fn.__code__
    else:
        assert new_code.co_code != fn.__code__.co_code
    rebuilt = rebuild_function(fn, new_code)
    for args in calls:
        assert outcome(rebuilt, args) == outcome(fn, args), args


def test_extended_args_really_appear_in_the_stress_variant() -> None:
    fn = SAMPLES[-1][0]
    assert isinstance(fn, types.FunctionType)
    code = transform_code(fn.__code__, TRANSFORMS["extended-args"])
    extended = [i for i in __import__("dis").get_instructions(code) if i.opname == "EXTENDED_ARG"]
    assert len(extended) >= 5


def test_exceptions_raised_inside_reassembled_code_keep_their_lines() -> None:
    def fails(x: int) -> int:
        y = x + 1
        return y // 0

    new = rebuild_function(fails, transform_code(fails.__code__, spread_nops(3)))
    assert outcome(new, (1,)) == outcome(fails, (1,))
    assert outcome(new, (1,))[2] == [fails.__code__.co_firstlineno + 2]


def test_class_pattern_sample_uses_recorder() -> None:
    # Guards the match sample against silently testing nothing for class patterns.
    fn = SAMPLES[6][0]
    assert fn(Recorder([], "r")) == ("recorder", "r")
