"""Errors and warnings where the user looks: their file and line, not Strata's."""

from __future__ import annotations

import logging
import os
import traceback
import warnings
from typing import Any

import pytest
import torch

import compile_api


def _with_print(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    print("not capturable")  # the line the error must name
    return y


def test_fullgraph_error_traceback_ends_at_the_users_line() -> None:
    fn = compile_api.compile(_with_print, backend="eager", fullgraph=True)
    with pytest.raises(compile_api.Unsupported) as info:
        fn(torch.randn(3))
    frames = traceback.extract_tb(info.value.__traceback__)
    last = frames[-1]
    assert last.filename == __file__
    assert last.line == 'print("not capturable")  # the line the error must name'
    # Only the user's frames: the test's call, then the function at the construct's line
    # (evalframe drops the callback's frames and adds no entry at the def line).
    assert [(f.filename, f.name) for f in frames] == [
        (__file__, "test_fullgraph_error_traceback_ends_at_the_users_line"),
        (__file__, "_with_print"),
    ], frames
    assert info.value.__cause__ is None


def test_fullgraph_error_shows_no_more_internal_frames_than_torch_compile() -> None:
    """torch.compile 2.13's traceback keeps one frame of its own (its wrapper's re-raise)."""
    torch._dynamo.reset()
    reference = torch.compile(_with_print, backend="eager", fullgraph=True)
    with pytest.raises(Exception) as torch_info:
        reference(torch.randn(3))
    fn = compile_api.compile(_with_print, backend="eager", fullgraph=True)
    with pytest.raises(compile_api.Unsupported) as info:
        fn(torch.randn(3))

    def internal(tb: Any) -> list[traceback.FrameSummary]:
        return [f for f in traceback.extract_tb(tb) if f.filename != __file__]

    ours = internal(info.value.__traceback__)
    assert ours == []
    assert len(ours) <= len(internal(torch_info.value.__traceback__))


def test_fullgraph_error_keeps_strata_frames_when_verbose() -> None:
    compile_api.config.verbose = True
    fn = compile_api.compile(_with_print, backend="eager", fullgraph=True)
    with pytest.raises(compile_api.Unsupported) as info:
        fn(torch.randn(3))
    frames = traceback.extract_tb(info.value.__traceback__)
    assert any("/symbolic_vm/" in f.filename for f in frames)


class _PrintingModule(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        print("not capturable")  # the module's line the error must name
        return y


def _own_frames(tb: Any) -> list[tuple[str, str]]:
    """The frames outside torch's nn.Module machinery (which eager's traceback shows too)."""
    return [
        (f.filename, f.name) for f in traceback.extract_tb(tb)
        if not f.filename.endswith("torch/nn/modules/module.py")
    ]


def test_fullgraph_error_of_a_compiled_module_shows_only_the_users_frames() -> None:
    mod = compile_api.compile(_PrintingModule(), backend="eager", fullgraph=True)
    with pytest.raises(compile_api.Unsupported) as info:
        mod(torch.randn(3))
    frames = traceback.extract_tb(info.value.__traceback__)
    assert frames[-1].line == 'print("not capturable")  # the module\'s line the error must name'
    # no OptimizedModule.__call__ between the user's call and the module's forward
    assert [(f.filename, f.name) for f in frames] == [
        (__file__, "test_fullgraph_error_of_a_compiled_module_shows_only_the_users_frames"),
        (__file__, "forward"),
    ], frames


def test_a_compiled_module_with_a_hook_shows_the_frames_eager_shows() -> None:
    module = _PrintingModule()
    mod = compile_api.compile(module, backend="eager", fullgraph=True)
    mod.register_forward_pre_hook(lambda m, args: None)  # nn.Module's ordinary route
    with pytest.raises(compile_api.Unsupported) as info:
        mod(torch.randn(3))
    frames = traceback.extract_tb(info.value.__traceback__)
    strata = os.path.dirname(compile_api.__file__)
    assert not [f for f in frames if f.filename.startswith(strata)], frames
    assert _own_frames(info.value.__traceback__) == [
        (__file__, "test_a_compiled_module_with_a_hook_shows_the_frames_eager_shows"),
        (__file__, "forward"),
    ]


def test_a_compiled_modules_frame_stays_when_verbose() -> None:
    compile_api.config.verbose = True
    mod = compile_api.compile(_PrintingModule(), backend="eager", fullgraph=True)
    with pytest.raises(compile_api.Unsupported) as info:
        mod(torch.randn(3))
    frames = traceback.extract_tb(info.value.__traceback__)
    assert ("__call__" in [f.name for f in frames if f.filename.endswith("compile_api/api.py")])


class _Raising(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > 2:
            raise ValueError("too long")  # an error of the user's own code
        return x * 2


def test_an_error_of_the_users_forward_has_no_frame_of_the_wrapper() -> None:
    module = _Raising()
    with pytest.raises(ValueError, match="too long") as eager:
        module(torch.randn(3))
    mod = compile_api.compile(module, backend="eager")
    with pytest.raises(ValueError, match="too long") as info:
        mod(torch.randn(3))
    theirs = [name for _, name in _own_frames(eager.value.__traceback__)]
    ours = [name for _, name in _own_frames(info.value.__traceback__)]
    assert theirs == ["test_an_error_of_the_users_forward_has_no_frame_of_the_wrapper", "forward"]
    assert ours == theirs


def _square(x: torch.Tensor) -> torch.Tensor:
    return x * x


def test_cache_limit_warning_names_the_users_function() -> None:
    compile_api.config.cache_size_limit = 1
    fn = compile_api.compile(_square, backend="eager", dynamic=False)
    fn(torch.randn(2))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x = torch.randn(3)
        torch.testing.assert_close(fn(x), _square(x))
    (w,) = [w for w in caught if "cache_size_limit" in str(w.message)]
    assert w.filename == __file__
    assert w.lineno == _square.__code__.co_firstlineno


def test_backend_failure_warning_names_the_users_function() -> None:
    def broken(gm: Any, example_inputs: Any) -> Any:
        raise RuntimeError("no")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x = torch.randn(3)
        torch.testing.assert_close(compile_api.compile(_square, backend=broken)(x), _square(x))
    (w,) = [w for w in caught if "failed on a graph" in str(w.message)]
    assert w.filename == __file__


def _plain(x: torch.Tensor) -> torch.Tensor:
    return x + 1


def test_dynamic_must_be_a_bool_or_none_as_in_torch() -> None:
    with pytest.raises(TypeError, match="dynamic must be True, False or None"):
        compile_api.compile(_plain, dynamic="maybe")  # type: ignore[arg-type]
    # torch.compile raises an AssertionError for the same mistake (at its first call).
    with pytest.raises(AssertionError):
        compile_api.compile(_plain, dynamic="maybe")  # type: ignore[arg-type]
    with pytest.raises(AssertionError):
        torch.compile(_plain, dynamic="maybe")(torch.randn(2))  # type: ignore[arg-type]


def test_mode_with_the_eager_backend_warns_and_is_ignored() -> None:
    message = "mode='max-autotune' has no effect with backend='eager'"
    with pytest.warns(UserWarning, match=message) as rec:
        fn = compile_api.compile(_plain, backend="eager", mode="max-autotune")
    assert rec[0].filename == __file__
    x = torch.randn(2)
    torch.testing.assert_close(fn(x), _plain(x))


def _reads_env(x: torch.Tensor) -> torch.Tensor:
    # os.environ (a Mapping of a dict) and its copy() trace; a process query still breaks.
    return x * (1 + (os.getpid() > 0))


def _calls_into_the_library(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    return _reads_env(y)  # the user's line that leads into os


def test_a_break_in_library_code_is_reported_with_the_users_call_chain(
    caplog: pytest.LogCaptureFixture,
) -> None:
    x = torch.randn(3)
    with caplog.at_level(logging.DEBUG, logger="strata.graph_breaks"):
        out = compile_api.compile(_calls_into_the_library, backend="eager")(x)
    torch.testing.assert_close(out, _calls_into_the_library(x))
    text = caplog.text
    user = text.index("return _reads_env(y)  # the user's line that leads into os")
    inner = text.index("return x * (1 + (os.getpid() > 0))")
    assert user < inner, text  # outermost first
    fn = compile_api.compile(_calls_into_the_library, backend="eager", fullgraph=True)
    with pytest.raises(compile_api.Unsupported) as info:
        fn(x)
    last = traceback.extract_tb(info.value.__traceback__)[-1]
    assert last.filename == __file__
    assert last.line == "return _reads_env(y)  # the user's line that leads into os"
    assert "reached through (outermost first)" in str(info.value)
