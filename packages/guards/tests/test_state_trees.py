"""State trees (guards/state_trees.py, csrc/state_tree.cpp): value guards on an object graph
skipped while nothing on their paths changed.  Every mutation below must give the same answer
as the same guards compiled without trees, and as ``failures()``."""

from __future__ import annotations

import gc
import types
import weakref
from collections.abc import Callable
from typing import Any

import pytest
import torch

from guards import (
    AttrSource,
    CompiledGuards,
    GlobalSource,
    GuardSet,
    ItemSource,
    LocalSource,
    TypeSource,
    compile_guards,
)
from guards.state_trees import STATE_TREES_ENV


class Leaf:
    def __init__(self) -> None:
        self.stride = (2, 2)
        self.flag = True
        self.mode = "zeros"
        self.weight = torch.ones(3)

    def forward(self) -> int:
        return 1


class OtherLeaf(Leaf):
    pass


class Holder:
    def __init__(self, a: Leaf | None = None, b: Leaf | None = None) -> None:
        self._modules: dict[str, Any] = {"a": a or Leaf(), "b": b or Leaf()}
        self.training = False


M = LocalSource("m")
MODS = AttrSource(M, "_modules")
A = ItemSource(MODS, "a")
B = ItemSource(MODS, "b")


def build(gs: GuardSet, m: Holder, f_globals: dict[str, Any]) -> None:
    a = m._modules["a"]
    gs.CONSTANT_MATCH(AttrSource(M, "training"), False)
    gs.DICT_KEYS(MODS, m._modules)
    gs.ID_MATCH(B, m._modules["b"])
    gs.TYPE_MATCH(A, a)
    for i in range(2):
        gs.CONSTANT_MATCH(ItemSource(AttrSource(A, "stride"), i), 2)
    gs.CONSTANT_MATCH(AttrSource(A, "flag"), True)
    gs.CONSTANT_MATCH(AttrSource(A, "mode"), "zeros")
    gs.ID_MATCH(AttrSource(TypeSource(A), "forward"), type(a).forward)
    gs.TENSOR_MATCH(AttrSource(A, "weight"), a.weight)  # not covered: read from the tree
    for name in ("torch", "math_ops"):
        gs.ID_MATCH(GlobalSource(name), f_globals[name])
    gs.ID_MATCH(AttrSource(GlobalSource("torch"), "flatten"), torch.flatten)
    gs.ID_MATCH(AttrSource(GlobalSource("math_ops"), "relu"), f_globals["math_ops"].relu)
    gs.add_base_guards({"m": m}, f_globals)


@pytest.fixture
def pair(
    native: Any, monkeypatch: pytest.MonkeyPatch
) -> Callable[[Holder, dict[str, Any]], tuple[CompiledGuards, CompiledGuards]]:
    """(with trees, without trees) for the same guards over ``m`` and ``f_globals``."""

    def make(m: Holder, f_globals: dict[str, Any]) -> tuple[CompiledGuards, CompiledGuards]:
        gs = GuardSet()
        build(gs, m, f_globals)
        with_trees = compile_guards(gs, f_globals)
        assert "___state_tree" in with_trees.source_code
        monkeypatch.setenv(STATE_TREES_ENV, "0")
        without = compile_guards(gs, f_globals)
        monkeypatch.delenv(STATE_TREES_ENV)
        assert "___state_tree" not in without.source_code
        return with_trees, without

    return make


def globals_dict() -> dict[str, Any]:
    ops = types.ModuleType("math_ops")
    ops.relu = lambda x: x  # type: ignore[attr-defined]
    return {"torch": torch, "math_ops": ops}


def trees(cg: CompiledGuards) -> list[Any]:
    ns = cg.check.__globals__
    return [v for k, v in ns.items() if k.startswith("___state_tree")]


def agree(cg: CompiledGuards, plain: CompiledGuards, f_locals: dict[str, Any]) -> bool:
    """Both checks (twice: the second after a re-arm) and failures() say the same."""
    want = plain(f_locals)
    assert cg(f_locals) is want
    assert cg(f_locals) is want
    assert (cg.failures(f_locals) == []) is want
    return want


def test_the_trees_arm_on_a_passing_check_and_then_stand_for_their_guards(pair: Any) -> None:
    m, g = Holder(), globals_dict()
    cg, plain = pair(m, g)
    assert agree(cg, plain, {"m": m})
    assert [t.why() for t in trees(cg)] == ["armed", "armed"]
    # Both root values and the exported node (a, for the TENSOR_MATCH) are what the check read.
    assert trees(cg)[1](m) == (m._modules["a"],)


