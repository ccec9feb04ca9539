"""compile_api: Strata's torch.compile-compatible API.

``compile_api.compile(fn)`` is a drop-in for ``torch.compile``: it installs evalframe's hook,
captures each frame with symbolic_vm into FX graphs, guards them with guards and compiles them with
the chosen backend.
"""

from symbolic_vm import Unsupported, allow_in_graph, graph_break, nonstrict_trace

from . import logs as _logs
from .api import OptimizedModule, compile, disable, mark_dynamic, optimize, reset, run
from .backends import list_backends, lookup_backend, register_backend
from .config import Config, config
from .ddp import ddp_split_backend
from .errors import BackendCompilerFailed, InternalError, InvalidBackend, NotCallableError
from .explain import ExplainOutput, explain
from .logs import set_logs
from .profiling import CompileProfiler, compile_times

__all__ = [
    "compile",
    "optimize",
    "disable",
    "run",
    "reset",
    "explain",
    "ExplainOutput",
    "graph_break",
    "allow_in_graph",
    "nonstrict_trace",
    "mark_dynamic",
    "config",
    "Config",
    "set_logs",
    "list_backends",
    "register_backend",
    "lookup_backend",
    "CompileProfiler",
    "compile_times",
    "OptimizedModule",
    "ddp_split_backend",
    "Unsupported",
    "BackendCompilerFailed",
    "InternalError",
    "InvalidBackend",
    "NotCallableError",
]

_logs.load_env()
