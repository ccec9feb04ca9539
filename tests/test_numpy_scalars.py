"""NumPy scalars in compiled code, as torch.compile treats them.

transformers' CTRL scales its embeddings by ``np.sqrt(d_model)``: torch.compile folds NumPy on
constants and puts the resulting number in the graph. Strata broke at the ufunc and then put
the ``np.float64`` into the resumed graph, whose code named ``np`` (NameError: the compile
crashed and the frame ran eagerly). A NumPy scalar argument's value is guarded, not only its
type. Each test compares with eager and with torch.compile.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch._dynamo

import compile_api

from .conftest import GraphCounter

D_MODEL = 32


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


def scaled_embedding(x: torch.Tensor) -> torch.Tensor:
    x = x * 2
    x *= np.sqrt(D_MODEL)
    return x + np.float32(1.5) + np.exp(np.float64(0.5))


def test_numpy_ufuncs_and_scalar_types_on_constants_fold_into_one_graph(
    counter: GraphCounter,
) -> None:
    compile_api.config.suppress_errors = False
    x = torch.randn(3, 4)
    expected = scaled_embedding(x)
    theirs, torch_count = _torch_graphs(scaled_embedding, x)
    got = compile_api.compile(scaled_embedding, backend=counter, fullgraph=True)(x)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    torch.testing.assert_close(theirs, expected, rtol=0, atol=0)
    assert counter.count == torch_count == 1


def threshold(x: torch.Tensor, s: Any) -> torch.Tensor:
    if s > 3.5:
        return x * s + 1
    return x * s - 1


def test_numpy_scalar_arguments_are_guarded_by_value(counter: GraphCounter) -> None:
    compile_api.config.suppress_errors = False
    compiled = compile_api.compile(threshold, backend=counter)
    x = torch.randn(5)
    for s in (np.float32(3.0), np.float32(4.0), np.float32(3.0), np.int64(5), np.float64(2.5)):
        torch.testing.assert_close(compiled(x, s), threshold(x, s), rtol=0, atol=0)
    theirs, _ = _torch_graphs(threshold, x, np.float32(4.0))
    torch.testing.assert_close(theirs, threshold(x, np.float32(4.0)), rtol=0, atol=0)


def array_root(x: torch.Tensor) -> torch.Tensor:
    return x + float(np.sqrt(np.array([4.0, 9.0])).sum())


def test_numpy_ufunc_on_an_array_runs_eagerly_at_a_break(counter: GraphCounter) -> None:
    compile_api.config.suppress_errors = False
    x = torch.randn(3)
    report = compile_api.explain(array_root)(x)
    got = compile_api.compile(array_root, backend=counter)(x)
    torch.testing.assert_close(got, array_root(x), rtol=0, atol=0)
    assert report.graph_break_count >= 1


def scale(x: torch.Tensor, s: Any) -> torch.Tensor:
    return x * s


def test_equal_numpy_float64_arguments_reuse_the_graph_and_other_values_recompile(
    counter: GraphCounter,
) -> None:
    # np.float64 is a float subclass the value guards cannot compare: it was pinned by
    # identity, so a new equal scalar on every call recompiled.
    compiled = compile_api.compile(scale, backend=counter)
    x = torch.randn(4)
    for s in (np.float64(2.0), np.float64(2.0), np.float64(2.0)):
        torch.testing.assert_close(compiled(x, s), scale(x, s), rtol=0, atol=0)
    assert counter.count == 1
    for s in (np.float64(3.0), np.float64(-0.0), np.float64(0.0)):
        torch.testing.assert_close(compiled(x, s), scale(x, s), rtol=0, atol=0)
    assert counter.count == 4
