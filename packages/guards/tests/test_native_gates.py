"""The C++ checks read module attributes straight from the instance dict only while the class
is unchanged since the check was built (DictGate: class identity + version tag).  Each test
changes a class after building the check, in a way that changes what the attribute read gives,
and asserts the C++ verdict still equals the Python path's (and ``failures()``)."""

from __future__ import annotations

import os
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
