"""Ready-made backends built on aot, for compile_api to register by name."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from aot.api import aot_module_simplified
from aot.compilers import eager_compiler
from aot.decompositions import core_decompositions
from aot.partition import min_cut_partition

__all__ = ["aot_eager", "aot_eager_decomp_partition"]


def aot_eager(gm: torch.fx.GraphModule, example_inputs: Sequence[object]) -> Callable[..., Any]:
    """Backend "aot_eager": aot tracing and the default partition, graphs run op by op."""
    return aot_module_simplified(gm, example_inputs, eager_compiler)


def aot_eager_decomp_partition(
    gm: torch.fx.GraphModule, example_inputs: Sequence[object]
) -> Callable[..., Any]:
    """Backend "aot_eager_decomp_partition": core decompositions and the min-cut partition."""
    return aot_module_simplified(
        gm,
        example_inputs,
        eager_compiler,
        partition_fn=min_cut_partition,
        decompositions=core_decompositions(),
    )
