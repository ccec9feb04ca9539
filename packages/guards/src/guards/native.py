"""The optional C++ fast path (``guards._tensor_guards``) and the objects built from guards.

The extension is compiled at install time against the installed torch (packages/guards/setup.py)
or, when the install could not (an isolated build), at first use (guards/build.py, cached).
When it is missing and cannot be built (one warning says how to get it), fails to import, or
fails its self-test (built from other sources than those beside it, a TensorImpl read at
another address than ``tensor._cdata``, a check that rejects the tensor it was built from), it is
built again at first use; failing that, the generated check stays on the pure-Python path; one
DEBUG line on ``strata.guards`` says why.
``STRATA_GUARDS_PURE_PYTHON=1`` forces the Python path; it is read each time a check is
compiled, so tests can compile the same guards both ways.

Both paths check the same properties, as the TensorImpl holds them: the C++ check reads the
TensorImpl directly, and the Python path reads a tensor whose class overrides
``__torch_function__`` under ``torch._C.DisableTorchFunctionSubclass`` (a guard never runs the
user's override: eager runs it only for the user's own operations).
"""

from __future__ import annotations

import logging
import os
import warnings
import weakref
from types import ModuleType
from typing import Any

import torch

from guards.build import build_extension, source_digest, sources
from guards.global_state import GlobalStateSnapshot
from guards.tensor_spec import StrideRel, TensorSpec

__all__ = [
    "PURE_PYTHON_ENV",
    "native_module",
    "tensor_check",
    "dispatch_tls_check",
    "global_state_check",
    "module_params_check",
]

log = logging.getLogger("strata.guards")

#: Set to "1" to compile every check on the pure-Python path.
PURE_PYTHON_ENV = "STRATA_GUARDS_PURE_PYTHON"

_loaded: list[ModuleType | None] = []  # empty until the first load attempt


def _self_test(mod: Any) -> str | None:
    """None when the extension reads tensors as torch does, else what went wrong."""
    cpp = sources()
    if cpp and getattr(mod, "source_digest", None) != source_digest(cpp):
        # A build left from older sources (an in-place build, say) can pass every check below
        # and still lack what the Python side uses (state trees).
        return "it was built from other sources than the ones beside it"
    # No random tensor: drawing one would advance the user's seeded global RNG on first compile.
    samples = [torch.ones(3, 4), torch.zeros(2, 5).t(), torch.nn.Parameter(torch.ones(2))]
    for t in samples:
        if mod.impl_address(t) != t._cdata:
            return "it reads a TensorImpl at another address than tensor._cdata"
        keys = torch._C._dispatch_keys(t).raw_repr()
        check = mod.TensorCheck(
            type(t),
            t.dtype,
            t.device,
            t.requires_grad,
            keys,
            tuple(t.size()),
            tuple(t.stride()),
            (-1,) * t.dim(),
        )
        if not check(t) or check(t.unsqueeze(0)):
            return "its TensorCheck disagrees with the tensor it was built from"
    inc = torch._C._dispatch_tls_local_include_set().raw_repr()
    exc = torch._C._dispatch_tls_local_exclude_set().raw_repr()
    if tuple(mod.dispatch_tls_raw()) != (inc, exc):
        return "it reads other dispatch TLS sets than torch._C"
    return None


def _load() -> ModuleType | None:
    try:
        from guards import _tensor_guards as mod  # type: ignore[attr-defined]
    except Exception as exc:  # ImportError, or an undefined symbol from another torch
        try:
            # Not built at install (an isolated build has no torch): build it now, once.
            mod = build_extension()
        except Exception as build_error:
            _say_unavailable(exc, build_error)
            return None
        return _tested(mod)
    installed = _tested(mod)
    if installed is not None:
        return installed
    # The installed build disagrees with this torch or with the sources (an in-place build left
    # from older sources, say): the build at first use is keyed by both, so try it once.
    try:
        return _tested(build_extension())
    except Exception as build_error:
        log.debug("guards: no C++ fast path: the build at first use failed (%s)", build_error)
        return None


