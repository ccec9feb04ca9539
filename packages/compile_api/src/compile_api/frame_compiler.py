"""The evalframe callback: capture a frame, compile its graphs, build its guards, return an Entry.

Every decision about a frame is made here, in Python; evalframe only dispatches.
"""

from __future__ import annotations

import functools
import importlib.util
import linecache
import logging
import os
import site
import sys
import sysconfig
import threading
import time
import traceback
import types
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal, TypeAlias

import attrs
import torch

import evalframe
import guards
import symbolic_vm

from . import observe
from .backends import Backend
from .config import config
from .ddp import maybe_wrap_for_ddp
from .errors import BackendCompilerFailed, InternalError
from .frame_filters import called_past_limit, frame_may_touch_tensors
from .logs import channel
from .pins import pinned_locals
from .prechecked import prechecked_entry
from .state import FrameRecord, RecordedGraph, state
from .torch_controls import RecompileForbidden, marked_dims, torch_stance

__all__ = ["CompileContext", "context_token", "make_callback", "skip_reason"]

log = logging.getLogger("strata.compile_api")

_GENERATOR_FLAGS = 0x20 | 0x80 | 0x200  # CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR
_CO_OPTIMIZED = 0x1  # set on function code; module and class bodies keep names in a dict


@attrs.frozen
class CompileContext:
    """What one ``compile(...)`` call asked for; its callback compiles frames accordingly."""

    backend: Backend
    backend_name: str
    fullgraph: bool = False
    dynamic: bool | None = None
    on_record: Callable[[FrameRecord], None] | None = None
    # Code compiled even where the skip rules say library code: the forward of a compiled
    # nn.Module whose class torch defines (nn.Sequential, nn.Linear, ...).
    force_codes: frozenset[types.CodeType] = frozenset()
    # Which cached entries this context may run: those compiled under the same token.
    token: int = attrs.field(default=0, eq=False)
    pinned_modules: tuple[Any, ...] = attrs.field(default=(), eq=False)  # see pins.py


# Installed in the globals of every compiled frame: each entry's guard reads the running
# callback (evalframe.get_callback, C) and its ``_strata_token``.
_CALLBACK_NAME = "__strata_callback"
# (id of the backend, fullgraph, dynamic) -> (the backend, kept alive so its id is never
# reused, token). By id: a backend may be an unhashable callable object.
_tokens: dict[tuple[int, bool, bool | None], tuple[object, int]] = {}


def context_token(backend: Backend, fullgraph: bool, dynamic: bool | None) -> int:
    """One token per (backend, fullgraph, dynamic): ``compile()`` calls that agree share a cache.

    A code object's cache is shared by every ``compile()`` of it, so each entry is guarded on
    the token of the context that compiled it (carried by the running callback): a second
    ``compile(fn, backend=other)`` compiles anew instead of running the first backend's code,
    and ``fullgraph=True`` never reuses an entry that was compiled with graph breaks. With no
    callback running (inside a top-level ``run()``), any entry may run.
    """
    key = (id(backend), fullgraph, dynamic)
    with state.lock:
        return _tokens.setdefault(key, (backend, len(_tokens) + 1))[1]


# Packages whose code is never compiled: the torch stack, Strata's layers, and tools around tests.
_LIBRARY_PACKAGES = (
    "torch",
    "evalframe",
    "guards",
    "fxbuild",
    "symbolic_vm",
    "aot",
    "inductor_lite",
    "compile_api",
    "attr",
    "attrs",
    "typing_extensions",
    "numpy",
    "sympy",
    "networkx",
    "triton",
    "mpmath",
    "_pytest",
    "pluggy",
    "pytest",
    "hypothesis",
    "tqdm",
)


