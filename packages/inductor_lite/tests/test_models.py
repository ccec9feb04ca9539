"""End to end: small models through compile_fx and as a real torch.compile backend."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import inductor_lite
from inductor_lite import InductorConfig, compile_fx


class Block(nn.Module):
    """A pre-norm transformer block."""

    def __init__(self, d: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.ln2 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q = q.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        att = torch.softmax(q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


def mlp() -> nn.Module:
    return nn.Sequential(
        nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.SiLU(), nn.Linear(64, 10)
    )


def cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 5),
    )


MODELS = {
    "mlp": (mlp, lambda: torch.randn(16, 32)),
    "transformer_block": (Block, lambda: torch.randn(2, 10, 64)),
    "cnn": (cnn, lambda: torch.randn(2, 3, 12, 12)),
}


def _backend(config: InductorConfig) -> Any:
    return lambda gm, example_inputs: compile_fx(gm, example_inputs, config=config)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_inference_matches_eager_through_compile_fx(name: str, check: Any) -> None:
    make, data = MODELS[name]
    torch.manual_seed(0)
    model = make().eval()
    c = check(model, [data()], atol=1e-4, rtol=1e-4)
    assert c.kernel_count >= 1


@pytest.mark.parametrize("name", sorted(MODELS))
def test_inference_as_torch_compile_backend(name: str, config: InductorConfig) -> None:
    make, data = MODELS[name]
    torch.manual_seed(0)
    model = make().eval()
    x = data()
    opt = torch.compile(model, backend=_backend(config), dynamic=False)
    with torch.no_grad():
        torch.testing.assert_close(opt(x), model(x), atol=1e-4, rtol=1e-4)
        x2 = data()
        torch.testing.assert_close(opt(x2), model(x2), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_training_gradients_match_eager_through_aot(name: str, config: InductorConfig) -> None:
    make, data = MODELS[name]
    torch.manual_seed(0)
    model = make().train()
    ref = make().train()
    ref.load_state_dict(model.state_dict())
    x = data()
    opt = torch.compile(model, backend=_backend(config), dynamic=False)
    out = opt(x)
    expected = ref(x)
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)
    out.square().sum().backward()
    expected.square().sum().backward()
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-3, rtol=1e-3, msg=n)
    if any(isinstance(m, nn.BatchNorm2d) for m in model.modules()):
        for b1, b2 in zip(model.buffers(), ref.buffers()):
            torch.testing.assert_close(b1, b2, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- through compile_api


@pytest.fixture
def compile_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    original = inductor_lite.compile_fx

    def spy(gm: torch.fx.GraphModule, example_inputs: Any, **kw: Any) -> Any:
        result = original(gm, example_inputs, **kw)
        calls.append(type(result).__name__)
        return result

    monkeypatch.setattr(inductor_lite, "compile_fx", spy)
    return calls


@pytest.mark.parametrize("name", sorted(MODELS))
def test_inference_and_training_through_strata_compile_api(
    name: str, compile_calls: list[str]
) -> None:
    compile_api = pytest.importorskip("compile_api")
    make, data = MODELS[name]
    torch.manual_seed(0)
    model = make().eval()
    ref = make().eval()
    ref.load_state_dict(model.state_dict())
    opt = compile_api.compile(model)
    with torch.no_grad():
        x = data()
        torch.testing.assert_close(opt(x), ref(x), atol=1e-4, rtol=1e-4)
    # one graph, compiled by us exactly once, and compiled (not an eager fallback); under
    # no_grad without aot's runtime around it
    assert compile_calls == ["CompiledGraph"]
    model.train()
    ref.train()
    x = data()
    out = opt(x)
    expected = ref(x)
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)
    out.square().sum().backward()
    expected.square().sum().backward()
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-3, rtol=1e-3, msg=n)
    assert "EagerFallback" not in compile_calls


def test_no_grad_graph_that_writes_an_input_keeps_aots_runtime(compile_calls: list[str]) -> None:
    # batch norm in training mode updates its running statistics in place: under no_grad
    # the graph still goes through aot, whose runtime writes the inputs back
    compile_api = pytest.importorskip("compile_api")
    torch.manual_seed(0)
    model = cnn().train()
    ref = cnn().train()
    ref.load_state_dict(model.state_dict())
    opt = compile_api.compile(model)
    x = torch.randn(2, 3, 12, 12)
    with torch.no_grad():
        torch.testing.assert_close(opt(x), ref(x), atol=1e-4, rtol=1e-4)
    assert compile_calls == ["function"]  # aot's runtime, compiled (not run as it came)
    for (n, b1), b2 in zip(model.named_buffers(), ref.buffers()):
        torch.testing.assert_close(b1, b2, atol=1e-5, rtol=1e-5, msg=n)
