"""Shared models, inputs and the eager-vs-compiled training-step comparison."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import aot

# Float32 graphs run the very same aten kernels as eager, so results agree to rounding.
RTOL = 1e-5
ATOL = 1e-6
# With core decompositions some kernels become several simpler ops (tanh_backward, layer norm,
# ...), which round differently: measured differences reach ~1e-5 absolute on unit-scale values.
DECOMPOSED_RTOL = 1e-4
DECOMPOSED_ATOL = 1e-5
_tolerance = {"rtol": RTOL, "atol": ATOL}


@pytest.fixture(autouse=True)
def _seed_and_tolerance(request: pytest.FixtureRequest) -> Any:
    """Every test starts from the same RNG state (tests must not depend on their order), and
    tests parametrized with a decomposing variant compare at the decomposed tolerance."""
    torch.manual_seed(1234)
    callspec = getattr(request.node, "callspec", None)
    params = callspec.params.values() if callspec is not None else ()
    decomposed = any(isinstance(p, str) and "decomp" in p for p in params)
    _tolerance.update(
        rtol=DECOMPOSED_RTOL if decomposed else RTOL, atol=DECOMPOSED_ATOL if decomposed else ATOL
    )
    yield
    _tolerance.update(rtol=RTOL, atol=ATOL)


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 32)
        self.fc3 = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(torch.tanh(self.fc2(F.relu(self.fc1(x)))))


class TransformerBlock(nn.Module):
    """Pre-norm block written out by hand: multi-head attention, then a GELU MLP."""

    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q = q.view(b, t, h, d // h).transpose(1, 2)
        k = k.view(b, t, h, d // h).transpose(1, 2)
        v = v.view(b, t, h, d // h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // h)
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), diagonal=1)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class ConvNet(nn.Module):
    """Conv + BatchNorm2d (running statistics) + dropout + linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(0.3)
        self.head = nn.Linear(8 * 4 * 4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.head(self.drop(x.flatten(1)))


def pointwise_chain(x: torch.Tensor) -> torch.Tensor:
    """Eight pointwise ops in a row: every intermediate is cheap to recompute."""
    y = torch.sin(x)
    y = torch.cos(y) * 2.0
    y = torch.exp(y * 0.1)
    y = torch.sigmoid(y + x)
    y = torch.tanh(y)
    return y


MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[], torch.Tensor]]] = {
    "mlp": (MLP, lambda: torch.randn(8, 16)),
    "transformer_block": (TransformerBlock, lambda: torch.randn(2, 6, 32)),
    "cnn_batchnorm_dropout": (ConvNet, lambda: torch.randn(4, 3, 8, 8)),
}

PARTITIONS: dict[str, dict[str, Any]] = {
    "default": {},
    "min_cut": {"partition_fn": aot.min_cut_partition},
    "decomp_min_cut": {
        "partition_fn": aot.min_cut_partition,
        "decompositions": aot.core_decompositions(),
    },
    "cpu": {"partition_fn": aot.cpu_partition},
    "decomp_cpu": {
        "partition_fn": aot.cpu_partition,
        "decompositions": aot.core_decompositions(),
    },
}


def assert_close(actual: Any, expected: Any, what: str) -> None:
    torch.testing.assert_close(
        actual, expected, rtol=_tolerance["rtol"], atol=_tolerance["atol"],
        msg=lambda m: f"{what}: {m}",
    )


def train_steps(
    model: nn.Module, run: Callable[[torch.Tensor], torch.Tensor], inputs: list[torch.Tensor],
    seed: int,
) -> list[dict[str, Any]]:
    """Forward, MSE loss, backward and an SGD step per input; returns what each step produced."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    records = []
    torch.manual_seed(seed)
    for x in inputs:
        opt.zero_grad()
        out = run(x)
        loss = (out.float() ** 2).mean()
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        opt.step()
        records.append(
            {
                "loss": loss.detach(),
                "grads": grads,
                "params": {n: p.detach().clone() for n, p in model.named_parameters()},
                "buffers": {n: b.clone() for n, b in model.named_buffers()},
            }
        )
    return records


def compare_training(
    make_model: Callable[[], nn.Module],
    make_input: Callable[[], torch.Tensor],
    compile_model: Callable[[nn.Module], Callable[[torch.Tensor], torch.Tensor]],
    steps: int = 2,
    device: str = "cpu",
) -> None:
    """Eager and compiled copies of one model take the same steps and must agree on everything."""
    torch.manual_seed(0)
    eager_model = make_model().to(device)
    compiled_model = copy.deepcopy(eager_model)
    inputs = [make_input().to(device) for _ in range(steps)]
    eager = train_steps(eager_model, eager_model, inputs, seed=1)
    compiled = train_steps(compiled_model, compile_model(compiled_model), inputs, seed=1)
    for i, (e, c) in enumerate(zip(eager, compiled)):
        assert_close(c["loss"], e["loss"], f"step {i} loss")
        for kind in ("grads", "params", "buffers"):
            assert c[kind].keys() == e[kind].keys()
            for name in e[kind]:
                if kind == "grads" and _is_rounding_noise(e[kind][name], e[kind].values()):
                    # 0 in exact arithmetic (a conv bias before batch norm): both sides must
                    # be noise, but their noise is not compared (it differs by machine)
                    assert _is_rounding_noise(c[kind][name], e[kind].values()), (
                        f"step {i} grads {name}: eager's is rounding noise, compiled's is not"
                    )
                    continue
                assert_close(c[kind][name], e[kind][name], f"step {i} {kind} {name}")


def _is_rounding_noise(grad: torch.Tensor, all_grads: Any) -> bool:
    """A gradient under 1e-5 of the largest gradient of the step: float32 rounding of a value
    that is 0 in exact arithmetic."""
    scale = max(float(g.abs().max()) for g in all_grads if g.numel())
    return float(grad.abs().max()) <= 1e-5 * scale


def mutating_or_aliasing_ops(gm: torch.fx.GraphModule) -> list[str]:
    """Names of the ops in `gm` whose schema mutates an argument or returns an alias, plus
    training-mode `native_batch_norm` (it updates running stats without declaring it)."""
    bad = []
    for node in gm.graph.nodes:
        schema = getattr(node.target, "_schema", None)
        if node.op != "call_function" or schema is None:
            continue
        if node.target is torch.ops.aten.native_batch_norm.default and node.args[5]:
            bad.append(str(node.target))
            continue
        if schema.is_mutable or any(r.alias_info is not None for r in schema.returns):
            bad.append(str(node.target))
    return bad


@pytest.fixture
def models() -> dict[str, tuple[Callable[[], nn.Module], Callable[[], torch.Tensor]]]:
    return MODELS


@pytest.fixture
def helpers() -> Any:
    """The shared helpers, as a namespace (tests run under --import-mode=importlib)."""

    class H:
        MLP = MLP
        TransformerBlock = TransformerBlock
        ConvNet = ConvNet
        pointwise_chain = staticmethod(pointwise_chain)
        PARTITIONS = PARTITIONS
        MODELS = MODELS
        compare_training = staticmethod(compare_training)
        assert_close = staticmethod(assert_close)
        mutating_or_aliasing_ops = staticmethod(mutating_or_aliasing_ops)

    return H
