"""What crosses a graph break: the stack slots of a plan, the plan, and the code built from it.

A :class:`BreakPlan` describes one break: the original code, the offset of the instruction that
runs for real, each stack slot before it (:data:`Slot`), the live locals and the prologue helper
(graph + side effects). symbolic_vm.breaks.resume turns it into a :class:`BreakCode` (the residual
code and its :class:`ResumeFunction` s). Records only; imports no torch.
"""

from __future__ import annotations

import types
from typing import Protocol

import attrs

from symbolic_vm.bytecode import Instr, Label, ResumeError, codegen

__all__ = [
    "NULL_TAG",
    "UNBOUND",
    "VALUE_TAG",
    "WITH_TAG",
    "BreakCode",
    "BreakPlan",
    "Const",
    "Finish",
    "HandOn",
    "Handoff",
    "Local",
    "Null",
    "Reenter",
    "ResumeFunction",
    "Slot",
    "Tag",
    "Unbound",
    "Value",
    "WithExit",
    "resume_name",
    "slot_tag",
]

# Stack shapes of a resume function's entry: one tag per slot.
NULL_TAG, VALUE_TAG, WITH_TAG = "null", "value", "with"


@attrs.frozen
class Null:
    """A NULL on the value stack (the slot a pending call keeps for ``self``)."""


@attrs.frozen
class Value:
    """Element ``index`` of the tuple the prologue helper returns."""

    index: int


@attrs.frozen
class Const:
    """A constant, loaded directly (not passed through the helper)."""

    value: object


@attrs.frozen
class WithExit:
    """An active ``with`` block: the context manager is element ``index`` of the helper's tuple.

    On the real stack the slot holds the manager's bound ``__exit__``; the residual code enters
    the manager before running the broken instruction and exits it before calling the resume
    function, which enters it again.
    """

    index: int


@attrs.frozen
class Reenter:
    """An active ``with`` block re-entered with a fresh manager ``factory(*args, **kwargs)``.

    The factory and its arguments are constants built into the residual code and the resume
    function (so they must be hashable: they are part of the resume function's cache key). Used
    for managers whose effect is fully described by their arguments (grad mode, autocast): the
    resume function builds the same manager again, so the VM capturing it sees an ordinary
    ``with torch.no_grad():`` / ``with torch.autocast(...):`` and keeps it in the graph.
    """

    factory: object
    args: tuple[object, ...] = ()
    kwargs: tuple[tuple[str, object], ...] = ()


@attrs.frozen
class Handoff:
    """An active ``with`` block of a user context manager entered in the graph's trace: the
    manager is element ``index`` of the helper's tuple, its ``__enter__`` already ran (its
    effects replayed by the helper) and its ``__exit__`` must run once, at the block's end.

    The residual code enters :class:`HandOn` around the broken instruction (its ``__exit__``
    passes an exception on to the manager's and does nothing otherwise) and passes a
    :class:`Finish` to the resume function, which enters it like a ``"with"`` slot: the rest
    of the block runs there and its exit calls the manager's ``__exit__``. Only for managers
    whose ``__exit__`` never suppresses an exception: the residual code re-raises one.
    """

    index: int


class _Exits(Protocol):
    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None,
        tb: types.TracebackType | None,
    ) -> bool | None: ...


class HandOn:
    """The residual code's stand-in for a user manager entered in the graph (see Handoff)."""

    def __init__(self, manager: _Exits) -> None:
        self.manager = manager

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None,
        tb: types.TracebackType | None,
    ) -> bool | None:
        if kind is None:
            return None  # the block goes on in the resume function, which exits the manager
        return self.manager.__exit__(kind, value, tb)


class Finish:
    """The resume function's stand-in for a user manager entered before the graph break: its
    ``__exit__`` is the manager's (see Handoff). The VM traces it like any user class."""

    def __init__(self, manager: _Exits) -> None:
        self.manager = manager

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None,
        tb: types.TracebackType | None,
    ) -> bool | None:
        return self.manager.__exit__(kind, value, tb)


