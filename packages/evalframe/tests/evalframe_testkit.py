"""Helpers shared by evalframe's tests: install a callback, a recording callback."""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator

import evalframe
from evalframe import _evalframe


@contextlib.contextmanager
def installed(callback: evalframe.Callback | None) -> Iterator[None]:
    """Install `callback` on this thread for the block, then put back the previous one."""
    previous = evalframe.set_callback(callback)
    try:
        yield
    finally:
        evalframe.set_callback(previous)


class Recorder:
    """A callback that answers only for chosen code objects and records each call.

    `answers` maps a code object to a function (frame, cache_size) -> answer; every
    other frame gets None, so unrelated frames (pytest, stdlib) run as they are.
    """

    def __init__(self, answers: dict[types.CodeType, Callable[..., object]]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, int, dict[str, object]]] = []

    def __call__(self, frame: types.FrameType, cache_size: int) -> object:
        answer = self.answers.get(frame.f_code)
        if answer is None:
            return None
        self.calls.append((frame.f_code.co_name, cache_size, dict(frame.f_locals)))
        return answer(frame, cache_size)

    def count(self, name: str) -> int:
        return sum(1 for call in self.calls if call[0] == name)


def always(_locals: dict[str, object]) -> bool:
    return True


def never(_locals: dict[str, object]) -> bool:
    return False


def entry_for(code: types.CodeType, guard: evalframe.Guard = always) -> Callable[..., object]:
    """An answer factory: the callback returns Entry(guard, code)."""
    return lambda _frame, _size: evalframe.Entry(guard, code)


def stats() -> dict[str, int]:
    return _evalframe._stats()
