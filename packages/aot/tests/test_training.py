"""Training steps through aot match eager: loss, gradients, updated parameters and buffers."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import aot

MODEL_NAMES = ["mlp", "transformer_block", "cnn_batchnorm_dropout"]
PARTITION_NAMES = ["default", "min_cut", "decomp_min_cut", "cpu", "decomp_cpu"]


COMPILERS = {"identity": aot.identity_compiler, "eager": aot.eager_compiler}


@pytest.mark.parametrize("compiler", list(COMPILERS))
@pytest.mark.parametrize("partition", PARTITION_NAMES)
@pytest.mark.parametrize("model_name", MODEL_NAMES)
def test_aot_module_training_steps_match_eager(
    helpers: Any, model_name: str, partition: str, compiler: str
) -> None:
    make_model, make_input = helpers.MODELS[model_name]
    options = helpers.PARTITIONS[partition]
    helpers.compare_training(
        make_model, make_input, lambda m: aot.aot_module(m, COMPILERS[compiler], **options)
    )


@pytest.mark.parametrize("partition", PARTITION_NAMES)
def test_aot_function_mlp_training_step_matches_eager(helpers: Any, partition: str) -> None:
    options = helpers.PARTITIONS[partition]

    def compile_model(model: torch.nn.Module) -> Any:
        params = dict(model.named_parameters())

        def fn(p: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
            return torch.func.functional_call(model, p, (x,))

        compiled = aot.aot_function(fn, aot.identity_compiler, **options)
        return lambda x: compiled(params, x)

    helpers.compare_training(helpers.MLP, helpers.MODELS["mlp"][1], compile_model)


def test_batchnorm_running_stats_updated_once_per_step(helpers: Any) -> None:
    torch.manual_seed(0)
    eager = helpers.ConvNet()
    compiled_model = helpers.ConvNet()
    compiled_model.load_state_dict(eager.state_dict())
    compiled = aot.aot_module(compiled_model, aot.identity_compiler)
    x = torch.randn(4, 3, 8, 8)
    for _ in range(3):
        torch.manual_seed(5)
        eager(x).sum().backward()
        torch.manual_seed(5)
        compiled(x).sum().backward()
    assert int(compiled_model.bn.num_batches_tracked) == 3
    helpers.assert_close(compiled_model.bn.running_mean, eager.bn.running_mean, "running_mean")
    helpers.assert_close(compiled_model.bn.running_var, eager.bn.running_var, "running_var")


def test_eval_mode_switch_retraces_without_dropout_or_stat_updates(helpers: Any) -> None:
    torch.manual_seed(0)
    model = helpers.ConvNet()
    compiled = aot.aot_module(model, aot.identity_compiler)
    x = torch.randn(4, 3, 8, 8)
    compiled(x)
    model.eval()
    stats = model.bn.running_mean.clone()
    out = compiled(x)
    helpers.assert_close(out, model(x), "eval output")
    torch.testing.assert_close(model.bn.running_mean, stats, rtol=0, atol=0)


@pytest.mark.parametrize("partition", PARTITION_NAMES)
def test_dropout_mask_same_as_eager_for_same_seed(helpers: Any, partition: str) -> None:
    options = helpers.PARTITIONS[partition]

    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.dropout(torch.sigmoid(x @ w), p=0.5, training=True).exp()

    x = torch.randn(16, 16)
    w = torch.randn(16, 16, requires_grad=True)
    compiled = aot.aot_function(fn, aot.identity_compiler, **options)
    for seed in (0, 1):
        torch.manual_seed(seed)
        expected = fn(x, w)
        (gw_expected,) = torch.autograd.grad(expected.sum(), w)
        torch.manual_seed(seed)
        actual = compiled(x, w)
        (gw_actual,) = torch.autograd.grad(actual.sum(), w)
        helpers.assert_close(actual, expected, "dropout output")
        helpers.assert_close(gw_actual, gw_expected, "dropout grad")
    # The mask is drawn once, in the forward; the backward never draws it again.
    art = compiled.artifacts
    assert art is not None and art.bw_gm is not None
    random_in_bw = [
        n.target for n in art.bw_gm.graph.nodes
        if torch.Tag.nondeterministic_seeded in getattr(n.target, "tags", ())
    ]
    assert random_in_bw == []
