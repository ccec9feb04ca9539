"""Differential runner: a generated program, eager vs compiled, on the same inputs.

Each program's source is written to a real file and loaded twice as two separate modules
(one for eager, one for compiled), so each has its own globals and its own code objects and
the frame hook sees a real filename. Every call compares the return value, the arguments
after the call (in-place mutation), the module globals and the printed output.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import itertools
import os
import re
import tempfile
import types
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

import compile_api

__all__ = ["Failure", "Stats", "check_source", "compare", "load_module"]

_COUNTER = itertools.count()
_TMPDIR: str | None = None


def _tmpdir() -> str:
    global _TMPDIR
    if _TMPDIR is None:
        _TMPDIR = tempfile.mkdtemp(prefix="strata-fuzz-")
    return _TMPDIR


def load_module(source: str, tag: str) -> tuple[types.ModuleType, types.ModuleType]:
    """Write ``source`` to a fresh file and load it as two independent modules."""
    path = os.path.join(_tmpdir(), f"fuzzprog_{tag}_{next(_COUNTER)}.py")
    with open(path, "w") as f:
        f.write(source)
    mods = []
    for role in ("eager", "compiled"):
        spec = importlib.util.spec_from_file_location(f"fuzzprog_{role}_{next(_COUNTER)}", path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mods.append(mod)
    return mods[0], mods[1]


@dataclass
class Failure:
    """The first difference between eager and compiled in one program's run."""

    call: int
    kind: str  # "value", "inputs", "globals", "stdout", "raised", "not-raised", "exception"
    detail: str

    @property
    def signature(self) -> tuple[str, str]:
        """What a shrunk program must keep failing with."""
        return (
            self.kind,
            self.detail.split(":", 1)[0] if self.kind in {"raised", "exception"} else "",
        )

    def __str__(self) -> str:
        return f"call {self.call}: {self.kind}: {self.detail}"


@dataclass
class Stats:
    """What a run compiled (a program whose frames all ran eagerly proves little)."""

    programs: int = 0
    graphs: int = 0
    programs_with_graphs: int = 0
    warnings: list[str] = field(default_factory=list)


@dataclass
class _Outcome:
    value: Any
    args: Any
    globs: Any
    stdout: str
    exc: BaseException | None


def _materialize(spec: dict[str, Any]) -> tuple[Any, ...]:
    return (
        torch.tensor(spec["x"], dtype=torch.float32),
        torch.tensor(spec["y"], dtype=torch.float32),
        int(spec["n"]),
        list(spec["lst"]),
    )


def _snapshot_globals(mod: types.ModuleType) -> dict[str, Any]:
    return {"G": mod.G, "GL": list(mod.GL), "GT": mod.GT.clone()}


def _call(fn: Callable[..., Any], mod: types.ModuleType, spec: dict[str, Any]) -> _Outcome:
    args = _materialize(spec)
    out = io.StringIO()
    exc: BaseException | None = None
    value: Any = None
    with contextlib.redirect_stdout(out):
        try:
            value = fn(*args)
        except Exception as err:
            exc = err
    return _Outcome(value, args, _snapshot_globals(mod), out.getvalue(), exc)


def compare(a: Any, b: Any, exact: bool, path: str = "") -> str | None:
    """None when ``a`` (eager) and ``b`` (compiled) agree, else where and how they differ."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return f"{path}: {type(a).__name__} vs {type(b).__name__}"
        if a.dtype != b.dtype or a.shape != b.shape:
            return f"{path}: {a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}"
        if a.requires_grad != b.requires_grad:
            return f"{path}: requires_grad {a.requires_grad} vs {b.requires_grad}"
        tol = {"rtol": 0.0, "atol": 0.0} if exact else {"rtol": 1e-4, "atol": 1e-5}
        if not torch.allclose(a.detach(), b.detach(), equal_nan=True, **tol):
            return f"{path}: values {a.tolist()} vs {b.tolist()}"
        return None
    if type(a) is not type(b):
        return f"{path}: {type(a).__name__} {a!r} vs {type(b).__name__} {b!r}"
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return f"{path}: length {len(a)} vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            diff = compare(x, y, exact, f"{path}[{i}]")
            if diff:
                return diff
        return None
    if isinstance(a, dict):
        if list(a) != list(b):
            return f"{path}: keys {list(a)} vs {list(b)}"
        for k in a:
            diff = compare(a[k], b[k], exact, f"{path}[{k!r}]")
            if diff:
                return diff
        return None
    if isinstance(a, float) and not exact:
        return None if abs(a - b) <= 1e-4 * max(1.0, abs(a)) else f"{path}: {a!r} vs {b!r}"
    return None if a == b else f"{path}: {a!r} vs {b!r}"


def _diff(call: int, e: _Outcome, c: _Outcome, exact: bool) -> Failure | None:
    if e.exc is not None or c.exc is not None:
        if e.exc is None:
            assert c.exc is not None
            return Failure(call, "raised", f"{type(c.exc).__name__}: {c.exc}")
        if c.exc is None:
            return Failure(call, "not-raised", f"eager raised {type(e.exc).__name__}: {e.exc}")
        if type(e.exc) is not type(c.exc):
            return Failure(call, "exception", f"{type(e.exc).__name__} vs {type(c.exc).__name__}")
    else:
        diff = compare(e.value, c.value, exact, "result")
        if diff:
            return Failure(call, "value", diff)
    for kind, ea, ca in (("inputs", e.args, c.args), ("globals", e.globs, c.globs)):
        diff = compare(ea, ca, exact, kind)
        if diff:
            return Failure(call, kind, diff)
    if e.stdout != c.stdout:
        return Failure(call, "stdout", f"{e.stdout!r} vs {c.stdout!r}")
    return None


def _warning_kind(message: str) -> str:
    """A Strata warning without its file names and numbers, so equal causes count together."""
    first = message.splitlines()[0]
    first = re.sub(r"\(?\S+\.py:\d+\)?", "<file>", first)
    first = re.sub(r"__resume_at_\d+_\d+|\bs\d+\b|\bu\d+\b", "<n>", first)
    return first[:200]


class _CountingBackend:
    def __init__(self, name: str) -> None:
        self.inner = compile_api.lookup_backend(name)
        self.graphs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        self.graphs += 1
        return self.inner(gm, example_inputs)


def check_source(
    source: str,
    backend: str,
    inputs: Sequence[dict[str, Any]],
    stats: Stats | None = None,
    tag: str = "p",
) -> Failure | None:
    """Run ``fn`` of ``source`` eagerly and compiled on each input set; the first difference.

    Compiles with ``fullgraph=False``; the compile caches are reset before and after.
    """
    exact = backend != "inductor"
    compile_api.reset()
    try:
        eager_mod, comp_mod = load_module(source, tag)
        counting = _CountingBackend(backend)
        compiled = compile_api.compile(comp_mod.fn, backend=counting, fullgraph=False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for i, spec in enumerate(inputs):
                e = _call(eager_mod.fn, eager_mod, spec)
                c = _call(compiled, comp_mod, spec)
                failure = _diff(i, e, c, exact)
                if failure is not None:
                    return failure
        if stats is not None:
            stats.programs += 1
            stats.graphs += counting.graphs
            stats.programs_with_graphs += counting.graphs > 0
            stats.warnings += [_warning_kind(str(w.message)) for w in caught
                               if "Strata" in str(w.message)]
        return None
    finally:
        compile_api.reset()
