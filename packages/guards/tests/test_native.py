"""The C++ fast path agrees with the pure-Python path (and with ``failures()``) everywhere.

Each test compiles the same GuardSet twice, once on each path, and checks both on the same
frames.  They set the environment variable themselves around each compile, so they run once (this
module overrides conftest's two-path ``check_path`` fixture).
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import threading
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

import guards
import guards.native as gn
from guards import AttrSource, CompiledGuards, GuardSet, LocalSource, compile_guards
from guards.native import PURE_PYTHON_ENV, native_module

Build = Callable[[GuardSet], None]


@pytest.fixture(autouse=True)
def check_path() -> str:
    """Overrides conftest's two-path fixture: these tests compile both paths themselves."""
    return "both"


@contextlib.contextmanager
def _env(pure: bool) -> Iterator[None]:
    old = os.environ.get(PURE_PYTHON_ENV)
    if pure:
        os.environ[PURE_PYTHON_ENV] = "1"
    else:
        os.environ.pop(PURE_PYTHON_ENV, None)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(PURE_PYTHON_ENV, None)
        else:
            os.environ[PURE_PYTHON_ENV] = old


def both(build: Build) -> tuple[CompiledGuards, CompiledGuards]:
    """(C++ path, Python path) compiled from the same guards; skips if the C++ one is absent."""
    with _env(pure=False):
        if native_module() is None:
            pytest.skip("guards' C++ extension is not built")
        gs = GuardSet()
        build(gs)
        fast = compile_guards(gs, {})
    with _env(pure=True):
        slow = compile_guards(gs, {})
    assert "___tensor_check" not in slow.source_code
    return fast, slow


def agree(fast: CompiledGuards, slow: CompiledGuards, f_locals: dict[str, object]) -> bool:
    """Both paths and failures() give one verdict on ``f_locals``; returns it."""
    a, b = fast(f_locals), slow(f_locals)
    why = slow.failures(f_locals)
    assert a == b == (why == []), (a, b, why, fast.source_code)
    return a


class Sub(torch.Tensor):
    pass


class Sub2(torch.Tensor):
    pass


# -- tensors ----------------------------------------------------------------------------------

DTYPES = [torch.float32, torch.float64, torch.int64, torch.complex64]


def _make(kind: str, shape: tuple[int, ...], dtype: torch.dtype, transpose: bool) -> torch.Tensor:
    base = torch.zeros(shape, dtype=dtype)
    real = torch.zeros(shape)
    if transpose and base.dim() >= 2:
        base = base.transpose(0, 1)
    if kind == "plain":
        return base
    if kind == "requires_grad":
        return (real.transpose(0, 1) if transpose and real.dim() >= 2 else real).requires_grad_()
    if kind == "meta":
        return base.to("meta")
    if kind == "subclass":
        return base.as_subclass(Sub)
    if kind == "subclass2":
        return base.as_subclass(Sub2)
    if kind == "parameter":
        return torch.nn.Parameter(real)
    if kind == "conj":
        return base.to(torch.complex64).conj()
    if kind == "neg":
        return torch._neg_view(real)
    if kind == "sparse":
        return base.contiguous().to_sparse()
    if kind == "inference":
        with torch.inference_mode():
            return torch.zeros(shape, dtype=dtype)
    if kind == "strided":
        n = max(base.numel(), 1)
        storage = torch.zeros(4 * n, dtype=dtype)
        return storage.as_strided(tuple(base.size()), tuple(2 * s for s in base.stride()))
    raise AssertionError(kind)


KINDS = [
    "plain",
    "requires_grad",
    "meta",
    "subclass",
    "subclass2",
    "parameter",
    "conj",
    "neg",
    "sparse",
    "inference",
    "strided",
]
shapes = st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple)
tensors = st.builds(_make, st.sampled_from(KINDS), shapes, st.sampled_from(DTYPES), st.booleans())

