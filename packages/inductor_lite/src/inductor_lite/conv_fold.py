"""Folding a convolution's per-channel epilogue into the convolution (CPU, float32).

An eval-mode ``conv -> batch_norm -> relu`` reaches us as ``convolution`` followed by a chain
of pointwise ops with per-channel operands (aot's batch-norm decomposition: subtract the
running mean, multiply by ``1/sqrt(var + eps)``, by the weight, add the bias) and a ``relu``.
The chain is affine in the convolution's output ``y`` per output channel, ``s * y + t``, so

    relu(s * conv(x, w, b) + t) == relu(conv(x, w * s, s * b + t))

The rewrite computes ``w * s`` and ``s * b + t`` in the graph -- on every call, from the
weights as they are then, so a parameter changed between calls is seen -- and runs oneDNN's
convolution with the ReLU as a fused post-op (``mkldnn._convolution_pointwise``, an ATen op;
without a ReLU, a plain ``convolution`` with the folded weight and bias). The batch-norm +
ReLU pass over the activation (a read and a write of the whole tensor per stage) is gone.

The results differ from eager's by rounding only, with one exception that a guard covers:
oneDNN's ReLU turns NaN into 0 where eager keeps NaN, and folded weights may overflow where
eager's order of operations does not. So the graph also computes, per call, a bound on every
folded convolution's result (``max|x| * max_c sum|w[c] * s[c]| + max|bias|``, chained from
one folded convolution to the next) and one 0-dim bool: the bound is finite and under
``FINITE_LIMIT``. The wrapper checks it after the call; when it fails (a NaN or infinity in
an input or a weight, or values so large that a sum could overflow), that call's results
are discarded and the graph as it came runs instead. Finite, moderate inputs -- every real
call -- take the folded path.

Only a chain whose every intermediate value has one user (nothing else reads the unfolded
values) and keeps the convolution's float32 shape is folded; a graph that mutates an input
is left alone (its guard could not rerun it).
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensorMode

from .choices import choice

__all__ = ["FINITE_LIMIT", "GUARD_KEY", "fold_conv_epilogues"]

log = logging.getLogger("strata.inductor_lite")

aten = torch.ops.aten

# a Node, a Python number, or None (the identity of the operation it stands for)
_Operand = torch.fx.Node | float | None

_AFFINE_OPS = frozenset({aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor})


# node.meta key of the graph's guard: a 0-dim bool that must be True for the folded code's
# results to be eager's (else the unfolded graph runs)
GUARD_KEY = "strata_fold_guard"

# The guard's bound on every folded convolution's result: far enough under float32's
# largest value (3.4e38) that rounding in the sums and in the bound itself cannot reach it.
FINITE_LIMIT = 1e37


def _pointwise_conv_op() -> torch._ops.OpOverload | None:
    """oneDNN's convolution with a fused post-op, where this torch build has it."""
    if not torch.backends.mkldnn.is_available():  # type: ignore[no-untyped-call]
        return None
    try:
        op: torch._ops.OpOverload = torch.ops.mkldnn._convolution_pointwise.default
    except (AttributeError, RuntimeError):
        return None
    return op


def _val(node: object) -> torch.Tensor | None:
    if isinstance(node, torch.fx.Node):
        v = node.meta.get("val")
        return v if isinstance(v, torch.Tensor) else None
    return None


def _static(t: torch.Tensor) -> bool:
    return all(isinstance(s, int) for s in (*t.shape, *t.stride()))


def _foldable_conv(node: torch.fx.Node) -> bool:
    if node.target is not aten.convolution.default or len(node.args) != 9 or node.kwargs:
        return False
    x, w, bias, _stride, _padding, _dilation, transposed, _output_padding, _groups = node.args
    out, xv, wv = _val(node), _val(x), _val(w)
    if out is None or xv is None or wv is None or transposed:
        return False
    bv = _val(bias)
    if bias is not None and bv is None:
        return False
    tensors = [out, xv, wv] + ([bv] if bv is not None else [])
    return all(
        t.device.type == "cpu" and t.dtype == torch.float32 and _static(t) for t in tensors
    ) and (out.ndim == 4 and wv.ndim == 4)


def _per_channel(a: object, channels: int) -> bool:
    """True when ``a`` broadcasts against an NCHW value as one number per channel (or one)."""
    if isinstance(a, bool):
        return False
    if isinstance(a, int | float):
        return True
    v = _val(a)
    if v is None or v.dtype != torch.float32 or v.device.type != "cpu" or not _static(v):
        return False
    if v.ndim > 4:
        return False
    shape = (1,) * (4 - v.ndim) + tuple(v.shape)
    return shape[0] == 1 and shape[2] == 1 and shape[3] == 1 and shape[1] in (1, channels)


