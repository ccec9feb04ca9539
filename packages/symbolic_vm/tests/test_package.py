"""The package surface: lazy torch import, public names, handler tables per version."""

from __future__ import annotations

import importlib
import subprocess
import sys

import symbolic_vm


def test_import_does_not_import_torch():
    code = "import sys, symbolic_vm; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_public_names_resolve_to_the_api_even_after_submodule_imports():
    importlib.import_module("symbolic_vm.frame_capture")
    importlib.import_module("symbolic_vm.registries")
    assert callable(symbolic_vm.capture) and symbolic_vm.capture.__name__ == "capture"
    for name in symbolic_vm.__all__:
        assert getattr(symbolic_vm, name) is not None


def test_every_handler_is_registered_for_both_versions_it_names():
    from symbolic_vm.interpreter import handlers_for

    t311 = handlers_for((3, 11))
    t312 = handlers_for((3, 12))
    assert {"LOAD_METHOD", "PRECALL", "POP_JUMP_FORWARD_IF_FALSE"} <= set(t311)
    assert not {"LOAD_METHOD", "POP_JUMP_FORWARD_IF_FALSE"} & set(t312)
    assert {"LOAD_FAST_AND_CLEAR", "END_FOR", "RETURN_CONST", "BINARY_SLICE",
            "LOAD_SUPER_ATTR", "CALL_INTRINSIC_1", "POP_JUMP_IF_FALSE"} <= set(t312)
    assert t311["LOAD_ATTR"] is not t312["LOAD_ATTR"]  # the 3.12 method bit


def test_graph_names_stay_unique_across_reset_and_reset_counters_restarts_them():
    import torch

    from symbolic_vm import CaptureConfig, capture, frame_from_call, reset, reset_counters

    def fn(x):
        return x + 1

    reset_counters()
    first = capture(frame_from_call(fn, (torch.randn(2),)), CaptureConfig())
    reset()
    second = capture(frame_from_call(fn, (torch.randn(2),)), CaptureConfig())
    assert first.graphs[0].name == "__compiled_fn_0"
    assert second.graphs[0].name == "__compiled_fn_1"
    reset_counters()
    third = capture(frame_from_call(fn, (torch.randn(2),)), CaptureConfig())
    assert third.graphs[0].name == "__compiled_fn_0"
