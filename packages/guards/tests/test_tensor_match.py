"""TENSOR_MATCH: every checked property fails with its own words; data does not matter;
dynamic dims skip exact sizes and follow the documented stride rule."""

from __future__ import annotations

import pytest
import torch

from guards import GuardError, GuardSet, LocalSource, StrideRel, TensorMatch, UnsupportedGuardValue


def guard_x(compile_set, x: torch.Tensor, dynamic_dims=()):  # type: ignore[no-untyped-def]
    return compile_set(lambda gs: gs.TENSOR_MATCH(LocalSource("x"), x, dynamic_dims=dynamic_dims))


def test_passes_on_the_same_and_on_a_same_shaped_tensor_with_other_data(
    compile_set, verdict
) -> None:
    x = torch.randn(3, 4)
    cg = guard_x(compile_set, x)
    assert verdict(cg, {"x": x}) == (True, [])
    assert verdict(cg, {"x": torch.zeros(3, 4)}) == (True, [])
    x.add_(1)  # data changes in place
    assert verdict(cg, {"x": x}) == (True, [])


@pytest.mark.parametrize(
    ("changed", "expected_words"),
    [
        (torch.randn(4, 4), "tensor 'x' size mismatch at index 0: expected 3, actual 4"),
        (
            torch.randn(3, 4, dtype=torch.float64),
            "tensor 'x' dtype mismatch: expected torch.float32, actual torch.float64",
        ),
        (
            torch.randn(3, 4, requires_grad=True),
            "tensor 'x' requires_grad mismatch: expected False, actual True",
        ),
        (torch.randn(3, 4, device="meta"), "tensor 'x' device mismatch: expected cpu, actual meta"),
        (torch.randn(4, 3).t(), "tensor 'x' stride mismatch at index 0: expected 4, actual 1"),
        (torch.randn(12), "tensor 'x' rank mismatch: expected 2, actual 1"),
        (
            torch.nn.Parameter(torch.randn(3, 4), requires_grad=False),
            "tensor 'x' class mismatch: expected torch.Tensor, actual torch.nn.parameter.Parameter",
        ),
    ],
    ids=["size", "dtype", "requires_grad", "device", "stride", "ndim", "class"],
)
def test_each_changed_property_fails_with_its_words(
    compile_set, verdict, changed, expected_words
) -> None:
    cg = guard_x(compile_set, torch.randn(3, 4))
    ok, why = verdict(cg, {"x": changed})
    assert not ok
    assert expected_words in why[0].split("; ")


def test_dispatch_keys_of_the_tensor_are_checked(compile_set, verdict) -> None:
    z = torch.randn(3, dtype=torch.complex64)
    cg = guard_x(compile_set, z)
    assert verdict(cg, {"x": torch.randn(3, dtype=torch.complex64)})[0]
    ok, why = verdict(cg, {"x": z.conj()})  # same dtype/shape, Conjugate key set
    assert not ok and "dispatch keys mismatch" in why[0]
    with torch.inference_mode():
        inf = torch.randn(3, dtype=torch.complex64)
    ok, why = verdict(cg, {"x": inf})  # inference tensors lack the autograd keys
    assert not ok and "dispatch keys mismatch" in why[0]


def test_thread_local_dispatch_state_is_checked(compile_set, verdict) -> None:
    x = torch.randn(3)
    cg = guard_x(compile_set, x)
    assert [g.kind for g in cg.guards] == ["TENSOR_MATCH", "DISPATCH_TLS"]
    with torch.inference_mode():
        ok, why = verdict(cg, {"x": x})
    assert not ok and any("dispatch TLS" in w for w in why)
    with torch.autocast("cpu"):
        ok, why = verdict(cg, {"x": x})
    assert not ok and any("exclude set" in w for w in why)
    assert verdict(cg, {"x": x})[0]


def test_dynamic_dims_check_only_size_at_least_two(compile_set, verdict) -> None:
    cg = guard_x(compile_set, torch.randn(3, 4), dynamic_dims=[0])
    for n in (2, 3, 17):
        assert verdict(cg, {"x": torch.randn(n, 4)}) == (True, []), n
    assert verdict(cg, {"x": torch.randn(1, 4)}) == (
        False,
        ["tensor 'x' size mismatch at index 0: expected a dynamic size >= 2, actual 1"],
    )
    ok, why = verdict(cg, {"x": torch.randn(5, 5)})
    assert not ok and "size mismatch at index 1: expected 4, actual 5" in why[0]


def test_negative_dynamic_dims_count_from_the_end(compile_set, verdict) -> None:
    cg = guard_x(compile_set, torch.randn(3, 4), dynamic_dims=[-1])
    assert verdict(cg, {"x": torch.randn(3, 9)})[0]
    assert not verdict(cg, {"x": torch.randn(4, 4)})[0]


def test_dynamic_dim_of_example_size_one_stays_static(compile_set, verdict) -> None:
    cg = guard_x(compile_set, torch.randn(1, 4), dynamic_dims=[0])
    assert verdict(cg, {"x": torch.randn(1, 4)})[0]
    assert not verdict(cg, {"x": torch.randn(2, 4)})[0]


def test_out_of_range_dynamic_dim_is_an_error() -> None:
    with pytest.raises(GuardError):
        GuardSet().TENSOR_MATCH(LocalSource("x"), torch.randn(3), dynamic_dims=[1])


def test_tensor_match_on_a_non_tensor_is_refused() -> None:
    with pytest.raises(UnsupportedGuardValue):
        GuardSet().TENSOR_MATCH(LocalSource("x"), [1.0])  # type: ignore[arg-type]


