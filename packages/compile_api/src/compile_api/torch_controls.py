"""torch's compiler settings that live outside traced code: stance, tensor marks, reset.

``torch.compiler.set_stance`` and torch's ``mark_dynamic``/``maybe_mark_dynamic``/``mark_static``
are called by users outside any compiled function, so the VM never sees them (the calls made
inside traced code are symbolic_vm's ``controls``). compile_api reads the state they leave:
the stance torch's frontend keeps, and the dims torch's marks store on the tensor. It reads that
state only (the frontend's package is looked up in ``sys.modules``, never imported or called),
so with torch's frontend never loaded everything is at its default.

``torch.compiler.reset()`` must forget Strata's compiled code too, whether the user calls it
outside compiled code or inside it (where it runs eagerly, as a break). Nothing of torch calls
out when it resets, so ``on_torch_reset`` watches an object torch's reset replaces: the side
table of ``torch._higher_order_ops.wrap`` (loaded with torch itself, so the watch holds before
torch's frontend is ever imported). A finalizer on the table torch drops runs the moment reset
replaces it, then watches the new one. Nothing of torch is called or written.
"""

from __future__ import annotations

import sys
import types
import weakref
from collections.abc import Callable

import torch

import symbolic_vm

__all__ = ["RecompileForbidden", "marked_dims", "on_torch_reset", "torch_stance"]

_LOADED: list[types.ModuleType] = []

# Tensor attributes torch's marks set (sets of dims), and what each asks for.
_DYNAMIC_MARKS = ("_dynamo_dynamic_indices", "_dynamo_weak_dynamic_indices")
_STATIC_MARK = "_dynamo_static_indices"


class RecompileForbidden(RuntimeError):
    """A recompile under torch's ``fail_on_recompile`` stance (raised to the user, as torch)."""


def _eval_frame() -> types.ModuleType | None:
    if not _LOADED:
        # the frontend's eval_frame module, where the stance lives (looked up, never imported)
        module = symbolic_vm.torch_frontend_module("eval_frame")
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


# The module whose side table torch's reset replaces, and the table's attribute.
_RESET_WATCHED = ("torch._higher_order_ops.wrap", "inductor_code_side_table", "id_to_callable")
_RESET_CALLBACKS: list[Callable[[], None]] = []


def _watch_reset() -> None:
    module_name, holder_name, attr = _RESET_WATCHED
    holder = getattr(sys.modules.get(module_name), holder_name, None)
    table = getattr(holder, attr, None)
    if table is None:
        return  # another torch: reset is then not followed (documented in the README)
    try:
        watch = weakref.finalize(table, _torch_reset)
    except TypeError:  # not weak-referenceable in this torch
        return
    # Not at interpreter exit: there the finalizer would run, watch the table again and be run
    # again, for ever (every script that compiled anything hung at exit).
    watch.atexit = False


def _torch_reset() -> None:
    # The dropped table dies inside reset's assignment, after the new one is stored.
    _watch_reset()
    for callback in _RESET_CALLBACKS:
        callback()


def on_torch_reset(callback: Callable[[], None]) -> None:
    """Call ``callback`` whenever torch's compiler is reset (``torch.compiler.reset()``)."""
    if not _RESET_CALLBACKS:
        import torch._higher_order_ops.wrap  # noqa: F401 - loaded by torch itself; made sure

        _watch_reset()
    _RESET_CALLBACKS.append(callback)
