"""Each guard kind passes on the original value, fails on each changed property with the
right words, and does not fail on changes it does not guard."""

from __future__ import annotations

import enum
import math
import types

import pytest
import torch

from guards import (
    AttrSource,
    GlobalSource,
    GuardError,
    GuardSet,
    ItemSource,
    LocalSource,
    UnsupportedGuardValue,
    compile_guards,
)


class Mode(enum.Enum):
    TRAIN = "train"
    EVAL = "eval"


def x_src(name: str = "x") -> LocalSource:
    return LocalSource(name)


# -- CONSTANT_MATCH --------------------------------------------------------------------------

CONSTANTS = [
    None,
    True,
    False,
    0,
    3,
    -7,
    2.5,
    0.0,
    -0.0,
    float("nan"),
    float("inf"),
    complex(1.0, -0.0),
    complex(float("nan"), 1.0),
    "abc",
    "",
    b"\x00b",
    Mode.TRAIN,
    torch.float16,
    torch.device("cpu"),
    (1, "a", None, (2.0, torch.int64)),
]

# For each constant, values that must NOT match it (type or value differs).
CHANGED = [
    (None, [0, False, "None"]),
    (True, [1, False, 1.0]),
    (False, [0, True, None]),
    (0, [False, 0.0, 1]),
    (3, [3.0, 4, True, "3"]),
    (-7, [7]),
    (2.5, [2, 2.6, float("nan")]),
    (0.0, [-0.0, 0, False]),
    (-0.0, [0.0]),
    (float("nan"), [0.0, float("inf")]),
    (float("inf"), [float("-inf"), 1e308]),
    (complex(1.0, -0.0), [complex(1.0, 0.0), 1.0, complex(-1.0, -0.0)]),
    (complex(float("nan"), 1.0), [complex(0.0, 1.0), complex(float("nan"), 2.0), float("nan")]),
    ("abc", ["abd", b"abc"]),
    ("", [None, b""]),
    (b"\x00b", [b"\x00c", "\x00b"]),
    (Mode.TRAIN, [Mode.EVAL, "train"]),
    (torch.float16, [torch.bfloat16, torch.float32]),
    (torch.device("cpu"), [torch.device("meta"), "cpu"]),
    ((1, "a", None, (2.0, torch.int64)), [(1, "a", None), (1, "a", None, (2.0, torch.int32)), [1]]),
]


@pytest.mark.parametrize("value", CONSTANTS, ids=repr)
def test_constant_match_passes_on_an_equal_value(compile_set, verdict, value) -> None:
    cg = compile_set(lambda gs: gs.CONSTANT_MATCH(x_src(), value))
    same = float("nan") if isinstance(value, float) and math.isnan(value) else value
    assert verdict(cg, {"x": same}) == (True, [])


@pytest.mark.parametrize(("value", "others"), CHANGED, ids=lambda v: repr(v)[:30])
def test_constant_match_fails_on_other_type_or_value(compile_set, verdict, value, others) -> None:
    cg = compile_set(lambda gs: gs.CONSTANT_MATCH(x_src(), value))
    for other in others:
        ok, why = verdict(cg, {"x": other})
        assert not ok, other
        assert why == [
            f"L['x'] == {value!r} expected, got "
            + (repr(other) if type(other) is type(value) else f"{other!r} ({_tn(other)})")
        ]


def _tn(v: object) -> str:
    from guards.guard import type_name

    return type_name(type(v))


def test_constant_match_words_for_a_flag(compile_set, verdict) -> None:
    cg = compile_set(lambda gs: gs.CONSTANT_MATCH(LocalSource("flag"), True))
    assert verdict(cg, {"flag": False}) == (False, ["L['flag'] == True expected, got False"])


def test_constant_match_rejects_unsupported_values() -> None:
    gs = GuardSet()
    for bad in ([1], {1: 2}, object(), torch.ones(1)):
        with pytest.raises(UnsupportedGuardValue):
            gs.CONSTANT_MATCH(x_src(), bad)