@attrs.frozen
class Local:
    """A stack value that is also the value of the live local ``name`` (passed once, by name).

    The resume function pushes the local instead of taking a ``___stack<d>`` argument, so the
    graph input it becomes is named after the user's variable.
    """

    name: str


Slot = Null | Value | Const | WithExit | Reenter | Handoff | Local
# One tag per stack slot of a resume function's entry (see ResumeBuilder.resume_at).
Tag = str | Reenter | Local


@attrs.frozen
class BreakPlan:
    """Everything the residual code of one graph break needs.

    ``stack`` is the value stack right before the instruction at ``offset`` (bottom first),
    ``live_locals`` the locals to pass on (``Value`` or ``Const`` each; pass every bound local that
    the rest of the code may read). ``helper`` names the global prologue function; the residual
    code calls it with the frame variables named in ``helper_args`` (arguments, cells or free
    variables, read at the start of the frame), positionally.

    ``helper_code``, when given, replaces the global: its body is inlined at the start of the
    residual code (its returns become the store of the tuple), so it runs in the frame itself --
    no extra frame for the frame hook to see -- and reads the frame's arguments, cells and free
    variables by name. It is a code object compiled with the original's parameter names and
    free variables, or the instructions of such a body (what symbolic_vm.codegen.build_body
    emits); ``helper_args`` is then unused.
    """

    code: types.CodeType
    offset: int
    stack: tuple[Slot, ...]
    live_locals: tuple[tuple[str, Slot], ...]
    helper: str
    helper_args: tuple[str, ...] = ()
    helper_code: types.CodeType | tuple[Instr | Label, ...] | None = None
    # Live locals passed as a tuple of items, which the resume function turns into an iterator.
    iterated: tuple[str, ...] = ()


@attrs.frozen
class ResumeFunction:
    """A resume function: ``name`` is also its ``co_name``; ``code`` resumes at ``offset``.

    ``has_closure`` is true when the original code has free variables: the residual code then
    builds the function itself (with the frame's closure cells) instead of loading a global.
    """

    name: str
    code: types.CodeType
    offset: int
    # The original's first argument, passed first (before the stack values) when the code
    # uses zero-argument super(): it reads the class cell and the frame's first local.
    lead: str | None = None

    @property
    def has_closure(self) -> bool:
        """Whether the function needs the frame's closure (and so is made in place, not global)."""
        return bool(self.code.co_freevars)

    def function(self, f_globals: dict[str, object]) -> types.FunctionType:
        """A function running this code with ``f_globals`` (only for code without free vars)."""
        if self.has_closure:
            raise ResumeError(f"{self.name} needs a closure; the residual code makes it itself")
        return codegen.function_from_code(self.code, f_globals)


@attrs.frozen
class BreakCode:
    """The residual code of a broken frame and the resume functions it calls."""

    code: types.CodeType
    resumes: tuple[ResumeFunction, ...]

    def globals_to_install(self, f_globals: dict[str, object]) -> dict[str, object]:
        """The resume functions the residual code loads as globals, by name."""
        return {r.name: r.function(f_globals) for r in self.resumes if not r.has_closure}


def resume_name(offset: int, index: int) -> str:
    """The name of a resume function: ``__resume_at_<offset>_<index>``."""
    return f"__resume_at_{offset}_{index}"


class Unbound:
    """The type of :data:`UNBOUND`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<unbound local>"


#: Passed for a local that was unbound where a region of the frame ended (see region.py).
UNBOUND = Unbound()

def slot_tag(slot: Slot) -> Tag:
    if isinstance(slot, Null):
        return NULL_TAG
    if isinstance(slot, WithExit | Handoff):
        return WITH_TAG
    if isinstance(slot, Reenter | Local):
        return slot
    return VALUE_TAG
