"""Values the generated code learns only while it runs: data-dependent sizes and ``torch.cond``.

Unbacked symbols. ``nonzero``, a boolean mask, ``unique`` return tensors whose sizes are new
symbols (``u0``) that no input size gives, and ``Tensor.item()`` returns one as a scalar. Such
an op stays an aten call; the wrapper binds each symbol from its result right after the call
(``u0 = _r3.size(0)``, paths from the node's ``unbacked_bindings``), and everything after it --
buffer allocations, kernel loops, kernel arguments -- uses the symbol like any other size.
Unlike an input's size symbol, an unbacked one may be 0 or 1 and no per-call check covers it:
the kernels loop ``u0`` times whatever it is. A float ``item()`` is the tensor's one element
read inside the kernels (a float64 value, as the Python float eager passes); when the graph
returns it, the wrapper also reads it out as a Python float.

``torch.cond``. Each branch (a subgraph) is compiled on its own, as a whole graph, and the
wrapper calls one of the two with the operands, on the predicate's value (``BranchCall``):
a one-line runtime branch, results laid out as the cond node's example values say.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import sympy
import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.fx.experimental.symbolic_shapes import CallMethodKey, ConvertIntKey, DivideByKey
from torch.utils._sympy.symbol import SymT, symbol_is_type

from .errors import LoweringError, UnsupportedGraph
from .ir import BufferSpec, FallbackNode, IConst, TensorRef
from .symbolic import cexpr, to_size
from .tensorvalue import SymScalar, TensorValue, cast, realized

if TYPE_CHECKING:
    from .graph_lowering import GraphLowering

__all__ = [
    "NOT_SPECIAL",
    "BranchCall",
    "SubgraphCompiler",
    "float_input",
    "is_rng_replay",
    "lower_rng_replay",
    "lower_runtime_value",
    "has_unbacked_bindings",
    "item_output",
    "lower_cond",
    "lower_data_dependent",
    "needs_python",
    "python_scalar",
]

aten = torch.ops.aten

# compiles a cond's branch: (aten graph, example inputs) -> callable returning its outputs
SubgraphCompiler = Callable[[torch.fx.GraphModule, Sequence[object]], Callable[..., Any]]


NOT_SPECIAL = object()  # what lower_runtime_value returns for any other node


def lower_runtime_value(
    L: GraphLowering,
    node: torch.fx.Node,
    target: Any,
    args: Sequence[object],
    kwargs: dict[str, object],
) -> object:
    """The lowering of a node whose value the wrapper learns at run time, else NOT_SPECIAL."""
    if target is torch.ops.higher_order.cond:
        return lower_cond(L, node, args)
    if is_rng_replay(target):
        return lower_rng_replay(L, node, target, args, kwargs)
    if has_unbacked_bindings(node):
        return lower_data_dependent(L, node, target, args, kwargs)
    return NOT_SPECIAL


def has_unbacked_bindings(node: torch.fx.Node) -> bool:
    """True when ``node``'s result defines unbacked symbols (a data-dependent size or value)."""
    return bool(node.meta.get("unbacked_bindings"))


def _path_expr(path: Sequence[object]) -> str:
    """Python reading a bound symbol from a result written ``{}`` (a key path of torch's)."""
    expr = "{}"
    for key in path:
        if isinstance(key, CallMethodKey):
            expr = f"{expr}.{key.name}()"
        elif isinstance(key, pytree.SequenceKey):
            expr = f"{expr}[{key.idx}]"
        elif isinstance(key, ConvertIntKey):
            expr = f"int({expr})"
        elif isinstance(key, DivideByKey):
            expr = f"({expr} // {int(key.divisor)})"
        else:
            raise UnsupportedGraph(f"unbacked symbol bound through {key!r}")
    return expr


def _binds(node: torch.fx.Node) -> tuple[tuple[str, str], ...]:
    bindings: dict[Any, Sequence[object]] = node.meta.get("unbacked_bindings") or {}
    return tuple((str(sym), _path_expr(path)) for sym, path in bindings.items())


