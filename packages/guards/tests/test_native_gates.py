"""The C++ checks read module attributes straight from the instance dict only while the class
is unchanged since the check was built (DictGate: class identity + version tag).  Each test
changes a class after building the check, in a way that changes what the attribute read gives,
and asserts the C++ verdict still equals the Python path's (and ``failures()``)."""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import pytest
import torch

from guards import AttrSource, CompiledGuards, GuardSet, LocalSource, compile_guards
from guards.native import PURE_PYTHON_ENV, native_module


@pytest.fixture(autouse=True)
def check_path() -> str:
    """Overrides conftest's two-path fixture: these tests compile both paths themselves."""
    return "both"


def both(build: Callable[[GuardSet], None]) -> tuple[CompiledGuards, CompiledGuards]:
    """(C++ path, Python path) compiled from the same guards; skips if the C++ one is absent."""
    old = os.environ.pop(PURE_PYTHON_ENV, None)
    try:
        if native_module() is None:
            pytest.skip("guards' C++ extension is not built")
        gs = GuardSet()
        build(gs)
        fast = compile_guards(gs, {})
        os.environ[PURE_PYTHON_ENV] = "1"
        slow = compile_guards(gs, {})
    finally:
        os.environ.pop(PURE_PYTHON_ENV, None)
        if old is not None:
            os.environ[PURE_PYTHON_ENV] = old
    return fast, slow


def agree(fast: CompiledGuards, slow: CompiledGuards, f_locals: dict[str, object]) -> bool:
    """Both paths and failures() give one verdict on ``f_locals``; returns it."""
    a, b = fast(f_locals), slow(f_locals)
    why = slow.failures(f_locals)
    assert a == b == (why == []), (a, b, why)
    return a


def _params_guard(model: torch.nn.Module) -> Any:
    names = [n for n, _ in model.named_parameters()]
    return both(lambda gs: gs.MODULE_PARAMS(LocalSource("m"), model, names))


def test_getattribute_added_to_a_submodule_class_after_building_is_seen() -> None:
    class Lin(torch.nn.Linear):
        pass

    model = torch.nn.Sequential(Lin(2, 2), Lin(2, 2))
    fast, slow = _params_guard(model)
    assert "___module_params_check" in fast.source_code
    assert agree(fast, slow, {"m": model})
    other = {"weight": torch.nn.Parameter(torch.ones(2, 2)), "bias": None}

    def redirected(self: Any, name: str) -> Any:
        if name == "_parameters":
            return other
        return object.__getattribute__(self, name)

    Lin.__getattribute__ = redirected  # type: ignore[method-assign,assignment]
    try:
        assert not agree(fast, slow, {"m": model})  # another weight object is read now
    finally:
        del Lin.__getattribute__
    assert agree(fast, slow, {"m": model})


def test_class_property_shadowing_modules_after_building_is_seen() -> None:
    class Seq(torch.nn.Sequential):
        pass

    model = Seq(torch.nn.Linear(2, 2))
    fast, slow = _params_guard(model)
    assert agree(fast, slow, {"m": model})
    Seq._modules = property(lambda self: {"0": torch.nn.Linear(2, 2)})  # type: ignore[assignment]
    try:
        assert not agree(fast, slow, {"m": model})
    finally:
        del Seq._modules
    assert agree(fast, slow, {"m": model})


def test_unrelated_class_change_keeps_the_verdicts() -> None:
    class Lin(torch.nn.Linear):
        pass

    model = torch.nn.Sequential(Lin(2, 2))
    fast, slow = _params_guard(model)
    Lin.extra = 1  # type: ignore[attr-defined]  # new version tag: the full getattr path
    assert agree(fast, slow, {"m": model})
    torch.nn.Sequential.extra = 1  # type: ignore[attr-defined]  # a base of the root's class
    try:
        assert agree(fast, slow, {"m": model})
        model[0].weight.data = torch.zeros(3, 2)  # metadata still read live on that path
        assert not agree(fast, slow, {"m": model})
    finally:
        del torch.nn.Sequential.extra  # type: ignore[attr-defined]


def test_module_calls_with_getattribute_added_after_building_agree() -> None:
    class Act(torch.nn.ReLU):
        pass

    seq = torch.nn.Sequential(Act(), Act())
    source = AttrSource(LocalSource("seq"), "_modules")
    calls = [(k, type(m), type(m).forward) for k, m in seq._modules.items()]
    fast, slow = both(lambda gs: gs.MODULE_CALLS(source, calls))
    assert "___module_calls_check" in fast.source_code
    assert agree(fast, slow, {"seq": seq})
    hooked = {
        "_forward_hooks": {0: print}, "_forward_pre_hooks": {}, "_backward_hooks": {},
        "_backward_pre_hooks": {},
    }

    def redirected(self: Any, name: str) -> Any:
        if name == "__dict__":
            return hooked
        return object.__getattribute__(self, name)

    Act.__getattribute__ = redirected  # type: ignore[method-assign,assignment]
    try:
        assert not agree(fast, slow, {"seq": seq})
    finally:
        del Act.__getattribute__
    assert agree(fast, slow, {"seq": seq})
    Act._forward_hooks = {0: print}  # type: ignore[assignment]  # a class attribute: not a hook
    try:
        agree(fast, slow, {"seq": seq})  # both read the instance dict's (empty) hooks
    finally:
        del Act._forward_hooks
    assert agree(fast, slow, {"seq": seq})


