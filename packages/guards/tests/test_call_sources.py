"""CallSource and MethodCallSource: a global-state query and a method query on a guarded value,
guarded by CONSTANT_MATCH on their answer (both check paths, see conftest)."""

from __future__ import annotations

import pytest
import torch

from guards import (
    CallSource,
    GuardSet,
    LocalSource,
    MethodCallSource,
    UnsupportedGuardValue,
)

_STATE = {"on": False}


def flag_on() -> bool:
    return _STATE["on"]


def scaled(k: int, *, by: float = 1.0) -> float:
    return k * by * (2.0 if _STATE["on"] else 1.0)


def test_call_source_guard_follows_the_state_it_queries(compile_set, verdict) -> None:
    cg = compile_set(lambda gs: gs.CONSTANT_MATCH(CallSource(flag_on), False))
    assert verdict(cg, {}) == (True, [])
    _STATE["on"] = True
    try:
        ok, why = verdict(cg, {})
    finally:
        _STATE["on"] = False
    assert not ok
    assert why == [f"{__name__}.flag_on() == False expected, got True"]


def test_call_source_passes_constant_arguments(compile_set, verdict) -> None:
    source = CallSource(scaled, (3,), (("by", 0.5),))
    assert source.name() == f"{__name__}.scaled(3, by=0.5)"
    cg = compile_set(lambda gs: gs.CONSTANT_MATCH(source, 1.5))
    assert verdict(cg, {}) == (True, [])
    _STATE["on"] = True
    try:
        assert not verdict(cg, {})[0]
    finally:
        _STATE["on"] = False


def test_call_sources_of_two_functions_are_two_guards() -> None:
    gs = GuardSet()
    gs.CONSTANT_MATCH(CallSource(flag_on), False)
    gs.CONSTANT_MATCH(CallSource(torch.is_grad_enabled), True)
    gs.CONSTANT_MATCH(CallSource(flag_on), False)  # the same guard merges
    assert len(gs) == 2


def test_profiler_query_guard_fails_inside_the_profiler(compile_set, verdict) -> None:
    cg = compile_set(
        lambda gs: gs.CONSTANT_MATCH(CallSource(torch.autograd._profiler_enabled), False)
    )
    assert verdict(cg, {}) == (True, [])
    with torch.autograd.profiler.profile():
        ok, why = verdict(cg, {})
    assert not ok and len(why) == 1 and "_profiler_enabled() == False expected, got True" in why[0]


def test_storage_offset_guard(compile_set, verdict) -> None:
    base = torch.arange(20.0)
    x = LocalSource("x")

    def build(gs: GuardSet) -> None:
        gs.TENSOR_MATCH(x, base[5:15])
        gs.CONSTANT_MATCH(MethodCallSource(x, "storage_offset"), 5)

    cg = compile_set(build)
    assert verdict(cg, {"x": base[5:15]}) == (True, [])
    assert verdict(cg, {"x": torch.arange(30.0)[5:15]}) == (True, [])
    assert verdict(cg, {"x": base[:10]}) == (
        False, ["L['x'].storage_offset() == 5 expected, got 0"]
    )
    assert not verdict(cg, {"x": 5})[0]  # the TENSOR_MATCH before it fails first


def test_method_call_with_a_bound_keyword_argument(compile_set, verdict) -> None:
    a = torch.randn(2, 3, 4, 4)
    source = MethodCallSource(
        LocalSource("x"), "is_contiguous", kwargs=(("memory_format", torch.channels_last),)
    )
    assert source.name() == "L['x'].is_contiguous(memory_format=torch.channels_last)"
    cg = compile_set(lambda gs: gs.CONSTANT_MATCH(source, False))
    assert verdict(cg, {"x": a}) == (True, [])
    ok, why = verdict(cg, {"x": a.to(memory_format=torch.channels_last)})
    assert not ok
    assert why == [
        "L['x'].is_contiguous(memory_format=torch.channels_last) == False expected, got True"
    ]


def test_unhashable_call_arguments_are_refused() -> None:
    with pytest.raises(UnsupportedGuardValue):
        CallSource(len, ([1, 2],))
    with pytest.raises(UnsupportedGuardValue):
        MethodCallSource(LocalSource("x"), "view", ([2, 3],))
