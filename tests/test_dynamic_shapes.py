"""Dynamic shapes through compile_api: compile counts over size sweeps, compared with eager.

dynamic=False specialises every size; dynamic=True makes sizes symbolic from the first
compile (0 and 1 stay specialised); dynamic=None compiles static first and then once more with
the changed dimension symbolic; mark_dynamic makes a dim symbolic up front; relations the
trace relied on (equal sizes, branches on a size) are guarded.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import compile_api


def same(compiled: Any, eager: Any, *args: Any) -> Any:
    got = compiled(*args)
    torch.testing.assert_close(got, eager(*args))
    return got


def row_norm(x: torch.Tensor) -> torch.Tensor:
    return x / (x.abs().sum(dim=-1, keepdim=True) + 1) * x.shape[0]


SWEEP = (3, 4, 5, 8, 17)


def test_static_recompiles_for_every_size(counter: Any) -> None:
    fn = compile_api.compile(row_norm, backend=counter, dynamic=False)
    for n in SWEEP:
        same(fn, row_norm, torch.randn(n, 6))
    assert counter.count == len(SWEEP)
    for n in SWEEP:  # each size hits its own entry
        same(fn, row_norm, torch.randn(n, 6))
    assert counter.count == len(SWEEP)


def test_dynamic_true_compiles_once_for_a_sweep(counter: Any) -> None:
    fn = compile_api.compile(row_norm, backend=counter, dynamic=True)
    for n in SWEEP:
        same(fn, row_norm, torch.randn(n, 7 + n))
    assert counter.count == 1


@pytest.mark.parametrize("special", [0, 1])
def test_dynamic_true_specialises_zero_and_one(counter: Any, special: int) -> None:
    fn = compile_api.compile(row_norm, backend=counter, dynamic=True)
    same(fn, row_norm, torch.randn(4, 6))
    same(fn, row_norm, torch.randn(special, 6))
    assert counter.count == 2, f"size {special} gets its own (static) entry"
    same(fn, row_norm, torch.randn(9, 6))
    assert counter.count == 2


def test_automatic_dynamic_compiles_twice_then_generalises(counter: Any) -> None:
    fn = compile_api.compile(row_norm, backend=counter)  # dynamic=None
    same(fn, row_norm, torch.randn(3, 6))
    assert counter.count == 1
    same(fn, row_norm, torch.randn(4, 6))
    assert counter.count == 2
    for n in (5, 8, 17):
        same(fn, row_norm, torch.randn(n, 6))
    assert counter.count == 2, "a third size must not recompile"
    # The first, static graph has no symbolic placeholder; the second has one.
    assert not any(n.op == "placeholder" and _is_sym(n) for n in counter.graphs[0].graph.nodes)


def _is_sym(node: torch.fx.Node) -> bool:
    value = node.meta.get("example_value", node.meta.get("val"))
    if isinstance(value, torch.SymInt):
        return True
    if isinstance(value, torch.Tensor):
        return any(isinstance(s, torch.SymInt) for s in value.shape)
    return False


def test_automatic_dynamic_only_generalises_the_dim_that_changed(counter: Any) -> None:
    fn = compile_api.compile(row_norm, backend=counter)
    same(fn, row_norm, torch.randn(3, 6))
    same(fn, row_norm, torch.randn(4, 6))
    same(fn, row_norm, torch.randn(5, 6))
    assert counter.count == 2
    same(fn, row_norm, torch.randn(5, 9))  # dim 1 was static: recompile
    assert counter.count == 3


def test_mark_dynamic_compiles_once(counter: Any) -> None:
    fn = compile_api.compile(row_norm, backend=counter, dynamic=False)
    for n in SWEEP:
        x = torch.randn(n, 6)
        compile_api.mark_dynamic(x, 0)
        same(fn, row_norm, x)
    assert counter.count == 1


def test_mark_dynamic_leaves_other_dims_static(counter: Any) -> None:
    fn = compile_api.compile(row_norm, backend=counter, dynamic=False)
    x = torch.randn(4, 6)
    compile_api.mark_dynamic(x, 0)
    same(fn, row_norm, x)
    y = torch.randn(4, 7)
    compile_api.mark_dynamic(y, 0)
    same(fn, row_norm, y)
    assert counter.count == 2


def add_pair(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a + b * 2


def test_relation_between_inputs_is_guarded(counter: Any) -> None:
    fn = compile_api.compile(add_pair, backend=counter, dynamic=True)
    same(fn, add_pair, torch.randn(4), torch.randn(4))
    same(fn, add_pair, torch.randn(7), torch.randn(7))
    assert counter.count == 1
    # Broadcasting: sizes that were equal in the trace now differ; the old entry must not run.
    same(fn, add_pair, torch.randn(5), torch.randn(1))
    assert counter.count == 2


def test_mismatched_sizes_raise_like_eager(counter: Any) -> None:
    fn = compile_api.compile(add_pair, backend=counter, dynamic=True)
    same(fn, add_pair, torch.randn(4), torch.randn(4))
    with pytest.raises(RuntimeError):
        add_pair(torch.randn(4), torch.randn(5))
    with pytest.raises(RuntimeError):
        fn(torch.randn(4), torch.randn(5))


def branchy(x: torch.Tensor) -> torch.Tensor:
    if x.shape[0] > 4:
        return x * 2
    return x - 1


def test_branch_on_a_size_is_guarded(counter: Any) -> None:
    fn = compile_api.compile(branchy, backend=counter, dynamic=True)
    for n in (5, 6, 9):
        same(fn, branchy, torch.randn(n))
    assert counter.count == 1
    for n in (2, 3, 4):
        same(fn, branchy, torch.randn(n))
    assert counter.count == 2, "the other side of the branch: one more entry"
    same(fn, branchy, torch.randn(12))
    same(fn, branchy, torch.randn(3))
    assert counter.count == 2


def test_automatic_dynamic_branch_on_a_size(counter: Any) -> None:
    fn = compile_api.compile(branchy, backend=counter)
    for n in (5, 6, 7, 2, 3, 8, 4):
        same(fn, branchy, torch.randn(n))
    # 5: static; 6: dynamic (x > 4); 2: dynamic (x <= 4); the rest hit.
    assert counter.count == 3


def reshape_half(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(2, x.shape[0] // 2) + 1


def test_symbolic_arithmetic_on_sizes(counter: Any) -> None:
    fn = compile_api.compile(reshape_half, backend=counter, dynamic=True)
    for n in (4, 6, 10, 32):
        same(fn, reshape_half, torch.randn(n))
    assert counter.count == 1


def test_dynamic_non_contiguous_input_gives_eager_result(counter: Any) -> None:
    fn = compile_api.compile(row_norm, backend=counter, dynamic=True)
    for n in (4, 6):
        same(fn, row_norm, torch.randn(6, n).t())
        same(fn, row_norm, torch.randn(n, 6))
    assert counter.count <= 2


def test_failed_broadcast_under_dynamic_compiles_without_internal_error(counter: Any) -> None:
    compile_api.config.suppress_errors = False
    fn = compile_api.compile(add_pair, backend=counter, dynamic=True)
    same(fn, add_pair, torch.randn(4), torch.randn(4))
    with pytest.raises(RuntimeError) as info:
        fn(torch.randn(4), torch.randn(5))
    if isinstance(info.value, compile_api.InternalError):
        raise info.value
    assert "size of tensor a" in str(info.value)


def sum_pair(xs: list[torch.Tensor]) -> torch.Tensor:
    return xs[0] * 2 + xs[1]


def test_automatic_dynamic_reaches_tensors_inside_a_list(counter: Any) -> None:
    fn = compile_api.compile(sum_pair, backend=counter)
    for n in (3, 4, 5, 6):
        xs = [torch.randn(n), torch.randn(n)]
        same(fn, sum_pair, xs)
    assert counter.count == 2


def repeat_n(x: torch.Tensor, n: int) -> torch.Tensor:
    return x * n + n


def test_automatic_dynamic_int_argument_compiles_twice(counter: Any) -> None:
    fn = compile_api.compile(repeat_n, backend=counter)
    x = torch.randn(4)
    for n in (2, 3, 5, 7):
        same(fn, repeat_n, x, n)
    assert counter.count == 2
