"""Exceptions raised by fxbuild."""

from __future__ import annotations


class FxBuildError(Exception):
    """Base class of fxbuild's errors."""


class FakePropagationError(FxBuildError):
    """An operation could not run on fake example values.

    ``data_dependent`` is True when the cause is an output whose shape or value depends on tensor
    data (``nonzero``, ``item``, a branch on a tensor value): the caller should graph-break there.
    Otherwise the op failed as it would in eager (bad shapes, wrong dtypes) and ``cause`` says why.
    """

    def __init__(self, message: str, *, target: str, data_dependent: bool) -> None:
        super().__init__(message)
        self.target = target
        self.data_dependent = data_dependent
