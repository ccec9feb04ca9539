"""Running compiled graphs as if they were the original function.

The compiled forward computes fresh tensors only. The runtime wrapper

* runs it inside a `torch.autograd.Function` (training) whose backward runs the compiled backward
  as one op, or directly (inference);
* copies the new values of mutated inputs back into the real inputs, once, after the forward;
* rebuilds outputs that alias inputs or each other as real views of their base (replaying the
  recorded view ops, or `as_strided` when the chain is unknown);
* passes non-tensor outputs through; symbolic-number outputs (SymInt/SymFloat/SymBool at trace
  time) are computed by the forward graph and come back as plain numbers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch

from aot import partial_backward
from aot.analysis import FunctionMeta, OutputInfo, OutputKind, TracedKind
from aot.errors import DoubleBackwardError

__all__ = [
    "CompiledCallable",
    "make_inference_runtime",
    "make_training_runtime",
    "written_input_overlaps",
]

log = logging.getLogger("strata.aot")

CompiledCallable = Callable[..., Any]  # what a backend returns; takes flat inputs


def _as_list(result: object) -> list[Any]:
    if isinstance(result, (list, tuple)):
        return list(result)
    return [result]


def _storage_key(value: object) -> int | None:
    if not isinstance(value, torch.Tensor):
        return None
    return int(value.untyped_storage().data_ptr())


def _byte_range(t: torch.Tensor) -> tuple[int, int]:
    """The addresses ``t`` may touch, [start, end); empty for a tensor with no elements."""
    start = t.data_ptr()
    if t.numel() == 0:
        return start, start
    extent = sum((size - 1) * abs(stride) for size, stride in zip(t.shape, t.stride(), strict=True))
    return start, start + (extent + 1) * t.element_size()


def written_input_overlaps(flat_args: Sequence[object], written: Sequence[int]) -> bool:
    """Whether an input written in place shares memory with another tensor input.

    Graphs are traced with every input a tensor of its own: written through one, an
    overlapping other would be read stale (``f(b[:4], b[2:])``). Callers then run the
    function eagerly for this call. Address ranges, not storages: two disjoint slices of one
    buffer are independent, as they are for the graph.
    """
    if not written:
        return False
    # Fast path, the common case (an optimizer step's hundreds of separate tensors): no two
    # share a storage. Storages are compared by identity (views share theirs).
    tensors = [a for a in flat_args if isinstance(a, torch.Tensor)]
    storage_of = torch._C._storage_address  # type: ignore[attr-defined]
    if len({storage_of(a) for a in tensors}) == len(tensors):
        return False
    ranges = sorted(
        (*_byte_range(a), i)
        for i, a in enumerate(flat_args)
        if isinstance(a, torch.Tensor) and a.numel() > 0
    )
    targets = set(written)
    end = -1
    cluster: list[int] = []
    for start, stop, i in ranges:
        if start >= end:  # a new group of mutually reachable ranges
            if len(cluster) > 1 and targets.intersection(cluster):
                return True
            cluster, end = [], stop
        cluster.append(i)
        end = max(end, stop)
    return len(cluster) > 1 and bool(targets.intersection(cluster))


def _symbol_resolver(
    meta: FunctionMeta, flat_args: Sequence[object]
) -> Callable[[Any], Any] | None:
    """Maps recorded symbolic sizes to this call's integers (None when shapes are static)."""
    if not meta.size_symbols:
        return None
    bindings: dict[Any, int] = {}
    for symbol, index, dim in meta.size_symbols:
        arg = flat_args[index]
        if isinstance(arg, torch.Tensor) and dim is not None:
            bindings[symbol] = int(arg.shape[dim])
        else:
            bindings[symbol] = int(arg)  # type: ignore[call-overload]

    def resolve(value: Any) -> Any:
        if isinstance(value, torch.SymInt):
            return int(value.node.expr.xreplace(bindings))
        if isinstance(value, (list, tuple)):
            return type(value)(resolve(v) for v in value)
        if isinstance(value, dict):
            return {k: resolve(v) for k, v in value.items()}
        return value

    return resolve


def _regenerate_view(
    base: torch.Tensor, info: OutputInfo, resolve: Callable[[Any], Any] | None
) -> torch.Tensor:
    if info.requires_grad and not torch.is_grad_enabled():
        # a view the function made inside an enable_grad() block of a call under no_grad
        # carries a gradient (one made under no_grad does not: info says which)
        with torch.enable_grad():
            return _regenerate_view(base, info, resolve)
    if info.view_chain is not None:
        out = base
        for step in info.view_chain:
            out = step.apply(out, resolve)
        return out
    return base.as_strided(info.size, info.stride, base.storage_offset() + info.storage_offset)