def _chain(conv: torch.fx.Node) -> tuple[list[torch.fx.Node], bool]:
    """The affine per-channel ops after ``conv`` (in order) and whether a relu ends them."""
    out = _val(conv)
    assert out is not None
    channels = int(out.shape[1])
    steps: list[torch.fx.Node] = []
    cur = conv
    while len(cur.users) == 1:
        user = next(iter(cur.users))
        uval = _val(user)
        if (
            uval is None
            or uval.dtype != torch.float32
            or tuple(uval.shape) != tuple(out.shape)
            or user.kwargs
        ):
            break
        if user.target is aten.relu.default:
            return steps, True
        if user.target not in _AFFINE_OPS or len(user.args) != 2:
            break
        a, b = user.args
        if user.target is aten.div.Tensor and isinstance(b, int | float) and b == 0:
            break  # y / 0 is not y times a finite scale
        left = a is cur and b is not cur and _per_channel(b, channels)
        # c / y is not affine in y
        right = b is cur and a is not cur and user.target is not aten.div.Tensor
        if not (left or (right and _per_channel(a, channels))):
            break
        steps.append(user)
        cur = user
    return steps, False


class _Builder:
    """Appends aten nodes before ``anchor``, each with its example value (fake tensors)."""

    def __init__(self, graph: torch.fx.Graph, anchor: torch.fx.Node, mode: FakeTensorMode) -> None:
        self.graph = graph
        self.anchor = anchor
        # one fake mode of our own: the graph's example values may come from several
        # (make_fx gives constants their own), and fake tensors of two modes do not mix
        self.mode = mode

    def _fake(self, a: object) -> object:
        if not isinstance(a, torch.fx.Node):
            return a
        v = a.meta["val"]
        if not isinstance(v, torch.Tensor):
            return v
        with self.mode:
            return torch.empty_strided(
                tuple(v.shape), tuple(v.stride()), dtype=v.dtype, device=v.device
            )

    def call(self, target: torch._ops.OpOverload, *args: Any) -> torch.fx.Node:
        with self.graph.inserting_before(self.anchor):
            node = self.graph.call_function(target, args)
        fake = [self._fake(a) for a in args]
        with self.mode:
            node.meta["val"] = target(*fake)
        return node

    def vector(self, a: object, channels: int) -> _Operand:
        """A per-channel operand as a (C,) vector node, or a float as it is."""
        if isinstance(a, int | float):
            return float(a)
        assert isinstance(a, torch.fx.Node)
        v = _val(a)
        assert v is not None
        flat = self.call(aten.reshape.default, a, [-1])
        if v.numel() == channels:
            return flat
        return self.call(aten.expand.default, flat, [channels])

    def mul(self, a: _Operand, b: _Operand) -> _Operand:
        if a is None or b is None:
            return None
        if isinstance(a, float) and isinstance(b, float):
            return a * b
        x, y = (a, b) if isinstance(a, torch.fx.Node) else (b, a)
        if y == 1.0 and isinstance(y, float):
            return x
        return self.call(aten.mul.Tensor, x, y)

    def add(self, a: _Operand, b: _Operand, *, sub: bool = False) -> _Operand:
        target = aten.sub.Tensor if sub else aten.add.Tensor
        if b is None:
            return a
        if a is None:
            if not sub:
                return b
            if isinstance(b, float):
                return -b
            return self.call(aten.neg.default, b)
        if isinstance(a, float) and isinstance(b, float):
            return a - b if sub else a + b
        if isinstance(a, float):
            # c - v == -(v - c); c + v == v + c
            assert isinstance(b, torch.fx.Node)
            if not sub:
                return self.call(aten.add.Tensor, b, a)
            return self.call(aten.neg.default, self.call(aten.sub.Tensor, b, a))
        return self.call(target, a, b)

    def div(self, a: _Operand, b: _Operand) -> _Operand:
        if a is None:
            return None
        assert b is not None
        if isinstance(a, float) and isinstance(b, float):
            return a / b
        if isinstance(a, float):
            return self.mul(self.call(aten.reciprocal.default, b), a)
        return self.call(aten.div.Tensor, a, b)


