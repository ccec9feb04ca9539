"""Graph ops that may raise when the graph runs, on the tensors' data (an index out of range, a
failed assert, a singular matrix, a class target out of bounds).

Errors that depend on metadata only (shapes, dtypes, devices) are raised by the fake tensors
while tracing, and guarded; these are not, and they raise from the middle of the graph, after
the trace assumed the code ran to its end. Where that matters -- a user context manager whose
block holds one (eager runs its ``__exit__`` with the exception; the transformed code would
replay its ``__enter__`` and ``__exit__`` only after the graph returns) -- the with statement
runs as bytecode instead (breaks.policy, calls).

The ops are recognised by name: the index family, embeddings, losses over class targets,
asserts and checks, and the linear-algebra factorisations that fail on their input's values.
Pointwise arithmetic, matmul, reductions and views raise only on metadata.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable

import torch

# Parts of an op's name (lower case) that mark it as able to raise on data; names that only
# start so (``torch._check*``: not ``checkpoint``), and whole names.
_RAISING_PARTS = (
    "index", "gather", "scatter", "take", "embedding", "bincount", "repeat_interleave",
    "one_hot", "multinomial", "assert", "cholesky", "inverse", "solve", "lu_factor",
    "nll_loss", "cross_entropy", "histc",
)
_RAISING_PREFIXES = ("_check",)
_RAISING_NAMES = frozenset({"put", "put_"})

_SUBSCRIPTS = (operator.getitem, operator.setitem)


def may_raise_on_data(nodes: Iterable[torch.fx.Node]) -> bool:
    """Whether one of ``nodes`` (graph nodes) may raise at run time on its tensors' values."""
    return any(_node_may_raise(node) for node in nodes)


def _node_may_raise(node: torch.fx.Node) -> bool:
    if node.op == "call_method" and node.target in ("__getitem__", "__setitem__"):
        return _tensor_index(node.args[1:2])
    if node.op == "call_function" and node.target in _SUBSCRIPTS:
        # x[idx] with an integer tensor index reads the index's values; a tuple's item, an
        # int or slice index (its bounds checked on the fake tensor) never raises here.
        return _tensor_index(node.args[1:2])
    if node.op not in ("call_function", "call_method", "call_module"):
        return False
    target = node.target
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    lowered = str(name).lower()
    return (
        lowered in _RAISING_NAMES
        or lowered.startswith(_RAISING_PREFIXES)
        or any(part in lowered for part in _RAISING_PARTS)
    )


def _tensor_index(args: tuple[object, ...]) -> bool:
    """Whether an index argument holds an integer tensor (advanced indexing by values)."""
    found = False

    def visit(value: object) -> None:
        nonlocal found
        if isinstance(value, torch.fx.Node):
            example = value.meta.get("example_value")
            if not isinstance(example, torch.Tensor) or not (
                example.dtype.is_floating_point or example.dtype is torch.bool
            ):
                found = True  # an integer tensor, or a value whose kind is unknown
        elif isinstance(value, (tuple, list)):
            for item in value:
                visit(item)

    for arg in args:
        visit(arg)
    return found
