"""Loop IR, fusion and C++/OpenMP code generation: the compiler backend of Strata."""

from .compile import CompiledGraph, EagerFallback, compile_aten_graph, compile_fx
from .config import InductorConfig, default_cache_dir
from .errors import CompilerError, InductorError, LoweringError, UnsupportedGraph

__all__ = [
    "compile_fx",
    "compile_aten_graph",
    "CompiledGraph",
    "EagerFallback",
    "InductorConfig",
    "default_cache_dir",
    "InductorError",
    "LoweringError",
    "CompilerError",
    "UnsupportedGraph",
]
