"""Builtins, enum, math and str on constants inside compiled code (symbolic_vm.stdlib.misc,
builtins_): each equals eager, is captured whole, in no more graphs than torch.compile; an
exception eager raises (min() of nothing) is raised with the same type and message."""

from __future__ import annotations

import enum
import math
from typing import Any

import pytest
import torch
from stdlib_harness import check_whole

import compile_api

pytestmark = pytest.mark.usefixtures("errors_raise")


def _x() -> tuple[Any, ...]:
    return (torch.arange(4.0),)


class Mode(enum.Enum):
    FAST = "fast"
    SLOW = "slow"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 3


CASES = {
    "hex_oct_bin": lambda x: (hex(255), oct(8), bin(5), x * len(hex(-16))),
    "float_fromhex_hex": lambda x: (x * float.fromhex("0x1.8p1"), (2.5).hex()),
    "int_from_bytes": lambda x: x * int.from_bytes(b"\x01\x02", "big"),
    "dict_fromkeys": lambda x: (dict.fromkeys(["a", "b"], x), dict.fromkeys("xy")),
    "max_min_key": lambda x: (
        max([x, x * 3, x * 2], key=lambda t: t.shape[0] + 1),
        min([(2, "b"), (1, "a")], key=lambda p: p[1]), max("abc", key=ord),
        max(3, 1, 2, key=lambda v: -v),
    ),
    "max_min_default": lambda x: (
        min([], default=x), max((), default=None), max([2, 5], default=0)
    ),
    "sorted_key_reverse": lambda x: sorted([3, -1, 2], key=abs, reverse=True),
    "str_methods": lambda x: (
        "a,b".split(","), "X".lower(), " ab ".strip(), "ab".upper(), "a-b".replace("-", "_"),
        "_".join(["a", "b"]), "abc".startswith("ab"), "abc".endswith("bc"), "abc".find("c"),
        "Abc".title(), "a b".partition(" "), "12".zfill(4), "ab".center(6, "*"), x + 1,
    ),
    "formatting": lambda x: (
        f"{3:04d}|{'ab':>5}|{2.5:.3f}|{10:x}", "{}-{k}".format(1, k=2),  # noqa: UP032
        "%d/%s" % (3, "a"),  # noqa: UP031
        format(255, "#x"), x * 2,
    ),
    "enum": lambda x: (
        x * Level.HIGH, Mode.FAST.value, Mode("slow").name, Level.LOW < Level.HIGH,
        Mode.FAST is Mode.FAST, Mode["SLOW"].value, Level(3) == 3, [m.value for m in Mode],
        len(Mode), Mode.FAST in Mode,
    ),
    "math": lambda x: (
        x * math.sqrt(4.0) + math.pi, math.floor(2.5), math.ceil(2.1), math.log2(8),
        math.gcd(12, 18), math.isclose(1.0, 1.0 + 1e-12), math.prod([2, 3]), math.inf > 1,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_builtin_on_constants_matches_eager_in_one_graph(name: str) -> None:
    check_whole(CASES[name], _x)


@pytest.mark.parametrize(
    "fn",
    [lambda x: min([]), lambda x: max([], key=abs), lambda x: max(1, 2, default=3),
     lambda x: int.from_bytes(b"\x01", "middle"), lambda x: float.fromhex("zz")],
)
def test_a_builtin_that_raises_in_eager_raises_the_same(fn: Any) -> None:
    with pytest.raises(Exception) as want:
        fn(torch.ones(1))
    compiled = compile_api.compile(fn, backend="eager")
    with pytest.raises(want.type) as got:
        compiled(torch.ones(1))
    assert str(got.value) == str(want.value)
