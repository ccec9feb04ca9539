"""The base of the guard records (one class per kind, each owning its check code and its words)
and what a kind's code needs from the check generator.

A guard kind knows three things about itself, kept side by side so they cannot drift:
``emit`` -- the statements of the fast check, ``explain`` -- the same check written out in
words for ``failures()``, and ``text()`` -- one line for ``CompiledGuards.text``. The kinds
live by family: value_guards (TYPE_MATCH, ID_MATCH, CONSTANT_MATCH, LENGTH, DICT_KEYS),
tensor_guard (TENSOR_MATCH), state_guards (DISPATCH_TLS, GLOBAL_STATE), shape_guard (SHAPE and
PREDICATE); module_params and module_calls hold the module guards.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

import attrs
import torch

from guards.errors import GuardError
from guards.source import Source

__all__ = ["CodeContext", "Guard", "type_name"]


class CodeContext(Protocol):
    """What a guard needs from the code generator."""

    def bind(self, value: object, hint: str) -> str:
        """Bind ``value`` as a constant of the generated function; return its name."""
        ...

    def temp(self, hint: str) -> str:
        """A fresh local variable name."""
        ...

    @property
    def tls_exclude_checked(self) -> int | None:
        """The dispatch TLS exclude set (raw) that this check function compares exactly, if any."""
        ...

    @property
    def native(self) -> Any:
        """The C++ fast-path module (``guards.native``), or None for the pure-Python path."""
        ...

    def load(self, source: Source) -> str:
        """The local holding ``source``'s value, read now (bases first, once per check) when
        no earlier guard read it."""
        ...


def type_name(tp: type) -> str:
    """``torch.Tensor``, ``int``, ``mymod.MyClass``: a class as people write it."""
    module = tp.__module__
    if module == "builtins":
        return tp.__qualname__
    if module.startswith("torch") and getattr(torch, tp.__name__, None) is tp:
        return f"torch.{tp.__name__}"
    return f"{module}.{tp.__qualname__}"


@attrs.frozen
class Guard:
    """Base of all guard kinds.  ``source`` is None for guards on global state or shapes."""

    kind: ClassVar[str] = ""
    #: Order among guards on sources of the same depth: cheap identity checks first.
    rank: ClassVar[int] = 0

    source: Source | None

    def merge_key(self) -> tuple[object, ...]:
        """Guards with the same key are merged into one by ``GuardSet``."""
        return (self.kind, self.source)

    def merge(self, other: Guard) -> Guard:
        """Combine with a guard of the same key; contradictory guards raise GuardError."""
        if self == other:
            return self
        raise GuardError(
            f"contradictory guards on the same value:\n  {self.text()}\n  {other.text()}"
        )

    def text(self) -> str:
        """One line in the TorchDynamo README style, ``KIND: source details``."""
        raise NotImplementedError

    def emit(self, var: str, ctx: CodeContext) -> list[str]:
        """Statements checking the value held in local ``var``; each failing path returns False."""
        raise NotImplementedError

    def explain(
        self, value: object, f_locals: dict[str, object], f_globals: dict[str, Any]
    ) -> str | None:
        """None if the guard holds for ``value``, else what differs, in words."""
        raise NotImplementedError

    def _name(self) -> str:
        return self.source.name() if self.source is not None else ""


