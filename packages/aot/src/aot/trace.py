"""Tracing a flat function to functional aten graphs with make_fx under fake tensors.

Two graphs can come out of here:

* the inference graph: inputs -> traced outputs, traced under no_grad;
* the joint graph: (primals, tangents) -> (traced outputs, grads of the inputs that require grad),
  where the backward part comes from calling torch.autograd.grad inside the trace.

Both are functionalized with PyTorch's functionalization (the C++ Functionalize key), and views
are then turned into their `*_copy` forms, so no op in them mutates or aliases anything. Mutated
inputs become extra outputs carrying their new values; the runtime copies them back. The one
exception, on request (`FunctionMeta.mutations_in_graph`, inference graphs only): such an input's
new value is written by the graph itself, as a final `aten.copy_(input, new_value)` after every
other node, and is not an output.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx
from torch._dispatch.python import enable_python_dispatcher
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils import _pytree as pytree

from aot.analysis import FlatFn, FunctionMeta, TracedKind
from aot.decompositions import DecompositionTable
from aot.errors import AotTracingError

__all__ = [
    "JointTrace",
    "keep_mutations_in_forward",
    "trace_inference",
    "trace_joint",
    "traced_outputs_fn",
]

log = logging.getLogger("strata.aot")

# Identity-like functional ops that functionalization leaves behind; they only cost a copy.
_IDENTITY_OPS = (torch.ops.aten.detach_copy.default, torch.ops.aten.alias_copy.default)


class _UnfoldWithGapsAsStrided(torch.overrides.TorchFunctionMode):
    """``x.unfold(d, size, step)`` whose windows leave elements of ``d`` out, as the equal
    ``as_strided`` view.

    Functionalization replays a write through an unfold view onto its base with
    ``unfold_backward``, which scatters the windows into zeros: the elements between windows
    (step > size) or after the last one became 0 (found by the op fuzzer; torch.compile 2.13
    does the same). ``as_strided``'s inverse, ``as_strided_scatter``, writes into the base.
    """

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func is torch.Tensor.unfold and len(args) == 4 and not kwargs:
            x, dim, size, step = args
            if isinstance(x, torch.Tensor) and all(isinstance(v, int) for v in (dim, size, step)):
                d = dim % max(x.dim(), 1)
                n = x.shape[d] if x.dim() else 1
                if isinstance(n, int) and n >= size and (step > size or (n - size) % step):
                    count = (n - size) // step + 1
                    if x.dim() == 0:
                        sizes, strides = [size], [1]
                    else:
                        sizes = [*x.shape[:d], count, *x.shape[d + 1 :], size]
                        strides = list(x.stride())
                        strides = [*strides[:d], strides[d] * step, *strides[d + 1 :], strides[d]]
                    return torch.as_strided(x, sizes, strides, x.storage_offset())
        return func(*args, **kwargs)


def traced_outputs_fn(
    flat_fn: FlatFn, meta: FunctionMeta
) -> Callable[[list[object]], list[Any]]:
    """A function returning the traced outputs (see analysis.TracedOutput) of `flat_fn`.

    The new values of `meta.mutations_in_graph` are left out (the graph writes them itself).
    """
    in_graph = set(meta.mutations_in_graph)

    def run(args: list[object]) -> list[Any]:
        with _UnfoldWithGapsAsStrided():
            outs: list[Any] = list(flat_fn(*args))
        result: list[Any] = []
        for t in meta.traced:
            if t.kind is TracedKind.MUTATION and t.index in in_graph:
                continue
            if t.kind is TracedKind.USER:
                result.append(outs[t.index])
            elif t.kind is TracedKind.MUTATION:
                result.append(args[t.index])
            else:
                result.append(outs[t.index]._base)
        return result

    return run


def _to_functional(x: object) -> object:
    return torch._to_functional_tensor(x) if isinstance(x, torch.Tensor) else x


def _from_functional(x: object) -> object:
    if not isinstance(x, torch.Tensor):
        return x
    torch._sync(x)  # type: ignore[attr-defined,no-untyped-call]
    return torch._from_functional_tensor(x)


def _is_aliasing(target: Any) -> bool:
    schema = getattr(target, "_schema", None)
    if schema is None or schema.is_mutable:
        return False
    return any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)


def _copy_variant(target: Any) -> Any:
    packet = target.overloadpacket
    name = packet.__name__
    copy_packet = getattr(torch.ops.aten, "lift_fresh_copy" if name == "lift_fresh" else
                          f"{name}_copy", None)
    if copy_packet is None:
        return None
    return getattr(copy_packet, target._overloadname, None)


def _views_to_copies(gm: torch.fx.GraphModule, fake_mode: Any) -> None:
    """Replace every view op by its `*_copy` form, so no graph value aliases another.

    Tracing keeps real view ops (functionalization with reapply_views=True) because tensor
    strides then match eager's, which decides e.g. whether `.contiguous()` copies. In a graph with
    no mutation, a view and a copy of it hold the same values, so swapping is safe.
    """
    for node in gm.graph.nodes:
        if node.op != "call_function" or not _is_aliasing(node.target):
            continue
        target = _copy_variant(node.target)
        if target is None:
            log.warning("no copy variant for view op %s; left as a view", node.target)
            continue
        node.target = target
        # A `*_copy` op returns the view's values in a fresh contiguous tensor.
        with fake_mode:
            node.meta["val"] = pytree.tree_map_only(
                torch.Tensor, lambda v: v.clone(memory_format=torch.contiguous_format),
                node.meta.get("val"),
            )


def _mutates(node: torch.fx.Node) -> bool:
    if node.op != "call_function":
        return False
    if node.target is torch.ops.aten.native_batch_norm.default:
        return bool(node.args[5])  # training: updates the running stats without declaring it
    schema = getattr(node.target, "_schema", None)
    return schema is not None and bool(schema.is_mutable)


def _is_input_write(node: torch.fx.Node, writable: frozenset[int]) -> bool:
    """True for one of the final `copy_(input, new_value)` nodes asked for."""
    if node.op != "call_function" or node.target is not torch.ops.aten.copy_.default:
        return False
    dst = node.args[0]
    if not isinstance(dst, torch.fx.Node) or dst.op != "placeholder":
        return False
    placeholders = [n for n in node.graph.nodes if n.op == "placeholder"]
    return placeholders.index(dst) in writable


def _check_functional(gm: torch.fx.GraphModule, writable: frozenset[int] = frozenset()) -> None:
    """Refuse a graph that still mutates (e.g. a decomposition writing below functionalization).

    The only mutations allowed are final `copy_`s into the placeholders of `writable`.
    """
    bad = sorted({str(n.target) for n in gm.graph.nodes
                  if _mutates(n) and not _is_input_write(n, writable)})
    if bad:
        raise AotTracingError(
            f"the traced graph still mutates tensors through {', '.join(bad)}; this usually "
            "means a decomposition in the table writes in place below functionalization. "
            "Remove that op's entry from the decomposition table."
        )


def _flatten_calling_convention(
    gm: torch.fx.GraphModule, fake_mode: Any, writable: frozenset[int] = frozenset()
) -> torch.fx.GraphModule:
    """Make `gm` take its placeholders positionally and return a flat tuple; drop aliases."""
    gm.graph._codegen = torch.fx.graph.CodeGen()
    out = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    values = out.args[0]
    out.args = (tuple(values) if isinstance(values, (list, tuple)) else (values,),)
    _views_to_copies(gm, fake_mode)
    _check_functional(gm, writable)
    for node in list(gm.graph.nodes):
        if (node.op == "call_function" and node.target in _IDENTITY_OPS
                and out not in node.users):
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return gm


def _make_fx(
    fn: Callable[..., Any],
    decompositions: DecompositionTable | None,
    fake_mode: Any,
    writable: frozenset[int] = frozenset(),
) -> Callable[..., torch.fx.GraphModule]:
    def trace(*args: object) -> torch.fx.GraphModule:
        try:
            with enable_python_dispatcher(), fake_mode:
                gm = make_fx(fn, decomposition_table=decompositions or {}, tracing_mode="real")(
                    *args
                )
        except Exception as exc:
            raise AotTracingError(
                f"aot could not trace the function to aten: {type(exc).__name__}: {exc}"
            ) from exc
        return _flatten_calling_convention(gm, fake_mode, writable)

    return trace


def trace_inference(
    flat_fn: FlatFn,
    meta: FunctionMeta,
    fake_inputs: Sequence[object],
    fake_mode: Any,
    decompositions: DecompositionTable | None,
) -> torch.fx.GraphModule:
    """Trace inputs -> traced outputs under no_grad, functionalized.

    Each input of `meta.mutations_in_graph` gets its new value by a `copy_` at the end.
    """
    run = traced_outputs_fn(flat_fn, meta)
    in_graph = meta.mutations_in_graph

    def inference(*args: object) -> list[object]:
        fargs = [_to_functional(a) for a in args]
        torch._enable_functionalization(reapply_views=True)
        try:
            with torch.no_grad():
                outs = run(fargs)
        finally:
            torch._disable_functionalization()  # type: ignore[no-untyped-call]
        results = [_from_functional(o) for o in outs]
        # after every other op (all reads of the old values come first), outside
        # functionalization, so make_fx records the copies into the placeholders themselves
        with torch.no_grad():
            for i in in_graph:
                dst = args[i]
                assert isinstance(dst, torch.Tensor)
                dst.copy_(_from_functional(fargs[i]))  # type: ignore[arg-type]
        return results

    gm = _make_fx(inference, decompositions, fake_mode, frozenset(in_graph))(*fake_inputs)
    log.debug("inference graph:\n%s", gm.code)
    return gm


class JointTrace:
    """The joint graph plus how its inputs and outputs line up."""

    def __init__(self, gm: torch.fx.GraphModule, num_primals: int, num_fwd_outputs: int) -> None:
        self.gm = gm
        self.num_primals = num_primals
        self.num_fwd_outputs = num_fwd_outputs

    def gradless_inputs(self, meta: FunctionMeta) -> tuple[int, ...]:
        """Inputs that require grad but get none from this graph (no differentiable output
        depends on them: ``t.detach()``, or ops under no_grad)."""
        out = next(n for n in reversed(self.gm.graph.nodes) if n.op == "output")
        grads = list(out.args[0])[self.num_fwd_outputs:]
        return tuple(i for i, g in zip(meta.grad_inputs, grads, strict=True) if g is None)

    @property
    def example_inputs(self) -> list[object]:
        """Fake values of the joint graph's placeholders (primals then tangents)."""
        return [n.meta.get("val") for n in self.gm.graph.nodes if n.op == "placeholder"]


