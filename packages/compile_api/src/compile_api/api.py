"""compile, optimize, disable, run, reset, mark_dynamic: the torch.compile surface."""

from __future__ import annotations

import functools
import inspect
import sys
import types
import warnings
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import attrs
import torch
import torch.nn.modules.module as _module_globals  # its global hook dicts

import evalframe
import symbolic_vm

from . import observe
from .backends import Backend, inductor_with_options, lookup_backend
from .config import config
from .ddp import warn_if_fsdp
from .errors import NotCallableError
from .frame_compiler import CompileContext, context_token, make_callback
from .frame_filters import always_compile
from .state import FrameRecord, state
from .torch_controls import on_torch_reset

__all__ = [
    "OptimizedModule",
    "compile",
    "disable",
    "mark_dynamic",
    "optimize",
    "reset",
    "run",
]

F = TypeVar("F", bound=Callable[..., Any])

_MODES = (None, "default", "lite", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
_CUDAGRAPH_MODES = ("reduce-overhead", "max-autotune")
_AUTOTUNE_MODES = ("max-autotune", "max-autotune-no-cudagraphs")


def _backend_name(backend: str | Backend) -> str:
    if isinstance(backend, str):
        return backend
    return getattr(backend, "__name__", type(backend).__name__)


def _context(
    backend: str | Backend,
    *,
    fullgraph: bool,
    dynamic: bool | None,
    on_record: Callable[[FrameRecord], None] | None = None,
) -> CompileContext:
    resolved = lookup_backend(backend)
    return CompileContext(
        backend=resolved,
        backend_name=_backend_name(backend),
        fullgraph=fullgraph,
        dynamic=dynamic,
        on_record=on_record,
        token=context_token(resolved, fullgraph, dynamic),
    )


def _forward_code(mod: torch.nn.Module) -> frozenset[types.CodeType]:
    inner = getattr(mod, "module", None)
    if isinstance(mod, torch.nn.parallel.DistributedDataParallel) and isinstance(
        inner, torch.nn.Module
    ):
        # compile(DDP(model)), as torch.compile does it: DDP's own forward (bucket bookkeeping,
        # a profiler range, reducer calls) runs eagerly; the wrapped module's forward is
        # compiled even when torch defines it (nn.Sequential), and split at DDP's buckets.
        return _forward_code(inner)
    forward = getattr(type(mod).forward, "__code__", None)
    return frozenset({forward}) if isinstance(forward, types.CodeType) else frozenset()


def _wrapped_modules(mod: torch.nn.Module) -> list[torch.nn.Module]:
    """``mod``, and the module a DistributedDataParallel wraps (whose forward is compiled)."""
    inner = getattr(mod, "module", None)
    if isinstance(mod, torch.nn.parallel.DistributedDataParallel) and isinstance(
        inner, torch.nn.Module
    ):
        return [mod, *_wrapped_modules(inner)]
    return [mod]


def _wrap(fn: Callable[..., Any], ctx: CompileContext) -> Callable[..., Any]:
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, torch.nn.Module) and not ctx.pinned_modules:
        # compile(model.forward): that one module is called again and again, as compile(model)
        # (pins.py): its frames keep the identity guard and the one-call parameter reader.
        ctx = attrs.evolve(ctx, pinned_modules=(weakref.ref(owner),))
    always_compile(fn)  # compiled even when its arguments hold no tensor, as torch.compile
    # evalframe.with_callback: the callback is set around each call in C, with no Python frame.
    compiled = evalframe.with_callback(make_callback(ctx), fn)
    functools.update_wrapper(compiled, fn)
    compiled._strata_orig_callable = fn  # type: ignore[attr-defined]
    compiled._strata_context = ctx  # type: ignore[attr-defined]
    return compiled


def _compile_class(cls: type, ctx: CompileContext) -> type:
    """``compile(SomeClass)`` as torch.compile does it: the class itself comes back, changed
    in place, its instances' ``__call__`` (and an nn.Module's ``_call_impl``) compiled, so an
    instance made afterwards runs compiled when called (its construction does not)."""

    def compiled_method(method: Callable[..., Any]) -> Callable[..., Any]:
        compiled = _wrap(method, ctx)

        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:  # a function: it binds as a method
            return compiled(*args, **kwargs)

        return call

    if any("__call__" in vars(k) for k in cls.__mro__[:-1]):
        cls.__call__ = compiled_method(cls.__call__)  # type: ignore[method-assign]
    if issubclass(cls, torch.nn.Module):
        cls._call_impl = compiled_method(cls._call_impl)  # type: ignore[method-assign]
    return cls