def lower_data_dependent(
    L: GraphLowering,
    node: torch.fx.Node,
    target: Any,
    args: Sequence[object],
    kwargs: dict[str, object],
) -> object:
    """A node whose result holds unbacked symbols: an aten call binding them at run time."""
    if target is aten._local_scalar_dense.default:
        return _lower_item(L, node, args)
    result = L.fallback(node, target, args, kwargs)
    last = L.nodes[-1]
    assert isinstance(last, FallbackNode)
    L.nodes[-1] = FallbackNode(
        last.target, last.args, last.kwargs, last.outputs, last.multi_output, _binds(node)
    )
    return result


def _lower_item(L: GraphLowering, node: torch.fx.Node, args: Sequence[object]) -> object:
    (src,) = args
    val = node.meta.get("val")
    if not isinstance(src, TensorValue) or src.numel != 1:
        raise UnsupportedGraph("item() of a value that is not a one-element tensor")
    binds = _binds(node)
    if len(binds) != 1:
        raise UnsupportedGraph("item() binding more than one symbol")
    # the wrapper reads the value as Python (cheap next to any kernel): graph outputs and
    # Python-level arithmetic on it (torch.sym_int) use that
    L.nodes.append(FallbackNode(node.target, (L.ref_of(src),), (), (None,), False, binds))
    name = binds[0][0]
    if isinstance(val, torch.SymFloat):
        L.float_items[node] = sympy.Symbol(name)
        # kernels read the element themselves, as float64: the Python float eager passes on
        # (exact for every floating dtype); a float cannot be an int64 kernel argument
        value = SymScalar(cast(src.loader([IConst(0)] * src.ndim), torch.float64))
        L.python_floats[id(value)] = (value, sympy.Symbol(name))  # for aten calls' arguments
        return value
    if isinstance(val, torch.SymBool):
        return sympy.Symbol(name, integer=True)  # bound to int(item): 0 or 1
    if not isinstance(val, torch.SymInt):
        raise UnsupportedGraph(f"item() giving a {type(val).__name__}")
    return to_size(val)


def float_input(L: GraphLowering, name: str, k: int) -> SymScalar:
    """Graph input ``k``, a float known only at run time (a float ``item()`` the forward saved
    for the backward): the wrapper puts it in a 0-dim float64 buffer, which kernels read."""
    L.inputs.append(BufferSpec(name, (), (), torch.float64))
    spec = BufferSpec(f"{name}_value", (), (), torch.float64)
    L.buffers[spec.name] = spec
    L.float_inputs[k] = spec.name
    return SymScalar(realized(TensorRef(spec.name, (), (), 0, torch.float64)).loader([]))


def item_output(L: GraphLowering, node: torch.fx.Node) -> sympy.Symbol:
    """A float ``item()`` the graph returns: the Python float the wrapper read."""
    return L.float_items[node]


def needs_python(val: object) -> bool:
    """Whether a scalar computed from symbols must be computed by the wrapper in Python: a
    bool, or an int over a float ``item()`` (``torch.sym_int``) or that C++ cannot print."""
    if isinstance(val, torch.SymBool):
        return bool(val.node.expr.free_symbols)
    if not isinstance(val, torch.SymInt):
        return False
    expr = val.node.expr
    if any(symbol_is_type(s, SymT.UNBACKED_FLOAT) for s in expr.free_symbols):
        return True
    try:
        cexpr(to_size(val))
    except LoweringError:
        return True
    return False


def python_scalar(L: GraphLowering, node: torch.fx.Node) -> sympy.Symbol:
    """``node`` (a Python scalar function such as ``torch.sym_int``) called by the wrapper on
    the Python values of its arguments; its result is a new int symbol (a bool as 0 or 1)."""
    args: list[object] = []
    for a in node.args:
        value = L.env[a] if isinstance(a, torch.fx.Node) else a
        if isinstance(value, SymScalar):
            named = L.float_items.get(a) if isinstance(a, torch.fx.Node) else None
            if named is None:
                raise UnsupportedGraph("a float computed from sizes passed to Python")
            value = named
        if not isinstance(value, int | float | bool | sympy.Expr):
            raise UnsupportedGraph(f"{node.target} of a {type(value).__name__}")
        args.append(value)
    if node.kwargs:
        raise UnsupportedGraph(f"{node.target} with keyword arguments")
    name = f"v_{node.name}"
    L.nodes.append(FallbackNode(node.target, tuple(args), (), (None,), False, ((name, "{}"),)))
    return sympy.Symbol(name, integer=True)


