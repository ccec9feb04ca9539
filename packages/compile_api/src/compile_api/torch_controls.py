"""torch's compiler settings that live outside traced code: stance, tensor marks, limits.

``torch.compiler.set_stance`` and torch's ``mark_dynamic``/``maybe_mark_dynamic``/``mark_static``
are called by users outside any compiled function, so the VM never sees them (the calls made
inside traced code are symbolic_vm's ``controls``). compile_api reads the state they leave:
the stance torch's frontend keeps, and the dims torch's marks store on the tensor. It reads that
state only (the frontend's package is looked up in ``sys.modules``, never imported or called),
so with torch's frontend never loaded everything is at its default.
"""

from __future__ import annotations

import sys
import types

import torch

__all__ = ["RecompileForbidden", "marked_dims", "torch_stance"]

_EVAL_FRAME = "torch._dynamo.eval_frame"  # a sys.modules key: read, never imported or called
_LOADED: list[types.ModuleType] = []

# Tensor attributes torch's marks set (sets of dims), and what each asks for.
_DYNAMIC_MARKS = ("_dynamo_dynamic_indices", "_dynamo_weak_dynamic_indices")
_STATIC_MARK = "_dynamo_static_indices"


class RecompileForbidden(RuntimeError):
    """A recompile under torch's ``fail_on_recompile`` stance (raised to the user, as torch)."""


def _eval_frame() -> types.ModuleType | None:
    if not _LOADED:
        module = sys.modules.get(_EVAL_FRAME)
        if module is None:
            return None
        _LOADED.append(module)
    return _LOADED[0]


def torch_stance() -> str:
    """The stance set by ``torch.compiler.set_stance`` ("default" if never set)."""
    module = _eval_frame()
    if module is None:
        return "default"
    return str(getattr(getattr(module, "_stance", None), "stance", "default"))


def marked_dims(t: torch.Tensor) -> tuple[frozenset[int], frozenset[int]]:
    """(dims marked dynamic, dims marked static) by torch's marks on ``t``."""
    dynamic: set[int] = set()
    for attr in _DYNAMIC_MARKS:
        dynamic.update(getattr(t, attr, ()))
    static = frozenset(getattr(t, _STATIC_MARK, ()))
    return frozenset(dynamic) - static, static