def trace_joint(
    flat_fn: FlatFn,
    meta: FunctionMeta,
    fake_inputs: Sequence[object],
    fake_mode: Any,
    decompositions: DecompositionTable | None,
    *,
    before_backward: Callable[[Sequence[object]], None] | None = None,
) -> JointTrace:
    """Trace (primals, tangents) -> (traced outputs, grads of inputs requiring grad).

    ``before_backward(outputs)`` runs before the outputs are differentiated (source lines for
    the backward's nodes, aot.source_meta)."""
    run = traced_outputs_fn(flat_fn, meta)
    grad_inputs = meta.grad_inputs
    diff = meta.differentiable_traced
    mutated = set(meta.mutated_inputs)

    def joint(primals: list[object], tangents: list[object]) -> list[object]:
        fprimals = [_to_functional(p) for p in primals]
        ftangents = [_to_functional(t) for t in tangents]
        assert all(isinstance(t, torch.Tensor) for t in ftangents)
        torch._enable_functionalization(reapply_views=True)
        try:
            with torch.enable_grad():
                leaves: list[torch.Tensor] = []
                call_args: list[object] = []
                for i, fp in enumerate(fprimals):
                    if i in grad_inputs:
                        assert isinstance(fp, torch.Tensor)
                        fp.requires_grad_(True)
                        leaves.append(fp)
                        # A mutated input that requires grad is mutated through a copy, so the
                        # leaf itself stays untouched and its gradient flows through the copy.
                        call_args.append(fp.clone() if i in mutated else fp)
                    else:
                        call_args.append(fp)
                # the forward in the caller's grad mode: ops before an enable_grad() block of a
                # function called under no_grad record no gradient, as in eager
                with torch.set_grad_enabled(meta.grad_mode_at_entry):
                    outs = run(call_args)
                diff_outs = [outs[k] for k in diff]
                grads: Sequence[torch.Tensor | None] = [None] * len(leaves)
                if diff_outs and leaves:
                    if before_backward is not None:
                        before_backward(diff_outs)
                    grads = torch.autograd.grad(
                        diff_outs, leaves, ftangents, allow_unused=True  # type: ignore[arg-type]
                    )
        finally:
            torch._disable_functionalization()  # type: ignore[no-untyped-call]
        return [_from_functional(o) for o in [*outs, *grads]]

    primals = list(fake_inputs)
    with fake_mode:
        tangents: list[object] = [
            torch.empty(
                tuple(meta.traced[k].example.shape),
                dtype=meta.traced[k].example.dtype,
                device=meta.traced[k].example.device,
            )
            for k in diff
        ]
    gm = _make_fx(joint, decompositions, fake_mode)(primals, tangents)
    log.debug("joint graph:\n%s", gm.code)
    return JointTrace(gm, len(primals), len(meta.traced))


