"""compile_api's exceptions (``Unsupported`` is symbolic_vm's, re-exported)."""

from __future__ import annotations

import linecache
from collections.abc import Sequence

__all__ = ["BackendCompilerFailed", "InternalError", "InvalidBackend", "NotCallableError"]


class InvalidBackend(RuntimeError):
    """``backend=`` names no registered backend (torch.compile raises the same kind)."""


class NotCallableError(TypeError, AssertionError):
    """compile() of something that is not callable.

    Also an AssertionError, because that is what torch.compile raises for the same mistake.
    """


class BackendCompilerFailed(RuntimeError):
    """A backend raised (or returned something unusable) while compiling a graph."""

    def __init__(self, backend_name: str, where: str, cause: BaseException) -> None:
        super().__init__(
            f"backend {backend_name!r} failed to compile a graph of {where}: "
            f"{type(cause).__name__}: {cause}\n"
            "Outside fullgraph=True, compile_api.config.suppress_errors = True (the default) "
            "runs that graph eagerly instead."
        )
        self.backend_name = backend_name
        self.cause = cause


class InternalError(RuntimeError):
    """A bug in Strata itself (not in the user's program), with how to reproduce it.

    ``at`` is the user's lines the error passed through while tracing, innermost first.
    """

    def __init__(
        self, where: str, cause: BaseException, at: Sequence[tuple[str, int]] = ()
    ) -> None:
        lines = "".join(
            f"\n  {'at' if i == 0 else 'reached from'} {f}:{n}"
            + (f"\n    {linecache.getline(f, n).strip()}" if linecache.getline(f, n) else "")
            for i, (f, n) in enumerate(at)
        )
        super().__init__(
            f"Strata internal error while compiling {where}: {type(cause).__name__}: {cause}"
            f"{lines}\n"
            "This is a bug in Strata, not in your program. To reproduce, call the function under "
            "compile_api.compile(fn, backend='eager') with the same inputs; please report it with "
            "that snippet. Outside fullgraph=True, compile_api.config.suppress_errors = True (the "
            "default) runs such frames eagerly."
        )
        self.cause = cause
