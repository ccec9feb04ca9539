"""Exceptions raised by symbolic_vm."""

from __future__ import annotations

import inspect
import linecache
from typing import Any

from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    UnsupportedOperatorException,
)
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

from symbolic_vm.values import ObjectVar

HINT = (
    "rewrite the code so the construct is not reached while tracing, move it out of the compiled "
    "function, wrap the call with compile_api.nonstrict_trace, or register it as a "
    "torch.library custom_op; compile_api.compile(fn) without fullgraph=True runs it eagerly at "
    "a graph break (compile_api.explain(fn)(*args) lists the breaks)"
)
_EAGER = "or compile without fullgraph=True, which runs it eagerly at a graph break"
# The most common reasons, each with what to change (matched on the reason's text; the first
# match wins). They name compile_api, the user-facing package, never internal modules.
_HINTS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("graph_break() called",),
     "remove the compile_api.graph_break() (or torch's graph_break()) call, " + _EAGER),
    (("disabled for compilation", "(without_hook)"),
     "the function is wrapped in compile_api.disable (torch.compiler.disable): remove the "
     "wrapper to trace it, " + _EAGER),
    (("effects outside the program", "outside the program (files", "process-wide state"),
     "do the I/O, printing, saving or setting outside the function given to "
     "compile_api.compile (before or after calling it), " + _EAGER + " once per call"),
    (("data-dependent", "truth value of"),
     "the code needs a tensor's value while tracing: branch with torch.where or torch.cond, "
     "keep the value a tensor instead of calling .item()/bool(), " + _EAGER),
    (("is not supported", "cannot be passed to a torch operation"),
     "a call into code the tracer cannot follow: compile_api.allow_in_graph(fn) puts a function "
     "of tensors into the graph as one call, compile_api.nonstrict_trace(fn) runs it as an "
     "opaque call, " + _EAGER),
    (("whose class defines __setattr__", "data descriptor"),
     "store the attribute outside the compiled function or through a plain attribute, "
     + _EAGER),
    (("is a generator or coroutine", "yield from"),
     "consume the generator into a list outside the compiled function, " + _EAGER),
    (("hooks registered", "forward hook registered"),
     "backward hooks and always_call forward hooks are not traced: remove them from the modules "
     "the compiled function calls, " + _EAGER),
)


def hint_for(reason: str) -> str:
    """What to change for an Unsupported ``reason``: specific to the construct where known."""
    for needles, hint in _HINTS:
        if any(needle in reason for needle in needles):
            return hint
    return HINT


class SymbolicVMError(Exception):
    """Base class of symbolic_vm's errors."""


class Unsupported(SymbolicVMError):
    """The VM met a construct it cannot capture; with fullgraph=True this reaches the user.

    The message names the construct, the user's ``filename:lineno`` and source line, and a hint.
    """

    def __init__(
        self,
        reason: str,
        *,
        filename: str = "<unknown>",
        lineno: int = 0,
        source_line: str = "",
        hint: str | None = None,
    ) -> None:
        self.reason = reason
        self.filename = filename
        self.lineno = lineno
        self.source_line = source_line
        self.hint = hint_for(reason) if hint is None else hint
        # (filename, lineno) of each caller the error passed out through, innermost first: a
        # construct inside an inlined library call is reported with the user's line that led
        # there.
        self.callers: list[tuple[str, int]] = []
        super().__init__(self._message())

    def _message(self) -> str:
        where = f"{self.filename}:{self.lineno}"
        line = f"\n    {self.source_line}" if self.source_line else ""
        return f"{self.reason}\n  at {where}{line}\n  hint: {self.hint}"

    def located(self, filename: str, lineno: int) -> Unsupported:
        """The same error, placed at ``filename:lineno`` (the first location wins; later ones,
        from the callers it passes through, are kept in ``callers``)."""
        if self.lineno:
            if (filename, lineno) != (self.filename, self.lineno):
                # setdefault: subclasses may not run this __init__
                vars(self).setdefault("callers", []).append((filename, lineno))
            return self
        source_line = linecache.getline(filename, lineno).strip()
        kind = FrameRunsEagerly if isinstance(self, FrameRunsEagerly) else Unsupported
        return kind(
            self.reason, filename=filename, lineno=lineno, source_line=source_line, hint=self.hint
        )


class FrameRunsEagerly(Unsupported):
    """No graph break keeps eager's semantics here (e.g. a generator dropped mid-frame would
    have run its finally at a point the trace has passed): the whole frame runs eagerly."""


class GraphBreakNeeded(Unsupported):
    """Raised instead of :class:`Unsupported` when fullgraph is off.

    Until graph breaks exist (issue 5) compile_api answers it by running the frame eagerly;
    ``breaks`` holds the GraphBreak records that explain() reports.
    """

    breaks: list[Any] = []  # noqa: RUF012 - replaced per instance by capture()