def _stdlib_dirs() -> set[str]:
    """CPython's own standard library: where ``os`` lives, and sysconfig's stdlib paths.

    ``platstdlib`` alone is wrong: in a virtual environment it is ``<venv>/lib/pythonX.Y``, the
    folder that holds the venv's site-packages.
    """
    paths = sysconfig.get_paths()
    candidates = {os.path.dirname(os.__file__), paths["stdlib"], paths["platstdlib"]}
    return {os.path.realpath(d) for d in candidates}


def _site_dirs() -> set[str]:
    """Folders of installed third-party packages; never standard library, even inside it."""
    dirs = set(site.getsitepackages()) | {site.getusersitepackages()}
    dirs.update(p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages"))
    return {os.path.realpath(d) for d in dirs}


def _library_dirs(names: tuple[str, ...] = _LIBRARY_PACKAGES) -> tuple[str, ...]:
    """Directories of _LIBRARY_PACKAGES (found without importing)."""
    dirs: set[str] = set()
    for name in names:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.submodule_search_locations:
            dirs.update(os.path.realpath(d) for d in spec.submodule_search_locations)
    return _as_prefixes(dirs)


def _as_prefixes(dirs: set[str]) -> tuple[str, ...]:
    return tuple(sorted(d.rstrip(os.sep) + os.sep for d in dirs))


@functools.lru_cache(maxsize=4096)
def is_library_file(filename: str) -> bool:
    """Whether a code object's file is CPython's standard library or one of _LIBRARY_PACKAGES.

    Installed libraries (transformers, timm, torchvision, a user's own packages) are not: their
    frames are compiled and traced into, as torch.compile does. Paths are compared after
    resolving symlinks, and a site-packages folder below the stdlib folder (a plain pyenv or
    system install) does not count as stdlib.
    """
    path = os.path.realpath(filename)
    if path.startswith(_prefixes().traced):
        return False
    if path.startswith(_prefixes().library):
        return True
    return path.startswith(_prefixes().stdlib) and not path.startswith(_prefixes().site)


@attrs.frozen
class _Prefixes:
    library: tuple[str, ...]
    # torch's own user-level Python, compiled as torch.compile compiles it: torch.optim
    # (compile(opt.step), a compiled training step calling opt.step())
    traced: tuple[str, ...]
    stdlib: tuple[str, ...]
    site: tuple[str, ...]


@functools.cache
def _prefixes() -> _Prefixes:
    return _Prefixes(
        library=_library_dirs(),
        traced=tuple(d + "optim" + os.sep for d in _library_dirs(("torch",))),
        stdlib=_as_prefixes(_stdlib_dirs()),
        site=_as_prefixes(_site_dirs()),
    )


# Files inside Strata's own directories that hold user code (the demo's example functions).
_USER_FILES = frozenset({os.path.join(os.path.dirname(__file__), "demo.py")})


def skip_reason(code: types.CodeType) -> str | None:
    """Why a code object is never compiled, or None when it may be."""
    if code in state.skip_codes:
        return "disabled with compile_api.disable(recursive=False)"
    if code.co_flags & _GENERATOR_FLAGS:
        return "generators and coroutines run eagerly"
    if not code.co_flags & _CO_OPTIMIZED:
        # A class statement's body (run by __build_class__ at a break) or an exec'd module:
        # its LOAD_NAME/STORE_NAME work on a dict the VM does not model. Capturing it could
        # only break at its first instruction, one more broken frame than torch.compile.
        return "module and class bodies run eagerly"
    filename = code.co_filename
    if filename.startswith("<frozen") or "eval_with_key" in filename:
        return "generated or frozen library code"
    if filename not in _USER_FILES and is_library_file(filename):
        return "library code (torch, the standard library or Strata itself)"
    return None


def _warn_once(key: object, message: str, code: types.CodeType | None = None) -> None:
    """Warn once per ``key``, at the user's ``code`` (its file and first line) when given.

    The callback runs before the frame does, so no user line is on the stack: the warning is
    placed there explicitly rather than at a line of this file.
    """
    with state.lock:
        if key in state.warned:
            return
        state.warned.add(key)
    if code is None:
        warnings.warn(message, RuntimeWarning, stacklevel=3)
    else:
        warnings.warn_explicit(
            message, RuntimeWarning, code.co_filename, code.co_firstlineno, module=code.co_name
        )


def _at_user_line(err: symbolic_vm.Unsupported, frame: types.FrameType) -> BaseException:
    """``err`` with a traceback that ends at the user's line, not inside Strata.

    The frame being compiled has not started, so no traceback entry names it: one is made for
    it, at the construct's line (or the function's first line when the construct is in another
    file). ``config.verbose`` keeps Strata's own frames and the chained cause.
    """
    if config.verbose:
        return err
    code = frame.f_code
    # The frame's own line: the construct's, or that of the call that led to it (the
    # outermost caller); the calls in between are added to the message.
    callers = list(getattr(err, "callers", ()))
    filename, line = callers[-1] if callers else (err.filename, err.lineno)
    if filename != code.co_filename or not line:
        line = code.co_firstlineno
    if callers:
        chain = "".join(
            f"\n    {f}:{n}: {linecache.getline(f, n).strip()}" for f, n in reversed(callers)
        )
        err.args = (f"{err}\n  reached through (outermost first):{chain}",)
    err.__cause__ = None
    return err.with_traceback(types.TracebackType(None, frame, -1, line))


def _warn_at(
    code: types.CodeType, message: str, line: int | None = None, key: object = None
) -> None:
    """Warn once per ``key`` (default: the code object) at the user's file and ``line``
    (default: the function's first line, as when the frame has not started yet)."""
    key = ("failed", code) if key is None else key
    with state.lock:
        if key in state.warned:
            return
        state.warned.add(key)
    warnings.warn_explicit(
        message,
        RuntimeWarning,
        code.co_filename,
        line or code.co_firstlineno,
        module=code.co_name,
    )


def _where(code: types.CodeType) -> str:
    return f"{code.co_name} ({code.co_filename}:{code.co_firstlineno})"


@contextmanager
def _timed(record: FrameRecord, phase: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - start
        record.times[phase] = record.times.get(phase, 0.0) + elapsed
        state.times[phase].append(elapsed)


def _dynamic_dims(
    frame: types.FrameType, f_locals: dict[str, Any], ctx: CompileContext, recompiling: bool
) -> dict[guards.Source, frozenset[int]]:
    """Dims to make symbolic: mark_dynamic'd ones, plus automatic dynamic after a size change.

    Automatic dynamic compares each tensor that an earlier entry's TENSOR_MATCH guarded (found
    through its source, so tensors inside lists, dicts and attributes count too) with its size now.
    """
    code = frame.f_code
    dims: dict[guards.Source, set[int]] = {}
    static: dict[guards.Source, frozenset[int]] = {}
    for name, value in f_locals.items():
        if not isinstance(value, torch.Tensor):
            continue
        # compile_api.mark_dynamic's dims, and those of torch's own marks.
        torch_dynamic, torch_static = marked_dims(value)
        marked = set(getattr(value, "_strata_dynamic_dims", ())) | torch_dynamic
        if marked:
            dims.setdefault(guards.LocalSource(name), set()).update(marked)
        if torch_static:
            static[guards.LocalSource(name)] = torch_static
    with state.lock:
        auto = state.auto_dynamic.setdefault((code, ctx.token), {})
        if recompiling and ctx.dynamic is None and config.automatic_dynamic_shapes:
            for source, sizes in state.tensor_sizes.get((code, ctx.token), ()):
                try:
                    value = source.resolve(f_locals, frame.f_globals)
                except Exception:  # the source no longer resolves: nothing to compare
                    continue
                if not isinstance(value, torch.Tensor):
                    continue
                with torch._C.DisableTorchFunctionSubclass():  # no user __torch_function__
                    shape = value.shape
                if len(shape) != len(sizes):
                    continue
                changed = {
                    i
                    for i, (old, new) in enumerate(zip(sizes, shape, strict=True))
                    if old is not None and old != new
                }
                if changed - auto.get(source, frozenset()):
                    auto[source] = auto.get(source, frozenset()) | changed
                    channel("dynamic").debug(
                        "%s: size of %s changed at dims %s; recompiling them as dynamic",
                        _where(code),
                        source.name(),
                        sorted(changed),
                    )
        for source, auto_dims in auto.items():
            dims.setdefault(source, set()).update(auto_dims - static.get(source, frozenset()))
    return {source: frozenset(d) for source, d in dims.items()}


def _static_dims(f_locals: dict[str, Any]) -> dict[guards.Source, frozenset[int]]:
    """Dims torch's ``mark_static`` pinned, kept static even under ``dynamic=True``."""
    static: dict[guards.Source, frozenset[int]] = {}
    for name, value in f_locals.items():
        if isinstance(value, torch.Tensor):
            dims = marked_dims(value)[1]
            if dims:
                static[guards.LocalSource(name)] = dims
    return static


def _dynamic_ints(
    frame: types.FrameType, f_locals: dict[str, Any], ctx: CompileContext, recompiling: bool
) -> frozenset[guards.Source]:
    """Int sources to trace as SymInts: automatic dynamic for ints, as for sizes above.

    An int that an earlier entry's CONSTANT_MATCH guarded and that now holds another int is
    made symbolic from this compile on (torch.compile does the same with dynamic=None).
    """
    code = frame.f_code
    with state.lock:
        auto = state.auto_dynamic_ints.setdefault((code, ctx.token), set())
        if recompiling and ctx.dynamic is None and config.automatic_dynamic_shapes:
            for source, old in state.int_values.get((code, ctx.token), ()):
                try:
                    value = source.resolve(f_locals, frame.f_globals)
                except Exception:  # the source no longer resolves: nothing to compare
                    continue
                if type(value) in (int, float) and value != old and source not in auto:
                    auto.add(source)
                    channel("dynamic").debug(
                        "%s: %s changed from %r to %r; recompiling it as a symbol",
                        _where(code),
                        source.name(),
                        old,
                        value,
                    )
            # An int where an earlier entry saw a tensor: it varies already (torch.compile
            # makes it a SymInt at once rather than compiling once per value first).
            for source, _ in state.tensor_sizes.get((code, ctx.token), ()):
                if source in auto:
                    continue
                try:
                    value = source.resolve(f_locals, frame.f_globals)
                except Exception:  # the source no longer resolves: nothing to compare
                    continue
                if type(value) is int:
                    auto.add(source)
                    channel("dynamic").debug(
                        "%s: %s was a tensor and is now the int %d; recompiling it as a SymInt",
                        _where(code),
                        source.name(),
                        value,
                    )
        return frozenset(auto)


def _compile_graph(
    ctx: CompileContext,
    backend: Backend,
    graph: Any,
    code: types.CodeType,
    namespace: dict[str, Any],
) -> Callable[..., Any]:
    """Run the backend on one captured graph, falling back to the graph itself on error.

    The result is installed as ``namespace[graph.name]``, where the transformed code calls it.
    """
    gm: torch.fx.GraphModule = graph.gm
    try:
        compiled = backend(gm, graph.example_inputs)
        if not callable(compiled):
            raise TypeError(f"the backend returned {type(compiled).__name__}, not a callable")
    except Exception as err:
        if ctx.fullgraph or not config.suppress_errors:
            raise BackendCompilerFailed(ctx.backend_name, _where(code), err) from err
        _warn_once(
            ("backend", ctx.backend_name, type(err).__name__, str(err)),
            f"Strata: backend {ctx.backend_name!r} failed on a graph of {_where(code)} "
            f"({type(err).__name__}: {err}); running that graph eagerly. "
            "Set compile_api.config.suppress_errors = False to raise instead.",
            code,
        )
        compiled = gm.forward
    return _without_hook(
        compiled,
        gm.forward,
        ctx.backend_name,
        namespace,
        graph.name,
        code=code,
        fullgraph=ctx.fullgraph,
    )


def _without_hook(
    compiled: Callable[..., Any],
    fallback: Callable[..., Any],
    backend_name: str,
    namespace: dict[str, Any],
    name: str,
    *,
    code: types.CodeType,
    fullgraph: bool = False,
) -> Callable[..., Any]:
    """``compiled`` run with the frame hook off, as TorchDynamo runs its compiled code.

    A backend's callable is Python (an FX forward, a generated wrapper, aot's runtime); left
    hooked, its frames would be compiled in turn -- by the same backend, without end.
    ``evalframe.without_hook`` does that in C. The first call goes through this Python layer:
    a callable that raises there (a backend bug: it refuses the graph's arguments, or fails
    at its first run) is replaced by the captured graph, which runs this call: eager's result,
    with one warning at the user's line, under ``config.suppress_errors`` and outside
    ``fullgraph=True``. If the captured graph raises too, eager would have raised: that error
    propagates. Once a call has gone through, the bare C wrapper takes this layer's place in
    ``namespace[name]`` (later failures are the backend's to handle: aot and inductor_lite
    run their graphs eagerly on their own errors).
    """
    current = [evalframe.without_hook(compiled)]

    def first_calls(*args: Any) -> Any:
        try:
            result = current[0](*args)
        except Exception as err:
            running_fallback = current[0].__wrapped__ is fallback
            if running_fallback or fullgraph or not config.suppress_errors:
                raise
            eager = evalframe.without_hook(fallback)
            result = eager(*args)  # raises as eager would, if it does
            # The caller is the user's frame running its transformed code (our file name,
            # the user's line numbers): the warning names the user's file and that line.
            line = sys._getframe(1).f_lineno
            if line not in {ln for _, _, ln in code.co_lines()}:
                line = code.co_firstlineno  # the call is not stamped with a line of the user's
            _warn_at(
                code,
                f"Strata: the code backend {backend_name!r} compiled for a graph of "
                f"{_where(code)} failed at its first call ({type(err).__name__}: {err}); "
                "running that graph eagerly. Set compile_api.config.suppress_errors = False "
                "to raise instead.",
                line,
                key=("compiled call", id(compiled)),
            )
            current[0] = eager
        # Only while still installed: reset() may have removed the name meanwhile.
        if namespace.get(name) is first_calls:
            namespace[name] = current[0]
        return result

    first_calls.__wrapped__ = compiled  # type: ignore[attr-defined]
    return first_calls


def _call_prechecked_where_guarded(
    graphs: list[symbolic_vm.CapturedGraph],
    namespace: dict[str, Any],
    guard_list: list[guards.Guard],
    ctx: CompileContext,
    code: types.CodeType,
) -> None:
    """Install a graph's ``call_prechecked`` in place of its checked call where the frame's
    guards already check every input as the graph would (``prechecked.py``): each tensor is
    then inspected once per call, by the guards, not twice."""
    with state.lock:
        for graph in graphs:
            installed = namespace.get(graph.name)
            compiled = getattr(installed, "__wrapped__", None)
            if compiled is None:
                continue
            entry = prechecked_entry(
                compiled, graph.input_sources, graph.example_inputs, guard_list
            )
            if entry is None:
                continue
            log.debug("%s: %s called without its own input check", _where(code), graph.name)
            namespace[graph.name] = _without_hook(
                entry, graph.gm.forward, ctx.backend_name, namespace, graph.name,
                code=code, fullgraph=ctx.fullgraph,
            )


def _finish(record: FrameRecord, ctx: CompileContext) -> None:
    with state.lock:
        state.records.append(record)
    if ctx.on_record is not None:
        ctx.on_record(record)
    observe.finish(record)


FrameAnswer: TypeAlias = "evalframe.Entry | evalframe.Skip | None"


def _unguardable(
    record: FrameRecord, ctx: CompileContext, code: types.CodeType, err: Exception
) -> Literal[evalframe.Skip.SKIP]:
    """The guards of a compiled frame could not be built: run the frame eagerly from now on.

    Its graphs are compiled, but without guards for every fact they were compiled under (a
    ShapeEnv fact guards cannot express) they may not run. Raises under suppress_errors=False.
    """
    if ctx.fullgraph or not config.suppress_errors:
        raise InternalError(_where(code), err) from err
    _warn_once(
        ("guards", code),
        f"Strata could not build the guards of {_where(code)} and runs it eagerly: "
        f"{type(err).__name__}: {err}\n"
        "Set compile_api.config.suppress_errors = False to raise instead.",
        code,
    )
    record.ran_eagerly = f"guards: {type(err).__name__}: {err}"
    _finish(record, ctx)
    return evalframe.SKIP


@contextmanager
def _preserved_rng_state() -> Iterator[None]:
    """Compiling a frame draws no random number the program sees (as TorchDynamo does): the
    global CPU and CUDA generators are restored after capture and after the backends, so a seeded
    program's first compiled call draws eager's dropout masks."""
    cpu = torch.random.get_rng_state()
    cuda_on = torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
    cuda = torch.cuda.get_rng_state_all() if cuda_on else None
    try:
        yield
    finally:
        torch.random.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


def _backward_entry_codes() -> frozenset[types.CodeType]:
    """The methods through which the autograd engine runs a Python backward.

    ``loss.backward()`` in a compiled function runs the compiled backwards of aot's
    autograd.Functions (and any custom Function's backward) on this thread, with the hook on.
    A backend's backward is compiled code, as its forward is (which runs under
    ``without_hook``): the frames under these methods are not compiled, as TorchDynamo
    disables itself around aot's compiled backward. A custom Function's backward run by the
    engine therefore runs eagerly.
    """
    codes: set[types.CodeType] = set()
    engine_node = torch.autograd.function.BackwardCFunction
    for name in ("apply", "apply_boxed"):
        code = getattr(getattr(engine_node, name, None), "__code__", None)
        if isinstance(code, types.CodeType):
            codes.add(code)
    return frozenset(codes)


_BACKWARD_ENTRIES = _backward_entry_codes()


def compile_frame(frame: types.FrameType, cache_size: int, ctx: CompileContext) -> FrameAnswer:
    """The body of the evalframe callback: None, evalframe.SKIP or an evalframe.Entry."""
    code = frame.f_code
    if code in _BACKWARD_ENTRIES:
        return evalframe.SKIP_RECURSIVE
    disabled = symbolic_vm.torch_disabled_code(code)
    if disabled is not None:
        # torch.compiler.disable: its wrapper and callees run unhooked (recursive), or the
        # function's own frame is never compiled (recursive=False).
        return evalframe.SKIP_RECURSIVE if disabled else evalframe.SKIP
    if code not in ctx.force_codes and skip_reason(code) is not None:
        return evalframe.SKIP
    if config.debug_function and code.co_name != config.debug_function:
        return None
    f_locals = dict(frame.f_locals)
    if not frame_may_touch_tensors(frame, f_locals):
        return None  # as torch.compile: run as is, asked again at the next call
    if state.past_limit and called_past_limit(frame):
        return None
    stance = torch_stance()
    if stance == "force_eager" or (cache_size > 0 and stance == "eager_on_recompile"):
        return None
    if cache_size > 0 and stance == "fail_on_recompile":
        reasons = observe.recompile_reasons(code, dict(frame.f_locals))
        raise RecompileForbidden(
            f"Detected recompile of {_where(code)} while torch.compiler.set_stance is "
            f"'fail_on_recompile'; guard failures: {'; '.join(reasons) or 'unknown'}"
        )
    if cache_size >= config.cache_size_limit:
        # Checked before anything else: past the limit every miss runs eagerly, and cheaply.
        with state.lock:
            state.past_limit.add(code)
        key = ("cache_size_limit", code)
        if key not in state.warned:
            reasons = observe.recompile_reasons(code, dict(frame.f_locals))
            _warn_once(
                key,
                f"Strata: {_where(code)} hit config.cache_size_limit ({config.cache_size_limit}); "
                f"it now runs eagerly for inputs that miss its cache. Last guard failures: "
                f"{'; '.join(reasons) or 'unknown'}. Raise compile_api.config.cache_size_limit, "
                "or use dynamic=True / mark_dynamic for changing sizes.",
                code,
            )
        return None
    recompiling = cache_size > 0
    reasons = observe.recompile_reasons(code, f_locals) if recompiling else []
    if recompiling:
        channel("recompiles").debug(
            "Recompiling %s, triggered by guard failure(s):\n%s",
            _where(code),
            "\n".join(f"    - {r}" for r in reasons) or "    - (unknown)",
        )
    record = FrameRecord(
        code=code, transformed=None, backend=ctx.backend, recompile_reasons=reasons
    )
    observe.begin(record, frame)
    capture_config = symbolic_vm.CaptureConfig(
        fullgraph=ctx.fullgraph,
        dynamic=ctx.dynamic if ctx.dynamic is not None or config.assume_static_by_default else True,
        dynamic_dims=_dynamic_dims(frame, f_locals, ctx, recompiling),
        static_dims=_static_dims(f_locals),
        dynamic_ints=_dynamic_ints(frame, f_locals, ctx, recompiling),
        # torch.compile 2.13 captures both under fullgraph=True whatever the settings say
        capture_scalar_outputs=config.capture_scalar_outputs or ctx.fullgraph,
        capture_dynamic_output_shape_ops=config.capture_dynamic_output_shape_ops or ctx.fullgraph,
        inline_inbuilt_nn_modules=config.inline_inbuilt_nn_modules,
        pinned_locals=pinned_locals(f_locals, ctx.pinned_modules),
    )
    try:
        with _timed(record, "bytecode_analysis"), _preserved_rng_state():
            result = symbolic_vm.capture(frame, capture_config)
    except symbolic_vm.Unsupported as err:
        if ctx.fullgraph:
            raise
        record.ran_eagerly = str(err)
        # kept without its tracebacks: they would keep the user's frame and locals alive
        record.breaks.append(symbolic_vm.drop_tracebacks(err))
        _finish(record, ctx)
        return evalframe.SKIP
    except Exception as err:
        # Under fullgraph=True a bug of ours is never hidden by running the frame eagerly.
        if ctx.fullgraph or not config.suppress_errors:
            raise InternalError(_where(code), err, symbolic_vm.traced_at(err)) from err
        detail = traceback.format_exc() if config.verbose else f"{type(err).__name__}: {err}"
        _warn_once(
            ("internal", code),
            f"Strata could not compile {_where(code)} and runs it eagerly: {detail}\n"
            "Set compile_api.config.suppress_errors = False to raise instead "
            "(config.verbose = True shows the full traceback).",
            code,
        )
        record.ran_eagerly = f"internal error: {type(err).__name__}: {err}"
        _finish(record, ctx)
        return evalframe.SKIP

    record.transformed = result.code
    # Records keep each graph's name and module, not its example inputs (the user's tensors).
    record.graphs = [RecordedGraph(graph.name, graph.gm) for graph in result.graphs]
    record.breaks = list(result.breaks)
    namespace = frame.f_globals
    # Inside a DistributedDataParallel forward, graphs are split at gradient-bucket boundaries.
    backend = maybe_wrap_for_ddp(ctx.backend, config.optimize_ddp)
    with _timed(record, "backend_compile"), _preserved_rng_state():
        compiled = {
            graph.name: _compile_graph(ctx, backend, graph, code, namespace)
            for graph in result.graphs
        }
    with state.lock:
        for name, value in [*compiled.items(), *result.globals_to_install.items()]:
            namespace[name] = value
            state.installed.append((namespace, name))
        if namespace.get(_CALLBACK_NAME) is not evalframe.get_callback:
            namespace[_CALLBACK_NAME] = evalframe.get_callback
            state.installed.append((namespace, _CALLBACK_NAME))
    try:
        with _timed(record, "guard_building"):
            # Built now, not at capture: the backends may have added facts to the capture's
            # ShapeEnv (aot's trace specialising a size), and their code is valid only under them.
            guard_set = result.rebuild_guards()
            guard_set.SHAPE(
                f"getattr(current(), '_strata_token', 0) in ({ctx.token}, 0)",
                f"compiled by compile(backend={ctx.backend_name!r}, fullgraph={ctx.fullgraph}, "
                f"dynamic={ctx.dynamic}); another compile() of this code is running",
                operands={"current": guards.GlobalSource(_CALLBACK_NAME)},
            )
            check = guards.compile_guards(guard_set, namespace)
    except Exception as err:
        return _unguardable(record, ctx, code, err)
    _call_prechecked_where_guarded(result.graphs, namespace, check.guards, ctx, code)
    record.guards_text = check.text
    with state.lock:
        state.tensor_sizes.setdefault((code, ctx.token), []).extend(
            (guard.source, guard.spec.sizes)
            for guard in check.guards
            if isinstance(guard, guards.TensorMatch)
        )
        state.int_values.setdefault((code, ctx.token), []).extend(
            (guard.source, guard.value)
            for guard in check.guards
            if isinstance(guard, guards.ConstantMatch) and type(guard.value) in (int, float)
        )
    observe.entry_compiled(check.check, record, f_locals)
    _finish(record, ctx)
    # The bare generated function (it carries .failures): one call layer less on every hit.
    return evalframe.Entry(check.check, result.code)


# One compile at a time in the process: tracing (fake tensors, fx's patcher, make_fx) keeps global
# state, as TorchDynamo's compile lock acknowledges. Cached entries run without it.
_compile_lock = threading.RLock()


def make_callback(ctx: CompileContext) -> evalframe.Callback:
    """The evalframe callback for one compile context."""
    return _FrameCallback(ctx)


class _FrameCallback:
    """The evalframe callback of one compile context.

    ``_strata_token`` is what each entry's guard reads to tell which compile() context is
    running; under torch's ``force_eager`` stance it matches no entry, so cached code is not
    run either: the miss reaches ``compile_frame``, which runs the frame as it is.
    """

    __slots__ = ("ctx",)

    def __init__(self, ctx: CompileContext) -> None:
        self.ctx = ctx

    def __call__(self, frame: types.FrameType, cache_size: int) -> FrameAnswer:
        with _compile_lock:
            try:
                return compile_frame(frame, cache_size, self.ctx)
            except symbolic_vm.Unsupported as err:
                # fullgraph=True: the traceback ends at the user's line (one frame of ours).
                raise _at_user_line(err, frame) from None
            except RecompileForbidden:
                raise  # the stance asked for the error
            except Exception as err:
                # Outside fullgraph=True no error of ours reaches the user's program: the
                # frame runs eagerly from now on (compile_frame handles the expected ones).
                if self.ctx.fullgraph and not isinstance(
                    err, (InternalError, BackendCompilerFailed)
                ):
                    # a bug of ours outside the capture (recompile bookkeeping, logs, DDP):
                    # named as one, at the user's function
                    raise InternalError(_where(frame.f_code), err) from err
                if self.ctx.fullgraph or not config.suppress_errors:
                    raise
                _warn_at(
                    frame.f_code,
                    f"Strata could not compile {_where(frame.f_code)} and runs it eagerly: "
                    f"{type(err).__name__}: {err}\nSet compile_api.config.suppress_errors = "
                    "False to raise instead.",
                )
                return evalframe.SKIP

    @property
    def _strata_token(self) -> int:
        return -1 if torch_stance() == "force_eager" else self.ctx.token
