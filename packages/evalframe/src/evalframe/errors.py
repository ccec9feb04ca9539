"""The evalframe layer's exceptions."""

from __future__ import annotations

__all__ = ["EvalFrameError", "HookUnavailableError"]


class EvalFrameError(Exception):
    """Base class of the errors this layer raises itself."""


class HookUnavailableError(EvalFrameError, RuntimeError):
    """The running CPython has no frame-evaluation hook support in this build.

    evalframe supports CPython 3.11, 3.12 and 3.13; on other versions the module imports
    (so `cache_entries` and friends work) but `set_callback` and `run_only` raise this.
    """
