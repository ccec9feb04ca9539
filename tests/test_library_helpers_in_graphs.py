"""Library helpers models call on every forward capture as under torch.compile.

Found by the model sweep (benchmarks/model_sweep.py) on wav2vec2 and HuBERT, which torch
captures in 1 graph and Strata broke 7-9 times:
- a ``parametrizations.weight_norm`` weight is a property whose getter (torch.nn.utils.
  parametrize) calls the parametrization modules: it was taken for a torch op and given a
  module as an argument;
- ``re.match`` on a constant string (transformers' ``is_flash_attention_requested``) broke in
  ``re``'s cache lookup;
- transformers marks its install/version probes with torch's ``assume_constant_result``
  marker: torch calls them while tracing and keeps the result as a constant; Strata traced
  them into importlib.metadata.
Each test compares with eager and with torch.compile's graph count.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch._dynamo

import compile_api

from .conftest import GraphCounter


def _torch_graphs(fn: Callable[..., Any], *args: Any) -> tuple[Any, int]:
    graphs: list[torch.fx.GraphModule] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    try:
        return torch.compile(fn, backend=backend)(*args), len(graphs)
    finally:
        torch._dynamo.reset()


def _weight_normed() -> torch.nn.Module:
    torch.manual_seed(0)
    conv = torch.nn.Conv1d(4, 4, 3, padding=1)
    return torch.nn.utils.parametrizations.weight_norm(conv, name="weight", dim=2)


def test_weight_norm_parametrized_conv_trains_in_one_graph(counter: GraphCounter) -> None:
    compile_api.config.suppress_errors = False
    x = torch.randn(2, 4, 8)

    def step(model: torch.nn.Module, run: Callable[..., Any]) -> list[torch.Tensor]:
        loss = run(x).square().mean()
        loss.backward()
        return [loss.detach(), *(p.grad for p in model.parameters() if p.grad is not None)]

    eager_model, ours_model, torch_model = _weight_normed(), _weight_normed(), _weight_normed()
    expected = step(eager_model, eager_model)
    got = step(ours_model, compile_api.compile(ours_model, backend=counter, fullgraph=True))
    _, torch_count = _torch_graphs(torch_model, x)
    torch.testing.assert_close(got, expected)
    assert len(expected) == 4  # the loss; the bias's and both originals' (g, v) gradients
    assert counter.count == torch_count == 1


ATTENTION = "flash_attention_2"


def wants_flash(x: torch.Tensor) -> torch.Tensor:
    if re.match(r".*flash.*" + str(2), ATTENTION) is not None:
        return x * 2
    return x - 1


def test_re_match_on_constant_strings_folds_in_the_graph(counter: GraphCounter) -> None:
    compile_api.config.suppress_errors = False
    x = torch.randn(3)
    theirs, torch_count = _torch_graphs(wants_flash, x)
    got = compile_api.compile(wants_flash, backend=counter, fullgraph=True)(x)
    torch.testing.assert_close(got, wants_flash(x))
    torch.testing.assert_close(theirs, wants_flash(x))
    assert counter.count == torch_count == 1


CALLS: list[str] = []


def _probe(name: str) -> bool:
    CALLS.append(name)  # a side effect the trace must not replay: the probe runs once
    return name.startswith("torch")


_probe._dynamo_marked_constant = True  # type: ignore[attr-defined]  # as transformers marks


def probed(x: torch.Tensor) -> torch.Tensor:
    return x + 1 if _probe("torch") else x - 1


def test_function_marked_constant_valued_is_called_while_tracing_not_traced(
    counter: GraphCounter,
) -> None:
    compile_api.config.suppress_errors = False
    x = torch.randn(3)
    _, torch_count = _torch_graphs(probed, x)
    CALLS.clear()
    compiled = compile_api.compile(probed, backend=counter, fullgraph=True)
    first, second = compiled(x), compiled(x)
    torch.testing.assert_close(first, x + 1)
    torch.testing.assert_close(second, x + 1)
    assert CALLS == ["torch"]  # once, at trace time; the graph holds its answer
    assert counter.count == torch_count == 1
    nodes = [n.op for n in counter.graphs[0].graph.nodes]
    assert nodes.count("call_function") == 1  # just the add


def test_relative_import_inside_a_function_of_an_imported_package_is_traced(
    tmp_path: Any, monkeypatch: Any, counter: GraphCounter
) -> None:
    # transformers' output-capturing hooks do `from ..modeling_utils import PreTrainedModel`
    # inside a function: the module is imported already, so the import is a lookup.
    import importlib

    package = tmp_path / "relpkg_sweep"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "helpers.py").write_text("SCALE = 3.0\nOFFSET = 1.5\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "mod.py").write_text(
        "def f(x):\n"
        "    from ..helpers import SCALE\n"
        "    from .. import helpers\n"
        "    return x * SCALE + helpers.OFFSET\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("", ".helpers", ".sub", ".sub.mod"):
        monkeypatch.delitem(sys.modules, "relpkg_sweep" + name, raising=False)
    f = importlib.import_module("relpkg_sweep.sub.mod").f
    importlib.import_module("relpkg_sweep.helpers")
    compile_api.config.suppress_errors = False
    x = torch.randn(3)
    theirs, torch_count = _torch_graphs(f, x)
    got = compile_api.compile(f, backend=counter, fullgraph=True)(x)
    torch.testing.assert_close(got, f(x))
    torch.testing.assert_close(theirs, f(x))
    assert counter.count == torch_count == 1
