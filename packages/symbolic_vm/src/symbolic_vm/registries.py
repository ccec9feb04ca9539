"""User-facing markers the VM consults: graph_break, allow_in_graph, nonstrict_trace, disable."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable[..., object])


class _Registry:
    """A set of callables, held weakly where they allow it so a registry never keeps code alive."""

    def __init__(self) -> None:
        self._weak: weakref.WeakSet[Callable[..., object]] = weakref.WeakSet()
        self._strong: set[int] = set()
        self._keep: list[object] = []

    def add(self, fn: Callable[..., object]) -> None:
        try:
            self._weak.add(fn)
        except TypeError:  # builtins cannot be weakly referenced
            self._strong.add(id(fn))
            self._keep.append(fn)

    def __contains__(self, fn: object) -> bool:
        try:
            return fn in self._weak
        except TypeError:
            return id(fn) in self._strong

    def clear(self) -> None:
        self._weak = weakref.WeakSet()
        self._strong.clear()
        self._keep.clear()


ALLOW_IN_GRAPH = _Registry()
NONSTRICT_TRACE = _Registry()
DISABLED = _Registry()


def graph_break() -> None:
    """Force a graph break where it is called inside a compiled function; eagerly, a no-op."""


def allow_in_graph(fn: F) -> F:
    """Put calls to ``fn`` in the graph as one ``call_function`` node instead of inlining it."""
    ALLOW_IN_GRAPH.add(fn)
    return fn


def nonstrict_trace(fn: F) -> F:
    """Like :func:`allow_in_graph`: the VM does not look inside ``fn``; it becomes one node."""
    NONSTRICT_TRACE.add(fn)
    return fn


def disable_marker(fn: F) -> F:
    """Mark ``fn`` as never traced: calling it inside a compiled function is a graph break."""
    DISABLED.add(fn)
    return fn


def reset_registries() -> None:
    """Forget every registration (compile_api.reset())."""
    for registry in (ALLOW_IN_GRAPH, NONSTRICT_TRACE, DISABLED):
        registry.clear()
