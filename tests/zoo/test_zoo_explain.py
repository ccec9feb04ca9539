"""``compile_api.explain`` reports what ``compile`` captures on library models (timm, torchvision).

explain used to report 0 graphs and 0 breaks on models that compile() captured whole (library
frames were skipped on one path only); both now go through the same frame compiler.
"""

from __future__ import annotations

import pytest
import torch

import compile_api
from benchmarks.zoo.measure import run_strata
from benchmarks.zoo.models import case


@pytest.mark.parametrize("name", ["resnet18", "mobilenetv3", "convnext_atto"])
def test_explain_reports_the_graphs_and_breaks_compile_captures(name: str) -> None:
    c = case(f"{name}-infer")
    compiled = run_strata(c, "eager")
    built = c.model.build()
    model = built.model.eval()
    with torch.no_grad():
        report = compile_api.explain(model)(built.kwargs["x"])
        expected = model(built.kwargs["x"])
    torch.testing.assert_close(compiled.tensors, [expected], rtol=1e-4, atol=1e-5)
    assert (report.graph_count, report.graph_break_count) == (compiled.graphs, compiled.breaks)
    assert report.graph_count == 1
    assert report.op_count > 10
