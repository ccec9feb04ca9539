"""Guards on nn.Module state through compile_api, where guards' state trees stand for the
per-attribute guards (a conv's stride, padding, ..., a submodule's identity) while nothing on
their paths changed: every change of a guarded attribute between calls still recompiles and
gives eager's result, and changing it back is a cache hit again.

Runs on guards' default check path (state trees on the C++ path) and with the trees off, the
reference the tree path must agree with.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import compile_api
import evalframe


@pytest.fixture(autouse=True, params=["trees", "no-trees"])
def trees(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "no-trees":
        monkeypatch.setenv("STRATA_GUARDS_STATE_TREES", "0")
    else:
        monkeypatch.delenv("STRATA_GUARDS_STATE_TREES", raising=False)
    return str(request.param)


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 3, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(3)
        self.act: torch.nn.Module = torch.nn.Hardswish()
        self.scale = 2.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x))) * self.scale


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(Block(), torch.nn.Sequential(Block(), Block()))
        self.residual = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.features(x)
        return y + x if self.residual and y.shape == x.shape else y


def inner_conv(net: Net) -> torch.nn.Conv2d:
    conv = net.features[1][0].conv
    assert isinstance(conv, torch.nn.Conv2d)
    return conv


def swap_weight(net: Net) -> None:
    conv = inner_conv(net)
    conv.weight = torch.nn.Parameter(torch.randn_like(conv.weight))


CHANGES: dict[str, Callable[[Net], None]] = {
    "conv stride": lambda n: setattr(inner_conv(n), "stride", (2, 2)),
    "conv padding": lambda n: setattr(inner_conv(n), "padding", (0, 0)),
    "conv dilation": lambda n: setattr(inner_conv(n), "dilation", (2, 2)),
    "conv padding mode": lambda n: setattr(inner_conv(n), "padding_mode", "reflect"),
    "batch norm eps": lambda n: setattr(n.features[1][1].bn, "eps", 0.5),
    "a float attribute": lambda n: setattr(n.features[0], "scale", 3.0),
    "the root's flag": lambda n: setattr(n, "residual", False),
    "a submodule replaced": lambda n: setattr(n.features[1][1], "act", torch.nn.Tanh()),
    "a Sequential item replaced": lambda n: n.features[1].__setitem__(0, Block()),
    "a parameter swapped": swap_weight,
    "training mode of one block": lambda n: n.features[1][0].train(),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_changed_module_attribute_recompiles_and_matches_eager(
    counter: Any, change: str
) -> None:
    torch.manual_seed(0)
    net = Net().eval()
    opt = compile_api.compile(net, backend=counter)
    x = torch.randn(1, 3, 8, 8)
    with torch.no_grad():
        for _ in range(3):  # the second and third calls take the armed trees
            torch.testing.assert_close(opt(x), net(x))
        assert counter.count == 1
        CHANGES[change](net)
        for _ in range(2):
            torch.testing.assert_close(opt(x), net(x))
        assert counter.count == 2


def test_a_change_put_back_is_a_cache_hit(counter: Any, trees: str) -> None:
    torch.manual_seed(0)
    net = Net().eval()
    opt = compile_api.compile(net, backend=counter)
    x = torch.randn(1, 3, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(opt(x), net(x))
        if trees == "trees":
            code = type(net).forward.__code__
            guard = evalframe.cache_entries(code)[0].guard
            assert "___state_tree" in guard.compiled_guards.source_code  # type: ignore[attr-defined]
        conv = inner_conv(net)
        conv.padding = (0, 0)
        torch.testing.assert_close(opt(x), net(x))
        conv.padding = (1, 1)  # an equal tuple, not the same object
        torch.testing.assert_close(opt(x), net(x))
        net.features[0].note = "an attribute no guard reads"
        torch.testing.assert_close(opt(x), net(x))
        assert counter.count == 2
