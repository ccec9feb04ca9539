"""The backend registry: names -> callables (gm, example_inputs) -> compiled callable."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import torch

from .errors import InvalidBackend

__all__ = ["Backend", "list_backends", "lookup_backend", "register_backend"]

Backend: TypeAlias = Callable[[torch.fx.GraphModule, Sequence[Any]], Callable[..., Any]]

_REGISTRY: dict[str, Backend] = {}


def register_backend(compiler_fn: Backend | None = None, *, name: str | None = None) -> Any:
    """Register a backend under ``name`` (default: the function's name).

    Usable as ``register_backend(fn)``, ``@register_backend`` or ``@register_backend(name="x")``.
    """

    def register(fn: Backend) -> Backend:
        if not callable(fn):
            raise TypeError(f"register_backend expects a callable, got {type(fn).__name__}")
        key = name or getattr(fn, "__name__", None)
        if not key:
            raise ValueError("register_backend: pass name= for a callable without __name__")
        if key in _REGISTRY and _REGISTRY[key] is not fn:
            raise ValueError(f"a backend named {key!r} is already registered")
        _REGISTRY[key] = fn
        return fn

    if compiler_fn is None:
        return register
    return register(compiler_fn)


def list_backends(exclude_tags: Sequence[str] | None = ("debug", "experimental")) -> list[str]:
    """Names of the registered backends, sorted (``exclude_tags`` kept for torch compatibility)."""
    del exclude_tags
    return sorted(_REGISTRY)


def inductor_with_options(options: dict[str, Any]) -> Backend:
    """The inductor backend with ``compile(options=...)`` applied to inductor_lite's config.

    Keys are ``inductor_lite.InductorConfig`` fields (``num_threads``, ``cflags``, ``fallback``,
    ``codegen``, ...); an unknown key raises a RuntimeError naming the valid ones.
    """
    import dataclasses

    import inductor_lite

    valid = {f.name for f in dataclasses.fields(inductor_lite.InductorConfig)}
    unknown = sorted(set(options) - valid)
    if unknown:
        raise RuntimeError(
            f"Unexpected optimization option(s) {', '.join(unknown)} for backend 'inductor'; "
            "valid options are the fields of inductor_lite.InductorConfig: "
            f"{', '.join(sorted(valid))}"
        )
    config = inductor_lite.InductorConfig(**options)

    def inductor_configured(
        gm: torch.fx.GraphModule, example_inputs: Sequence[Any]
    ) -> Callable[..., Any]:
        return inductor_lite.compile_fx(gm, list(example_inputs), config=config)  # type: ignore[no-any-return]

    return inductor_configured


def lookup_backend(backend: str | Backend) -> Backend:
    """The callable for a backend name, or the callable itself."""
    if isinstance(backend, str):
        try:
            return _REGISTRY[backend]
        except KeyError:
            raise InvalidBackend(
                f"Invalid backend: {backend!r}; registered backends: {', '.join(list_backends())}"
            ) from None
    if not callable(backend):
        raise TypeError(
            f"backend must be a name or a callable (gm, example_inputs) -> callable, "
            f"got {type(backend).__name__}"
        )
    return backend


def eager(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    """Runs the captured FX graph as it is (Python calling torch ops)."""
    del example_inputs
    return gm.forward


def aot_eager(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    """aot's joint trace and default partition, with the graphs run op by op."""
    import aot

    return aot.aot_eager(gm, list(example_inputs))


def aot_eager_decomp_partition(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any]
) -> Callable[..., Any]:
    """aot with the core decompositions and the min-cut partitioner, graphs run op by op."""
    import aot

    return aot.aot_eager_decomp_partition(gm, list(example_inputs))


def inductor(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    """inductor_lite: fused C++/OpenMP (CPU) or Triton (CUDA) kernels."""
    import inductor_lite

    return inductor_lite.compile_fx(gm, list(example_inputs))  # type: ignore[no-any-return]


for _backend in (eager, aot_eager, aot_eager_decomp_partition, inductor):
    register_backend(_backend)
