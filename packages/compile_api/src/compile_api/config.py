"""compile_api's one configuration object, with an environment-variable override per field."""

from __future__ import annotations

import os
from collections.abc import Callable

import attrs

__all__ = ["Config", "config"]


def _env_bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError(f"expected a boolean (1/0/true/false), got {value!r}")


def _env_str(value: str) -> str:
    return value


# field name -> (environment variable, parser)
_ENV: dict[str, tuple[str, Callable[[str], object]]] = {
    "cache_size_limit": ("STRATA_CACHE_SIZE_LIMIT", int),
    "suppress_errors": ("STRATA_SUPPRESS_ERRORS", _env_bool),
    "verbose": ("STRATA_VERBOSE", _env_bool),
    "debug": ("STRATA_DEBUG", _env_bool),
    "debug_function": ("STRATA_DEBUG_FUNCTION", _env_str),
    "automatic_dynamic_shapes": ("STRATA_AUTOMATIC_DYNAMIC_SHAPES", _env_bool),
    "assume_static_by_default": ("STRATA_ASSUME_STATIC_BY_DEFAULT", _env_bool),
    "optimize_ddp": ("STRATA_OPTIMIZE_DDP", _env_bool),
    "trace_dir": ("STRATA_TRACE", _env_str),
    "compile_debug": ("STRATA_COMPILE_DEBUG", _env_bool),
    "capture_scalar_outputs": ("STRATA_CAPTURE_SCALAR_OUTPUTS", _env_bool),
    "capture_dynamic_output_shape_ops": ("STRATA_CAPTURE_DYNAMIC_OUTPUT_SHAPE_OPS", _env_bool),
    "inline_inbuilt_nn_modules": ("STRATA_INLINE_INBUILT_NN_MODULES", _env_bool),
}


@attrs.define
class Config:
    """Settings that change how compile_api compiles; read at each compile, not at each call.

    Every field can be set from the environment when compile_api is imported, e.g.
    ``STRATA_CACHE_SIZE_LIMIT=16`` or ``STRATA_SUPPRESS_ERRORS=0``.
    """

    cache_size_limit: int = 8
    """Compiled entries per code object; past it the code runs eagerly (with one warning)."""
    suppress_errors: bool = True
    """On an internal or backend error, warn and run eagerly instead of raising."""
    verbose: bool = False
    """Internal errors carry their full traceback in the warning."""
    debug: bool = False
    """Print each FX graph, the original and modified bytecode and the guards as frames compile."""
    debug_function: str = ""
    """When set, only functions of this name are compiled (STRATA_DEBUG_FUNCTION)."""
    automatic_dynamic_shapes: bool = True
    """With dynamic=None, a size that changes recompiles that dimension as symbolic."""
    assume_static_by_default: bool = True
    """With dynamic=None, the first compile specialises sizes (torch's setting of this name);
    False compiles as dynamic=True from the first call."""
    optimize_ddp: bool = True
    """Split graphs of DistributedDataParallel modules at bucket boundaries."""
    trace_dir: str = ""
    """Write the structured trace tlparse reads into this directory (also ``TORCH_TRACE``)."""
    compile_debug: bool = False
    """Dump each compiled frame's graphs, code, guards and bytecode to a folder (also
    ``TORCH_COMPILE_DEBUG=1``; the folder's parent is ``STRATA_COMPILE_DEBUG_DIR``, else the
    current directory)."""

    capture_scalar_outputs: bool = False
    """``Tensor.item()`` joins the graph as an unbacked symbol instead of breaking (torch's
    setting of this name and default; ``fullgraph=True`` captures it anyway, as torch 2.13)."""
    capture_dynamic_output_shape_ops: bool = False
    """Ops whose output sizes depend on tensor data (``nonzero``, ``x[mask]``) join the graph
    with unbacked sizes instead of breaking (torch's setting of this name and default;
    ``fullgraph=True`` captures them anyway, as torch 2.13)."""

    inline_inbuilt_nn_modules: bool = True
    """torch's setting of this name: a module passed to a compiled frame (``self`` of a layer's
    ``forward``) is guarded by its class, the values the trace read from it and its
    parameters' metadata, not its identity, so the layers of a stack share one compiled
    ``forward``. The module ``compile(model)`` wrapped stays guarded by identity. False guards
    every module by identity (one compile per layer)."""

    @property
    def recompile_limit(self) -> int:
        """torch 2.13's name for ``cache_size_limit`` (the same setting)."""
        return self.cache_size_limit

    @recompile_limit.setter
    def recompile_limit(self, value: int) -> None:
        self.cache_size_limit = value

    def load_env(self, environ: dict[str, str] | None = None) -> None:
        """Apply the STRATA_* environment overrides to this object."""
        env = os.environ if environ is None else environ
        for field, (var, parse) in _ENV.items():
            if var in env:
                try:
                    setattr(self, field, parse(env[var]))
                except ValueError as err:
                    raise ValueError(f"environment variable {var}: {err}") from None

    @staticmethod
    def env_var(field: str) -> str:
        """The environment variable that overrides ``field``."""
        return _ENV[field][0]


config = Config()
config.load_env()