def _finish(
    meta: FunctionMeta, flat_args: Sequence[object], traced: Sequence[torch.Tensor]
) -> list[object]:
    """Apply input mutations, then build the flat user outputs.

    The inputs of `meta.mutations_in_graph` were written by the graph; it returns no value for
    them (mutations are the last traced outputs, so the outputs keep their indices).
    """
    in_graph = meta.mutations_in_graph
    k = 0  # position in the graph's outputs
    for t in meta.traced:
        if t.kind is TracedKind.MUTATION and t.index in in_graph:
            continue
        if t.kind is TracedKind.MUTATION:
            target = flat_args[t.index]
            assert isinstance(target, torch.Tensor)
            # in the mode the program wrote it (a write inside an enable_grad() block of a
            # function called under no_grad is recorded by autograd)
            with_grad = t.index not in meta.mutated_without_grad
            if with_grad == torch.is_grad_enabled():
                target.copy_(traced[k])
            else:
                with torch.set_grad_enabled(with_grad):
                    target.copy_(traced[k])
        k += 1
    outs: list[object] = []
    resolve = _symbol_resolver(meta, flat_args)
    for info in meta.outputs:
        if info.kind is OutputKind.CONSTANT:
            outs.append(info.constant)
        elif info.kind in (OutputKind.TENSOR, OutputKind.SYMBOLIC):
            outs.append(traced[info.index])
        elif info.kind is OutputKind.ALIAS_OF_INPUT:
            base = flat_args[info.index]
            assert isinstance(base, torch.Tensor)
            outs.append(_regenerate_view(base, info, resolve) if info.view_chain != () else base)
        else:
            outs.append(_regenerate_view(traced[info.index], info, resolve))
    if meta.grad_mode_at_exit != meta.grad_mode_at_entry:
        torch._C._set_grad_enabled(meta.grad_mode_at_exit)  # left switched, as the function does
    return outs


def _entry(compiled: CompiledCallable, prechecked: bool) -> CompiledCallable:
    """How the runtime calls a compiled forward: through its ``call_prechecked`` when it has
    one and the runtime checked the inputs against the graph's example inputs (the static
    signature: sizes, strides, dtypes, devices, non-tensor values), so the compiled graph
    need not read them all again (0.2 ms per call on a 200-input graph)."""
    entry = getattr(compiled, "call_prechecked", None) if prechecked else None
    return entry if callable(entry) else compiled


def _saved_values(ctx: Any) -> list[Any]:
    """The values the forward saved, in the backward graph's order (raises once autograd
    freed them)."""
    tensors = iter(ctx.saved_tensors)
    others = iter(ctx.saved_other)
    return [next(tensors) if is_t else next(others) for is_t in ctx.saved_layout]


_KEEP_GRAPH = getattr(torch._C._autograd, "_get_current_graph_task_keep_graph", None)


def _keeps_graph() -> bool:
    """Whether the running backward keeps the graph (retain_graph=True). Unknown (a torch
    without the query): as if it frees, so a later backward may raise where eager would not."""
    if _KEEP_GRAPH is None:
        return False
    try:
        return bool(_KEEP_GRAPH())
    except RuntimeError:
        return False


def _shape_of(t: Any) -> tuple[Any, ...]:
    return (t.shape, t.stride(), t.dtype, t.device)


