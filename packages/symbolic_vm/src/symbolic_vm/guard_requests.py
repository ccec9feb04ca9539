"""Guard requests: what one capture asks its guards to check, merged as they come; turned into
a GuardSet by guard_plan when the capture ends."""

from __future__ import annotations

from typing import Any

import attrs

from symbolic_vm.guard_api import Source


@attrs.frozen
class GuardRequest:
    """A guard the trace depends on; emitted into the GuardSet when the capture ends."""

    kind: str
    source: Source
    value: Any


class GuardRequests:
    """The guard requests of one capture (the base of Output: every layer above asks here)."""

    def __init__(self) -> None:
        self._guards: dict[tuple[str, Source], GuardRequest] = {}
        # PREDICATE guards: (expression, its operands by name) -> description
        self._predicates: dict[tuple[str, tuple[tuple[str, Source], ...]], str] = {}

    def request(self, kind: str, source: Source, value: object) -> None:
        """Ask for one guard (merged with an identical request)."""
        self._guards.setdefault((kind, source), GuardRequest(kind, source, value))

    def predicate(self, predicate: str, description: str, **operands: Source) -> None:
        """Guard a Python boolean expression over its ``operands`` (name -> Source, read by the
        check as every source is; a SHAPE-kind guard the log calls PREDICATE). Sources never
        travel as text: any attribute name or dict key a Source holds works."""
        self._predicates.setdefault((predicate, tuple(sorted(operands.items()))), description)
