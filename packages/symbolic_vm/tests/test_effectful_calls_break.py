"""Library calls with effects outside the program -- files (``torch.save``, ``open``), output
(``print``), pickling, process-wide settings (``torch.set_num_threads``,
``torch.set_float32_matmul_precision``) -- are never run on fake values while tracing: the
graph breaks before the call, which then runs eagerly, once per call as in eager. Under
``fullgraph=True`` compiling raises before anything was written or changed.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from counting_backend import Counting

import compile_api
from compile_api import Unsupported

pytestmark = pytest.mark.usefixtures("errors_raise")


def save_between(x: torch.Tensor, path: str) -> torch.Tensor:
    y = x * 2
    torch.save(y, path)
    return y + 1


def write_between(x: torch.Tensor, path: str) -> torch.Tensor:
    y = x * 2
    with open(path, "a") as f:
        f.write("line\n")
    return y + 1


def pickle_between(x: torch.Tensor, path: str) -> torch.Tensor:
    y = x * 2
    Path(path).write_bytes(pickle.dumps(y))
    return y + 1


@pytest.mark.parametrize("fn", [save_between, write_between, pickle_between])
def test_fullgraph_raises_before_the_call_writes_anything(
    fn: Callable[..., Any], tmp_path: Path
) -> None:
    path = tmp_path / "out"
    with pytest.raises(Unsupported):
        compile_api.compile(fn, backend="eager", fullgraph=True)(torch.ones(2), str(path))
    assert not path.exists()


@pytest.mark.parametrize("fn", [save_between, write_between, pickle_between])
def test_the_call_runs_eagerly_once_per_call_at_a_break(
    fn: Callable[..., Any], tmp_path: Path
) -> None:
    eager_path, our_path = tmp_path / "eager", tmp_path / "ours"
    x = torch.arange(3.0)
    for _ in range(2):
        want = fn(x, str(eager_path))
    backend = Counting()
    compiled = compile_api.compile(fn, backend=backend)
    for _ in range(2):
        got = compiled(x, str(our_path))
    assert torch.equal(got, want)
    if fn is write_between:
        assert our_path.read_text() == eager_path.read_text() == "line\n" * 2
    else:
        loaded = (torch.load(our_path) if fn is save_between
                  else pickle.loads(our_path.read_bytes()))
        assert torch.equal(loaded, x * 2)
    assert backend.count == 2  # the code before the call and after it, each compiled once


def test_print_runs_once_per_call_with_eagers_output(capsys: pytest.CaptureFixture[str]) -> None:
    def show(x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        print("between", y.shape)
        return y * 2

    x = torch.ones(2)
    want = show(x)
    eager_out = capsys.readouterr().out
    backend = Counting()
    got = compile_api.compile(show, backend=backend)(x)
    assert capsys.readouterr().out == eager_out == "between torch.Size([2])\n"
    assert torch.equal(got, want)
    theirs = Counting()
    torch._dynamo.reset()
    torch.compile(show, backend=theirs)(x)
    torch._dynamo.reset()
    capsys.readouterr()
    assert backend.count <= theirs.count


@pytest.mark.parametrize(
    ("setter", "read"),
    [
        # a count other than the current one (a 2-core machine starts at 2)
        (lambda: torch.set_num_threads(torch.get_num_threads() % 2 + 1), torch.get_num_threads),
        (lambda: torch.set_float32_matmul_precision("medium"),
         torch.get_float32_matmul_precision),
        (lambda: torch.set_warn_always(True), torch.is_warn_always_enabled),
    ],
)
def test_process_wide_setters_break_and_are_not_run_while_tracing(
    setter: Callable[[], None], read: Callable[[], object]
) -> None:
    def change(x: torch.Tensor) -> torch.Tensor:
        setter()
        return x + 1

    threads, precision, warn = (torch.get_num_threads(), torch.get_float32_matmul_precision(),
                                torch.is_warn_always_enabled())
    try:
        before = read()
        with pytest.raises(Unsupported, match="process-wide state"):
            compile_api.compile(change, backend="eager", fullgraph=True)(torch.ones(2))
        assert read() == before  # not run while tracing
        got = compile_api.compile(change, backend="eager")(torch.ones(2))
        assert torch.equal(got, torch.ones(2) + 1)
        assert read() != before  # the eager run at the break made the change
    finally:
        torch.set_num_threads(threads)
        torch.set_float32_matmul_precision(precision)
        torch.set_warn_always(warn)


def test_queries_of_those_modules_trace_without_a_break() -> None:
    # transformers' attention asks torch.jit.is_tracing() in every layer: a question, no effect
    def asks(x: torch.Tensor) -> torch.Tensor:
        if torch.jit.is_tracing() or torch.jit.is_scripting() or torch.onnx.is_in_onnx_export():
            return x - 1
        return x * 2 + 1

    counting = Counting()
    got = compile_api.compile(asks, backend=counting, fullgraph=True)(torch.ones(2))
    assert torch.equal(got, asks(torch.ones(2)))
    assert counting.count == 1