def spec_strides(x: torch.Tensor, dims) -> tuple[object, ...]:  # type: ignore[no-untyped-def]
    gs = GuardSet()
    gs.TENSOR_MATCH(LocalSource("x"), x, dynamic_dims=dims)
    (tm,) = [g for g in gs.guards if isinstance(g, TensorMatch)]
    return tm.spec.strides


def test_stride_rule_contiguous_inner_dynamic_becomes_a_relation() -> None:
    assert spec_strides(torch.randn(3, 5, 4), [0, 1]) == (StrideRel(1), 4, 1)
    assert spec_strides(torch.randn(3, 5), [0]) == (5, 1)
    assert spec_strides(torch.randn(3, 5), [1]) == (StrideRel(1), 1)
    assert spec_strides(torch.randn(5, 3).t(), [0]) == (1, StrideRel(0))
    assert spec_strides(torch.randn(5, 3).t(), [1]) == (1, 3)


def test_dynamic_inner_dim_accepts_new_contiguous_strides_only(compile_set, verdict) -> None:
    cg = guard_x(compile_set, torch.randn(3, 5), dynamic_dims=[1])
    assert verdict(cg, {"x": torch.randn(3, 8)}) == (True, [])
    padded = torch.randn(3, 10)[:, :8]  # stride 10 where the relation asks for 8
    ok, why = verdict(cg, {"x": padded})
    assert not ok
    assert why == [
        "tensor 'x' stride mismatch at index 0: expected 8 (= stride[1]*size[1]), actual 10"
    ]


def test_non_dense_example_keeps_exact_strides(compile_set, verdict) -> None:
    x = torch.randn(3, 10)[:, :5]  # strides (10, 1), not derived from size 5
    assert spec_strides(x, [1]) == (10, 1)
    cg = guard_x(compile_set, x, dynamic_dims=[1])
    assert verdict(cg, {"x": torch.randn(3, 10)[:, :7]})[0]
    assert not verdict(cg, {"x": torch.randn(3, 7)})[0]


def test_static_and_dynamic_guards_on_one_tensor_merge_to_the_stricter() -> None:
    x = torch.randn(3, 4)
    gs = GuardSet()
    gs.TENSOR_MATCH(LocalSource("x"), x, dynamic_dims=[0])
    gs.TENSOR_MATCH(LocalSource("x"), x)
    (tm,) = [g for g in gs.guards if isinstance(g, TensorMatch)]
    assert tm.spec.sizes == (3, 4)
    gs.TENSOR_MATCH(LocalSource("x"), x)
    assert len(gs.guards) == 2  # TENSOR_MATCH + DISPATCH_TLS
    with pytest.raises(GuardError):
        gs.TENSOR_MATCH(LocalSource("x"), x.double())


def test_text_line_in_dynamo_style(compile_set) -> None:
    cg = guard_x(compile_set, torch.randn(10))
    line = cg.text.splitlines()[0]
    assert line.startswith(
        "TENSOR_MATCH: L['x'] class=torch.Tensor dtype=torch.float32 device=cpu "
        "requires_grad=False size=[10] stride=[1] dispatch_keys=[CPU"
    )


def test_zero_dim_and_empty_tensors(compile_set, verdict) -> None:
    cg = guard_x(compile_set, torch.tensor(3.0))
    assert verdict(cg, {"x": torch.tensor(7.0)}) == (True, [])
    assert not verdict(cg, {"x": torch.tensor([7.0])})[0]
    cg = guard_x(compile_set, torch.empty(0, 3), dynamic_dims=[0])  # size 0 stays static
    assert verdict(cg, {"x": torch.empty(0, 3)})[0]
    assert not verdict(cg, {"x": torch.empty(2, 3)})[0]


def test_sparse_tensors_check_layout_and_sizes_without_strides(compile_set, verdict) -> None:
    sp = torch.eye(3).to_sparse()
    cg = guard_x(compile_set, sp)
    assert "layout=torch.sparse_coo" in cg.text
    assert verdict(cg, {"x": (torch.eye(3) * 2).to_sparse()}) == (True, [])
    assert verdict(cg, {"x": torch.eye(3)}) == (
        False,
        ["tensor 'x' layout mismatch: expected torch.sparse_coo, actual torch.strided"],
    )
    assert not verdict(cg, {"x": torch.eye(4).to_sparse()})[0]
    dense = guard_x(compile_set, torch.eye(3))
    ok, why = verdict(dense, {"x": sp})
    assert not ok and why == [
        "tensor 'x' layout mismatch: expected torch.strided, actual torch.sparse_coo"
    ]


def test_tensor_without_sizes_is_refused() -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nested = torch.nested.nested_tensor([torch.randn(2), torch.randn(3)])
    with pytest.raises(UnsupportedGuardValue):
        GuardSet().TENSOR_MATCH(LocalSource("x"), nested)


def test_parameter_and_requires_grad_tensors(compile_set, verdict) -> None:
    p = torch.nn.Parameter(torch.randn(2, 2))
    cg = guard_x(compile_set, p)
    assert verdict(cg, {"x": torch.nn.Parameter(torch.zeros(2, 2))}) == (True, [])
    ok, why = verdict(cg, {"x": torch.zeros(2, 2, requires_grad=True)})
    assert not ok and "class mismatch" in why[0]
    with torch.no_grad():
        p.mul_(2)  # data changes under no_grad: still the same guard state
    assert verdict(cg, {"x": p})[0]
    p.requires_grad_(False)
    assert verdict(cg, {"x": p}) == (
        False,
        ["tensor 'x' requires_grad mismatch: expected True, actual False"],
    )
