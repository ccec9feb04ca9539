"""aot's graphs keep the user's source lines (``# File: ...:N in fn, code: ...``), as torch's do."""

from __future__ import annotations

import linecache
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
from torch._dynamo.backends.common import aot_autograd

import compile_api
from aot import aot_module_simplified

# torch 2.11 (the GPU machine's) names the line of another node for some backward nodes; 2.13's
# attribution is the one ours follows.
_TORCH_AT_LEAST_2_13 = tuple(int(p) for p in torch.__version__.split(".")[:2]) >= (2, 13)
_FILE = re.compile(r"# File: (.+):(\d+) in (\w+), code: (.*)")


class _Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x).relu()
        z = y * torch.sigmoid(y)
        return (z * 2).sum()


def _lines(gm: torch.fx.GraphModule) -> list[tuple[int, str]]:
    """(line, code) of each source comment of the graph, restricted to this file."""
    text = gm.print_readable(print_output=False)
    return [(int(m.group(2)), m.group(4)) for m in _FILE.finditer(text) if m.group(1) == __file__]


def _recorder(graphs: list[torch.fx.GraphModule]) -> Callable[..., Any]:
    def compiler(gm: torch.fx.GraphModule, example_inputs: Sequence[object]) -> Any:
        graphs.append(gm)
        return gm

    return compiler


def _ours(model: torch.nn.Module, x: torch.Tensor) -> list[torch.fx.GraphModule]:
    graphs: list[torch.fx.GraphModule] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: Sequence[object]) -> Any:
        return aot_module_simplified(gm, example_inputs, _recorder(graphs))

    compiled = compile_api.compile(model, backend=backend)
    out = compiled(x)
    torch.testing.assert_close(out, model(x))
    out.backward()
    return graphs


def _torchs(model: torch.nn.Module, x: torch.Tensor) -> list[torch.fx.GraphModule]:
    graphs: list[torch.fx.GraphModule] = []
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=aot_autograd(fw_compiler=_recorder(graphs)))
    compiled(x).backward()
    return graphs


@pytest.mark.parametrize("train", [False, True])
def test_aot_graphs_carry_the_same_source_lines_as_torch_compiles(train: bool) -> None:
    model = _Model()
    x = torch.randn(2, 4)
    if not train:
        model.requires_grad_(False)
        x.requires_grad_(True)  # a backward still runs: through the input
    ours, torchs = _ours(model, x), _torchs(model, x)
    assert len(ours) == len(torchs) == 2  # forward, backward
    for mine, reference in zip(ours, torchs, strict=True):
        lines = _lines(mine)
        assert lines, mine.print_readable(print_output=False)
        for number, code in lines:  # each comment quotes the line it names
            assert linecache.getline(__file__, number).strip() == code
        if _TORCH_AT_LEAST_2_13:
            assert sorted(set(lines)) == sorted(set(_lines(reference)))


def test_inference_graph_and_its_log_carry_source_lines(caplog: pytest.LogCaptureFixture) -> None:
    model = _Model().requires_grad_(False)
    x = torch.randn(2, 4)
    caplog.set_level(logging.DEBUG, logger="strata.aot_graphs")
    ours = _ours_inference(model, x)
    (line, code), *_ = _lines(ours)
    assert code == "y = self.lin(x).relu()"
    assert f"{__file__}:{line} in forward, code: y = self.lin(x).relu()" in caplog.text


def _ours_inference(model: torch.nn.Module, x: torch.Tensor) -> torch.fx.GraphModule:
    graphs: list[torch.fx.GraphModule] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: Sequence[object]) -> Any:
        return aot_module_simplified(gm, example_inputs, _recorder(graphs))

    compiled = compile_api.compile(model, backend=backend)
    torch.testing.assert_close(compiled(x), model(x))
    (gm,) = graphs
    return gm
