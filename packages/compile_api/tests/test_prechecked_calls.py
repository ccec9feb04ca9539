"""A compiled graph whose inputs the frame's guards fully check is called without its own
input check (``CompiledGraph.call_prechecked``), and stays correct when the guards fail."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

import compile_api
import guards
import inductor_lite
from compile_api.prechecked import prechecked_entry


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.BatchNorm2d(8),
        torch.nn.Hardswish(),
        torch.nn.Conv2d(8, 8, 3, padding=1, groups=8),
        torch.nn.Sigmoid(),
    ).eval()


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """How often a CompiledGraph ran its own input check and its prechecked entry."""
    counts = {"checked": 0, "prechecked": 0}
    matches = inductor_lite.CompiledGraph._matches
    prechecked = inductor_lite.CompiledGraph.call_prechecked

    def counting_matches(self: Any, args: Any) -> bool:
        counts["checked"] += 1
        return matches(self, args)

    def counting_prechecked(self: Any, *args: Any) -> Any:
        counts["prechecked"] += 1
        return prechecked(self, *args)

    monkeypatch.setattr(inductor_lite.CompiledGraph, "_matches", counting_matches)
    monkeypatch.setattr(inductor_lite.CompiledGraph, "call_prechecked", counting_prechecked)
    yield counts


def test_guarded_parameters_are_not_checked_again_per_call(counted: dict[str, int]) -> None:
    model = _net()
    x = torch.randn(2, 3, 10, 10)
    compiled = compile_api.compile(model)
    with torch.no_grad():
        for _ in range(4):
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    assert counted["prechecked"] == 4
    # the first call checks once (call_prechecked's rule), the next three do not
    assert counted["checked"] == 1


def test_a_resized_parameter_fails_the_guard_and_recompiles(counted: dict[str, int]) -> None:
    model = _net()
    x = torch.randn(2, 3, 10, 10)
    compiled = compile_api.compile(model)
    with torch.no_grad():
        compiled(x)
        compiled(x)
        conv = model[0]
        assert isinstance(conv, torch.nn.Conv2d)
        # same object, other layout: only a metadata check notices
        conv.weight.data = conv.weight.data.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
        assert not conv.weight.is_contiguous()
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
        conv.weight.data = torch.randn(8, 3, 1, 1)  # other sizes: a 12x12 output
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)


def test_grad_mode_calls_keep_their_own_route(counted: dict[str, int]) -> None:
    model = _net()
    x = torch.randn(2, 3, 10, 10)
    compiled = compile_api.compile(model)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    out = compiled(x)  # grad on: another entry, through aot
    ref = model(x)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    out.sum().backward()
    grad = model[0].weight.grad
    assert grad is not None and torch.isfinite(grad).all()


def _spec_guard(source: guards.Source, t: torch.Tensor, dynamic: list[int]) -> list[guards.Guard]:
    gs = guards.GuardSet()
    gs.TENSOR_MATCH(source, t, dynamic_dims=dynamic)
    return list(guards.compile_guards(gs, {}).guards)


class _Graph:
    def call_prechecked(self, *args: Any) -> Any:
        return args


def test_dynamic_or_unguarded_inputs_keep_the_graphs_check() -> None:
    t = torch.randn(4, 3)
    src = guards.LocalSource("x")
    static = _spec_guard(src, t, [])
    assert prechecked_entry(_Graph(), [src], [t], static) is not None
    # a dynamic dim: the guard checks less than the graph would
    assert prechecked_entry(_Graph(), [src], [t], _spec_guard(src, t, [0])) is None
    # an input read from a source no TENSOR_MATCH covers
    assert prechecked_entry(_Graph(), [guards.LocalSource("y")], [t], static) is None
    # a non-tensor input (its value is baked into the graph)
    assert prechecked_entry(_Graph(), [src, guards.LocalSource("n")], [t, 3], static) is None
    # a callable without the protocol
    assert prechecked_entry(lambda *a: a, [src], [t], static) is None


def test_an_input_needing_grad_is_not_prechecked_unless_grad_is_guarded_off() -> None:
    t = torch.randn(4, 3, requires_grad=True)
    src = guards.LocalSource("x")
    assert prechecked_entry(_Graph(), [src], [t], _spec_guard(src, t, [])) is None
    gs = guards.GuardSet()
    gs.TENSOR_MATCH(src, t)
    with torch.no_grad():
        gs.GLOBAL_STATE()
    assert prechecked_entry(_Graph(), [src], [t], list(guards.compile_guards(gs, {}).guards))