def _fold(
    graph: torch.fx.Graph,
    conv: torch.fx.Node,
    steps: list[torch.fx.Node],
    relu: bool,
    op: torch._ops.OpOverload,
    *,
    bounds: dict[torch.fx.Node, torch.fx.Node],
    mode: FakeTensorMode,
) -> None:
    """Replace ``conv`` and its chain by one convolution; record a bound of its result."""
    tail = steps[-1] if steps else conv
    last = next(iter(tail.users)) if relu else tail
    out = _val(conv)
    assert out is not None
    channels = int(out.shape[1])
    b = _Builder(graph, last, mode)
    scale: _Operand = None  # None: 1
    shift: _Operand = None  # None: 0
    prev = conv
    for step in steps:
        x, y = step.args
        on_left = x is prev
        c = b.vector(y if on_left else x, channels)
        if step.target is aten.add.Tensor:
            shift = b.add(shift, c)
        elif step.target is aten.sub.Tensor and on_left:
            shift = b.add(shift, c, sub=True)
        elif step.target is aten.sub.Tensor:  # c - (s y + t)
            scale = b.mul(-1.0, 1.0 if scale is None else scale)
            shift = b.add(c, shift, sub=True)
        elif step.target is aten.mul.Tensor:
            scale = b.mul(1.0 if scale is None else scale, c)
            shift = b.mul(shift, c)
        else:
            scale = b.div(1.0 if scale is None else scale, c)
            shift = b.div(shift, c)
        prev = step
    xin, weight, bias, stride, padding, dilation, _, _, groups = conv.args
    assert isinstance(weight, torch.fx.Node)
    w = weight
    if isinstance(scale, torch.fx.Node):
        per_out = b.call(aten.reshape.default, scale, [channels, 1, 1, 1])
        w = b.call(aten.mul.Tensor, weight, per_out)
    elif isinstance(scale, float):
        w = b.call(aten.mul.Tensor, weight, scale)
    new_bias: _Operand = None
    if isinstance(bias, torch.fx.Node):
        new_bias = bias if scale is None else b.mul(bias, scale)
    new_bias = b.add(new_bias, shift)
    if isinstance(new_bias, float):
        new_bias = b.call(aten.new_full.default, weight, [channels], new_bias)
    if relu:
        result = b.call(op, xin, w, new_bias, padding, stride, dilation, groups, "relu", [], "")
    else:
        result = b.call(
            aten.convolution.default,
            xin,
            w,
            new_bias,
            stride,
            padding,
            dilation,
            False,
            [0, 0],
            groups,
        )
    # the value eager computes here, with eager's layout (what a graph output must keep)
    result.meta["val"] = last.meta["val"]
    bounds[result] = _bound(b, bounds, xin, weight, scale=scale, bias=new_bias)
    last.replace_all_uses_with(result)
    for node in reversed([conv, *steps, *([last] if relu else [])]):
        graph.erase_node(node)


def _bound(
    b: _Builder,
    bounds: dict[torch.fx.Node, torch.fx.Node],
    x: object,
    weight: torch.fx.Node,
    *,
    scale: _Operand,
    bias: _Operand,
) -> torch.fx.Node:
    """A 0-dim node bounding ``|conv(x, weight * scale, bias)|`` (before any ReLU).

    Each output is a sum of products of input values and weights plus the bias, so
    ``max|x| * max_c |scale[c]| sum|weight[c]| + max|bias|`` bounds it; the input's bound
    is the bound of the folded convolution that produced it, else ``max|x|`` itself. A NaN
    or infinity anywhere makes the bound NaN or infinite.
    """
    assert isinstance(x, torch.fx.Node)
    x_bound = bounds.get(x)
    if x_bound is None:
        x_bound = b.call(aten.amax.default, b.call(aten.abs.default, _flat(b, x)), [])
    wv = _val(weight)
    assert wv is not None
    rows = b.call(aten.reshape.default, weight, [int(wv.shape[0]), -1])
    norms = b.call(aten.sum.dim_IntList, b.call(aten.abs.default, rows), [1])
    if isinstance(scale, torch.fx.Node):
        norms = b.call(aten.mul.Tensor, norms, b.call(aten.abs.default, scale))
    elif isinstance(scale, float):
        norms = b.call(aten.mul.Tensor, norms, abs(scale))
    bound = b.call(aten.mul.Tensor, x_bound, b.call(aten.amax.default, norms, []))
    if isinstance(bias, torch.fx.Node):
        bias_max = b.call(aten.amax.default, b.call(aten.abs.default, bias), [])
        bound = b.call(aten.add.Tensor, bound, bias_max)
    return bound


def _flat(b: _Builder, x: torch.fx.Node) -> torch.fx.Node:
    """A graph input ``x`` as one dimension in its memory order (a view), so that the
    reduction over it is one plain loop rather than one recovering each index by division."""
    v = _val(x)
    assert v is not None
    if v.ndim <= 1 or x.op not in ("placeholder", "get_attr"):
        # a computed input may be a lazy value: reshaped, it would be stored an extra time
        return x
    order = sorted(range(v.ndim), key=lambda d: (-int(v.stride()[d]), d))
    if order != list(range(v.ndim)):
        x = b.call(aten.permute.default, x, order)
    return b.call(aten.reshape.default, x, [-1])