def test_contradictory_constants_raise() -> None:
    gs = GuardSet()
    gs.CONSTANT_MATCH(x_src(), 1)
    gs.CONSTANT_MATCH(x_src(), 1)  # duplicate merges
    assert len(gs.guards) == 1
    with pytest.raises(GuardError):
        gs.CONSTANT_MATCH(x_src(), 2)


# -- TYPE_MATCH ------------------------------------------------------------------------------


def test_type_match_is_exact_type_identity(compile_set, verdict) -> None:
    class Sub(list):  # type: ignore[type-arg]
        pass

    cg = compile_set(lambda gs: gs.TYPE_MATCH(x_src(), [1]))
    assert verdict(cg, {"x": [9, 9, 9]}) == (True, [])  # values and length are not guarded
    assert verdict(cg, {"x": ()}) == (False, ["type(L['x']) is list expected, got tuple"])
    ok, why = verdict(cg, {"x": Sub()})
    assert not ok and why[0].startswith("type(L['x']) is list expected, got ")


# -- ID_MATCH --------------------------------------------------------------------------------


def fn_a() -> int:
    return 1


def fn_b() -> int:
    return 1


def test_id_match_on_functions_modules_classes(compile_set, verdict) -> None:
    lin = torch.nn.Linear(2, 2)

    def build(gs: GuardSet) -> None:
        gs.ID_MATCH(LocalSource("f"), fn_a)
        gs.ID_MATCH(LocalSource("m"), lin)
        gs.ID_MATCH(LocalSource("c"), torch.nn.Linear)
        gs.ID_MATCH(LocalSource("b"), len)  # builtin: no weakref, held strongly

    cg = compile_set(build)
    good = {"f": fn_a, "m": lin, "c": torch.nn.Linear, "b": len}
    assert verdict(cg, good) == (True, [])
    lin.weight.data.add_(1.0)  # mutating the module does not matter
    assert verdict(cg, good)[0]
    ok, why = verdict(cg, dict(good, f=fn_b))
    assert not ok and why[0].startswith("L['f'] is the function with id")
    assert not verdict(cg, dict(good, m=torch.nn.Linear(2, 2)))[0]
    assert not verdict(cg, dict(good, c=torch.nn.Conv1d))[0]
    assert not verdict(cg, dict(good, b=max))[0]


def test_id_match_keeps_only_a_weak_reference_and_fails_once_the_object_dies(
    compile_set, verdict
) -> None:
    import gc
    import weakref

    class Thing:
        pass

    obj = Thing()
    probe = weakref.ref(obj)
    gs = GuardSet()
    gs.ID_MATCH(x_src(), obj)
    cg = compile_guards(gs, {})
    assert verdict(cg, {"x": obj})[0]
    del obj
    gc.collect()
    assert probe() is None  # the guard did not keep it alive
    ok, why = verdict(cg, {"x": None})
    assert not ok and "no longer exists" in why[0]
    assert not verdict(cg, {"x": Thing()})[0]


def test_id_match_on_none_is_refused() -> None:
    with pytest.raises(UnsupportedGuardValue):
        GuardSet().ID_MATCH(x_src(), None)


# -- LENGTH ----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [[1, 2, 3], (1, 2, 3), {"a": 1, "b": 2, "c": 3}], ids=repr)
def test_length_checks_type_and_len_only(compile_set, verdict, value) -> None:
    cg = compile_set(lambda gs: gs.LENGTH(LocalSource("xs"), value))
    assert verdict(cg, {"xs": value})[0]
    if isinstance(value, dict):
        same_len = {"x": 0, "y": 0, "z": 0}
        longer = dict(value, d=4)
    else:
        same_len = type(value)(["p", "q", "r"])
        longer = type(value)([1, 2, 3, 4])
    assert verdict(cg, {"xs": same_len}) == (True, [])
    assert verdict(cg, {"xs": longer}) == (False, ["len(L['xs']) == 3 expected, got 4"])
    other = (1, 2, 3) if type(value) is list else [1, 2, 3]
    ok, why = verdict(cg, {"xs": other})
    assert not ok and why[0].startswith(f"type(L['xs']) is {type(value).__name__} expected")


# -- DICT_KEYS -------------------------------------------------------------------------------