def _tested(mod: Any) -> ModuleType | None:
    """``mod`` when it passes the self-test, else None (said in the debug log)."""
    try:
        problem = _self_test(mod)
    except Exception as exc:
        problem = f"its self-test raised {type(exc).__name__}: {exc}"
    if problem is not None:
        log.debug("guards: C++ fast path disabled: %s; using the pure-Python check", problem)
        return None
    assert isinstance(mod, ModuleType)
    return mod


def _say_unavailable(exc: BaseException, build_error: BaseException) -> None:
    log.debug("guards: C++ fast path unavailable (%s); using the pure-Python check", exc)
    # Said once, loudly: every guard check of a module is ~15x slower without it.
    warnings.warn(
        f"guards: the C++ fast path (guards._tensor_guards) is not available ({exc}) and "
        f"could not be built at first use ({type(build_error).__name__}: {build_error}); "
        "guard checks run in pure Python, correct but ~15x slower per call for a module. "
        "Reinstall with `pip install --no-build-isolation <path to packages/guards>` (needs a "
        "C++ compiler), or make a compiler and ninja available for the build at first use. "
        "Set STRATA_GUARDS_PURE_PYTHON=1 to choose the Python path and silence this.",
        RuntimeWarning,
        stacklevel=3,
    )


def native_module() -> ModuleType | None:
    """The loaded extension, or None (not built, failed its self-test, or forced off by env)."""
    if os.environ.get(PURE_PYTHON_ENV) == "1":
        return None
    if not _loaded:
        _loaded.append(_load())
    return _loaded[0]


def tensor_check(mod: Any, spec: TensorSpec) -> object | None:
    """A ``TensorCheck`` for ``spec``, or None when the tensor must stay on the Python path."""
    sizes = tuple(-1 if s is None else s for s in spec.sizes)
    if spec.strides is None:
        strides, rel = None, (-1,) * spec.ndim
    else:
        strides = tuple(0 if isinstance(x, StrideRel) else x for x in spec.strides)
        rel = tuple(x.dim if isinstance(x, StrideRel) else -1 for x in spec.strides)
    # The device's index as Tensor.get_device() gives it: -1 on CPU/meta, checked when >= 0.
    device = (
        torch.device(spec.device.type, spec.device_index)
        if spec.device_index >= 0
        else torch.device(spec.device.type)
    )
    check: object = mod.TensorCheck(
        spec.cls,
        spec.dtype,
        device,
        spec.requires_grad,
        spec.dispatch_keys_raw,
        sizes,
        strides,
        rel,
    )
    return check


def dispatch_tls_check(mod: Any, include_raw: int, exclude_raw: int) -> object:
    """A ``DispatchTlsCheck``: a no-argument callable, True while both sets are as captured."""
    check: object = mod.DispatchTlsCheck(include_raw, exclude_raw)
    return check


def global_state_check(mod: Any, s: GlobalStateSnapshot) -> object:
    """A ``GlobalStateCheck`` of grad/inference mode, default dtype, deterministic flags (warn
    only when deterministic was on at capture) and the two mode-stack lengths."""
    check: object = mod.GlobalStateCheck(
        s.grad_enabled,
        s.inference_mode,
        s.default_dtype,
        s.deterministic,
        s.deterministic_warn_only,
        s.deterministic,
        s.torch_function_modes,
        s.torch_dispatch_modes,
    )
    return check


def module_params_check(
    mod: Any,
    root_ref: weakref.ref[Any],
    steps: list[tuple[int, str, str, weakref.ref[Any], TensorSpec | None]],
    identity: bool = True,
) -> object | None:
    """A ``ModuleParamsCheck`` over ``(parent, dict_name, key, ref, spec)`` steps, or None when
    a parameter must stay on the Python path. ``identity=False``: the root and the objects on
    the paths are not compared with the references (those only pick the classes whose
    instance dicts the check may read directly)."""
    native_steps: list[tuple[int, str, str, weakref.ref[Any], object | None]] = []
    for parent, dict_name, key, ref, spec in steps:
        check = None if spec is None else tensor_check(mod, spec)
        if spec is not None and check is None:
            return None
        native_steps.append((parent, dict_name, key, ref, check))
    out: object = mod.ModuleParamsCheck(root_ref, tuple(native_steps), identity)
    return out