def _partial_backward(
    bw_gm: torch.fx.GraphModule,
    diff: Sequence[int],
    grad_inputs: Sequence[int],
    backward_from: Callable[[Any, list[Any]], tuple[Any, ...]],
    scatter: Callable[[Sequence[Any]], tuple[Any, ...]],
) -> Callable[[Any, Sequence[Any]], tuple[Any, ...]]:
    """The backward of a region when some output gradients are absent, or after one was.

    The first such backward runs the compiled backward (absent gradients as zeros), gives
    None for the input gradients no live node computes, and keeps on the context (detached:
    no reference cycle through the outputs) the saved values no live node read, as eager's
    unexecuted nodes keep theirs. Once autograd has freed the saved values, a later backward
    runs the backward graph from those kept values (``partial_backward.run``), or raises
    eager's error where it needs a freed one."""
    plans: dict[frozenset[int], partial_backward.Plan] = {}
    first_kept: dict[frozenset[int], frozenset[int]] = {}  # saved values a first backward keeps
    placeholders = [n for n in bw_gm.graph.nodes if n.op == "placeholder"]
    num_saved = len(placeholders) - len(diff)
    readers = partial_backward.saved_readers(bw_gm, num_saved)
    static_shapes = partial_backward.static_shapes(bw_gm, num_saved)

    def backward(ctx: Any, grad_outputs: Sequence[Any]) -> tuple[Any, ...]:
        tangents = [grad_outputs[k] for k in diff]
        absent = frozenset(j for j, g in enumerate(tangents) if g is None)
        the_plan = plans.get(absent)
        if the_plan is None:
            the_plan = plans[absent] = partial_backward.plan(bw_gm, num_saved, absent)
        stash: dict[int, Any] | None = getattr(ctx, "stash", None)
        # nodes run by earlier backwards that freed the graph (retain_graph=False)
        freed: frozenset[torch.fx.Node] = getattr(ctx, "freed", frozenset())
        frees = not _keeps_graph()
        if frees:
            ctx.freed = freed | the_plan.live_set if freed else the_plan.live_set
        device = next(g.device for g in tangents if g is not None)
        try:
            saved = _saved_values(ctx)
        except RuntimeError:
            if stash is None:
                raise
            if frees:
                ctx.stash = {i: v for i, v in stash.items() if readers[i] - ctx.freed}
            inputs = [stash.get(i) for i in range(num_saved)] + tangents
            metas = ctx.saved_shapes + [
                (shape, stride, dtype) for shape, stride, dtype, _ in ctx.out_shapes
            ]
            return scatter(partial_backward.run(
                bw_gm, the_plan, inputs, metas, num_saved=num_saved, device=device,
                executed=freed,
            ))
        if frees:
            # autograd frees every saved value after this call: those a node that has not run
            # yet reads are kept (detached: no reference cycle through the outputs), as
            # eager's unexecuted nodes keep theirs
            if freed:
                kept = frozenset(i for i in range(num_saved) if readers[i] - ctx.freed)
            else:  # the first backward (every step of a `loss, logits` model)
                if absent not in first_kept:
                    first_kept[absent] = frozenset(
                        i for i in range(num_saved) if readers[i] - the_plan.live_set
                    )
                kept = first_kept[absent]
            ctx.saved_shapes = (
                static_shapes if static_shapes is not None else partial_backward.shapes_of(saved)
            )
            ctx.stash = {
                i: (saved[i].detach() if isinstance(saved[i], torch.Tensor) else saved[i])
                for i in kept
            }
        for j, g in enumerate(tangents):
            if g is None:
                shape, _, dtype, dev = ctx.out_shapes[j]
                saved.append(torch.zeros(shape, dtype=dtype, device=dev))
            else:
                saved.append(g.contiguous())
        grads = list(backward_from(ctx, saved))
        # eager's backward through these outputs gives these inputs no gradient at all
        for i in the_plan.zero_grads:
            grads[grad_inputs[i]] = None
        return tuple(grads)

    return backward


def make_inference_runtime(
    meta: FunctionMeta, compiled_fw: CompiledCallable, *, prechecked: bool = False
) -> Callable[[Sequence[object]], list[object]]:
    """Flat inputs -> flat user outputs, running one compiled graph with no autograd.
    ``prechecked``: every call's inputs have the example inputs' static signature."""
    call = _entry(compiled_fw, prechecked)

    def run(flat_args: Sequence[object]) -> list[object]:
        with torch.no_grad():
            traced = _as_list(call(*flat_args))
        return _finish(meta, flat_args, traced)

    return run


