"""Sources render as Python expressions over L/G that evaluate to the value they name."""

from __future__ import annotations

import enum
import types

import pytest
import torch

from guards import (
    AttrSource,
    GlobalSource,
    GuardSet,
    ItemSource,
    LocalSource,
    SizeSource,
    Source,
    StrideSource,
    TypeSource,
    UnsupportedGuardValue,
    compile_guards,
)


class Color(enum.Enum):
    RED = 1
    BLUE = 2


def evaluate(source: object, L: dict[str, object], G: dict[str, object]) -> object:
    return eval(source.name(), {"L": L, "G": G})  # type: ignore[attr-defined]


def test_names_match_the_documented_spelling() -> None:
    assert LocalSource("x").name() == "L['x']"
    assert AttrSource(GlobalSource("torch"), "nn").name() == "G['torch'].nn"
    self_w = AttrSource(AttrSource(LocalSource("self"), "linear"), "weight")
    assert self_w.name() == "L['self'].linear.weight"
    assert ItemSource(LocalSource("xs"), 0).name() == "L['xs'][0]"
    assert TypeSource(LocalSource("x")).name() == "type(L['x'])"
    assert SizeSource(LocalSource("x"), 1).name() == "L['x'].size(1)"
    assert StrideSource(LocalSource("x"), 0).name() == "L['x'].stride(0)"


def test_describe_is_a_readable_path() -> None:
    self_w = AttrSource(AttrSource(LocalSource("self"), "linear"), "weight")
    assert self_w.describe() == "self.linear.weight"
    assert AttrSource(GlobalSource("torch"), "nn").describe() == "global torch.nn"
    assert ItemSource(LocalSource("d"), Color.RED).describe() == "d[Color.RED]"
    assert ItemSource(LocalSource("d"), "k").describe() == "d['k']"


def test_every_source_kind_evaluates_to_its_value() -> None:
    ns = types.SimpleNamespace(linear=types.SimpleNamespace(weight=42))
    setattr(ns, "odd name", 7)
    setattr(ns, "class", 8)
    t = torch.empty(3, 5)
    L: dict[str, object] = {"self": ns, "xs": [10, 20], "d": {"a'b\"c": 1, (1, "x"): 2}, "t": t}
    G: dict[str, object] = {"torch": torch}
    cases = {
        AttrSource(AttrSource(LocalSource("self"), "linear"), "weight"): 42,
        AttrSource(LocalSource("self"), "odd name"): 7,
        AttrSource(LocalSource("self"), "class"): 8,
        ItemSource(LocalSource("xs"), 1): 20,
        ItemSource(LocalSource("xs"), -1): 20,
        ItemSource(LocalSource("d"), "a'b\"c"): 1,
        ItemSource(LocalSource("d"), (1, "x")): 2,
        AttrSource(GlobalSource("torch"), "nn"): torch.nn,
        TypeSource(LocalSource("xs")): list,
        SizeSource(LocalSource("t"), 1): 5,
        StrideSource(LocalSource("t"), 0): 5,
    }
    for source, expected in cases.items():
        assert evaluate(source, L, G) == expected, source.name()


def test_non_identifier_attributes_render_with_getattr() -> None:
    assert AttrSource(LocalSource("o"), "odd name").name() == "getattr(L['o'], 'odd name')"
    assert AttrSource(LocalSource("o"), "class").name() == "getattr(L['o'], 'class')"


def test_quotes_in_names_render_safely() -> None:
    src = ItemSource(LocalSource("it's"), "a'b")
    assert eval(src.name(), {"L": {"it's": {"a'b": 3}}}) == 3


def test_enum_keys_are_bound_as_constants_in_generated_code() -> None:
    gs = GuardSet()
    gs.CONSTANT_MATCH(ItemSource(LocalSource("d"), Color.RED), 5)
    cg = compile_guards(gs, {})
    assert "Color.RED" not in cg.source_code  # bound, not spelled
    assert cg({"d": {Color.RED: 5, Color.BLUE: 0}})
    assert not cg({"d": {Color.RED: 6}})
    assert not cg({"d": {Color.BLUE: 5}})


def test_sources_are_hashable_and_equal_by_value() -> None:
    a = AttrSource(LocalSource("self"), "w")
    b = AttrSource(LocalSource("self"), "w")
    assert a == b and hash(a) == hash(b)
    assert len({a, b, LocalSource("self"), GlobalSource("self")}) == 3
    assert LocalSource("x") != GlobalSource("x")


def test_unhashable_index_is_rejected() -> None:
    with pytest.raises(UnsupportedGuardValue):
        ItemSource(LocalSource("d"), [1, 2])


def test_chain_depth_and_root() -> None:
    s = ItemSource(AttrSource(LocalSource("self"), "layers"), 3)
    assert [c.name() for c in s.chain()] == ["L['self']", "L['self'].layers", "L['self'].layers[3]"]
    assert s.depth == 2 and s.root() == LocalSource("self")


def _frame(**changes: object) -> tuple[dict[str, object], dict[str, object]]:
    """A frame whose every source kind below reads the value 4 (or type int) by default."""
    obj = types.SimpleNamespace(attr=4)
    L: dict[str, object] = {"x": 4, "o": obj, "xs": [0, 4], "d": {"k": 4, Color.RED: 4}}
    L["t"] = torch.empty(4, 4)
    G: dict[str, object] = {"g": 4}
    for key, value in changes.items():
        if key == "attr":
            obj.attr = value
        elif key in G:
            G[key] = value
        else:
            L[key] = value
    return L, G


# (source, a change that alters the value it reads, the value that change makes it read)
SOURCE_KINDS = [
    (LocalSource("x"), {"x": 5}, 5),
    (GlobalSource("g"), {"g": 5}, 5),
    (AttrSource(LocalSource("o"), "attr"), {"attr": 5}, 5),
    (ItemSource(LocalSource("xs"), 1), {"xs": [0, 5]}, 5),
    (ItemSource(LocalSource("d"), "k"), {"d": {"k": 5, Color.RED: 4}}, 5),
    (ItemSource(LocalSource("d"), Color.RED), {"d": {"k": 4, Color.RED: 5}}, 5),
    (SizeSource(LocalSource("t"), 0), {"t": torch.empty(5, 4)}, 5),
    (StrideSource(LocalSource("t"), 0), {"t": torch.empty(4, 5)}, 5),
]


@pytest.mark.parametrize(
    ("source", "change", "changed"),
    SOURCE_KINDS,
    ids=lambda v: str(v)[:24] if isinstance(v, Source) else "",
)
def test_constant_guard_through_each_source_kind(
    compile_set, verdict, source, change, changed
) -> None:
    L, G = _frame()
    assert source.resolve(L, G) == 4
    cg = compile_set(lambda gs: gs.CONSTANT_MATCH(source, 4), G)
    assert verdict(cg, L) == (True, [])
    L2, G2 = _frame(**change)
    G.clear()
    G.update(G2)
    assert verdict(cg, L2) == (False, [f"{source.name()} == 4 expected, got {changed}"])
    # a change elsewhere in the frame does not matter
    L3, G3 = _frame(unrelated=object())
    G.clear()
    G.update(G3)
    assert verdict(cg, L3) == (True, [])


def test_type_guard_through_a_type_source(compile_set, verdict) -> None:
    src = TypeSource(LocalSource("x"))
    cg = compile_set(lambda gs: gs.ID_MATCH(src, int))
    assert verdict(cg, {"x": 1}) == (True, [])
    ok, why = verdict(cg, {"x": 1.0})
    assert not ok and why[0].startswith("type(L['x']) is the type with id")