class TracedException(SymbolicVMError):
    """The traced program raised an exception: ``value`` is the exception object as a tracked
    value (``values.ObjectVar``); handlers/exceptions.py and ``Interpreter.run`` route it to
    the code's exception handlers, as CPython does."""

    def __init__(self, value: Any) -> None:
        super().__init__(f"{type(value.value).__name__} raised while tracing")
        self.value = value

    @property
    def exception(self) -> BaseException:
        exc = self.value.value
        assert isinstance(exc, BaseException)
        return exc

    def escaping(self) -> Unsupported:
        """Leaving the compiled frame: the instruction then runs eagerly, raising it."""
        exc = self.exception
        return Unsupported(
            f"{exc!r} escapes the compiled function (from a raise statement or a builtin "
            "failing on traced values): that code runs eagerly, which raises it"
        )


def throw(exc_type: type[BaseException], *args: Any) -> TracedException:
    """The TracedException for ``exc_type(*args)`` raised by a builtin on tracked values."""
    return TracedException(ObjectVar(exc_type(*args)))


def leaving_generator(exc: BaseException, co_flags: int) -> BaseException:
    """The exception a generator's caller sees when ``exc`` leaves the generator's body (PEP
    479): a StopIteration (in an async generator, also StopAsyncIteration) becomes a
    RuntimeError caused by it; any other exception passes unchanged. 3.12+ does this in the
    body's bytecode (CALL_INTRINSIC_1 INTRINSIC_STOPITERATION_ERROR), 3.11 in the interpreter."""
    async_gen = bool(co_flags & inspect.CO_ASYNC_GENERATOR)
    if isinstance(exc, StopIteration):
        kind = "coroutine" if co_flags & inspect.CO_COROUTINE else (
            "async generator" if async_gen else "generator"
        )
        message = f"{kind} raised StopIteration"
    elif async_gen and isinstance(exc, StopAsyncIteration):
        message = "async generator raised StopAsyncIteration"
    else:
        return exc
    error = RuntimeError(message)
    error.__cause__ = error.__context__ = exc
    return error


# What a pure builtin raises on constants (``int("x")``, ``1 / 0``, ``[][0]``,
# ``math.sqrt(-1)``): rebuilt from type and args as the traced program's own exception. Other
# types stay a reason to break.
_FOLDED_EXCEPTIONS = (ValueError, TypeError, ArithmeticError, LookupError)


def folding_error(exc: Exception, what: str) -> TracedException | Unsupported:
    """How an exception raised while folding a pure call on constants reaches the trace: the
    same exception raised in the traced program where its type is rebuilt exactly from its
    args, else a break naming it."""
    if isinstance(exc, _FOLDED_EXCEPTIONS):
        return throw(type(exc), *exc.args)
    return Unsupported(f"{type(exc).__name__} raised while folding {what}: {exc}")


def fake_reason(exc: Exception) -> str:
    """The reason to break for a fake tensor's failure on a graph op (its first paragraph)."""
    data_dependent = getattr(exc, "data_dependent", False)
    kind = "data-dependent operation" if data_dependent else "operation failed while tracing"
    # torch's text goes on with its logging advice and the line of our tracer that asked
    # ("Caused by: .../fxbuild/builder.py"): the user's line is the error's own location.
    first = (str(exc).strip().split("\n\n") or [""])[0]
    return f"{kind}: {first}"


def drop_tracebacks(err: BaseException) -> BaseException:
    """``err`` with the tracebacks of its chain (``__cause__``, ``__context__``) cleared, to be
    kept: they hold the compiler's frames and through them the user's frame and its locals (a
    generator whose ``finally`` eager runs when the frame ends) until the error is dropped."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [err]
    while todo:
        link = todo.pop()
        if link is None or id(link) in seen:
            continue
        seen.add(id(link))
        link.__traceback__ = None
        todo += [link.__cause__, link.__context__]
    return err


# torch's errors for what fake tensors and the ShapeEnv cannot know while tracing: a guard on a
# value read from a tensor, an op whose output shape depends on data, an op with no fake
# implementation. Raised by torch code the VM runs outside a graph call (a slice bound, a
# SymBool's truth); at the instruction they are a reason to break like any Unsupported.
TORCH_TRACING_ERRORS: tuple[type[Exception], ...] = (
    GuardOnDataDependentSymNode,
    DataDependentOutputException,
    DynamicOutputShapeException,
    UnsupportedOperatorException,
)


def from_torch(err: Exception) -> Unsupported:
    """The Unsupported for one of TORCH_TRACING_ERRORS (its first line names the op or guard)."""
    first = (str(err).strip().splitlines() or [""])[0]
    if isinstance(err, UnsupportedOperatorException):
        return Unsupported(f"the operator {first} has no fake implementation (it cannot be traced)")
    return Unsupported(
        f"data-dependent operation while tracing ({type(err).__name__}: {first}): a value "
        "read from a tensor is needed as a Python value"
    )


_LOCATIONS = "_strata_traced_at"


def note_location(err: BaseException, filename: str, lineno: int) -> None:
    """Record on an unexpected error (a bug of the VM's) the traced line it passed through."""
    locations = err.__dict__.setdefault(_LOCATIONS, [])
    if (filename, lineno) not in locations:
        locations.append((filename, lineno))


def traced_at(err: BaseException) -> list[tuple[str, int]]:
    """The user's lines an unexpected error passed out through while tracing, innermost first
    (the last is the compiled function's own line); empty when it was not raised in the VM."""
    return list(getattr(err, _LOCATIONS, ()))
