"""Which frames the callback compiles and which it leaves alone."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

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


def test_class_bodies_are_left_alone_so_a_class_statement_breaks_once() -> None:
    def make() -> object:
        class Local:
            k = 3

        return Local

    body = next(c for c in make.__code__.co_consts if hasattr(c, "co_flags"))
    assert skip_reason(body) == "module and class bodies run eagerly"
    assert skip_reason(make.__code__) is None
    compile_api.reset()
    compiled = compile_api.compile(make)
    assert compiled().k == 3  # type: ignore[attr-defined]
    report = compile_api.explain(make)()
    assert len(report.break_reasons) == 1  # the class statement, not also its body


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


class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return _scaled(grad, x)


def _scaled(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return grad * 2 * x  # a user frame the autograd engine reaches


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_frames_run_by_the_autograd_engine_are_not_compiled(backend: str) -> None:
    # loss.backward() inside a compiled function runs backward functions on this thread with
    # the hook on; they are compiled code (aot's) or run eagerly (a custom Function's), as
    # under TorchDynamo: the engine's entry into Python is answered SKIP_RECURSIVE
    seen: list[Any] = []

    def spy(frame: Any, cache_size: int) -> Any:
        seen.append(frame.f_code)
        return callback(frame, cache_size)

    def step(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        y = (_Square.apply(x * w) + torch.sin(w)).sum()
        y.backward()
        return y.detach()

    w1 = torch.randn(5, requires_grad=True)
    w2 = w1.detach().clone().requires_grad_()
    x = torch.randn(5)
    compiled = compile_api.compile(step, backend=backend)
    callback = compiled.callback  # type: ignore[attr-defined]
    compiled = evalframe.with_callback(spy, step)
    torch.testing.assert_close(compiled(w1, x), step(w2, x))
    torch.testing.assert_close(w1.grad, w2.grad)
    entry = torch.autograd.function.BackwardCFunction.apply.__code__
    assert entry in seen  # the engine's entry was asked ...
    assert _scaled.__code__ not in seen  # ... and nothing under it
    assert _Square.backward.__code__ not in seen


def _code_in(filename: str, source: str, name: str) -> Any:
    namespace: dict[str, Any] = {"torch": torch}
    exec(compile(source, filename, "exec"), namespace)
    return namespace[name]


def test_standard_library_code_is_skipped() -> None:
    import json
    import os

    assert skip_reason(json.dumps.__code__) is not None
    assert skip_reason(os.path.join.__code__) is not None


@pytest.mark.parametrize("key", ["purelib", "platlib"])
def test_installed_libraries_are_compiled(key: str) -> None:
    # Regression: in a virtual environment sysconfig's platstdlib is <venv>/lib/pythonX.Y,
    # which holds site-packages, so every installed library counted as the standard library.
    import sysconfig

    filename = f"{sysconfig.get_paths()[key]}/some_library/layers.py"
    fn = _code_in(filename, "def swish(x):\n    return x * torch.sigmoid(x)\n", "swish")
    assert skip_reason(fn.__code__) is None

    graphs: list[object] = []

    def counter(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        graphs.append(gm)
        return gm.forward

    compile_api.reset()
    x = torch.randn(4)
    torch.testing.assert_close(compile_api.compile(fn, backend=counter)(x), fn(x))
    assert len(graphs) == 1
    compile_api.reset()


def test_site_packages_below_the_stdlib_folder_are_not_stdlib() -> None:
    # A plain (non-venv) install keeps site-packages inside lib/pythonX.Y.
    import os
    import site

    from compile_api.frame_compiler import is_library_file

    stdlib = os.path.dirname(os.__file__)
    assert is_library_file(os.path.join(stdlib, "json", "__init__.py"))
    for folder in site.getsitepackages():
        assert not is_library_file(os.path.join(folder, "some_library", "layers.py"))


class _Held:
    pass


def test_a_frame_run_eagerly_keeps_none_of_its_locals_alive() -> None:
    # The record of a frame that runs eagerly keeps its GraphBreakNeeded (explain reads it);
    # its traceback held the compiler's frames and through them the user's frame and locals
    # until reset() (a generator left suspended there never ran its finally: found by the
    # fuzzer's py_objects family). Reference cycles through the compiler's frames remain (a
    # collection frees them), so this test collects once.
    import gc
    import weakref

    import compile_api

    def made_function_escapes(x: torch.Tensor, held: _Held) -> Any:
        y = x + 1

        def inner(a: torch.Tensor) -> torch.Tensor:
            return a * 2

        return y, inner

    compile_api.reset()
    compiled = compile_api.compile(made_function_escapes, backend="eager")
    held = _Held()
    alive = weakref.ref(held)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        out = compiled(torch.ones(2), held)
        torch.testing.assert_close(out[0], torch.ones(2) + 1)
        del held, out
        gc.collect()
        assert alive() is None
    finally:
        if was_enabled:
            gc.enable()
        compile_api.reset()