IN_PLACE = ["none", "data_dtype", "data_shape", "t_", "requires_grad_", "resize_", "as_strided_"]


def _mutate(t: torch.Tensor, how: str) -> None:
    """Change ``t``'s metadata in place (the same Python object afterwards), where torch allows
    it (inference tensors, views and some layouts refuse some of these: left unchanged)."""
    with torch.no_grad(), contextlib.suppress(RuntimeError):
        if how == "data_dtype":
            t.data = (t.data.real if t.is_complex() else t.data).to(torch.float16)
        elif how == "data_shape":
            t.data = torch.zeros(5, 1, dtype=t.dtype, device=t.device)
        elif how == "t_" and t.dim() <= 2 and not t.is_sparse:
            t.t_()
        elif how == "requires_grad_" and t.is_floating_point() and t.is_leaf:
            t.requires_grad_(not t.requires_grad)
        elif how == "resize_" and t.layout == torch.strided and not t.is_inference():
            t.resize_(7)
        elif how == "as_strided_" and t.layout == torch.strided and t.numel() > 1:
            t.as_strided_((1,), (1,))


@settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    base=tensors,
    others=st.lists(tensors, max_size=4),
    dyn=st.lists(st.integers(-3, 2), max_size=2),
    how=st.sampled_from(IN_PLACE),
)
def test_tensor_match_paths_agree_on_random_tensors(base, others, dyn, how) -> None:  # type: ignore[no-untyped-def]
    dyn = [d for d in dyn if -base.dim() <= d < base.dim()]
    fast, slow = both(lambda gs: gs.TENSOR_MATCH(LocalSource("x"), base, dynamic_dims=dyn))
    assert agree(fast, slow, {"x": base})
    for other in others:
        agree(fast, slow, {"x": other})
    agree(fast, slow, {"x": 3})
    agree(fast, slow, {})
    _mutate(base, how)
    agree(fast, slow, {"x": base})


def test_each_tensor_property_change_fails_on_both_paths() -> None:
    x = torch.randn(4, 3)
    fast, slow = both(lambda gs: gs.TENSOR_MATCH(LocalSource("x"), x, dynamic_dims=[0]))
    assert agree(fast, slow, {"x": torch.randn(6, 3)})  # dynamic dim, size >= 2
    changed = [
        torch.randn(1, 3),  # dynamic dim below 2
        torch.randn(4, 2),
        torch.randn(3, 4).t(),
        x.double(),
        x.to("meta"),
        x.detach().requires_grad_(),
        x.as_subclass(Sub),
        torch.nn.Parameter(x.clone()),
        torch._neg_view(x),
        x.to_sparse(),
        torch.randn(4, 3, dtype=torch.complex64).conj(),
        torch.zeros(8, 6)[::2, ::2],
    ]
    with torch.inference_mode():
        changed.append(torch.randn(4, 3))
    for value in changed:
        assert not agree(fast, slow, {"x": value}), value


def test_metadata_is_read_live_behind_the_same_object() -> None:
    p = torch.nn.Parameter(torch.randn(3, 2))
    fast, slow = both(lambda gs: gs.TENSOR_MATCH(LocalSource("p"), p))
    assert agree(fast, slow, {"p": p})
    with torch.no_grad():
        p.t_()
    assert not agree(fast, slow, {"p": p})
    with torch.no_grad():
        p.t_()
    assert agree(fast, slow, {"p": p})
    p.data = torch.randn(3, 2, dtype=torch.float64)
    assert not agree(fast, slow, {"p": p})
    p.data = torch.randn(3, 2)
    assert agree(fast, slow, {"p": p})
    p.requires_grad_(False)
    assert not agree(fast, slow, {"p": p})