MUTATIONS: dict[str, Callable[[Holder, dict[str, Any]], None]] = {
    "a tuple attribute replaced": lambda m, g: setattr(m._modules["a"], "stride", (1, 2)),
    "an equal tuple put back": lambda m, g: setattr(m._modules["a"], "stride", (2, 2)),
    "a flag flipped": lambda m, g: setattr(m._modules["a"], "flag", False),
    "a string attribute deleted": lambda m, g: delattr(m._modules["a"], "mode"),
    "the root's flag flipped": lambda m, g: setattr(m, "training", True),
    "a submodule swapped": lambda m, g: m._modules.__setitem__("b", Leaf()),
    "a submodule added": lambda m, g: m._modules.__setitem__("c", Leaf()),
    "an equal submodule swapped in where only its type is guarded": (
        lambda m, g: m._modules.__setitem__("a", Leaf())
    ),
    "a submodule's class reassigned": lambda m, g: setattr(m._modules["a"], "__class__", OtherLeaf),
    "the instance dict replaced": lambda m, g: setattr(
        m._modules["a"], "__dict__", {**vars(m._modules["a"]), "flag": 0}
    ),
    "the tuple made a list": lambda m, g: setattr(m._modules["a"], "stride", [2, 2]),
    "the weight resized": lambda m, g: setattr(m._modules["a"], "weight", torch.ones(4)),
    "a global rebound": lambda m, g: g.__setitem__("torch", types.ModuleType("torch")),
    "an unrelated global added": lambda m, g: g.__setitem__("counter", 1),
    "a module attribute rebound": lambda m, g: setattr(g["math_ops"], "relu", abs),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_each_mutation_on_a_guarded_path_is_seen(pair: Any, mutation: str) -> None:
    m, g = Holder(), globals_dict()
    cg, plain = pair(m, g)
    assert agree(cg, plain, {"m": m})
    MUTATIONS[mutation](m, g)
    agree(cg, plain, {"m": m})


def test_a_class_property_that_shadows_the_instance_attribute_is_seen(pair: Any) -> None:
    class Shadowed(Leaf):
        pass

    m, g = Holder(a=Shadowed()), globals_dict()
    cg, plain = pair(m, g)
    assert agree(cg, plain, {"m": m})
    Shadowed.stride = property(lambda self: (1, 1))  # type: ignore[assignment,method-assign]
    assert not agree(cg, plain, {"m": m})
    del Shadowed.stride
    assert agree(cg, plain, {"m": m})


def test_a_class_method_replaced_is_seen(pair: Any) -> None:
    class Patched(Leaf):
        pass

    m, g = Holder(a=Patched()), globals_dict()
    cg, plain = pair(m, g)
    assert agree(cg, plain, {"m": m})
    Patched.forward = lambda self: 2  # type: ignore[method-assign]
    assert not agree(cg, plain, {"m": m})


def test_another_root_object_is_checked_in_full(pair: Any) -> None:
    m, g = Holder(), globals_dict()
    cg, plain = pair(m, g)
    assert agree(cg, plain, {"m": m})
    same_b = Holder(b=m._modules["b"])
    assert agree(cg, plain, {"m": same_b})
    other_b = Holder()
    assert not agree(cg, plain, {"m": other_b})
    same_b._modules["a"].flag = False
    assert not agree(cg, plain, {"m": same_b})
    assert agree(cg, plain, {"m": m})


def test_a_tree_that_cannot_be_armed_still_checks_right(pair: Any) -> None:
    class Odd(Leaf):
        mode = "zeros"  # read from the class: no instance dict entry to pin

        def __init__(self) -> None:
            super().__init__()
            del self.mode

    m, g = Holder(a=Odd()), globals_dict()
    cg, plain = pair(m, g)
    assert agree(cg, plain, {"m": m})
    assert "its class defines an attribute" in trees(cg)[1].why()
    m._modules["a"].flag = False
    assert not agree(cg, plain, {"m": m})


def test_the_trees_keep_no_object_alive(pair: Any) -> None:
    m, g = Holder(), globals_dict()
    cg, _ = pair(m, g)
    assert cg({"m": m})
    ref = weakref.ref(m._modules["a"])
    m._modules.clear()
    del m
    gc.collect()
    assert ref() is None
    assert cg({"m": Holder()}) is False  # the ID_MATCH'd b is gone: fails, never crashes


def _store_flag(o: Leaf, value: object) -> None:
    o.flag = value  # type: ignore[assignment]


def test_attribute_stores_by_specialised_bytecode_are_seen(pair: Any) -> None:
    m, g = Holder(), globals_dict()
    a = m._modules["a"]
    cg, plain = pair(m, g)
    for _ in range(200):  # warm STORE_ATTR up to its specialised forms, on this very object
        _store_flag(a, True)
    assert agree(cg, plain, {"m": m})
    for _ in range(200):
        _store_flag(a, True)
    assert agree(cg, plain, {"m": m})
    _store_flag(a, 1)
    assert not agree(cg, plain, {"m": m})
    _store_flag(a, True)
    assert agree(cg, plain, {"m": m})


def _with_default(x: int = 3) -> int:
    return x


def test_a_guard_through_a_function_attribute_stays_out_of_the_tree(native: Any) -> None:
    g = {**globals_dict(), "fn": _with_default}
    gs = GuardSet()
    gs.ID_MATCH(GlobalSource("fn"), _with_default)
    gs.CONSTANT_MATCH(AttrSource(GlobalSource("fn"), "__defaults__"), (3,))
    gs.ID_MATCH(GlobalSource("torch"), torch)
    gs.ID_MATCH(AttrSource(GlobalSource("torch"), "flatten"), torch.flatten)
    gs.ID_MATCH(AttrSource(GlobalSource("torch"), "relu"), torch.relu)
    gs.ID_MATCH(GlobalSource("math_ops"), g["math_ops"])
    cg = compile_guards(gs, g)
    assert cg({})
    assert [t.why() for t in trees(cg)] == ["armed"]
    _with_default.__defaults__ = (4,)
    try:
        assert not cg({})
    finally:
        _with_default.__defaults__ = (3,)
    assert cg({})


def test_a_failure_to_plan_trees_leaves_the_check_without_them(
    pair: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(guards: Any) -> Any:
        raise RuntimeError("planner bug")

    monkeypatch.setattr("guards.check_fn.plan_trees", broken)
    m, g = Holder(), globals_dict()
    gs = GuardSet()
    build(gs, m, g)
    cg = compile_guards(gs, g)
    assert "___state_tree" not in cg.source_code
    assert "planning them failed" in caplog.text
    assert cg({"m": m})
    m._modules["a"].flag = False
    assert not cg({"m": m})