def test_dict_keys_checks_type_and_key_order_not_values(compile_set, verdict) -> None:
    cg = compile_set(lambda gs: gs.DICT_KEYS(LocalSource("d"), {"a": 1, "b": 2}))
    assert verdict(cg, {"d": {"a": 100, "b": [5]}}) == (True, [])
    assert verdict(cg, {"d": {"b": 2, "a": 1}}) == (
        False,
        ["list(L['d'].keys()) == ['a', 'b'] expected, got ['b', 'a']"],
    )
    assert verdict(cg, {"d": {"a": 1}}) == (
        False,
        ["list(L['d'].keys()) == ['a', 'b'] expected, got ['a']"],
    )
    import collections

    ok, why = verdict(cg, {"d": collections.OrderedDict(a=1, b=2)})
    assert not ok and why[0].startswith("type(L['d']) is dict expected")


def test_dict_keys_with_non_literal_keys(compile_set, verdict) -> None:
    d = {Mode.TRAIN: 1, int: 2}
    cg = compile_set(lambda gs: gs.DICT_KEYS(LocalSource("d"), d))
    assert verdict(cg, {"d": {Mode.TRAIN: 0, int: 0}})[0]
    assert not verdict(cg, {"d": {Mode.EVAL: 0, int: 0}})[0]


@pytest.mark.parametrize(
    ("keys", "others"),
    [
        ((1, "a"), [(True, "a"), (1.0, "a")]),
        ((True,), [(1,), (1.0,)]),
        ((0.0,), [(-0.0,), (0,), (False,)]),
        (((1, 2.0),), [((1, 2),), ((True, 2.0),)]),
    ],
    ids=repr,
)
def test_dict_keys_equal_by_eq_but_not_as_constants_fail(
    compile_set, verdict, keys, others
) -> None:
    cg = compile_set(lambda gs: gs.DICT_KEYS(LocalSource("d"), dict.fromkeys(keys)))
    assert verdict(cg, {"d": dict.fromkeys(keys, 5)}) == (True, [])
    for other in others:
        ok, why = verdict(cg, {"d": dict.fromkeys(other)})
        assert not ok and len(why) == 1 and "of types" in why[0], (other, why)


# -- guards through bases ----------------------------------------------------------------------


def test_attribute_and_item_guards_see_only_what_they_read(compile_set, verdict) -> None:
    self_ = types.SimpleNamespace(training=True, other=1, cfg={"k": 3, "j": 4})
    train = AttrSource(LocalSource("self"), "training")
    k = ItemSource(AttrSource(LocalSource("self"), "cfg"), "k")

    def build(gs: GuardSet) -> None:
        gs.TYPE_MATCH(LocalSource("self"), self_)
        gs.CONSTANT_MATCH(train, True)
        gs.CONSTANT_MATCH(k, 3)

    cg = compile_set(build)
    assert verdict(cg, {"self": self_})[0]
    self_.other = "changed"  # unrelated attribute
    self_.cfg["j"] = 99  # unrelated dict value
    assert verdict(cg, {"self": self_}) == (True, [])
    self_.training = False
    assert verdict(cg, {"self": self_}) == (
        False,
        ["L['self'].training == True expected, got False"],
    )
    self_.training = True
    self_.cfg["k"] = 4
    assert verdict(cg, {"self": self_}) == (False, ["L['self'].cfg['k'] == 3 expected, got 4"])


def test_global_guards_see_rebinding_of_the_global(compile_set, verdict) -> None:
    g: dict[str, object] = {"scale": 2, "torch": torch}

    def build(gs: GuardSet) -> None:
        gs.CONSTANT_MATCH(GlobalSource("scale"), 2)
        gs.ID_MATCH(AttrSource(GlobalSource("torch"), "relu"), torch.relu)

    cg = compile_set(build, g)
    assert verdict(cg, {}) == (True, [])
    g["scale"] = 3
    assert verdict(cg, {}) == (False, ["G['scale'] == 2 expected, got 3"])
    g["scale"] = 2
    g["torch"] = types.SimpleNamespace(relu=torch.sigmoid)
    assert not verdict(cg, {})[0]
    del g["torch"]
    ok, why = verdict(cg, {})
    assert not ok and "KeyError" in why[0]
