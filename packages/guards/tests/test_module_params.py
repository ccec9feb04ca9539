"""MODULE_PARAMS (prototype): identity of submodules and parameters, metadata every call."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import pytest
import torch

from guards import CompiledGuards, GuardError, GuardSet, LocalSource, UnsupportedGuardValue
from guards.native import native_module

Verdict = Callable[[CompiledGuards, dict[str, object]], tuple[bool, list[str]]]


def net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Sequential(torch.nn.Linear(4, 2))
    )


def guard_all(compile_set: Any, model: torch.nn.Module) -> CompiledGuards:
    names = [name for name, _ in model.named_parameters()]
    cg: CompiledGuards = compile_set(lambda gs: gs.MODULE_PARAMS(LocalSource("self"), model, names))
    return cg


def test_unchanged_module_passes(compile_set: Any, verdict: Verdict) -> None:
    model = net()
    cg = guard_all(compile_set, model)
    assert verdict(cg, {"self": model}) == (True, [])


def test_parameters_are_read_through_the_module_dicts(compile_set: Any) -> None:
    cg = guard_all(compile_set, net())
    code = cg.source_code
    if native_module() is not None:
        # One C++ call does the same dict reads (tested against this path in test_native.py).
        assert code.count("___module_params_check") == 1
        return
    # Each parent's _modules / _parameters read once into a local, then its items.
    assert code.count("._modules") == 2  # the root's and the inner Sequential's
    assert "['2']" in code and "['0']" in code and "['weight']" in code
    assert code.count("._parameters") == 2  # the two Linear modules'
    assert "__getattr__" not in cg.source_code and ".weight" not in cg.source_code


def test_new_values_in_place_pass(compile_set: Any, verdict: Verdict) -> None:
    model = net()
    cg = guard_all(compile_set, model)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(2)
    assert verdict(cg, {"self": model})[0]


def test_replaced_submodule_fails(compile_set: Any, verdict: Verdict) -> None:
    model = net()
    cg = guard_all(compile_set, model)
    old = model[2]  # kept alive: a live object that is no longer at the path
    model[2] = torch.nn.Sequential(torch.nn.Linear(4, 2))
    ok, why = verdict(cg, {"self": model})
    assert not ok
    assert why == ["self._modules['2']: another submodule object than the guarded one"]
    del old


def test_replaced_parameter_of_the_same_shape_fails(compile_set: Any, verdict: Verdict) -> None:
    model = net()
    cg = guard_all(compile_set, model)
    old = model[0].weight
    model[0].weight = torch.nn.Parameter(torch.zeros(4, 3))
    ok, why = verdict(cg, {"self": model})
    assert not ok and "another parameter object" in why[0]
    model[0].weight = old
    assert verdict(cg, {"self": model})[0]


def test_metadata_changed_in_place_fails_despite_same_identity(
    compile_set: Any, verdict: Verdict
) -> None:
    model = net()
    cg = guard_all(compile_set, model)
    weight = model[0].weight
    weight.data = torch.zeros(4, 3, dtype=torch.float64)
    ok, why = verdict(cg, {"self": model})
    assert not ok and "dtype mismatch: expected torch.float32, actual torch.float64" in why[0]
    weight.data = torch.zeros(4, 3)
    assert verdict(cg, {"self": model})[0]
    with torch.no_grad():
        weight.t_()
    ok, why = verdict(cg, {"self": model})
    assert not ok and "size mismatch" in why[0]


def test_requires_grad_change_fails(compile_set: Any, verdict: Verdict) -> None:
    model = net()
    cg = guard_all(compile_set, model)
    model[2][0].bias.requires_grad_(False)
    ok, why = verdict(cg, {"self": model})
    assert not ok and "requires_grad mismatch" in why[0]


def test_parameter_outside_the_names_is_not_guarded(compile_set: Any, verdict: Verdict) -> None:
    model = net()
    cg: CompiledGuards = compile_set(
        lambda gs: gs.MODULE_PARAMS(LocalSource("self"), model, ["0.weight"])
    )
    model[2][0].weight = torch.nn.Parameter(torch.zeros(7, 7))
    assert verdict(cg, {"self": model})[0]


def test_other_module_and_foreign_objects_fail_without_raising(
    compile_set: Any, verdict: Verdict
) -> None:
    cg = guard_all(compile_set, net())
    assert verdict(cg, {"self": net()}) == (False, ["L['self'] is not the guarded module"])
    assert not verdict(cg, {"self": object()})[0]
    assert not verdict(cg, {})[0]


def test_collected_parameter_fails_forever(compile_set: Any, verdict: Verdict) -> None:
    model = net()
    cg = guard_all(compile_set, model)
    model[0].bias = torch.nn.Parameter(torch.zeros(4))
    gc.collect()
    ok, why = verdict(cg, {"self": model})
    assert not ok and "no longer exists" in why[0]


def test_text_lists_each_parameter_and_tls_is_added(compile_set: Any) -> None:
    cg = guard_all(compile_set, net())
    assert cg.text.startswith("MODULE_PARAMS: L['self'] submodules=3 parameters=4")
    assert cg.text.count("TENSOR_MATCH: L['self']._modules") == 4
    assert "DISPATCH_TLS" in cg.text


def test_unknown_names_and_non_modules_are_refused() -> None:
    model = net()
    with pytest.raises(UnsupportedGuardValue):
        GuardSet().MODULE_PARAMS(LocalSource("self"), model, ["0.missing"])
    with pytest.raises(UnsupportedGuardValue):
        GuardSet().MODULE_PARAMS(LocalSource("self"), object(), [])  # type: ignore[arg-type]


def test_two_captures_on_one_module_merge_into_the_union(
    compile_set: Any, verdict: Verdict
) -> None:
    model = net()

    def build(gs: GuardSet) -> None:
        gs.MODULE_PARAMS(LocalSource("self"), model, ["0.weight"])
        gs.MODULE_PARAMS(LocalSource("self"), model, ["0.weight", "2.0.bias"])

    cg: CompiledGuards = compile_set(build)
    assert [g.kind for g in cg.guards] == ["MODULE_PARAMS", "DISPATCH_TLS"]
    assert cg.text.count("TENSOR_MATCH") == 2
    assert verdict(cg, {"self": model})[0]
    model[2][0].bias.requires_grad_(False)
    assert not verdict(cg, {"self": model})[0]


def test_a_parameter_changed_between_captures_is_a_contradiction() -> None:
    model = net()
    gs = GuardSet()
    gs.MODULE_PARAMS(LocalSource("self"), model, ["0.weight"])
    model[0].weight.requires_grad_(False)
    with pytest.raises(GuardError, match="changed between two captures"):
        gs.MODULE_PARAMS(LocalSource("self"), model, ["0.weight"])


def guard_shared(compile_set: Any, model: torch.nn.Module) -> CompiledGuards:
    names = [name for name, _ in model.named_parameters()]
    cg: CompiledGuards = compile_set(
        lambda gs: gs.MODULE_PARAMS(LocalSource("self"), model, names, identity=False)
    )
    return cg


def test_without_identity_another_module_of_the_same_layout_passes(
    compile_set: Any, verdict: Verdict
) -> None:
    cg = guard_shared(compile_set, net())
    other = net()
    other[0].weight = torch.nn.Parameter(torch.randn(4, 3))  # another object, same metadata
    assert verdict(cg, {"self": other})[0]
    assert "any module of this layout" in cg.text


def test_without_identity_metadata_is_still_checked(compile_set: Any, verdict: Verdict) -> None:
    model = net()
    cg = guard_shared(compile_set, model)
    other = net()
    other[2][0].weight = torch.nn.Parameter(torch.randn(4, 4))  # another shape
    assert not verdict(cg, {"self": other})[0]
    other = net()
    other[0].bias.requires_grad_(False)
    assert not verdict(cg, {"self": other})[0]
    other = net()
    del other[2][0]._parameters["weight"]  # missing: fails, never raises
    assert not verdict(cg, {"self": other})[0]
    assert not verdict(cg, {"self": None})[0]
    assert verdict(cg, {"self": model})[0]  # the capture's module still passes


def test_without_identity_modules_called_in_turn_are_each_checked_anew(
    compile_set: Any, verdict: Verdict
) -> None:
    # More modules than the C++ check keeps per-root slots for (16), called in turn: a change
    # to one of them between its calls is seen whatever its slot remembered.
    models = [net() for _ in range(20)]
    cg = guard_shared(compile_set, models[0])
    for _ in range(2):
        assert all(cg.check({"self": m}) for m in models)
    models[3][0].weight = torch.nn.Parameter(torch.randn(5, 3))
    models[17][2]._modules["0"] = torch.nn.Linear(4, 3)
    results = [cg.check({"self": m}) for m in models]
    assert [i for i, ok in enumerate(results) if not ok] == [3, 17]
    assert not verdict(cg, {"self": models[3]})[0]