def keep_mutations_in_forward(
    fw_gm: torch.fx.GraphModule, meta: FunctionMeta, num_fwd_outputs: int
) -> tuple[int, ...]:
    """Move new values of mutated inputs that need no grad into final `copy_`s of `fw_gm`.

    A training forward returns them (the runtime copies them back); for a compiler that asked
    for input mutations in the graph, those of inputs that do not require grad and whose new
    value carries no gradient (BatchNorm's running statistics) become `copy_(input, value)`
    at the end instead, and leave the outputs. Kept only when the input's old value is not
    returned (the backward would read it after the write) and every differentiable traced
    output comes before it (so the tangents keep their positions). Returns the inputs moved.
    """
    placeholders = [n for n in fw_gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(meta.input_requires_grad):
        return ()  # a custom partitioner's forward with another calling convention
    out = next(n for n in reversed(fw_gm.graph.nodes) if n.op == "output")
    values = list(out.args[0])
    if len(meta.traced) != num_fwd_outputs or len(values) < num_fwd_outputs:
        return ()
    last_diff = max(meta.differentiable_traced, default=-1)
    moved: list[int] = []
    for k, t in enumerate(meta.traced):
        if (t.kind is not TracedKind.MUTATION or t.requires_grad or k <= last_diff
                or meta.input_requires_grad[t.index]):
            continue
        dst = placeholders[t.index]
        if not isinstance(values[k], torch.fx.Node) or any(
            v is dst for j, v in enumerate(values) if j != k
        ):
            continue
        moved.append(k)
    if not moved:
        return ()
    with fw_gm.graph.inserting_before(out):
        for k in moved:
            dst = placeholders[meta.traced[k].index]
            node = fw_gm.graph.call_function(torch.ops.aten.copy_.default, (dst, values[k]))
            node.meta["val"] = dst.meta.get("val")
    out.args = (tuple(v for j, v in enumerate(values) if j not in set(moved)),)
    fw_gm.recompile()
    return tuple(meta.traced[k].index for k in moved)