# -- dict version tags ---------------------------------------------------------------------------
#
# After a passing call the C++ checks skip the dict lookups whose dict still has the version
# tag it had then (see dict_tag in csrc/module_gate.h).  Each test below warms that cache with
# passing calls, then changes the tree in a way that leaves some dicts untouched and changes
# one, and asserts the C++ verdict equals the Python path's on the next calls, then again after
# undoing the change.


def _warm(fast: CompiledGuards, slow: CompiledGuards, f_locals: dict[str, object]) -> None:
    for _ in range(3):
        assert agree(fast, slow, f_locals)


def _tree() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Sequential(torch.nn.Linear(4, 2))
    )


def _delete_and_set_again(model: torch.nn.Sequential) -> None:
    w = model[0].weight
    del model[0].weight
    model[0].weight = w


def _swap_in_modules_dict(model: torch.nn.Sequential) -> None:
    inner = model[2]
    model._modules["2"] = torch.nn.Sequential(torch.nn.Linear(4, 2))
    model._modules["2"] = inner


PARAM_TREE_CHANGES: dict[str, tuple[Callable[[torch.nn.Sequential], object], bool]] = {
    # name: (change, the check still passes)
    "parameter replaced": (
        lambda m: setattr(m[2][0], "weight", torch.nn.Parameter(m[2][0].weight.detach())), False),
    "parameter entry rebound in the dict": (
        lambda m: m[0]._parameters.__setitem__("bias", torch.nn.Parameter(torch.zeros(4))), False),
    "deleted and set again (new tag, same object)": (_delete_and_set_again, True),
    "submodule replaced and put back (new tag, same object)": (_swap_in_modules_dict, True),
    "_parameters replaced by an equal copy": (
        lambda m: setattr(m[0], "_parameters", dict(m[0]._parameters)), True),
    "_parameters replaced by a copy with another bias": (
        lambda m: setattr(m[0], "_parameters", {**m[0]._parameters, "bias": None}), False),
    "_modules replaced by an equal copy": (
        lambda m: setattr(m, "_modules", dict(m._modules)), True),
    "inner _modules entry replaced": (
        lambda m: m[2]._modules.__setitem__("0", torch.nn.Linear(4, 2)), False),
    "metadata behind an unchanged tree (.data)": (
        lambda m: setattr(m[2][0].bias, "data", torch.zeros(5)), False),
    "requires_grad behind an unchanged tree": (
        lambda m: m[0].weight.requires_grad_(False), False),
    "an unguarded attribute added (instance dict tag moves)": (
        lambda m: setattr(m[0], "note", 1), True),
}


@pytest.mark.parametrize("change", list(PARAM_TREE_CHANGES))
def test_module_params_verdicts_agree_after_a_warm_cache(change: str) -> None:
    mutate, passes = PARAM_TREE_CHANGES[change]
    model = _tree()
    fast, slow = _params_guard(model)
    _warm(fast, slow, {"m": model})
    mutate(model)
    for _ in range(2):
        assert agree(fast, slow, {"m": model}) is passes


def test_module_params_passes_again_once_a_change_is_undone() -> None:
    model = _tree()
    fast, slow = _params_guard(model)
    _warm(fast, slow, {"m": model})
    old = model[2][0].weight
    model[2][0].weight = torch.nn.Parameter(old.detach().clone())
    assert not agree(fast, slow, {"m": model})
    model[2][0].weight = old
    _warm(fast, slow, {"m": model})
    assert not agree(fast, slow, {"m": _tree()})  # another tree entirely, after a warm cache


class _Act(torch.nn.ReLU):
    pass


def _calls_guard(seq: torch.nn.Sequential) -> tuple[CompiledGuards, CompiledGuards]:
    source = AttrSource(LocalSource("seq"), "_modules")
    calls = [(k, type(m), type(m).forward) for k, m in seq._modules.items()]
    return both(lambda gs: gs.MODULE_CALLS(source, calls))


class _TruthyWhenFlagged(dict):  # type: ignore[type-arg]
    flag = False

    def __bool__(self) -> bool:
        return self.flag


def _hook_dict_with_own_truth(m: torch.nn.Module) -> None:
    m._forward_hooks = _TruthyWhenFlagged()  # type: ignore[assignment]


