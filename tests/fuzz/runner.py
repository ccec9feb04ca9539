"""Differential runner: a generated program, eager vs compiled, on the same inputs.

Each program's source is written to a real file and loaded twice as two separate modules
(one for eager, one for compiled), so each has its own globals and its own code objects and
the frame hook sees a real filename. Every call compares the return value, the arguments
after the call (in-place mutation), the module globals (``G``, ``GL``, ``GT`` and the side-effect
log ``LOG``), the printed output, the exception, the grad mode after the call, the global RNG
state after the call (both runs start from the same seed), which results are (``is``) or share
memory with which arguments and results, and the gradients of ``requires_grad`` leaf arguments
after a backward through every result that requires grad.

A program may define ``extra_args(call, x, y, n)`` (more arguments for ``fn``, built afresh for
each call from the same ``x``/``y``, so they can alias them), ``RANDOM = True`` (draws random
numbers: values are not compared on inductor, whose RNG differs from eager by design) and
``PROFILE_CALLS`` (calls run inside ``torch.autograd.profiler.profile()``), ``NO_GRAD_CALLS``
(calls made with grad mode off); ``CHECK_RNG_STATE =
False`` leaves out the RNG-state comparison (a known bug, ``--avoid rng_state``);
``EXPECTED_EXCEPTIONS`` names the exception types ``fn`` may let escape on purpose (the
``exceptions`` family): for those, the args, a program class's attributes, ``__cause__``,
``__context__``'s type and ``__suppress_context__`` are compared too;
``EXPECTED_EXCEPTION_TYPES`` names others that may escape, compared by type only (a failed
``torch._check``: the compiled graph's assertion words its message its own way).
``COMPILE_CONFIG`` (``compile_api.config`` fields) and ``COMPILE_DYNAMIC`` (``dynamic=``) say
how the compiled copy is compiled (the ``data_dependent`` family draws them).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import itertools
import math
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
        # Module-level random initialisation (nn.Linear weights) must be the same in both
        # copies, also when a shrunk program lost its own manual_seed line.
        torch.manual_seed(0)
        spec.loader.exec_module(mod)
        mods.append(mod)
    return mods[0], mods[1]


@dataclass
class Failure:
    """The first difference between eager and compiled in one program's run."""

    call: int
    # "value", "inputs", "globals", "stdout", "raised", "not-raised", "exception", "grad_mode",
    # "alias", "rng", "backward", "grad", "internal" (Strata's compile crashed; ran eagerly),
    # "exc_detail" (an escaping exception's args, attributes, cause or context differ)
    kind: str
    detail: str

    @property
    def signature(self) -> tuple[str, str]:
        """What a shrunk program must keep failing with."""
        return (
            self.kind,
            self.detail.split(":", 1)[0]
            if self.kind in {"raised", "exception", "exc_detail", "backward", "internal"}
            else "",
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
    grad_mode: bool = True
    rng: bytes = b""
    aliases: list[tuple[str, str, str]] = field(default_factory=list)
    grads: Any = None
    backward_exc: BaseException | None = None


def _materialize(spec: dict[str, Any], mod: types.ModuleType, call: int) -> tuple[Any, ...]:
    x = torch.tensor(spec["x"], dtype=torch.float32)
    y = torch.tensor(spec["y"], dtype=torch.float32)
    args: tuple[Any, ...] = (x, y, int(spec["n"]), list(spec["lst"]))
    extra = getattr(mod, "extra_args", None)
    if extra is not None:
        args += tuple(extra(call, x, y, int(spec["n"])))
    return args


def _snapshot_globals(mod: types.ModuleType) -> dict[str, Any]:
    snap: dict[str, Any] = {"G": mod.G, "GL": list(mod.GL), "GT": mod.GT.clone()}
    if hasattr(mod, "LOG"):
        snap["LOG"] = list(mod.LOG)
    return snap


def _tensors(value: Any, path: str = "result") -> list[tuple[str, torch.Tensor]]:
    """Every tensor inside a (nested) result, with where it is."""
    if isinstance(value, torch.Tensor):
        return [(path, value)]
    if isinstance(value, (list, tuple)):
        return [t for i, v in enumerate(value) for t in _tensors(v, f"{path}[{i}]")]
    if isinstance(value, dict):
        return [t for k, v in value.items() for t in _tensors(v, f"{path}[{k!r}]")]
    return []


def _aliases(value: Any, args: tuple[Any, ...]) -> list[tuple[str, str, str]]:
    """Which results are, or share memory with, which arguments and earlier results.

    Eager semantics make this observable (an in-place write through one shows in the other),
    so a compiled result that is a copy where eager returns the input (or a view of it) is a
    difference.
    """
    results = _tensors(value)
    others = [(f"arg{i}", a) for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    found: list[tuple[str, str, str]] = []
    for ri, (rpath, r) in enumerate(results):
        for opath, o in [*others, *results[:ri]]:
            if r is o:
                found.append((rpath, "is", opath))
            elif _shares_memory(r, o):
                found.append((rpath, "shares memory with", opath))
    return found


def _shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.numel() == 0 or b.numel() == 0 or a.layout != torch.strided or b.layout != torch.strided:
        return False
    try:
        return bool(a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):
        return False


def _grad_weights(t: torch.Tensor) -> torch.Tensor:
    # Not all ones, so a gradient that swaps or drops elements shows.
    return torch.linspace(0.5, 1.5, t.numel(), dtype=t.dtype).reshape(t.shape)


def _backward(value: Any, args: tuple[Any, ...]) -> tuple[Any, BaseException | None]:
    """Backward through every result that requires grad; the leaf arguments' gradients."""
    outs = [t for _, t in _tensors(value) if t.requires_grad and t.dtype.is_floating_point]
    err: BaseException | None = None
    if outs:
        try:
            torch.autograd.backward(outs, [_grad_weights(t) for t in outs])
        except Exception as exc:
            err = exc
    grads = [
        (a.grad.clone() if a.grad is not None else None)
        for a in args
        if isinstance(a, torch.Tensor) and a.is_leaf and a.requires_grad
    ]
    return grads, err


def _call(
    fn: Callable[..., Any], mod: types.ModuleType, spec: dict[str, Any], call: int
) -> _Outcome:
    torch.manual_seed(1000 + call)  # the same RNG state for eager and compiled
    torch.set_grad_enabled(True)
    args = _materialize(spec, mod, call)
    torch.set_grad_enabled(call not in getattr(mod, "NO_GRAD_CALLS", ()))
    out = io.StringIO()
    exc: BaseException | None = None
    value: Any = None
    profiled = call in getattr(mod, "PROFILE_CALLS", ())
    with contextlib.redirect_stdout(out):
        try:
            with torch.autograd.profiler.profile() if profiled else contextlib.nullcontext():
                value = fn(*args)
        except Exception as err:
            exc = err
    grad_mode = torch.is_grad_enabled()
    torch.set_grad_enabled(True)
    rng = torch.get_rng_state().numpy().tobytes()
    aliases = _aliases(value, args)
    globs = _snapshot_globals(mod)
    grads, backward_exc = _backward(value, args) if exc is None else (None, None)
    return _Outcome(
        value, args, globs, out.getvalue(), exc, grad_mode, rng, aliases, grads, backward_exc
    )


def _type_key(v: Any) -> str:
    """A type's name; a generated program's own classes are equal by name across its two
    module copies (eager and compiled load the file separately)."""
    t = type(v)
    module = "<prog>" if t.__module__.startswith("fuzzprog_") else t.__module__
    return f"{module}.{t.__qualname__}"


def _same_float(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def compare(a: Any, b: Any, exact: bool, path: str = "") -> str | None:
    """None when ``a`` (eager) and ``b`` (compiled) agree, else where and how they differ.

    Exact compares NaN equal to NaN and tells -0.0 from 0.0 (eager semantics a constant guard
    must keep); inexact (inductor) is relative to the values' magnitude (``_close_scaled``).
    """
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return f"{path}: {type(a).__name__} vs {type(b).__name__}"
        if _type_key(a) != _type_key(b):
            return f"{path}: {_type_key(a)} vs {_type_key(b)}"
        if a.dtype != b.dtype or a.shape != b.shape:
            return f"{path}: {a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}"
        if a.requires_grad != b.requires_grad:
            return f"{path}: requires_grad {a.requires_grad} vs {b.requires_grad}"
        ad, bd = a.detach().as_subclass(torch.Tensor), b.detach().as_subclass(torch.Tensor)
        if not (_exact(ad, bd) if exact else _close_scaled(ad, bd, 1e-4)):
            return f"{path}: values {a.tolist()} vs {b.tolist()}"
        return None
    if _type_key(a) != _type_key(b):
        return f"{path}: {type(a).__name__} {a!r} vs {type(b).__name__} {b!r}"
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return f"{path}: length {len(a)} vs {len(b)}: {_short(a)} vs {_short(b)}"
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
    if isinstance(a, functools.partial):
        return compare(
            (a.func.__qualname__, a.args, a.keywords),
            (b.func.__qualname__, b.args, b.keywords),
            exact,
            f"{path}.partial",
        )
    if isinstance(a, torch.nn.Module):
        return compare(
            list(a.state_dict().values()), list(b.state_dict().values()), exact, f"{path}.state"
        )
    if isinstance(a, float):
        if exact or not (math.isfinite(a) and math.isfinite(b)):
            return None if _same_float(a, b) else f"{path}: {a!r} vs {b!r}"
        return None if abs(a - b) <= 1e-4 * max(1.0, abs(a)) else f"{path}: {a!r} vs {b!r}"
    if type(a).__module__.startswith("fuzzprog_") and hasattr(a, "__dict__"):
        return compare(vars(a), vars(b), exact, f"{path}.__dict__")
    return None if a == b else f"{path}: {a!r} vs {b!r}"


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 300 else text[:300] + "..."


def _exact(a: torch.Tensor, b: torch.Tensor) -> bool:
    if not a.is_floating_point():
        return torch.equal(a, b)
    nan_a, nan_b = torch.isnan(a), torch.isnan(b)
    if not torch.equal(nan_a, nan_b) or not torch.equal(a[~nan_a], b[~nan_b]):
        return False
    return torch.equal(torch.signbit(a[~nan_a]), torch.signbit(b[~nan_b]))  # -0.0 is not 0.0


def _close_scaled(a: torch.Tensor, b: torch.Tensor, rtol: float) -> bool:
    """Equal up to ``rtol``, relative to each value and to the tensor's magnitude: a value
    that is zero in exact arithmetic and comes out as 1e-7 next to values of order one is
    rounding noise, not a difference (never a fixed tiny atol)."""
    if not a.is_floating_point():
        return torch.equal(a, b)
    nan_a, nan_b = torch.isnan(a), torch.isnan(b)
    if not torch.equal(nan_a, nan_b):
        return False
    inf_a, inf_b = torch.isinf(a), torch.isinf(b)
    if not torch.equal(inf_a, inf_b) or not torch.equal(a[inf_a], b[inf_b]):
        return False
    finite = ~nan_a & ~inf_a
    fa, fb = a[finite].double(), b[finite].double()
    if fa.numel() == 0:
        return True
    scale = max(1.0, float(fa.abs().max()), float(fb.abs().max()))
    return bool(((fa - fb).abs() <= rtol * fa.abs() + 0.1 * rtol * scale).all())


def _compare_grads(a: Any, b: Any, exact: bool) -> str | None:
    if a is None or b is None:
        return None if a is None and b is None else f"grads: {a!r} vs {b!r}"
    if len(a) != len(b):
        return f"grads: {len(a)} vs {len(b)} leaves"
    for i, (ga, gb) in enumerate(zip(a, b)):
        if (ga is None) != (gb is None):
            return f"grad of leaf {i}: {ga!r} vs {gb!r}"
        if ga is None:
            continue
        if ga.shape != gb.shape or ga.dtype != gb.dtype:
            return f"grad of leaf {i}: {ga.dtype}{list(ga.shape)} vs {gb.dtype}{list(gb.shape)}"
        # Gradients are sums the backends may reassociate (even aot_eager's decompositions):
        # compared relative to their magnitude.
        if not _close_scaled(ga, gb, 1e-5 if exact else 1e-4):
            return f"grad of leaf {i}: {ga.tolist()} vs {gb.tolist()}"
    return None


def _exc_state(exc: BaseException | None, depth: int = 0) -> Any:
    """What a program can read of an exception that escaped ``fn``: its type, ``args``, a
    program class's attributes, the explicit cause (itself so, one level), the implicit
    context's type and whether ``raise ... from`` suppressed it."""
    if exc is None:
        return None
    own = type(exc).__module__.startswith("fuzzprog_")
    return {
        "type": _type_key(exc),
        "args": list(exc.args),
        "attrs": dict(vars(exc)) if own else {},
        "cause": _exc_state(exc.__cause__, depth + 1) if depth == 0 else None,
        "context": None if exc.__context__ is None else _type_key(exc.__context__),
        "suppress_context": exc.__suppress_context__,
    }


def _diff(
    call: int,
    e: _Outcome,
    c: _Outcome,
    exact: bool,
    random: bool,
    check_rng: bool = True,
    escapes: tuple[str, ...] = (),
) -> Failure | None:
    if e.exc is not None or c.exc is not None:
        if e.exc is None:
            assert c.exc is not None
            return Failure(call, "raised", f"{type(c.exc).__name__}: {c.exc}")
        if c.exc is None:
            return Failure(call, "not-raised", f"eager raised {type(e.exc).__name__}: {e.exc}")
        if _type_key(e.exc) != _type_key(c.exc):  # a program's own class: equal by name
            return Failure(call, "exception", f"{type(e.exc).__name__} vs {type(c.exc).__name__}")
        if type(e.exc).__name__ in escapes:
            diff = compare(_exc_state(e.exc), _exc_state(c.exc), exact, "exception")
            if diff:
                return Failure(call, "exc_detail", f"{type(e.exc).__name__}: {diff}")
    elif not random:
        diff = compare(e.value, c.value, exact, "result")
        if diff:
            return Failure(call, "value", diff)
    if e.grad_mode != c.grad_mode:
        return Failure(
            call, "grad_mode", f"grad enabled after the call: {e.grad_mode} vs {c.grad_mode}"
        )
    if e.aliases != c.aliases:
        return Failure(call, "alias", f"{e.aliases} vs {c.aliases}")
    if random:  # inductor draws other random numbers than eager by design
        return None
    if check_rng and e.rng != c.rng:
        return Failure(call, "rng", "the global RNG state after the call differs")
    for kind, ea, ca in (("inputs", e.args, c.args), ("globals", e.globs, c.globs)):
        diff = compare(ea, ca, exact, kind)
        if diff:
            return Failure(call, kind, diff)
    if e.stdout != c.stdout:
        return Failure(call, "stdout", f"{e.stdout!r} vs {c.stdout!r}")
    if type(e.backward_exc) is not type(c.backward_exc):
        return Failure(
            call, "backward", f"{type(c.backward_exc).__name__}: eager {e.backward_exc!r}"
        )
    diff = _compare_grads(e.grads, c.grads, exact)
    if diff:
        return Failure(call, "grad", diff)
    return None


def _is_internal_error(message: str) -> bool:
    """A warning that Strata's own compile failed (not an Unsupported break, not a backend
    that declined a graph): the frame ran eagerly because of a bug of ours."""
    return message.startswith("Strata could not compile")


def _warning_kind(message: str) -> str:
    """A Strata warning without its file names and numbers, so equal causes count together."""
    first = message.splitlines()[0]
    first = re.sub(r"\(?\S+\.py:\d+\)?", "<file>", first)
    first = re.sub(r"__resume_at_\d+_\d+|\bs\d+\b|\bu\d+\b|\bid \d+", "<n>", first)
    return first[:200]


@contextlib.contextmanager
def _compile_config(fields: dict[str, Any]) -> Any:
    """``compile_api.config`` with ``fields`` set for the compiled run, restored after."""
    old = {k: getattr(compile_api.config, k) for k in fields}
    try:
        for k, v in fields.items():
            setattr(compile_api.config, k, v)
        yield
    finally:
        for k, v in old.items():
            setattr(compile_api.config, k, v)


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
        compiled = compile_api.compile(
            comp_mod.fn,
            backend=counting,
            fullgraph=False,
            dynamic=getattr(eager_mod, "COMPILE_DYNAMIC", None),
        )
        with _compile_config(getattr(eager_mod, "COMPILE_CONFIG", {})), warnings.catch_warnings(
            record=True
        ) as caught:
            warnings.simplefilter("always")
            random = not exact and bool(getattr(eager_mod, "RANDOM", False))
            check_rng = bool(getattr(eager_mod, "CHECK_RNG_STATE", True))
            escapes = tuple(getattr(eager_mod, "EXPECTED_EXCEPTIONS", ()))
            for i, spec in enumerate(inputs):
                e = _call(eager_mod.fn, eager_mod, spec, i)
                c = _call(compiled, comp_mod, spec, i)
                failure = _diff(i, e, c, exact, random, check_rng, escapes)
                if failure is not None:
                    return failure
        # An error of ours while compiling runs the frame eagerly (same results), but it is a
        # bug all the same: a crash inside the VM (10k run of 2026-11-26: a dataclass __eq__
        # whose __module__ is None) would otherwise only show as a warning count.
        internal = [str(w.message) for w in caught if _is_internal_error(str(w.message))]
        if internal:
            return Failure(0, "internal", _warning_kind(internal[0]))
        if stats is not None:
            stats.programs += 1
            stats.graphs += counting.graphs
            stats.programs_with_graphs += counting.graphs > 0
            stats.warnings += [
                _warning_kind(str(w.message)) for w in caught if "Strata" in str(w.message)
            ]
        return None
    finally:
        compile_api.reset()
        torch.set_grad_enabled(True)