def make_training_runtime(
    meta: FunctionMeta,
    compiled_fw: CompiledCallable,
    compiled_bw: CompiledCallable,
    num_fwd_outputs: int,
    *,
    gradless_inputs: Sequence[int] = (),
    prechecked: bool = False,
    bw_gm: torch.fx.GraphModule | None = None,
) -> Callable[[Sequence[object]], list[object]]:
    """Flat inputs -> flat user outputs, with gradients through one autograd.Function.

    ``gradless_inputs`` require grad but no output's gradient reaches them: they are handed
    to the autograd.Function detached, so a backward through the outputs never walks into
    their own history (eager's outputs have no edge to it: that history may already be
    freed by a backward the function ran itself). ``prechecked`` as for the inference
    runtime (the backward's inputs are never prechecked).

    ``bw_gm`` (the backward graph) lets a backward through only some of the outputs run as
    eager's per-op nodes would (``aot.partial_backward``): input gradients no live node gives
    are None, and the saved values it does not read stay for a later backward through the
    other outputs."""
    call_fw = _entry(compiled_fw, prechecked)
    grad_inputs = meta.grad_inputs
    diff = meta.differentiable_traced
    non_diff = tuple(k for k in range(num_fwd_outputs) if k not in diff)
    num_inputs = len(meta.input_requires_grad)
    # The backward's inputs (saved values, then contiguous output gradients) from a compiled
    # forward have the same layout on every call: its boxed_call(as_before=True) checks them
    # until one call passes as they are, and trusts later ones (a graph that counts its eager
    # runs, ``eager_calls``, as inductor_lite's does, says whether a forward ran compiled).
    vouch = (
        prechecked
        and getattr(compiled_fw, "eager_calls", None) is not None
        and getattr(compiled_bw, "eager_calls", None) is not None
    )

    class CompiledRegion(torch.autograd.Function):
        """The compiled forward and backward of one traced function."""

        @staticmethod
        def forward(ctx: Any, *args: Any) -> Any:
            eager_calls = getattr(compiled_fw, "eager_calls", None)
            outs = _as_list(call_fw(*args))
            # saved values from the compiled code (not a run of the graph as it came) on inputs
            # of the checked static signature: laid out as on every such call (_backward_from)
            ctx.compiled_saved = vouch and getattr(compiled_fw, "eager_calls", None) == eager_calls
            fw_outs, saved = outs[:num_fwd_outputs], outs[num_fwd_outputs:]
            # A saved value sharing memory with an input that the runtime is about to overwrite
            # (input mutation) is saved as a copy: the backward needs its forward-time value.
            mutated = {_storage_key(args[i]) for i in meta.mutated_inputs}
            if mutated:
                saved = [s.clone() if _storage_key(s) in mutated else s for s in saved]
            tensors = [s for s in saved if isinstance(s, torch.Tensor)]
            ctx.save_for_backward(*tensors)
            ctx.saved_layout = [isinstance(s, torch.Tensor) for s in saved]
            ctx.saved_other = [s for s in saved if not isinstance(s, torch.Tensor)]
            if partial is not None:
                # absent output gradients come as None: a backward through some outputs
                ctx.set_materialize_grads(False)
                ctx.out_shapes = [_shape_of(fw_outs[k]) for k in diff]
            # Symbolic-number outputs come back as plain numbers: nothing to mark for them.
            ctx.mark_non_differentiable(
                *[fw_outs[k] for k in non_diff if isinstance(fw_outs[k], torch.Tensor)]
            )
            return tuple(fw_outs)

        @staticmethod
        def backward(ctx: Any, *grad_outputs: Any) -> Any:
            if torch.is_grad_enabled():
                raise DoubleBackwardError(
                    "double backward (create_graph=True) through an aot-compiled region is not "
                    "supported: its backward runs as one compiled op with no derivative of its "
                    "own. Run this part eagerly, or call backward without create_graph."
                )
            if partial is not None and (
                getattr(ctx, "stash", None) is not None
                or any(grad_outputs[k] is None for k in diff)
            ):
                return partial(ctx, grad_outputs)
            saved = _saved_values(ctx)
            saved.extend(grad_outputs[k].contiguous() for k in diff)
            return _backward_from(ctx, saved)

    def _backward_from(ctx: Any, saved: list[Any]) -> tuple[Any, ...]:
        boxed = getattr(compiled_bw, "boxed_call", None)
        if boxed is None:
            grads = _as_list(compiled_bw(*saved))
        else:
            # the compiled backward takes the list and empties it, and lets each saved
            # activation go at its last use; autograd's own references go first (unless
            # the graph is retained for another backward)
            clear = getattr(ctx, "maybe_clear_saved_tensors", None)
            if clear is not None:
                clear()
            trusted = getattr(ctx, "compiled_saved", False)
            grads = _as_list(boxed(saved, as_before=True) if trusted else boxed(saved))
        return _scatter(grads)

    def _scatter(grads: Sequence[Any]) -> tuple[Any, ...]:
        result: list[Any] = [None] * num_inputs
        for j, i in enumerate(grad_inputs):
            result[i] = grads[j]
        return tuple(result)

    partial: Callable[[Any, Sequence[Any]], tuple[Any, ...]] | None = None
    if bw_gm is not None and len(diff) > 1:
        partial = _partial_backward(bw_gm, diff, grad_inputs, _backward_from, _scatter)

    detached = tuple(gradless_inputs)

    def run(flat_args: Sequence[object]) -> list[object]:
        args = flat_args
        if detached:
            args = list(flat_args)
            for i in detached:
                arg = args[i]
                assert isinstance(arg, torch.Tensor)
                args[i] = arg.detach()
        if meta.grad_mode_at_entry:
            traced = list(CompiledRegion.apply(*args))  # type: ignore[no-untyped-call]
        else:
            # called under no_grad, the function enables grad inside (a statement or an
            # enable_grad() block): autograd records the region only with grad on at apply
            with torch.enable_grad():
                traced = list(CompiledRegion.apply(*args))  # type: ignore[no-untyped-call]
        return _finish(meta, flat_args, traced)

    return run
