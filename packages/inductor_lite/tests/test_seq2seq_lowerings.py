"""``repeat``, integer ``index`` and ``any``/``all`` lowered to index math and reductions that
their consumers fuse, not aten calls (#21: deberta_v2's position embeddings tiled over the
batch, transformers' ``padding_mask[batch_idx, kv_idx]``, t5's ``any`` over a mask row).

Every case is compared with eager (values, dtypes, shapes; gradients for the training ones)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from inductor_lite.ir import FallbackNode


def _aten_calls(c: Any) -> set[str]:
    return {str(i.target) for i in c.items if isinstance(i, FallbackNode)}


@pytest.mark.parametrize(
    ("shape", "repeats"),
    [((2, 16, 16), (2, 1, 1)), ((3, 4), (2, 3)), ((4,), (3, 1, 2)), ((2, 3, 5), (1, 1, 1))],
)
def test_repeat_matches_eager_without_an_aten_call(
    shape: tuple[int, ...], repeats: tuple[int, ...], check: Any
) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return (x * 2).repeat(*repeats) + 1

    c = check(fn, [torch.randn(shape)])
    assert "aten.repeat.default" not in _aten_calls(c)


def test_repeated_value_read_by_a_transposed_bmm_matches_eager(check: Any) -> None:
    # deberta_v2: pos_key_layer = proj(rel_embeddings).repeat(batch, 1, 1); bmm(q, k.T)
    def fn(q: torch.Tensor, rel: torch.Tensor) -> torch.Tensor:
        k = (rel * 0.5).repeat(2, 1, 1)
        return torch.bmm(q, k.transpose(-1, -2)).softmax(-1)

    c = check(fn, [torch.randn(4, 8, 16), torch.randn(2, 16, 16)])
    assert _aten_calls(c) == {"aten.bmm.default"}


def test_repeat_gradients_match_eager(recorder: Any) -> None:
    import compile_api

    def fn(x: torch.Tensor) -> torch.Tensor:
        return (x.sin().repeat(3, 2) ** 2).sum()

    x = torch.randn(4, 5, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    compiled = compile_api.compile(fn, backend=recorder)
    for _ in range(2):
        x.grad = x_ref.grad = None
        compiled(x).backward()
        fn(x_ref).backward()
        torch.testing.assert_close(x.grad, x_ref.grad, atol=1e-5, rtol=1e-5)
    assert not any("aten.repeat.default" in _aten_calls(g) for g in recorder.compiled())


def test_integer_index_matches_eager_with_negative_and_broadcast_indices(check: Any) -> None:
    def fn(x: torch.Tensor, m: torch.Tensor, b: torch.Tensor, k: torch.Tensor) -> Any:
        return x[b, k] * 2, m[b[:, None], k[None, :]], x[b] + 1, x[b[1:]]

    x, m = torch.randn(5, 6, 3), torch.rand(4, 7) > 0.5
    b, k = torch.tensor([0, -1, 3, 2]), torch.tensor([1, 5, -2, 0])
    c = check(fn, [x, m, b, k])
    assert "aten.index.Tensor" not in _aten_calls(c)


def test_padding_mask_lookup_matches_eager(check: Any) -> None:
    # transformers' masking_utils: padding_mask[batch_idx, kv_idx] with arange indices
    def fn(mask: torch.Tensor) -> torch.Tensor:
        batch_idx = torch.arange(2)[:, None, None, None]
        kv_idx = torch.arange(8)[None, None, None, :]
        return mask.to(torch.bool)[batch_idx, kv_idx] & (kv_idx >= 0)

    c = check(fn, [torch.tensor([[1] * 8, [1] * 5 + [0] * 3])])
    assert "aten.index.Tensor" not in _aten_calls(c)


@pytest.mark.parametrize("bad", [[0, 9, 1, 2], [0, -6, 1, 2]])
def test_out_of_range_index_raises_index_error_as_eager(bad: list[int], config: Any) -> None:
    import torch.fx

    from inductor_lite import compile_fx

    def fn(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return x[b] * 2

    x = torch.randn(5, 3)
    c = compile_fx(torch.fx.symbolic_trace(fn), [x, torch.tensor([0, 1, 2, 3])], config=config)
    with pytest.raises(IndexError):
        fn(x, torch.tensor(bad))
    with pytest.raises(IndexError):
        c(x, torch.tensor(bad))


def test_boolean_mask_index_stays_an_aten_call_and_matches_eager(check: Any) -> None:
    def fn(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return x[m] * 2

    x = torch.randn(6, 3)
    m = torch.tensor([True, False, True, True, False, True])
    assert "aten.index.Tensor" in _aten_calls(check(fn, [x, m]))


def test_any_and_all_match_eager_without_an_aten_call(check: Any) -> None:
    def fn(x: torch.Tensor, b: torch.Tensor) -> Any:
        return (
            (x > 0.5).any(-1, keepdim=True),
            x.any(dim=1),
            b.all(),
            (x > -3).all(1),
            x[:, :0].any(1),  # empty: False
            x[:, :0].all(1),  # empty: True
            torch.any(x * 0),
        )

    x = torch.randn(3, 4, 5)
    x[1] = 0
    x[0, 0, 0] = float("nan")  # nonzero: counts for any
    c = check(fn, [x, torch.rand(6) > 0.1])
    assert not {"aten.any.dim", "aten.any.default", "aten.all.dim", "aten.all.default"} & (
        _aten_calls(c)
    )


def test_t5_attention_mask_row_check_matches_eager(check: Any) -> None:
    # t5: a fully masked row of scores zeroed: where(~mask.any(-1), 0, softmax(scores))
    def fn(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        keep = mask.logical_not().any(-1, keepdim=True)
        probs = scores.masked_fill(mask, -1e9).softmax(-1)
        return torch.where(keep, probs, torch.zeros_like(probs))

    mask = torch.rand(2, 2, 8, 8) > 0.7
    mask[0, 1, 3] = True  # a fully masked row
    c = check(fn, [torch.randn(2, 2, 8, 8), mask])
    assert "aten.any.dim" not in _aten_calls(c)