def test_tensor_with_its_own_torch_function_is_checked_without_running_it() -> None:
    calls: list[object] = []

    class Logged(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            calls.append(func)
            return super().__torch_function__(func, types, args, kwargs or {})

    x = torch.zeros(2, 3).as_subclass(Logged)
    fast, slow = both(lambda gs: gs.TENSOR_MATCH(LocalSource("x"), x, dynamic_dims=[0]))
    assert "___tensor_check" in fast.source_code  # the C++ check reads the TensorImpl
    assert "___no_torch_function" in slow.source_code  # the Python path reads it so too
    assert agree(fast, slow, {"x": x})
    assert agree(fast, slow, {"x": torch.zeros(5, 3).as_subclass(Logged)})
    assert not agree(fast, slow, {"x": torch.zeros(2, 4).as_subclass(Logged)})
    assert calls == []  # no check, explanation or recorded spec ran the override


# -- thread-local dispatch sets and global state ----------------------------------------------


class NoopMode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        return func(*args, **(kwargs or {}))


class NoopFunctionMode(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


@contextlib.contextmanager
def _deterministic(warn_only: bool) -> Iterator[None]:
    old, old_warn = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    torch.use_deterministic_algorithms(True, warn_only=warn_only)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(old, warn_only=old_warn)


def _python_dispatcher() -> contextlib.AbstractContextManager[None]:
    from torch._dispatch.python import enable_python_dispatcher

    return enable_python_dispatcher()  # type: ignore[no-any-return]


CONTEXTS: dict[str, Callable[[], contextlib.AbstractContextManager[Any]]] = {
    "none": contextlib.nullcontext,
    "no_grad": torch.no_grad,
    "inference_mode": torch.inference_mode,
    "autocast_cpu": lambda: torch.autocast("cpu"),
    "autocast_cpu_f16": lambda: torch.autocast("cpu", dtype=torch.float16),
    "python_dispatcher": _python_dispatcher,
    "dispatch_mode": NoopMode,
    "function_mode": NoopFunctionMode,
    "default_dtype_f64": lambda: _default_dtype(torch.float64),
    "deterministic": lambda: _deterministic(False),
    "deterministic_warn_only": lambda: _deterministic(True),
}


@pytest.mark.parametrize("captured_in", sorted(CONTEXTS))
def test_dispatch_tls_and_global_state_agree_across_contexts(captured_in: str) -> None:
    x = torch.randn(3)

    def build(gs: GuardSet) -> None:
        gs.TENSOR_MATCH(LocalSource("x"), x)
        gs.GLOBAL_STATE()

    with CONTEXTS[captured_in]():
        fast, slow = both(build)
        tls_only = both(lambda gs: gs.TENSOR_MATCH(LocalSource("x"), x))
        state_only = both(lambda gs: gs.GLOBAL_STATE())
        assert agree(fast, slow, {"x": x})
    for checked_in in sorted(CONTEXTS):
        with CONTEXTS[checked_in]():
            verdict = agree(fast, slow, {"x": x})
            agree(*tls_only, {"x": x})
            agree(*state_only, {})
        if checked_in == captured_in:
            assert verdict, checked_in


def test_each_global_state_change_fails_on_both_paths() -> None:
    fast, slow = both(lambda gs: gs.GLOBAL_STATE())
    assert agree(fast, slow, {})
    for name, ctx in CONTEXTS.items():
        if name in ("none", "python_dispatcher"):
            continue  # not global state (the python dispatcher is a DISPATCH_TLS matter)
        with ctx():
            assert not agree(fast, slow, {}), name


# -- MODULE_PARAMS ----------------------------------------------------------------------------


def _net() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Sequential(torch.nn.Linear(4, 2))
    )


MODULE_CHANGES = [
    "none",
    "replace_param",
    "data_dtype",
    "data_shape",
    "t_",
    "requires_grad_",
    "replace_submodule",
    "param_to_none",
    "delete_param",
    "other_module",
    "eval",
]


def _change_module(model: torch.nn.Module, how: str, which: int) -> torch.nn.Module:
    """Apply change ``how`` to ``model`` (or return another module); a change that an earlier
    one made impossible (the parameter is gone) leaves the module as it is."""
    inner = model[0] if which == 0 else model[2][0]
    with torch.no_grad(), contextlib.suppress(AttributeError):
        if how == "replace_param":
            inner.weight = torch.nn.Parameter(inner.weight.detach().clone())
        elif how == "data_dtype":
            inner.bias.data = inner.bias.data.double()
        elif how == "data_shape":
            inner.bias.data = torch.zeros(9)
        elif how == "t_":
            inner.weight.t_()
        elif how == "requires_grad_":
            inner.weight.requires_grad_(False)
        elif how == "replace_submodule":
            model[2] = torch.nn.Sequential(torch.nn.Linear(4, 2))
        elif how == "param_to_none":
            inner.bias = None
        elif how == "delete_param":
            del inner.weight
        elif how == "other_module":
            return _net()
        elif how == "eval":
            model.eval()  # not a parameter property: still a hit
    return model


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    changes=st.lists(st.tuples(st.sampled_from(MODULE_CHANGES), st.integers(0, 1)), max_size=3),
    subset=st.booleans(),
)
def test_module_params_paths_agree_on_random_module_changes(changes, subset) -> None:  # type: ignore[no-untyped-def]
    model = _net()
    names = [n for n, _ in model.named_parameters()]
    if subset:
        names = names[::2]
    fast, slow = both(lambda gs: gs.MODULE_PARAMS(LocalSource("self"), model, names))
    assert "___module_params_check" in fast.source_code
    assert agree(fast, slow, {"self": model})
    current = model
    for how, which in changes:
        current = _change_module(current, how, which)
        agree(fast, slow, {"self": current})
    agree(fast, slow, {"self": None})
    agree(fast, slow, {"self": object()})