def _numel(node: object) -> int:
    v = _val(node)
    return 0 if v is None else int(v.numel())


# the fixed extra cost of ``_convolution_pointwise`` over ``convolution``, in elements of
# memory traffic (a read and a write of ~50,000 float32 elements; see _worth_folding)
_POST_OP_CALL_ELEMENTS = 100_000


# the guard's fixed cost per graph (its bound's reductions and the ``.item()`` read that
# decides the call, ~10-20 us), in elements of traffic: folds that save less in all are not
# made (mobilenet_v3_small at 96x96 has one fold worth ~8,000 elements)
_GUARD_CALL_ELEMENTS = 50_000


def _fold_margin(
    conv: torch.fx.Node, steps: list[torch.fx.Node], relu: bool, folded: set[torch.fx.Node]
) -> int:
    """How much memory traffic folding saves over what it adds (a cost model, in elements).

    Folding writes a scaled copy of the weight on every call and reads the weight again for
    the guard's bound (about 3 passes over the weight), plus one pass over the input when its
    bound is not chained from a folded convolution. It saves the epilogue's pass over the
    output (a read and a write) only where nothing else would absorb it: a ReLU ends the
    chain (oneDNN's post-op replaces the whole pass), or no reader of the chain's result is a
    pointwise op (a SiLU or a residual add after a batch norm takes the affine into its own
    pass for free). At batch 1 and small spatial sizes a late stage's weight is 10-100x its
    activation: folding it cost efficientnet_b0 at 64x64 ~6 ms of its ~15 ms call.
    """
    tail = steps[-1] if steps else conv
    absorbed = not relu and any(
        u.op == "call_function"
        and isinstance(u.target, torch._ops.OpOverload)
        and torch.Tag.pointwise in u.target.tags
        for u in tail.users
    )
    saved = 0 if absorbed else 2 * _numel(conv)
    if relu:
        # oneDNN's convolution with a post-op costs a fixed ~30-40 us more per call than
        # the plain convolution (1 thread; 47-58 us against 11-24 us for mobilenet's small
        # 1x1 and 3x3 convolutions), what a ReLU pass over ~50,000 elements costs: on
        # smaller outputs the separate pass (fused with the batch norm, or into consumers) wins
        saved -= _POST_OP_CALL_ELEMENTS
    x, weight = conv.args[0], conv.args[1]
    cost = 3 * _numel(weight) + (0 if x in folded else _numel(x))
    verdict = "epilogue folded into oneDNN" if cost < saved else "epilogue not folded"
    choice(
        f"convolution {conv.name}", verdict, "%d elements of traffic added, %d saved", cost, saved
    )
    return saved - cost


def fold_conv_epilogues(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm`` with each foldable convolution epilogue folded (a new module if any was).

    The module given is never changed: it is also what runs when compilation fails.
    """
    op = _pointwise_conv_op()
    if op is None or any(
        isinstance(n.target, torch._ops.OpOverload) and n.target._schema.is_mutable
        for n in gm.graph.nodes
    ):
        # a graph that writes its inputs must not be run twice (see the guard)
        return gm
    found = []
    folded: set[torch.fx.Node] = set()
    margin = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and _foldable_conv(node):
            steps, relu = _chain(node)
            gain = _fold_margin(node, steps, relu, folded) if steps or relu else 0
            if gain > 0:
                margin += gain
                found.append((node, steps, relu))
                tail = steps[-1] if steps else node
                folded.add(next(iter(tail.users)) if relu else tail)  # what the fold replaces
    if margin <= _GUARD_CALL_ELEMENTS:
        if found:
            choice(
                "convolution epilogues", "none folded",
                "%d folds would save %d elements of traffic, less than the guard costs",
                len(found), margin,
            )
        return gm
    graph = torch.fx.Graph()
    val_map: dict[torch.fx.Node, torch.fx.Node] = {}
    graph.output(graph.graph_copy(gm.graph, val_map))
    bounds: dict[torch.fx.Node, torch.fx.Node] = {}
    mode = FakeTensorMode()
    for conv, steps, relu in found:
        _fold(graph, val_map[conv], [val_map[s] for s in steps], relu, op, bounds=bounds, mode=mode)
    # One guard for the whole graph: every folded convolution's result provably finite.
    output = next(n for n in graph.nodes if n.op == "output")
    b = _Builder(graph, output, mode)
    total = None
    for bound in bounds.values():
        total = bound if total is None else b.call(aten.add.Tensor, total, bound)
    assert total is not None
    guard = b.call(aten.lt.Scalar, total, FINITE_LIMIT)
    guard.meta[GUARD_KEY] = True
    log.debug("folded %d convolution epilogues", len(found))
    return torch.fx.GraphModule(gm, graph)