def _initialize_lazy(mod: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """A lazy module's first call (``nn.LazyLinear``, a ``LazyModuleMixin`` class): its
    initialization hook runs eagerly on the real arguments, as eager's first call runs it,
    then the compiled forward (torch.compile also initializes before tracing). Left to
    ``nn.Module.__call__``, the hook's own frames (``initialize_parameters``) were compiled
    as frames of their own and, under ``fullgraph=True``, failed on making Parameters. With
    other pre-hooks registered, nn.Module's order is kept (the ordinary route)."""
    if mod._forward_pre_hooks.keys() != {mod._initialize_hook.id} or (
        _module_globals._global_forward_pre_hooks
    ):
        return
    with evalframe.run_only():
        mod._infer_parameters(mod, args, kwargs)


class OptimizedModule(torch.nn.Module):
    """A module whose forward runs compiled; everything else is the original module's.

    Attributes, parameters, buffers and ``state_dict`` (without a prefix) come from ``_orig_mod``.
    """

    _orig_mod: torch.nn.Module

    def __init__(self, mod: torch.nn.Module, ctx: CompileContext) -> None:
        super().__init__()
        self._orig_mod = mod
        # The module's own forward is compiled even when torch defines it (nn.Sequential).
        ctx = attrs.evolve(
            ctx,
            force_codes=ctx.force_codes | _forward_code(mod),
            pinned_modules=tuple(weakref.ref(m) for m in _wrapped_modules(mod)),
        )
        callback = make_callback(ctx)
        # Both routes take the module as an argument (never close over it), so a deepcopy of
        # this wrapper runs its own copy of the module (the C wrappers are copy-atomic).
        self._strata_call = evalframe.with_callback(callback, type(mod).__call__)
        self._strata_context = ctx
        # The direct route of __call__: the class's forward, run under the callback. Kept
        # outside nn.Module's registries (object.__setattr__) so it is a plain attribute.
        forward = type(mod).forward
        direct = evalframe.with_callback(callback, forward)
        object.__setattr__(self, "_strata_direct", (mod, forward, direct))
        # A class under torch.compiler.disable (its __call__ is torch's disabled wrapper): the
        # ordinary route reaches that wrapper, whose frames then run unhooked (noted here).
        object.__setattr__(
            self, "_strata_disabled", symbolic_vm.note_torch_disabled(type(mod).__call__)
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Straight to the compiled forward when no hook could run, as nn.Module's fast path.

        ``nn.Module.__call__`` of this wrapper and then of the wrapped module would each only
        check for hooks and call ``forward`` (~0.6-0.9 us apiece); this checks the same things
        once. Any hook (on either module, or global), a ``forward`` replaced on the instance or
        the class, or torch's own ``Module.compile()`` takes the ordinary route.
        """
        try:
            mod, forward, direct = self._strata_direct
            if "_initialize_hook" in mod.__dict__:
                _initialize_lazy(mod, args, kwargs)
            if (
                self._strata_disabled
                or self._forward_hooks
                or self._forward_pre_hooks
                or self._backward_hooks
                or self._backward_pre_hooks
                or mod._forward_hooks
                or mod._forward_pre_hooks
                or mod._backward_hooks
                or mod._backward_pre_hooks
                or _module_globals._global_forward_hooks
                or _module_globals._global_forward_pre_hooks
                or _module_globals._global_backward_hooks
                or _module_globals._global_backward_pre_hooks
                or type(mod).forward is not forward
                or "forward" in mod.__dict__
                or mod.__dict__.get("_compiled_call_impl") is not None
            ):
                return super().__call__(*args, **kwargs)
            return direct(mod, *args, **kwargs)
        except BaseException as err:
            _hide_own_entry(err)
            raise  # a bare raise adds no traceback entry for this frame again

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._strata_call(self._orig_mod, *args, **kwargs)
        except BaseException as err:
            _hide_own_entry(err)
            raise

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._orig_mod, name)

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self._orig_mod.state_dict(*args, **kwargs)

    def load_state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self._orig_mod.load_state_dict(*args, **kwargs)

    def named_parameters(self, *args: Any, **kwargs: Any) -> Iterator[tuple[str, Any]]:
        return self._orig_mod.named_parameters(*args, **kwargs)

    def named_buffers(self, *args: Any, **kwargs: Any) -> Iterator[tuple[str, Any]]:
        return self._orig_mod.named_buffers(*args, **kwargs)

    def __repr__(self) -> str:
        return f"OptimizedModule({self._orig_mod!r})"


def _hide_own_entry(err: BaseException) -> None:
    """Drop the traceback entry of the OptimizedModule method that caught ``err``: the user's
    traceback goes from their call of the module straight to their ``forward``, as in eager
    (``config.verbose`` keeps it). An error raised in the method itself keeps it."""
    tb = err.__traceback__
    if (
        tb is not None and tb.tb_next is not None and not config.verbose
        and tb.tb_frame.f_code.co_filename == __file__
    ):
        err.__traceback__ = tb.tb_next


class _BadArgument(TypeError, AssertionError):
    """A compile() argument of the wrong kind: a TypeError, and an AssertionError as torch's."""


def _refuse_unsupported_python() -> None:
    """compile() on a Python the hook or the VM does not run on: one error, naming what is
    missing, instead of frames that fail inside Strata (torch.compile also refuses at compile)."""
    missing = [
        reason
        for reason in (
            None if evalframe.HOOK_AVAILABLE else evalframe.UNAVAILABLE_REASON,
            symbolic_vm.unsupported_python(),
        )
        if reason
    ]
    if missing:
        raise RuntimeError(
            f"Strata cannot compile on Python {sys.version.split()[0]}:\n- " + "\n- ".join(missing)
        )


def compile(
    model: Any = None,
    *,
    fullgraph: bool = False,
    dynamic: bool | None = None,
    backend: str | Backend = "inductor",
    mode: str | None = None,
    options: dict[str, Any] | None = None,
    disable: bool = False,
) -> Any:
    """Compile a function or nn.Module, with torch.compile's meaning for every argument.

    Works as a call (``compile(fn)``) and as a decorator (``@compile``,
    ``@compile(fullgraph=True)``).
    ``fullgraph=True`` raises ``Unsupported`` at the first construct that cannot be captured;
    ``dynamic`` is False (specialise sizes), True (symbolic sizes) or None (automatic: a size that
    changes is recompiled as symbolic). ``backend`` is a registered name or a callable
    ``(gm, example_inputs) -> callable``.
    """
    if mode is not None and options is not None:
        raise RuntimeError(
            "Either mode or options can be specified, but both can't be specified at the same time."
        )
    if mode not in _MODES:
        raise RuntimeError(
            f"Unrecognized mode={mode}, should be one of: {', '.join(map(str, _MODES[1:]))}"
        )
    if options is not None and not isinstance(options, dict):
        raise TypeError(f"options must be a dict, got {type(options).__name__}")
    if dynamic not in (None, True, False):
        raise _BadArgument(f"dynamic must be True, False or None, got {dynamic!r}")
    if model is None:

        def decorate(fn: Any) -> Any:
            return compile(
                fn,
                fullgraph=fullgraph,
                dynamic=dynamic,
                backend=backend,
                mode=mode,
                options=options,
                disable=disable,
            )

        return decorate
    if mode not in (None, "default") and isinstance(backend, str) and backend != "inductor":
        # torch.compile's eager-style backends ignore mode= with a warning, as here.
        warnings.warn(
            f"mode={mode!r} has no effect with backend={backend!r} (modes configure the "
            "inductor backend); it is ignored",
            UserWarning,
            stacklevel=2,
        )
    if not callable(model):
        raise NotCallableError(
            f"A callable function is expected, but {type(model)} is provided "
            "(compile_api.compile takes a function or an nn.Module)."
        )
    _refuse_unsupported_python()
    if mode in (*_CUDAGRAPH_MODES, *_AUTOTUNE_MODES) and backend == "inductor":
        # torch's reduce-overhead and max-autotune record CUDA graphs; max-autotune(-no-
        # cudagraphs) also times Triton matmul templates against aten's; CPU graphs ignore both
        options = {"cudagraphs": mode in _CUDAGRAPH_MODES, "max_autotune": mode in _AUTOTUNE_MODES}
    if options:
        if backend != "inductor":
            raise RuntimeError(
                "options= configures backend='inductor' only (got backend="
                f"{_backend_name(backend)!r}); configure another backend in the callable you pass."
            )
        backend = inductor_with_options(options)
    ctx = _context(backend, fullgraph=fullgraph, dynamic=dynamic)
    if disable:
        return model
    if isinstance(model, torch.nn.Module):
        warn_if_fsdp(model)
        return OptimizedModule(model, ctx)
    if isinstance(model, type):
        return _compile_class(model, ctx)
    # A function torch.compiler.disable wrapped runs eagerly, as under torch.compile.
    symbolic_vm.note_torch_disabled(model)
    return _wrap(model, ctx)


class _Optimize:
    """``optimize(backend)``: a decorator, or a context manager compiling what is called inside."""

    def __init__(self, ctx: CompileContext) -> None:
        self._ctx = ctx
        self._callback = make_callback(ctx)
        self._previous: list[evalframe.Callback | None] = []

    def __call__(self, fn: F) -> F:
        if isinstance(fn, torch.nn.Module):
            return OptimizedModule(fn, self._ctx)  # type: ignore[return-value]
        if not callable(fn):
            raise TypeError(f"optimize(...) decorates callables, got {type(fn).__name__}")
        return _wrap(fn, self._ctx)  # type: ignore[return-value]

    def __enter__(self) -> None:
        self._previous.append(evalframe.set_callback(self._callback))

    def __exit__(self, *exc: object) -> None:
        evalframe.set_callback(self._previous.pop())


def optimize(
    backend: str | Backend = "inductor", nopython: bool = False, dynamic: bool | None = None
) -> _Optimize:
    """The TorchDynamo README's API: ``@optimize(backend)`` or ``with optimize(backend): ...``."""
    return _Optimize(_context(backend, fullgraph=nopython, dynamic=dynamic))


def disable(fn: Any = None, recursive: bool = True) -> Any:
    """Never compile ``fn`` (and, with recursive=True, anything it calls).

    With recursive=False only ``fn``'s own frame runs uncompiled; functions it calls still compile.
    Usable as ``@disable``, ``disable(fn)`` or ``@disable(recursive=False)``.
    """
    if fn is None:
        return functools.partial(disable, recursive=recursive)
    if not callable(fn):
        raise TypeError(f"disable expects a callable, got {type(fn).__name__}")
    if not recursive:
        code = getattr(inspect.unwrap(fn), "__code__", None)
        if isinstance(code, types.CodeType):
            state.skip_codes.add(code)
        return fn

    # The hook is off for the call and all it starts (C; no Python frame of ours).
    disabled = functools.update_wrapper(evalframe.without_hook(fn), fn)
    marker = getattr(symbolic_vm, "disable_marker", None)
    if marker is not None:
        marker(disabled)
    return disabled


@contextmanager
def _run_only() -> Iterator[None]:
    with evalframe.run_only():
        yield


def run(fn: Any = None) -> Any:
    """Run with what is already compiled and never compile more (quiescence).

    ``run(fn)`` returns a wrapper; ``with run():`` works as a context manager.
    """
    if fn is None:
        return _run_only()

    @functools.wraps(fn)
    def cached_only(*args: Any, **kwargs: Any) -> Any:
        with _run_only():
            return fn(*args, **kwargs)

    return cached_only


def reset() -> None:
    """Forget everything compiled: every code cache, record, timing and installed global.

    Called inside a compiled function (it runs eagerly, at a graph break), it forgets as
    ``torch.compiler.reset()`` does there: the installed globals stay, since the running
    transformed code still calls its graphs and resume functions by those names.
    """
    if state.running_installed_code(sys._getframe(1)):
        _reset_after_torch()
        return
    evalframe.clear_cache()
    state.clear()
    observe.reset()
    vm_reset = getattr(symbolic_vm, "reset", None)
    if vm_reset is not None:
        vm_reset()
    _drop_cuda_graphs()


def _drop_cuda_graphs() -> None:
    """inductor_lite's recorded CUDA graphs (mode="reduce-overhead") and their memory pools go
    with everything else; nothing to drop (or import) where the recorder was never loaded."""
    cudagraphs = sys.modules.get("inductor_lite.cudagraphs")
    if cudagraphs is not None:
        cudagraphs.reset()


def _reset_after_torch() -> None:
    """``torch.compiler.reset()`` was called: recompile everything, as torch does.

    It may run inside a compiled function (eagerly, between graphs), whose transformed code
    still looks up its graphs and resume functions by global name: those globals stay (and
    the VM keeps numbering them on, so no later name reuses theirs).
    """
    evalframe.clear_cache()
    state.clear(keep_installed=True)
    observe.reset()
    _drop_cuda_graphs()


on_torch_reset(_reset_after_torch)


def mark_dynamic(t: torch.Tensor, index: int | list[int] | tuple[int, ...]) -> None:
    """Compile dimension(s) ``index`` of ``t`` as symbolic from the first compile on."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"mark_dynamic expects a tensor, got {type(t).__name__}")
    dims = [index] if isinstance(index, int) else list(index)
    for dim in dims:
        if not -t.dim() <= dim < t.dim():
            raise IndexError(f"mark_dynamic: dim {dim} is out of range for a {t.dim()}-d tensor")
    existing: set[int] = set(getattr(t, "_strata_dynamic_dims", ()))
    existing.update(d % t.dim() for d in dims)
    t._strata_dynamic_dims = existing  # type: ignore[attr-defined]