def _guard_whole(model: torch.nn.Module) -> Build:
    names = [n for n, _ in model.named_parameters()]
    return lambda gs: gs.MODULE_PARAMS(LocalSource("self"), model, names)


def test_module_params_fails_once_the_module_is_collected() -> None:
    fast, slow = both(_guard_whole(_net()))  # nothing else keeps that module alive
    other = _net()
    assert not agree(fast, slow, {"self": other})
    assert not agree(fast, slow, {"self": None})  # a dead weakref reads None


# -- loading ----------------------------------------------------------------------------------


def test_env_var_forces_the_python_path(monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.randn(2)
    monkeypatch.setenv(PURE_PYTHON_ENV, "1")
    assert native_module() is None
    gs = GuardSet()
    gs.TENSOR_MATCH(LocalSource("x"), x)
    code = compile_guards(gs, {}).source_code
    assert "___tensor_check" not in code and "___dispatch_keys" in code


def test_missing_extension_falls_back_with_one_debug_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv(PURE_PYTHON_ENV, raising=False)
    monkeypatch.setenv("STRATA_GUARDS_BUILD", "0")  # and no build at first use
    monkeypatch.setitem(sys.modules, "guards._tensor_guards", None)  # import fails
    monkeypatch.delattr(guards, "_tensor_guards", raising=False)
    monkeypatch.setattr(gn, "_loaded", [])
    with caplog.at_level(logging.DEBUG, logger="strata.guards"):
        with pytest.warns(RuntimeWarning, match="--no-build-isolation") as said:
            assert native_module() is None
            assert native_module() is None  # remembered: said once
    assert len([w for w in said if "C++ fast path" in str(w.message)]) == 1
    lines = [r for r in caplog.records if "C++ fast path unavailable" in r.getMessage()]
    assert len(lines) == 1
    x = torch.randn(2)
    gs = GuardSet()
    gs.TENSOR_MATCH(LocalSource("x"), x)
    cg = compile_guards(gs, {})
    assert "___tensor_check" not in cg.source_code
    assert cg({"x": x}) and not cg({"x": torch.randn(3)})


def test_extension_that_fails_its_self_test_is_not_used(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, native: Any
) -> None:
    monkeypatch.delenv(PURE_PYTHON_ENV, raising=False)
    monkeypatch.setenv("STRATA_GUARDS_BUILD", "0")  # and no build at first use
    monkeypatch.setattr(native, "impl_address", lambda t: 0)
    monkeypatch.setattr(gn, "_loaded", [])
    with caplog.at_level(logging.DEBUG, logger="strata.guards"):
        assert native_module() is None
    assert any("C++ fast path disabled" in r.getMessage() for r in caplog.records)


def test_installed_extension_failing_its_self_test_gives_way_to_the_build_at_first_use(
    monkeypatch: pytest.MonkeyPatch, native: Any
) -> None:
    # An in-place build left from older sources fails the self-test; the build at first use
    # (keyed by torch and the sources' digest) is tried before falling back to Python.
    stale = types.ModuleType("guards._tensor_guards")
    stale.impl_address = lambda t: 0  # type: ignore[attr-defined]
    monkeypatch.delenv(PURE_PYTHON_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "guards._tensor_guards", stale)
    monkeypatch.setattr(guards, "_tensor_guards", stale, raising=False)
    monkeypatch.setattr(gn, "build_extension", lambda: native)
    monkeypatch.setattr(gn, "_loaded", [])
    assert native_module() is native
    monkeypatch.setattr(gn, "build_extension", lambda: stale)
    monkeypatch.setattr(gn, "_loaded", [])
    assert native_module() is None


def test_a_build_from_other_sources_fails_the_self_test(native: Any) -> None:
    # A build left from older sources passes every behavioural check yet may lack what the
    # Python side uses (StateTree, say): its stamped source digest gives it away.
    assert gn._self_test(native) is None  # the build in use carries these sources' digest
    stale = types.ModuleType("guards._tensor_guards")
    for name in ("impl_address", "TensorCheck", "dispatch_tls_raw"):
        setattr(stale, name, getattr(native, name))
    stale.source_digest = "d0"  # type: ignore[attr-defined]
    assert "other sources" in (gn._self_test(stale) or "")
    del stale.source_digest  # a build from before builds were stamped
    assert "other sources" in (gn._self_test(stale) or "")


def test_native_checks_reject_bad_arguments(native: Any) -> None:
    x = torch.randn(2)
    keys = torch._C._dispatch_keys(x).raw_repr()
    with pytest.raises(TypeError):
        native.TensorCheck(int, x.dtype, x.device, False, keys, (2,), (1,), (-1,))
    with pytest.raises(ValueError):
        native.TensorCheck(torch.Tensor, x.dtype, x.device, False, keys, (2,), (1, 1), (-1,))
    with pytest.raises(ValueError):
        native.TensorCheck(torch.Tensor, x.dtype, x.device, False, keys, (2,), (1,), (5,))
    check = native.TensorCheck(torch.Tensor, x.dtype, x.device, False, keys, (2,), (1,), (-1,))
    assert check(x) is True
    with pytest.raises(TypeError):
        check()
    with pytest.raises(TypeError):
        check(x, x)


# -- tensor subclasses with their own dispatch, threads ---------------------------------------


class Wrapper(torch.Tensor):
    """A wrapper subclass (Python dispatch key, metadata of its own, no storage)."""

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> Wrapper:
        return torch.Tensor._make_wrapper_subclass(  # type: ignore[attr-defined,no-any-return]
            cls, inner.size(), strides=inner.stride(), dtype=inner.dtype, device=inner.device
        )

    def __init__(self, inner: torch.Tensor) -> None:
        self.inner = inner

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        unwrapped = [a.inner if isinstance(a, Wrapper) else a for a in args]
        return func(*unwrapped, **(kwargs or {}))


def test_wrapper_subclass_with_torch_dispatch_agrees() -> None:
    w = Wrapper(torch.randn(3, 2))
    fast, slow = both(lambda gs: gs.TENSOR_MATCH(LocalSource("x"), w, dynamic_dims=[0]))
    assert "___tensor_check" in fast.source_code
    assert agree(fast, slow, {"x": w})
    assert agree(fast, slow, {"x": Wrapper(torch.randn(5, 2))})
    assert not agree(fast, slow, {"x": Wrapper(torch.randn(3, 2).t().contiguous().t())})
    assert not agree(fast, slow, {"x": Wrapper(torch.randn(3, 2, dtype=torch.float64))})
    assert not agree(fast, slow, {"x": torch.randn(3, 2)})


def test_dispatch_tls_is_read_on_the_calling_thread() -> None:
    x = torch.randn(3)
    fast, slow = both(lambda gs: gs.TENSOR_MATCH(LocalSource("x"), x))
    results: dict[str, bool] = {}

    def run() -> None:
        results["plain"] = agree(fast, slow, {"x": x})
        with torch.inference_mode():
            results["inference"] = agree(fast, slow, {"x": x})
        with torch._C._DisableTorchDispatch():  # type: ignore[attr-defined]
            results["no_python_dispatch"] = agree(fast, slow, {"x": x})

    with torch.inference_mode():  # only this thread's TLS changes
        thread = threading.Thread(target=run)
        thread.start()
        thread.join()
        assert not agree(fast, slow, {"x": x})
    assert results["plain"] is True
    assert results["inference"] is False
    assert results["no_python_dispatch"] is False


def test_native_checks_keep_no_references() -> None:
    model = _net()
    x = torch.randn(3)
    names = [n for n, _ in model.named_parameters()]
    fast, _ = both(lambda gs: (gs.TENSOR_MATCH(LocalSource("x"), x), gs.GLOBAL_STATE()))
    fast_m, _ = both(lambda gs: gs.MODULE_PARAMS(LocalSource("self"), model, names))
    watched = [x, model, model[0], model[0]._parameters["weight"], model._modules]
    before = [sys.getrefcount(o) for o in watched]
    for _ in range(1000):
        assert fast({"x": x})
        assert fast_m({"self": model})
        assert not fast_m({"self": _net()})
    assert [sys.getrefcount(o) for o in watched] == before
    saved, other = model[2], torch.nn.Sequential(torch.nn.Linear(4, 2))
    model[2] = other  # a miss deep in the steps, after references were taken
    watched = [model, saved, other, model._modules]
    before = [sys.getrefcount(o) for o in watched]
    for _ in range(1000):
        assert not fast_m({"self": model})
    assert [sys.getrefcount(o) for o in watched] == before


# -- MODULE_CALLS -----------------------------------------------------------------------------


class _Double(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


CALL_CHANGES = [
    "none",
    "forward_hook",
    "pre_hook",
    "backward_hook",
    "remove_hooks",
    "shadow_forward",
    "unshadow_forward",
    "class_change",
    "class_back",
    "delete",
    "replace_same_class",
    "patch_class_forward",
]


def _change_calls(seq: torch.nn.Sequential, how: str, which: int) -> None:
    key = str(which)
    m = seq._modules.get(key)
    if m is None:
        return
    if how == "forward_hook":
        m.register_forward_hook(lambda *a: None)
    elif how == "pre_hook":
        m.register_forward_pre_hook(lambda *a: None)
    elif how == "backward_hook":
        m.register_full_backward_hook(lambda *a: None)
    elif how == "remove_hooks":
        for name in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks"):
            getattr(m, name).clear()
    elif how == "shadow_forward":
        m.forward = lambda x: x
    elif how == "unshadow_forward":
        m.__dict__.pop("forward", None)
    elif how == "class_change":
        m.__class__ = _Double if type(m) is torch.nn.ReLU else torch.nn.ReLU
    elif how == "class_back":
        m.__class__ = torch.nn.ReLU if which == 0 else _Double
    elif how == "delete":
        del seq._modules[key]
    elif how == "replace_same_class":
        seq._modules[key] = type(m)()


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    changes=st.lists(st.tuples(st.sampled_from(CALL_CHANGES), st.integers(0, 2)), max_size=4),
    own_forward=st.booleans(),
)
def test_module_calls_paths_agree_on_random_changes(changes, own_forward) -> None:  # type: ignore[no-untyped-def]
    seq = torch.nn.Sequential(torch.nn.ReLU(), _Double(), _Double())
    source = AttrSource(LocalSource("seq"), "_modules")
    calls = [(k, type(m), type(m).forward) for k, m in seq._modules.items()]
    if own_forward:  # the trace ran an instance attribute for module '1'
        seq[1].forward = lambda x: x
        calls[1] = ("1", _Double, None)
    fast, slow = both(lambda gs: gs.MODULE_CALLS(source, calls))
    assert "___module_calls_check" in fast.source_code
    assert agree(fast, slow, {"seq": seq})
    original = _Double.forward
    try:
        for how, which in changes:
            if how == "patch_class_forward":
                _Double.forward = lambda self, x: x  # type: ignore[method-assign]
            else:
                _change_calls(seq, how, which)
            agree(fast, slow, {"seq": seq})
    finally:
        _Double.forward = original  # type: ignore[method-assign]
    agree(fast, slow, {"seq": seq})
    agree(fast, slow, {"seq": torch.nn.Linear(1, 1)})
    agree(fast, slow, {})


def test_module_calls_check_keeps_no_references() -> None:
    seq = torch.nn.Sequential(torch.nn.ReLU(), _Double())
    source = AttrSource(LocalSource("seq"), "_modules")
    calls = [(k, type(m), type(m).forward) for k, m in seq._modules.items()]
    fast, _ = both(lambda gs: gs.MODULE_CALLS(source, calls))
    watched = [seq, seq[0], seq[1], seq[1].__dict__, seq._modules, _Double.forward]
    before = [sys.getrefcount(o) for o in watched]
    for _ in range(1000):
        assert fast({"seq": seq})
    handle = seq[1].register_forward_hook(lambda *a: None)
    for _ in range(1000):
        assert not fast({"seq": seq})  # a miss after the module and its dict were read
    handle.remove()
    assert [sys.getrefcount(o) for o in watched] == before


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensor_paths_agree() -> None:
    x = torch.randn(3, 2, device="cuda")
    fast, slow = both(lambda gs: gs.TENSOR_MATCH(LocalSource("x"), x))
    assert agree(fast, slow, {"x": x})
    assert agree(fast, slow, {"x": torch.randn(3, 2, device="cuda")})
    for other in (x.cpu(), x.to("meta"), x.double(), x.t().contiguous().t(), x[:, :1]):
        assert not agree(fast, slow, {"x": other})
    with torch.autocast("cuda"):
        assert not agree(fast, slow, {"x": x})


def test_a_missing_extension_is_built_at_first_use_and_cached(tmp_path: Path) -> None:
    """What a plain (isolated) `pip install` gives: no extension, its sources shipped."""
    script = (
        "import sys, warnings\n"
        "sys.modules['guards._tensor_guards'] = None\n"  # as if not built at install
        "warnings.simplefilter('error')\n"  # the fallback warning would fail this run
        "from guards.native import native_module\n"
        "mod = native_module()\n"
        "assert mod is not None, 'no extension'\n"
        "print('BUILT', mod.__file__)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in {PURE_PYTHON_ENV, "STRATA_GUARDS_BUILD"}}
    env["STRATA_CACHE_DIR"] = str(tmp_path)
    first = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=900
    )
    assert first.returncode == 0, first.stdout + first.stderr
    assert "building the C++ fast path" in first.stderr
    assert str(tmp_path) in first.stdout
    again = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=900
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert "building the C++ fast path" not in again.stderr  # cached
