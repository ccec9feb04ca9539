"""The implementations a workload is run under: eager, Strata, torch.compile, or a plug-in.

An implementation turns a workload's function into the callable that is timed. The compile itself
happens lazily, on the first call, as with torch.compile, so the harness times it as "compile time".
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from workloads import Instance


@dataclass(frozen=True)
class GraphCounts:
    """How many graphs an implementation compiled for a workload and how many graph breaks it hit.

    None means unknown; ``note`` says where the numbers came from or why they are missing.
    """

    graphs: int | None
    breaks: int | None
    note: str


@dataclass(frozen=True)
class Options:
    """What implementations may need from the command line."""

    strata_backend: str = "inductor"
    torch_backend: str = "inductor"
    mode: str | None = None  # mode= for both compilers (reduce-overhead: CUDA graphs)


class Impl(Protocol):
    """One implementation, made fresh for each workload."""

    name: str

    def compile(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """The callable to time in place of ``fn``."""
        ...

    def graph_counts(self, fresh: Callable[[], Instance]) -> GraphCounts:
        """Graph and break counts, asked after the timed runs; ``fresh`` builds a new instance."""
        ...


class Eager:
    """The function itself: the baseline every other implementation is compared with."""

    name = "eager"

    def compile(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        return fn

    def graph_counts(self, fresh: Callable[[], Instance]) -> GraphCounts:
        return GraphCounts(None, None, "eager")


class TorchCompile:
    """``torch.compile(fn)`` with the default (inductor) backend, the reference we measure against.

    Counts come from dynamo's own counters, read before the first call and after the last one, so
    the timed callable is exactly what users get from torch.compile (no wrapping backend).
    """

    name = "torch"

    def __init__(self, options: Options) -> None:
        self._backend = options.torch_backend
        self._mode = options.mode
        self._before: tuple[int, int] | None = None

    @staticmethod
    def _counters() -> tuple[int, int]:
        from torch._dynamo.utils import counters

        graphs = int(counters["stats"]["unique_graphs"])
        breaks = int(sum(counters["graph_break"].values()))
        return graphs, breaks

    def compile(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        import torch

        self._before = self._counters()
        return torch.compile(fn, backend=self._backend, mode=self._mode)

    def graph_counts(self, fresh: Callable[[], Instance]) -> GraphCounts:
        if self._before is None:
            return GraphCounts(None, None, "not compiled")
        graphs, breaks = self._counters()
        return GraphCounts(graphs - self._before[0], breaks - self._before[1], "dynamo counters")


class Strata:
    """``compile_api.compile(fn, backend=...)``: the implementation under test.

    Counts come from ``compile_api.explain`` on a fresh instance, when compile_api has it.
    """

    name = "strata"

    def __init__(self, options: Options) -> None:
        self._backend = options.strata_backend
        self._mode = options.mode

    def compile(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        compile_api = importlib.import_module("compile_api")
        compile_fn = getattr(compile_api, "compile", None)
        if compile_fn is None:
            raise NotImplementedError("compile_api.compile does not exist yet")
        return compile_fn(fn, backend=self._backend, mode=self._mode)  # type: ignore[no-any-return]

    def graph_counts(self, fresh: Callable[[], Instance]) -> GraphCounts:
        compile_api = importlib.import_module("compile_api")
        explain = getattr(compile_api, "explain", None)
        if explain is None:
            return GraphCounts(None, None, "n/a (compile_api.explain missing)")
        instance = fresh()
        try:
            report = explain(instance.fn)(*instance.args)
        except Exception as exc:  # the count is optional; its failure must not fail the workload
            return GraphCounts(None, None, f"n/a (explain failed: {first_line(exc)})")
        graphs = getattr(report, "graph_count", None)
        breaks = getattr(report, "graph_break_count", None)
        return GraphCounts(
            graphs if isinstance(graphs, int) else None,
            breaks if isinstance(breaks, int) else None,
            "compile_api.explain",
        )


BUILTIN: dict[str, Callable[[Options], Impl]] = {
    "eager": lambda options: Eager(),
    "strata": Strata,
    "torch": TorchCompile,
}


def first_line(exc: BaseException) -> str:
    """``Type: first line of the message``, the form failures take in the table."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def make_impl(spec: str, options: Options) -> Impl:
    """Build an implementation from its name, or from ``module:attribute`` for a plug-in.

    A plug-in attribute is either an object with ``name``, ``compile`` and ``graph_counts``, or a
    callable taking the Options and returning one (called once per workload).
    """
    if spec in BUILTIN:
        return BUILTIN[spec](options)
    if ":" not in spec:
        known = ", ".join(BUILTIN)
        raise ValueError(f"unknown implementation {spec!r}: use {known} or module:attr")
    module_name, _, attr = spec.partition(":")
    target = getattr(importlib.import_module(module_name), attr)
    impl = target if hasattr(target, "graph_counts") else target(options)
    return impl  # type: ignore[no-any-return]


def impl_name(spec: str) -> str:
    """The name an implementation is reported under, without building it."""
    return spec if spec in BUILTIN else spec.rpartition(":")[2]
