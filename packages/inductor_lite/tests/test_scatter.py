"""The scatters of language-model backwards, lowered (op_lowerings/indexing.py), not aten calls.

scatter with one index per row is a fused, bounds-checked ``where`` (the cross-entropy
backward's ``scatter(full_like(x, 0), 1, target, -1.0)``); index_put with accumulate is a
scatter-add kernel (the embedding backward). Every case is compared with eager, values and
gradients; an out-of-range index raises as eager's does.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from inductor_lite.ir import FallbackNode

from .conftest import tol

SCATTER_CALLS = {"aten.scatter.value", "aten.scatter.src", "aten.full_like.default"}
INDEX_PUT = "aten.index_put.default"


def _aten_calls(c: Any) -> set[str]:
    return {str(i.target) for i in c.items if isinstance(i, FallbackNode)}


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_value_into_zeros_matches_eager_without_an_aten_call(dim: int, check: Any) -> None:
    x = torch.randn(6, 9)
    shape = [6, 9]
    shape[dim] = 1
    index = torch.randint(0, x.shape[dim], shape)

    def fn(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return torch.full_like(x, 0).scatter(dim, index, -1.0) * x + 1

    c = check(fn, [x, index])
    assert not _aten_calls(c) & SCATTER_CALLS


def test_scatter_src_into_a_computed_tensor_matches_eager(check: Any) -> None:
    def fn(x: torch.Tensor, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        return x.sin().scatter(1, index, src * 2) - 1

    x, src = torch.randn(5, 2, 7), torch.randn(5, 3, 7)
    c = check(fn, [x, torch.randint(0, 2, (5, 1, 7)), src])
    assert "aten.scatter.src" not in _aten_calls(c)


def test_scatter_with_several_indices_per_row_stays_an_aten_call_and_matches_eager(
    check: Any,
) -> None:
    def fn(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return x.scatter(1, index, 3.0) * 2

    index = torch.tensor([[0, 4], [1, 1], [3, 2]])
    c = check(fn, [torch.randn(3, 5), index])
    assert "aten.scatter.value" in _aten_calls(c)


@pytest.mark.parametrize("bad", [9, -1])
def test_out_of_range_scatter_index_raises_as_eager(bad: int, check: Any) -> None:
    def fn(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(x).scatter(1, index, 1.0) + x

    x = torch.randn(4, 9)
    index = torch.tensor([[0], [8], [3], [5]])
    c = check(fn, [x, index])
    assert "aten.scatter.value" not in _aten_calls(c)
    index[2, 0] = bad
    with pytest.raises(RuntimeError, match="out of bounds"):
        fn(x, index)
    with pytest.raises((RuntimeError, IndexError)):
        c(x, index)
    index[2, 0] = 2  # the error does not stick to later calls
    torch.testing.assert_close(c(x, index), fn(x, index))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("ignore_index", [-100, 3])
def test_cross_entropy_gradients_match_eager_with_no_scatter_call(
    dtype: torch.dtype, ignore_index: int, recorder: Any
) -> None:
    import compile_api

    def fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.float(), target, ignore_index=ignore_index)

    target = torch.randint(0, 11, (12,))
    target[[1, 5]] = ignore_index  # ignored rows get no gradient
    x = torch.randn(12, 11, dtype=dtype, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    compiled = compile_api.compile(fn, backend=recorder)
    for _ in range(2):
        x.grad = x_ref.grad = None
        loss = compiled(x, target)
        loss.backward()
        loss_ref = fn(x_ref, target)
        loss_ref.backward()
        torch.testing.assert_close(loss, loss_ref, **tol(dtype))
        torch.testing.assert_close(x.grad, x_ref.grad, **tol(dtype))
    graphs = recorder.compiled()
    assert len(graphs) == 2
    assert all(g.eager_calls == 0 for g in graphs)
    assert not any(_aten_calls(g) & SCATTER_CALLS for g in graphs)


def test_cross_entropy_backward_with_symbolic_rows_matches_eager(recorder: Any) -> None:
    import compile_api

    def fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, target)

    compiled = compile_api.compile(fn, backend=recorder, dynamic=True)
    for rows in (3, 17, 40):
        x = torch.randn(rows, 13, requires_grad=True)
        target = torch.randint(0, 13, (rows,))
        compiled(x, target).backward()
        grad = x.grad
        x.grad = None
        fn(x, target).backward()
        torch.testing.assert_close(grad, x.grad, atol=1e-6, rtol=1e-5)
    graphs = recorder.compiled()
    assert any(g.lowered.symbols for g in graphs)
    assert not any(_aten_calls(g) & SCATTER_CALLS for g in graphs)


def _index_put(w: torch.Tensor, idx: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.ops.aten.index_put(w.sin(), [idx], v * 2, True) + 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_index_put_accumulate_adds_repeated_and_negative_rows_like_eager(
    dtype: torch.dtype, check: Any
) -> None:
    w = torch.randn(10, 8, dtype=dtype)
    idx = torch.tensor([[1, 3, 1], [9, -1, 1]])  # row 1 three times, row 9 twice
    v = torch.randn(2, 3, 8, dtype=dtype)
    c = check(_index_put, [w, idx, v], **tol(dtype))
    assert INDEX_PUT not in _aten_calls(c)


def test_index_put_of_a_vector_adds_in_order(check: Any) -> None:
    # the index varies along the only loop: no vectorised or parallel adds into one element
    def fn(w: torch.Tensor, idx: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.index_put(w, [idx], v, True)

    idx = torch.tensor([0, 2, 2, 2, 0, 5, 2, 2, 1])
    c = check(fn, [torch.randn(6), idx, torch.randn(9)])
    assert INDEX_PUT not in _aten_calls(c)


def test_index_put_without_accumulate_stays_an_aten_call(check: Any) -> None:
    def fn(w: torch.Tensor, idx: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.index_put(w, [idx], v, False) * 2

    c = check(fn, [torch.randn(5, 3), torch.tensor([4, 0]), torch.randn(2, 3)])
    assert INDEX_PUT in _aten_calls(c)


@pytest.mark.parametrize("bad", [10, -11])
def test_out_of_range_index_put_raises_as_eager(bad: int, check: Any) -> None:
    w, v = torch.randn(10, 8), torch.randn(2, 3, 8)
    idx = torch.tensor([[1, 3, 1], [9, -1, 0]])
    c = check(_index_put, [w, idx, v])
    idx[1, 2] = bad
    with pytest.raises(IndexError):
        _index_put(w, idx, v)
    with pytest.raises(IndexError):
        c(w, idx, v)
    idx[1, 2] = 4
    torch.testing.assert_close(c(w, idx, v), _index_put(w, idx, v))


def test_index_put_on_two_threads_loses_no_update(check: Any, config: Any) -> None:
    # every token names one of two rows: parallel rows would race on them
    cfg = dataclasses.replace(config, num_threads=2, parallel_threshold=1024)
    idx = torch.arange(4096) % 2
    w, v = torch.randn(3, 64), torch.randn(4096, 64)
    c = check(_index_put, [w, idx, v], config=cfg, atol=1e-3, rtol=1e-4)
    assert INDEX_PUT not in _aten_calls(c)
    assert "omp parallel for schedule" not in c.kernel_source


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("padding_idx", [None, 2])
def test_embedding_gradients_match_eager_with_no_index_put_call(
    dtype: torch.dtype, padding_idx: int | None, recorder: Any
) -> None:
    import compile_api

    emb = torch.nn.Embedding(12, 8, padding_idx=padding_idx).to(dtype)
    ref = torch.nn.Embedding(12, 8, padding_idx=padding_idx).to(dtype)
    ref.load_state_dict(emb.state_dict())

    def step(module: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
        return (module(tokens).float() ** 2).sum()

    tokens = torch.tensor([[2, 5, 5, 0], [11, 2, 5, 7]])  # repeats, and the padding index
    compiled = compile_api.compile(step, backend=recorder)
    for _ in range(2):
        emb.zero_grad()
        ref.zero_grad()
        compiled(emb, tokens).backward()
        step(ref, tokens).backward()
        torch.testing.assert_close(emb.weight.grad, ref.weight.grad, **tol(dtype))
    if padding_idx is not None:
        assert emb.weight.grad[padding_idx].abs().max() == 0
    graphs = recorder.compiled()
    assert all(g.eager_calls == 0 for g in graphs)
    assert not any(INDEX_PUT in _aten_calls(g) for g in graphs)


def test_embedding_backward_with_symbolic_tokens_matches_eager(recorder: Any) -> None:
    import compile_api

    emb = torch.nn.Embedding(20, 6)

    def step(tokens: torch.Tensor) -> torch.Tensor:
        return (emb(tokens) * torch.arange(6.0)).sum()

    compiled = compile_api.compile(step, backend=recorder, dynamic=True)
    for n in (3, 17, 40):
        tokens = torch.randint(0, 20, (n,))
        emb.zero_grad()
        compiled(tokens).backward()
        grad = emb.weight.grad.clone()
        emb.zero_grad()
        step(tokens).backward()
        torch.testing.assert_close(grad, emb.weight.grad)
    graphs = recorder.compiled()
    assert any(g.lowered.symbols for g in graphs)
    assert not any(INDEX_PUT in _aten_calls(g) for g in graphs)
