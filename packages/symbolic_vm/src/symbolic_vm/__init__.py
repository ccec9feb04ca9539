"""A symbolic interpreter of CPython 3.11/3.12/3.13 bytecode that captures torch ops into FX graphs.

Importing this package does not import torch: the public names are loaded on first use
(PEP 562), so ``import symbolic_vm.bytecode`` works in a torch-free interpreter.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from symbolic_vm.controls import (
        note_torch_disabled,
        torch_disabled_code,
        torch_frontend_module,
    )
    from symbolic_vm.errors import (
        GraphBreakNeeded,
        SymbolicVMError,
        Unsupported,
        drop_tracebacks,
        traced_at,
    )
    from symbolic_vm.frame_capture import capture, reset, reset_counters
    from symbolic_vm.records import (
        CaptureConfig,
        CapturedGraph,
        CaptureResult,
        FrameInput,
        FrameLike,
        GraphBreak,
        frame_from_call,
    )
    from symbolic_vm.registries import (
        allow_in_graph,
        disable_marker,
        graph_break,
        nonstrict_trace,
        reset_registries,
    )
    from symbolic_vm.version_check import unsupported_python

_EXPORTS = {
    "capture": "symbolic_vm.frame_capture",
    "reset_counters": "symbolic_vm.frame_capture",
    "reset": "symbolic_vm.frame_capture",
    "CaptureConfig": "symbolic_vm.records",
    "CaptureResult": "symbolic_vm.records",
    "CapturedGraph": "symbolic_vm.records",
    "GraphBreak": "symbolic_vm.records",
    "FrameLike": "symbolic_vm.records",
    "FrameInput": "symbolic_vm.records",
    "frame_from_call": "symbolic_vm.records",
    "Unsupported": "symbolic_vm.errors",
    "GraphBreakNeeded": "symbolic_vm.errors",
    "SymbolicVMError": "symbolic_vm.errors",
    "drop_tracebacks": "symbolic_vm.errors",
    "traced_at": "symbolic_vm.errors",
    "graph_break": "symbolic_vm.registries",
    "allow_in_graph": "symbolic_vm.registries",
    "nonstrict_trace": "symbolic_vm.registries",
    "disable_marker": "symbolic_vm.registries",
    "reset_registries": "symbolic_vm.registries",
    "note_torch_disabled": "symbolic_vm.controls",
    "torch_disabled_code": "symbolic_vm.controls",
    "torch_frontend_module": "symbolic_vm.controls",
    "unsupported_python": "symbolic_vm.version_check",
}

__all__ = [
    "capture",
    "CaptureConfig",
    "CaptureResult",
    "CapturedGraph",
    "GraphBreak",
    "FrameLike",
    "FrameInput",
    "frame_from_call",
    "Unsupported",
    "GraphBreakNeeded",
    "SymbolicVMError",
    "drop_tracebacks",
    "traced_at",
    "graph_break",
    "allow_in_graph",
    "nonstrict_trace",
    "disable_marker",
    "reset_registries",
    "note_torch_disabled",
    "torch_disabled_code",
    "torch_frontend_module",
    "reset_counters",
    "reset",
    "unsupported_python",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'symbolic_vm' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
