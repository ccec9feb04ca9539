"""The training comparisons on a CUDA device (skipped without one)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import aot

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize("partition", ["default", "min_cut", "decomp_min_cut"])
@pytest.mark.parametrize("model_name", ["mlp", "transformer_block", "cnn_batchnorm_dropout"])
def test_cuda_training_steps_match_eager(helpers: Any, model_name: str, partition: str) -> None:
    make_model, make_input = helpers.MODELS[model_name]
    options = helpers.PARTITIONS[partition]
    helpers.compare_training(
        make_model, make_input,
        lambda m: aot.aot_module(m, aot.eager_compiler, **options), device="cuda",
    )


def test_cuda_dropout_mask_same_as_eager(helpers: Any) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.dropout(x.sin(), p=0.5, training=True)

    x = torch.randn(64, 64, device="cuda", requires_grad=True)
    compiled = aot.aot_function(fn, aot.identity_compiler, partition_fn=aot.min_cut_partition)
    torch.manual_seed(3)
    expected = fn(x)
    torch.manual_seed(3)
    actual = compiled(x)
    helpers.assert_close(actual, expected, "dropout output")
    helpers.assert_close(torch.autograd.grad(actual.sum(), x),
                         torch.autograd.grad(expected.sum(), x), "grad")
