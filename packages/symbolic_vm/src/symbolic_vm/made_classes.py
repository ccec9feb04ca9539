"""Classes a class statement made while tracing (``class Foo: ...`` inside the compiled frame),
per capture.

symbolic_vm.class_statements runs such a statement's body for real at trace time (only a body
that cannot change anything outside the class it makes) and the trace then uses that class like
any other. Eager makes a fresh class on every call, so the class must never reach the transformed
code: the class, an instance or a method of it leaving the frame (returned, stored, alive at a
break, a write replayed on it) raises :class:`ClassEscapes`, and the capture is traced again to
break at the class statement instead (``frame_capture``).

The methods the body made close over real cells standing for the trace's cells of the frame
(``Made.cells``): inlining a method reads and writes the trace's cell, so a closure sees the
frame's later stores as in Python.
"""

from __future__ import annotations

import linecache
import types
import weakref
from typing import TYPE_CHECKING

import attrs

from symbolic_vm.errors import Unsupported
from symbolic_vm.values import Cell

if TYPE_CHECKING:
    from symbolic_vm.output import Output

__all__ = ["ClassEscapes", "MadeClasses", "made_classes"]


class ClassEscapes(Unsupported):
    """A class made by a class statement in the trace (or its instance or method) leaves the
    frame: trace again and break at root step ``step`` (the class statement)."""

    def __init__(self, reason: str, step: int, filename: str, lineno: int) -> None:
        super().__init__(reason, filename=filename, lineno=lineno,
                         source_line=linecache.getline(filename, lineno).strip())
        self.step = step


@attrs.define(eq=False)
class MadeClasses:
    """One capture's classes made by class statements: each class and where its statement is
    (the root step, the file and line), and the real cells standing for trace cells
    (id -> (real cell, trace cell))."""

    steps: dict[type, tuple[int, str, int]] = attrs.field(factory=dict)
    cells: dict[int, tuple[types.CellType, Cell]] = attrs.field(factory=dict)

    def real_cell(self, cell: Cell) -> types.CellType:
        """The real cell standing for trace cell ``cell`` (made on first use)."""
        for real, traced in self.cells.values():
            if traced is cell:
                return real
        real = types.CellType()
        self.cells[id(real)] = (real, cell)
        return real

    def traced_cell(self, real: types.CellType) -> Cell | None:
        """The trace cell a made method's real cell stands for, if it is one."""
        found = self.cells.get(id(real))
        return found[1] if found is not None and found[0] is real else None

    def owner(self, value: object) -> type | None:
        """The made class ``value`` is, is an instance of, or is a function defined in."""
        if not self.steps:
            return None
        if isinstance(value, type) and value in self.steps:
            return value
        if type(value) in self.steps:
            return type(value)
        if isinstance(value, types.MethodType):
            return self.owner(value.__self__) or self.owner(value.__func__)
        if isinstance(value, types.FunctionType):
            for cls in self.steps:
                if any(_defines(entry, value) for entry in vars(cls).values()):
                    return cls
        return None

    def escape(self, cls: type, what: str) -> ClassEscapes:
        return ClassEscapes(
            f"class {cls.__qualname__} made inside the compiled function leaves it ({what}): "
            "the class statement runs as Python",
            *self.steps[cls],
        )


def _defines(entry: object, fn: types.FunctionType) -> bool:
    if entry is fn:
        return True
    inner = getattr(entry, "__func__", None)  # staticmethod, classmethod
    if inner is fn:
        return True
    return isinstance(entry, property) and fn in (entry.fget, entry.fset, entry.fdel)


_BY_OUTPUT: weakref.WeakKeyDictionary[Output, MadeClasses] = weakref.WeakKeyDictionary()


def made_classes(out: Output) -> MadeClasses:
    """The made-class record of the capture ``out`` belongs to."""
    found = _BY_OUTPUT.get(out)
    if found is None:
        found = _BY_OUTPUT[out] = MadeClasses()
    return found
