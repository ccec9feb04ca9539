"""Which frames the callback compiles and which it leaves alone."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import aot
import compile_api
import evalframe
import inductor_lite
from compile_api.frame_compiler import skip_reason


def user_function(x: torch.Tensor) -> torch.Tensor:
    return x + 1


def test_user_code_is_compiled() -> None:
    assert skip_reason(user_function.__code__) is None


@pytest.mark.parametrize(
    "code",
    [
        aot.aot_function.__code__,
        inductor_lite.compile_fx.__code__,
        torch.nn.functional.relu.__code__,
    ],
)
def test_library_code_is_skipped(code: object) -> None:
    assert skip_reason(code) is not None  # type: ignore[arg-type]


def test_layers_not_imported_yet_are_still_skipped() -> None:
    # Regression: the backend imported aot lazily, so aot's own helpers were compiled by a
    # backend that runs aot, recursing forever.
    script = (
        "import sys, compile_api\n"
        "from compile_api.frame_compiler import skip_reason\n"
        "assert 'aot' not in sys.modules\n"
        "import aot\n"
        "print(skip_reason(aot.aot_function.__code__))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert "library code" in out.stdout


def test_generator_functions_are_left_alone() -> None:
    def gen() -> object:
        yield 1

    assert skip_reason(gen.__code__) == "generators and coroutines run eagerly"


def test_after_its_first_call_a_graph_runs_through_evalframes_c_wrapper() -> None:
    def add_one(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    compiled = compile_api.compile(add_one, backend="eager")
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x + 1)
    installed = [
        value for name, value in add_one.__globals__.items() if name.startswith("__compiled_fn")
    ]
    assert installed
    c_wrapper = type(evalframe.without_hook(len))
    assert all(isinstance(value, c_wrapper) for value in installed)
    torch.testing.assert_close(compiled(x), x + 1)