def is_rng_replay(target: object) -> bool:
    """torch's rng prims, which aot puts around checkpointed random ops (``rng_replay.py``)."""
    hop = torch.ops.higher_order
    return target in (
        getattr(hop, "run_and_save_rng_state", None), getattr(hop, "run_with_rng_state", None)
    ) and target is not None


class _FlatResults:
    """Calls ``target`` and flattens its nested results (the wrapper indexes flat results)."""

    def __init__(self, target: Any) -> None:
        self.target = target

    def __call__(self, *args: Any, **kwargs: Any) -> tuple[object, ...]:
        return tuple(pytree.tree_leaves(self.target(*args, **kwargs)))

    def __repr__(self) -> str:
        return repr(self.target)


def lower_rng_replay(
    L: GraphLowering,
    node: torch.fx.Node,
    target: Any,
    args: Sequence[object],
    kwargs: dict[str, object],
) -> object:
    """A random op run with a saved (or saving the) generator state: an aten-level call from
    the wrapper, results laid out as the node's example values."""
    val = node.meta.get("val")
    flat, spec = pytree.tree_flatten(val)
    if not isinstance(val, list | tuple) or len(flat) == len(val):
        return L.fallback(node, target, args, kwargs)
    original = node.meta["val"]
    node.meta["val"] = tuple(flat)  # lowered as one flat multi-output call
    try:
        results = L.fallback(node, _FlatResults(target), args, kwargs)
    finally:
        node.meta["val"] = original
    assert isinstance(results, tuple)
    return pytree.tree_unflatten(list(results), spec)


class BranchCall:
    """``torch.cond`` at run time: one of two compiled branches, on the predicate's value."""

    def __init__(
        self, on_true: Callable[..., Any], on_false: Callable[..., Any]
    ) -> None:
        self.on_true = on_true
        self.on_false = on_false

    def __call__(self, pred: object, operands: Sequence[object]) -> tuple[object, ...]:
        branch = self.on_true if bool(pred) else self.on_false  # type: ignore[arg-type]
        return tuple(branch(*operands))

    def __repr__(self) -> str:
        return "cond"


def lower_cond(L: GraphLowering, node: torch.fx.Node, args: Sequence[object]) -> object:
    """``torch.ops.higher_order.cond(pred, true_gm, false_gm, operands)``: each branch
    compiled as its own graph, the choice made by the wrapper."""
    if len(args) != 4:
        raise UnsupportedGraph("cond with other arguments than (pred, true, false, operands)")
    pred, on_true, on_false, operands = args
    if not isinstance(on_true, torch.fx.GraphModule) or not isinstance(
        on_false, torch.fx.GraphModule
    ):
        raise UnsupportedGraph("cond branches that are not graphs")
    # a tensor, a constant, or a bool the wrapper computes in Python (0 or 1: a comparison
    # of sizes, a bool item())
    if not isinstance(pred, TensorValue | bool | sympy.Expr):
        raise UnsupportedGraph(f"a cond predicate given as {type(pred).__name__}")
    if not isinstance(operands, list | tuple):
        raise UnsupportedGraph("cond operands that are not a sequence")
    branches = [_compile_branch(gm, L) for gm in (on_true, on_false)]
    val = node.meta.get("val")
    if not isinstance(val, list | tuple):
        raise UnsupportedGraph("a cond without per-output example values")
    return L.fallback(node, BranchCall(*branches), [pred, tuple(operands)], {})


def _compile_branch(gm: torch.fx.GraphModule, L: GraphLowering) -> Callable[..., Any]:
    if L.compile_subgraph is None:
        raise UnsupportedGraph("a cond, lowered without a compiler for its branches")
    examples = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    if any(e is None for e in examples):
        raise UnsupportedGraph("a cond branch without example values")
    return L.compile_subgraph(gm, examples)
