"""evalframe: the PEP 523 frame-evaluation hook, with a thin typed API.

The C extension (`evalframe._evalframe`) dispatches; every decision is Python's:
a thread's callback sees each fresh frame whose code has no matching cache entry
and answers `None` (run the frame as is), `SKIP` (never ask again for this code),
`SKIP_RECURSIVE` (never ask again, and run this code's frames and every frame they
start with the thread's hook off) or an `Entry(guard, code)` (cache it and run
`code` in place of the frame).

`without_hook(fn)` (a C type) makes a callable that runs `fn` with the calling
thread's hook off -- no callback, no cached entries, as `set_callback(None)` around
the call -- and restores the thread's callback and `run_only()` state exactly after,
also when `fn` raises. `__wrapped__` is `fn`. `with_callback(callback, fn)` is its
twin: `callback` is the thread's callback while `fn` runs (as `set_callback(callback)`
around the call, `run_only()` depth kept). `get_callback()` reads the thread's callback.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import sys
import types
from collections.abc import Callable, Iterator
from typing import Final, TypeAlias

import attrs

from evalframe import _evalframe
from evalframe._evalframe import with_callback, without_hook
from evalframe.errors import EvalFrameError, HookUnavailableError

__all__ = [
    "SKIP",
    "SKIP_RECURSIVE",
    "Skip",
    "Entry",
    "Guard",
    "Callback",
    "set_callback",
    "get_callback",
    "run_only",
    "cache_entries",
    "clear_cache",
    "without_hook",
    "with_callback",
    "HOOK_AVAILABLE",
    "UNAVAILABLE_REASON",
    "EvalFrameError",
    "HookUnavailableError",
]

log = logging.getLogger("strata.evalframe")

HOOK_AVAILABLE: Final[bool] = _evalframe.HOOK_AVAILABLE


def _unavailable_reason(version: tuple[int, int]) -> str:
    """What the hook lacks on ``version``, in words (see the README's "Missing or limited")."""
    name = f"{version[0]}.{version[1]}"
    if version < (3, 11):
        return (
            f"evalframe's frame-evaluation hook supports CPython 3.11, 3.12 and 3.13; {name} "
            "predates the 3.11 frame layout it is written for"
        )
    return (
        f"evalframe's frame-evaluation hook supports CPython 3.11, 3.12 and 3.13, not {name}: "
        f"frames.c needs porting to {name}'s frame layout (on 3.14 the interpreter frame holds "
        "tagged stack references, f_executable included, and a frame's stack pointer), and "
        "_evalframe.h's EF_HOOK turned on for it (see packages/evalframe/README.md)"
    )


UNAVAILABLE_REASON: Final[str | None] = (
    None if HOOK_AVAILABLE else _unavailable_reason(sys.version_info[:2])
)
"""None where the hook works; else what it lacks on this CPython."""
_UNAVAILABLE = UNAVAILABLE_REASON or ""


class Skip(enum.Enum):
    """The type of `SKIP` and `SKIP_RECURSIVE`."""

    SKIP = "SKIP"
    SKIP_RECURSIVE = "SKIP_RECURSIVE"

    def __repr__(self) -> str:
        return f"evalframe.{self.value}"


SKIP: Final = Skip.SKIP
"""Returned by a callback: never call back for this code object again (the frames
it starts are still hooked)."""

SKIP_RECURSIVE: Final = Skip.SKIP_RECURSIVE
"""Returned by a callback: never call back for this code object again, and run each
of its frames with the thread's hook off -- every frame it starts runs as is, without
cached entries -- as `without_hook` does (also inside `run_only()`). For code whose
callees need no hooking: while no thread has a callback, CPython inlines its Python
calls again, so it runs at unhooked speed. A generator's later resumptions are not
covered (only the call that makes it)."""

Guard: TypeAlias = Callable[[dict[str, object]], bool]


@attrs.frozen
class Entry:
    """A cache entry: run `code` in place of a frame when `guard(f_locals)` is true.

    `guard` receives the frame's arguments by name (`*args` as a tuple, `**kwargs` as
    a dict) and its free variables by name (cell contents; absent when empty).
    `code` must keep the original code's argument layout and free variables; that is
    checked when the entry is first used (a ValueError at the frame's call).
    """

    guard: Guard
    code: types.CodeType

    def __attrs_post_init__(self) -> None:
        guard: object = self.guard
        code: object = self.code
        if not callable(guard):
            raise TypeError(f"Entry.guard must be callable, not {type(guard).__name__}")
        if not isinstance(code, types.CodeType):
            raise TypeError(f"Entry.code must be a code object, not {type(code).__name__}")


Callback: TypeAlias = Callable[[types.FrameType, int], "Entry | Skip | None"]

_evalframe._register(Entry, SKIP, SKIP_RECURSIVE)


def _set_callback_unavailable(callback: Callback | None) -> Callback | None:
    raise HookUnavailableError(_UNAVAILABLE)


# The C function itself, when the hook exists: compiled functions set and restore their
# callback on every call, and a Python layer here cost ~0.5 us per call (two calls).
set_callback: Callable[[Callback | None], Callback | None] = (
    _evalframe.set_callback if HOOK_AVAILABLE else _set_callback_unavailable  # type: ignore[assignment]
)
"""Set this thread's callback and return the previous one (`None` disables).

`callback(frame, cache_size)` runs on a cache miss of a fresh frame, with the
hook disabled for its own frames; `cache_size` is the number of entries already
cached for `frame.f_code`. The frame it receives is a snapshot of the frame at
entry (code, globals, builtins, arguments, f_back), not the frame that runs.
A callback that is not callable raises TypeError.
"""

get_callback: Callable[[], Callback | None] = _evalframe.get_callback  # type: ignore[assignment]
"""This thread's callback, or None (C; cheap enough for a guard to call)."""


@contextlib.contextmanager
def run_only() -> Iterator[None]:
    """Within the block (this thread): cached entries run, misses run the original
    code, and the callback is never called."""
    if not HOOK_AVAILABLE:
        raise HookUnavailableError(_UNAVAILABLE)
    _evalframe._enter_run_only()
    try:
        yield
    finally:
        _evalframe._exit_run_only()


def cache_entries(code: types.CodeType) -> list[Entry]:
    """The entries cached for `code`, newest first (the order they are tried)."""
    entries = _evalframe.cache_entries(code)
    return [e for e in entries if isinstance(e, Entry)]


def clear_cache(code: types.CodeType | None = None) -> None:
    """Forget the entries (and any SKIP mark) of `code`, or of every code object."""
    if code is None:
        for each in _evalframe._registered_codes():
            _evalframe._clear_code(each)
        log.debug("cleared every cache")
    else:
        _evalframe._clear_code(code)