CALL_TREE_CHANGES: dict[str, tuple[Callable[[torch.nn.Sequential], object], bool]] = {
    "hook put straight into the hook dict (instance dict untouched)": (
        lambda s: s[1]._forward_hooks.__setitem__(99, print), False),
    "pre-hook registered": (lambda s: s[0].register_forward_pre_hook(lambda *a: None), False),
    "backward hook registered": (
        lambda s: s[1].register_full_backward_hook(lambda *a: None), False),
    "hook dict replaced by an empty OrderedDict": (
        lambda s: setattr(s[0], "_forward_hooks", OrderedDict()), True),
    "hook dict replaced by a non-empty one": (
        lambda s: setattr(s[0], "_forward_hooks", OrderedDict({1: print})), False),
    "forward shadowed on the instance": (lambda s: setattr(s[1], "forward", print), False),
    "class changed (no dict touched)": (lambda s: setattr(s[0], "__class__", torch.nn.Tanh), False),
    "module replaced by another of its class": (lambda s: s.__setitem__(1, _Act()), True),
    "module deleted": (lambda s: s._modules.pop("1"), False),
    "class forward patched": (lambda s: setattr(_Act, "forward", lambda self, x: x), False),
}


@pytest.mark.parametrize("change", list(CALL_TREE_CHANGES))
def test_module_calls_verdicts_agree_after_a_warm_cache(change: str) -> None:
    mutate, passes = CALL_TREE_CHANGES[change]
    seq = torch.nn.Sequential(_Act(), _Act())
    fast, slow = _calls_guard(seq)
    _warm(fast, slow, {"seq": seq})
    original = _Act.forward
    try:
        mutate(seq)
        for _ in range(2):
            assert agree(fast, slow, {"seq": seq}) is passes
    finally:
        _Act.forward = original  # type: ignore[method-assign]


def test_hook_dict_with_its_own_truth_is_read_on_every_call() -> None:
    seq = torch.nn.Sequential(_Act(), _Act())
    _hook_dict_with_own_truth(seq[0])
    fast, slow = _calls_guard(seq)
    _warm(fast, slow, {"seq": seq})
    _TruthyWhenFlagged.flag = True  # no dict changes at all: only __bool__ answers otherwise
    try:
        assert not agree(fast, slow, {"seq": seq})
    finally:
        _TruthyWhenFlagged.flag = False
    assert agree(fast, slow, {"seq": seq})


def test_module_calls_passes_again_once_hooks_are_removed() -> None:
    seq = torch.nn.Sequential(_Act(), _Act())
    fast, slow = _calls_guard(seq)
    _warm(fast, slow, {"seq": seq})
    handle = seq[1].register_forward_hook(lambda *a: None)
    assert not agree(fast, slow, {"seq": seq})
    handle.remove()
    _warm(fast, slow, {"seq": seq})
    other = torch.nn.Sequential(_Act(), _Act())
    other[0].register_forward_hook(lambda *a: None)
    assert not agree(fast, slow, {"seq": other})  # another _modules dict after a warm cache


def _keys_guard(d: dict[Any, Any]) -> tuple[CompiledGuards, CompiledGuards]:
    return both(lambda gs: gs.DICT_KEYS(LocalSource("d"), d))


DICT_CHANGES: dict[str, tuple[Callable[[dict[Any, Any]], object], bool]] = {
    "value replaced (new tag, same keys)": (lambda d: d.__setitem__("b", 9), True),
    "key added": (lambda d: d.__setitem__("z", 0), False),
    "key deleted": (lambda d: d.pop("a"), False),
    "key moved to the end": (lambda d: d.__setitem__("a", d.pop("a")), False),
    "cleared and refilled in order": (
        lambda d: (items := list(d.items()), d.clear(), d.update(items)), True),
    "cleared": (lambda d: d.clear(), False),
}


@pytest.mark.parametrize("change", list(DICT_CHANGES))
def test_dict_keys_verdicts_agree_after_a_warm_cache(change: str) -> None:
    mutate, passes = DICT_CHANGES[change]
    d = {"a": 1, "b": 2, 3: "c"}
    fast, slow = _keys_guard(d)
    assert "___dict_keys_check" in fast.source_code
    _warm(fast, slow, {"d": d})
    mutate(d)
    for _ in range(2):
        assert agree(fast, slow, {"d": d}) is passes
    assert not agree(fast, slow, {"d": OrderedDict(d)})  # another type, after a warm cache
    assert agree(fast, slow, {"d": {"a": 0, "b": 0, 3: 0}}) is True  # another dict, same keys


def test_dict_keys_of_an_ordered_dict_stay_on_the_python_compare() -> None:
    d = OrderedDict(a=1, b=2)
    fast, slow = _keys_guard(d)
    assert "___dict_keys_check" not in fast.source_code
    _warm(fast, slow, {"d": d})
    d.move_to_end("a")  # reorders without a version-tag change
    assert not agree(fast, slow, {"d": d})


class _Key:
    """A key equal to the string "k", unequal once ``off`` is set."""

    off = False

    def __hash__(self) -> int:
        return hash("k")

    def __eq__(self, other: object) -> bool:
        return not _Key.off and (other == "k" or isinstance(other, _Key))


def test_dict_keys_compare_with_eq_like_tuple_equality() -> None:
    fast, slow = _keys_guard({"k": 1})
    d = {_Key(): 1}
    _warm(fast, slow, {"d": d})
    _Key.off = True  # the same dict, unchanged, but its key no longer equals "k"
    try:
        assert agree(fast, slow, {"d": d}) is False  # a user key's verdict is never cached
    finally:
        _Key.off = False
    assert agree(fast, slow, {"d": d})
