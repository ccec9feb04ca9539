"""Joint forward/backward aten graphs, functionalization and min-cut partitioning.

`aot_function`, `aot_module` and `aot_module_simplified` trace a function to a functional aten
joint graph with make_fx under fake tensors, split it with a partitioner, compile the halves with
the given backends and run them behind one `torch.autograd.Function`.
"""

from aot.analysis import has_torch_overrides
from aot.api import (
    AotCallable,
    AotFunction,
    AotModule,
    CompiledArtifacts,
    Compiler,
    PartitionFn,
    aot_function,
    aot_module,
    aot_module_simplified,
)
from aot.backends import aot_eager, aot_eager_decomp_partition
from aot.compilers import eager_compiler, identity_compiler
from aot.decompositions import DecompositionTable, core_decompositions
from aot.errors import (
    AotError,
    AotTracingError,
    AotUnsupportedError,
    DoubleBackwardError,
    PartitionError,
)
from aot.partition import (
    PartitionStats,
    cpu_partition,
    default_partition,
    is_recomputable,
    min_cut_partition,
    node_bytes,
    partition_stats,
)
from aot.runtime import written_input_overlaps

__all__ = [
    # entry points
    "aot_function",
    "aot_module",
    "aot_module_simplified",
    # ready-made backends and compilers
    "aot_eager",
    "aot_eager_decomp_partition",
    "identity_compiler",
    "eager_compiler",
    # partitioners and their helpers
    "default_partition",
    "min_cut_partition",
    "cpu_partition",
    "is_recomputable",
    "node_bytes",
    "partition_stats",
    "PartitionStats",
    # checks a compiler may share
    "written_input_overlaps",
    "has_torch_overrides",
    # decompositions
    "core_decompositions",
    "DecompositionTable",
    # types
    "AotCallable",
    "AotFunction",
    "AotModule",
    "CompiledArtifacts",
    "Compiler",
    "PartitionFn",
    # errors
    "AotError",
    "AotTracingError",
    "AotUnsupportedError",
    "DoubleBackwardError",
    "PartitionError",
]
