"""Property: for any f_locals, check(f_locals) == (failures(f_locals) == []), and the guards
pass on the values they were built from."""

from __future__ import annotations

import enum
import types

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from guards import (
    AttrSource,
    GlobalSource,
    GuardSet,
    ItemSource,
    LocalSource,
    MethodCallSource,
    compile_guards,
)


class Mode(enum.Enum):
    A = 1
    B = 2


class Raises:
    @property
    def training(self) -> bool:
        raise ValueError("nope")


def base_locals() -> dict[str, object]:
    return {
        "x": torch.randn(3, 4),
        "n": 3,
        "f": float("nan"),
        "s": "abc",
        "xs": [1, 2.0, "z"],
        "d": {"a": 1, "b": 2},
        "mode": Mode.A,
        "self": types.SimpleNamespace(training=True),
        "t": (1, (2, 3)),
        "c": complex(1.0, -0.0),
    }


def build(gs: GuardSet, L: dict[str, object]) -> None:
    gs.TENSOR_MATCH(LocalSource("x"), L["x"], dynamic_dims=[0])  # type: ignore[arg-type]
    gs.CONSTANT_MATCH(LocalSource("n"), L["n"])
    gs.CONSTANT_MATCH(LocalSource("f"), L["f"])
    gs.CONSTANT_MATCH(LocalSource("s"), L["s"])
    gs.LENGTH(LocalSource("xs"), L["xs"])
    gs.CONSTANT_MATCH(ItemSource(LocalSource("xs"), 1), 2.0)
    gs.DICT_KEYS(LocalSource("d"), L["d"])
    gs.CONSTANT_MATCH(LocalSource("mode"), Mode.A)
    gs.TYPE_MATCH(LocalSource("self"), L["self"])
    gs.CONSTANT_MATCH(AttrSource(LocalSource("self"), "training"), True)
    gs.CONSTANT_MATCH(LocalSource("t"), L["t"])
    gs.CONSTANT_MATCH(GlobalSource("K"), 7)
    gs.CONSTANT_MATCH(LocalSource("c"), L["c"])
    gs.CONSTANT_MATCH(MethodCallSource(LocalSource("x"), "storage_offset"), 0)
    gs.SHAPE("L['x'].size(0) < 9", "s0 < 9")


tensors = st.builds(
    lambda shape, dtype, rg, transpose: (
        torch.zeros(shape, dtype=dtype, requires_grad=rg and dtype.is_floating_point).t()
        if transpose and len(shape) == 2
        else torch.zeros(shape, dtype=dtype, requires_grad=rg and dtype.is_floating_point)
    ),
    st.lists(st.integers(0, 10), min_size=0, max_size=3).map(tuple),
    st.sampled_from([torch.float32, torch.float64, torch.int64]),
    st.booleans(),
    st.booleans(),
)
anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=3),
    st.sampled_from([Mode.A, Mode.B, 2.0, -0.0, 0.0, 3, "abc", (1, (2, 3)), (1, (2, 3.0)),
                     complex(1.0, 0.0), complex(1.0, -0.0), complex(float("nan"), -0.0)]),
    st.builds(lambda n: torch.zeros(n + 3)[n:], st.integers(0, 2)),
    st.lists(st.sampled_from([1, 2.0, "z", 2]), max_size=4),
    st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(), max_size=3),
    st.builds(lambda t: types.SimpleNamespace(training=t), st.sampled_from([True, False, 1, None])),
    st.just(Raises()),
    tensors,
)

KEYS = list(base_locals())


@settings(max_examples=300, deadline=None)
@given(
    changes=st.dictionaries(st.sampled_from(KEYS), anything, max_size=4),
    dropped=st.sets(st.sampled_from(KEYS), max_size=2),
    global_k=st.sampled_from([7, 7.0, 8, None]),
)
def test_check_agrees_with_failures(changes, dropped, global_k) -> None:  # type: ignore[no-untyped-def]
    L0 = base_locals()
    gs = GuardSet()
    build(gs, L0)
    G: dict[str, object] = {"K": 7}
    cg = compile_guards(gs, G)
    assert cg(L0) and cg.failures(L0) == []
    L = dict(L0, **changes)
    for k in dropped:
        L.pop(k, None)
    G["K"] = global_k
    ok, why = cg(L), cg.failures(L)
    assert ok == (why == []), (ok, why, cg.source_code)
    if not changes and not dropped and global_k == 7 and type(global_k) is int:
        assert ok
