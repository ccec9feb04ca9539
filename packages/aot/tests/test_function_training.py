"""Training steps through aot_function on functions with input mutation, aliased outputs,
non-differentiable and non-tensor outputs: same losses, gradients, parameters and mutated
inputs as eager; min-cut saves no more bytes than the default partition on each."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import aot

Params = dict[str, torch.Tensor]


def mutating(p: Params, x: torch.Tensor, stats: torch.Tensor) -> torch.Tensor:
    h = torch.tanh(x @ p["w1"])
    stats.mul_(0.9).add_(h.detach().mean(0), alpha=0.1)  # a running statistic, updated in place
    return (h - stats) @ p["w2"]


def aliasing(p: Params, x: torch.Tensor, stats: torch.Tensor) -> tuple[torch.Tensor, ...]:
    h = torch.sigmoid(x @ p["w1"])
    out = h @ p["w2"]
    return out, out.t(), out[0], h.view(-1), stats[1:]  # views of an output, an intermediate, input


def non_differentiable(p: Params, x: torch.Tensor, stats: torch.Tensor) -> dict[str, Any]:
    logits = torch.relu(x @ p["w1"]) @ p["w2"]
    return {"out": logits, "pred": logits.argmax(dim=1), "classes": logits.shape[1],
            "tag": "head", "mean": stats.mean()}


def loss_of(out: Any) -> torch.Tensor:
    if isinstance(out, dict):
        assert out["classes"] == 3 and out["tag"] == "head"
        assert out["pred"].dtype == torch.int64 and not out["pred"].requires_grad
        return (out["out"] ** 2).mean() + out["pred"].float().mean() * 0 + out["mean"]
    if isinstance(out, tuple):
        return sum((o.float() ** 2).mean() * (i + 1) for i, o in enumerate(out))
    return (out**2).mean()


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "mutating": mutating,
    "aliasing": aliasing,
    "non_differentiable": non_differentiable,
}
PARTITION_NAMES = ["default", "min_cut", "decomp_min_cut", "cpu", "decomp_cpu"]


def _params() -> Params:
    torch.manual_seed(0)
    return {
        "w1": torch.randn(6, 8, requires_grad=True),
        "w2": torch.randn(8, 3, requires_grad=True),
    }


def _train(fn: Callable[..., Any], steps: int = 2) -> tuple[list[Any], Params, torch.Tensor]:
    params = _params()
    stats = torch.zeros(8)
    torch.manual_seed(1)
    inputs = [torch.randn(5, 6) for _ in range(steps)]
    records = []
    for x in inputs:
        loss = loss_of(fn(params, x, stats))
        grads = torch.autograd.grad(loss, list(params.values()))
        with torch.no_grad():
            for p, g in zip(params.values(), grads):
                p.sub_(0.1 * g)
        records.append((loss.detach(), [g.clone() for g in grads]))
    return records, params, stats


@pytest.mark.parametrize("partition", PARTITION_NAMES)
@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_function_training_steps_match_eager(helpers: Any, name: str, partition: str) -> None:
    fn = FUNCTIONS[name]
    compiled = aot.aot_function(fn, aot.identity_compiler, **helpers.PARTITIONS[partition])
    expected, e_params, e_stats = _train(fn)
    actual, a_params, a_stats = _train(compiled)
    for i, ((el, eg), (al, ag)) in enumerate(zip(expected, actual)):
        helpers.assert_close(al, el, f"step {i} loss")
        helpers.assert_close(ag, eg, f"step {i} grads")
    helpers.assert_close(a_params, e_params, "updated parameters")
    helpers.assert_close(a_stats, e_stats, "mutated input")


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_min_cut_saves_no_more_than_default_on_each_function(helpers: Any, name: str) -> None:
    saved = {}
    for label, options in (("default", {}), ("min_cut", {"partition_fn": aot.min_cut_partition})):
        compiled = aot.aot_function(FUNCTIONS[name], aot.identity_compiler, **options)
        compiled(_params(), torch.randn(5, 6), torch.zeros(8))
        art = compiled.artifacts
        assert art is not None and art.stats is not None
        saved[label] = art.stats.saved_bytes
    assert 0 < saved["min_cut"] <= saved["default"]
