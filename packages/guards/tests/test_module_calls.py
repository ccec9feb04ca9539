"""MODULE_CALLS: the called submodules' class, hooks and inlined forward (both check paths)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from guards import (
    AttrSource,
    CompiledGuards,
    GuardError,
    GuardSet,
    ItemSource,
    LocalSource,
    UnsupportedGuardValue,
)

Verdict = Callable[[CompiledGuards, dict[str, object]], tuple[bool, list[str]]]
LAYERS = AttrSource(ItemSource(AttrSource(LocalSource("self"), "_modules"), "layers"), "_modules")
WHERE = "L['self']._modules['layers']._modules"


class Scale(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


class Shift(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


def net() -> torch.nn.Module:
    model = torch.nn.Module()
    model.layers = torch.nn.Sequential(Scale(), Shift(), Scale())
    return model


def entries(model: torch.nn.Module) -> list[tuple[str, type, object | None]]:
    return [(k, type(m), type(m).forward) for k, m in model.layers._modules.items()]


def compiled(compile_set: Any, model: torch.nn.Module) -> CompiledGuards:
    cg: CompiledGuards = compile_set(lambda gs: gs.MODULE_CALLS(LAYERS, entries(model)))
    return cg


def test_unchanged_modules_pass(compile_set: Any, verdict: Verdict) -> None:
    model = net()
    cg = compiled(compile_set, model)
    assert verdict(cg, {"self": model}) == (True, [])
    assert cg.text == (
        f"MODULE_CALLS: {WHERE} keys=['0', '1', '2'] "
        "(class, no hooks, the class forward inlined and not shadowed)"
    )


@pytest.mark.parametrize(
    "register",
    [
        lambda m: m.register_forward_hook(lambda *a: None),
        lambda m: m.register_forward_pre_hook(lambda *a: None),
        lambda m: m.register_full_backward_hook(lambda *a: None),
        lambda m: m.register_full_backward_pre_hook(lambda *a: None),
    ],
)
def test_a_hook_on_a_called_module_fails(compile_set: Any, verdict: Verdict, register) -> None:  # type: ignore[no-untyped-def]
    model = net()
    cg = compiled(compile_set, model)
    handle = register(model.layers[1])
    ok, why = verdict(cg, {"self": model})
    assert not ok and len(why) == 1
    assert why[0].startswith(f"{WHERE}['1'] has _") and "hooks" in why[0]
    handle.remove()
    assert verdict(cg, {"self": model}) == (True, [])


def test_forward_shadowed_on_the_instance_fails(compile_set: Any, verdict: Verdict) -> None:
    model = net()
    cg = compiled(compile_set, model)
    model.layers[2].forward = lambda x: x
    assert verdict(cg, {"self": model}) == (
        False,
        [f"{WHERE}['2'] shadows the class forward with an instance attribute"],
    )


def test_instance_forward_is_allowed_when_the_trace_ran_it(compile_set: Any, verdict) -> None:
    model = net()
    model.layers[0].forward = lambda x: x
    calls = [("0", Scale, None), ("1", Shift, Shift.forward)]
    cg = compile_set(lambda gs: gs.MODULE_CALLS(LAYERS, calls))
    assert verdict(cg, {"self": model}) == (True, [])


def test_class_forward_patched_fails(compile_set: Any, verdict: Verdict) -> None:
    model = net()
    cg = compiled(compile_set, model)
    original = Shift.forward
    Shift.forward = lambda self, x: x  # type: ignore[method-assign]
    try:
        assert verdict(cg, {"self": model}) == (
            False,
            [f"{__name__}.Shift.forward is not the function the trace inlined"],
        )
    finally:
        Shift.forward = original  # type: ignore[method-assign]
    assert verdict(cg, {"self": model})[0]


def test_changed_class_and_missing_key_fail(compile_set: Any, verdict: Verdict) -> None:
    model = net()
    cg = compiled(compile_set, model)
    model.layers[0].__class__ = Shift
    assert verdict(cg, {"self": model})[1] == [
        f"type({WHERE}['0']) is {__name__}.Scale expected, got {__name__}.Shift"
    ]
    model.layers[0].__class__ = Scale
    del model.layers._modules["2"]
    ok, why = verdict(cg, {"self": model})
    assert not ok and why[0].startswith(f"{WHERE}['2']: reading it raised KeyError")
    assert not verdict(cg, {"self": torch.nn.Linear(2, 2)})[0]


def test_two_captures_merge_and_contradictions_raise() -> None:
    model = net()
    gs = GuardSet()
    gs.MODULE_CALLS(LAYERS, entries(model)[:1])
    gs.MODULE_CALLS(LAYERS, entries(model)[1:])
    (guard,) = gs.guards
    assert [c.key for c in guard.calls] == ["0", "1", "2"]  # type: ignore[attr-defined]
    with pytest.raises(GuardError):
        gs.MODULE_CALLS(LAYERS, [("0", Shift, Shift.forward)])
    with pytest.raises(GuardError):
        GuardSet().MODULE_CALLS(LAYERS, [("0", Scale, None), ("0", Scale, Scale.forward)])
    with pytest.raises(UnsupportedGuardValue):
        GuardSet().MODULE_CALLS(LAYERS, [])
    with pytest.raises(UnsupportedGuardValue):
        GuardSet().MODULE_CALLS(LAYERS, [(0, Scale, None)])  # type: ignore[list-item]
