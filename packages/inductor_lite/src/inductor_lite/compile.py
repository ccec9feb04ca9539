"""``compile_fx``: the backend entry point."""

from __future__ import annotations

import ctypes
import logging
import operator
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensor

from .cache import libmvec_available, load_library
from .choices import choice
from .config import InductorConfig
from .cpp import generate_cpp
from .errors import CompilerError, InductorError, UnsupportedGraph
from .graph_lowering import lower_graph
from .input_writes import in_place_writes
from .ir import FallbackNode, LoweredGraph, Origin
from .kernel_call import kernel_call_module
from .origins import annotate_kernels
from .scheduler import Kernel, ScheduleItem, schedule
from .static_check import meta_key, static_input_check
from .tracing import extra_decompositions, kept_as_aten, trace_to_aten
from .wrapper import build_input_check, build_wrapper, ctypes_kernels, kernel_local_buffers

__all__ = ["CompiledGraph", "EagerFallback", "compile_aten_graph", "compile_fx"]

log = logging.getLogger("strata.inductor_lite")
# compile_api's perf_hints channel (``set_logs(perf_hints=True)``, ``TORCH_LOGS=perf_hints``)
hints = logging.getLogger("strata.perf_hints")


_meta_key = meta_key


def unflattener(spec: pytree.TreeSpec) -> Callable[[Sequence[Any]], Any]:
    """``pytree.tree_unflatten`` for ``spec``: a graph's output is almost always one tensor or
    a plain tuple or list of them, built directly (pytree's walk took 5-8 us per call)."""
    if spec.is_leaf():
        return operator.itemgetter(0)
    # ``children()`` from torch 2.13 (``children_specs``, before it, is deprecated there)
    getter = getattr(spec, "children", None)
    children = list(getter() if callable(getter) else spec.children_specs)
    if spec.type in (tuple, list) and all(c.is_leaf() for c in children):
        return spec.type  # type: ignore[no-any-return]
    return lambda flat: pytree.tree_unflatten(list(flat), spec)


def _same_but_unit_strides(got: object, key: object) -> bool:
    """Two tensors' meta keys that differ only in strides of dims of one element, which the
    input check accepts (static_input_check)."""
    if not (isinstance(got, tuple) and isinstance(key, tuple) and len(got) == len(key) == 4):
        return False
    if got[:3] != key[:3]:
        return False
    return all(n <= 1 or a == b for n, a, b in zip(got[2], got[3], key[3], strict=True))


def _describe(key: object) -> str:
    """An input's meta key in words: dtype, device, sizes and strides of a tensor."""
    if isinstance(key, tuple) and len(key) == 4:
        dtype, device, shape, strides = key
        return f"a {dtype} tensor on {device} of size {list(shape)} and strides {list(strides)}"
    return repr(key)


@dataclass
class CompiledGraph:
    """A graph compiled to kernels plus a wrapper; calls the original module when it must.

    The compiled code assumes the example inputs' sizes, strides and dtypes and runs
    without autograd; any call outside that (a different layout, or grad needed) runs
    the original graph instead, so results are never wrong.
    """

    gm: torch.fx.GraphModule
    run: Callable[[Sequence[Any]], tuple[object, ...]]
    out_spec: pytree.TreeSpec
    input_keys: tuple[object, ...]
    items: list[ScheduleItem]
    kernel_source: str  # the C++ translation unit or the Triton module
    wrapper_source: str
    cache_hit: bool
    lowered: LoweredGraph
    eager_calls: int = field(default=0)
    broken: bool = field(default=False)
    # graphs with size symbols: the generated per-call check (sizes as expressions of the
    # symbols, static dims exact); ``input_keys`` then only holds non-tensor inputs' values
    input_check: Callable[[Sequence[Any]], bool] | None = field(default=None)
    static_scalars: tuple[int, ...] = field(default=())
    # compiled without aot's runtime around it: the inputs it writes are checked per call
    check_write_overlap: bool = field(default=False)
    # the wrapper taking a list it empties, dropping each input at its last use (boxed_call)
    run_boxed: Callable[[list[Any]], tuple[object, ...]] | None = field(default=None)
    launched: bool = field(default=False)
    # a call_as_before call passed the input check as it was (see there)
    vouched: bool = field(default=False)
    # out_spec's unflatten (unflattener)
    unflatten: Callable[[Sequence[Any]], Any] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.unflatten = unflattener(self.out_spec)

    def _matches(self, args: Sequence[Any]) -> bool:
        if self.input_check is None:
            return tuple(_meta_key(a) for a in args) == self.input_keys
        return self.input_check(args) and all(
            _meta_key(args[k]) == self.input_keys[k] for k in self.static_scalars
        )

    def _writes_overlap(self, args: Sequence[Any]) -> bool:
        """An input the graph writes overlaps another input: the kernels, compiled for
        separate inputs, would read it stale (aot's runtime checks the same before it calls
        a graph; this covers the inference route, which reaches us without it)."""
        if not self.check_write_overlap or not self.lowered.input_writes:
            return False
        import aot

        written = {w.input for w in self.lowered.input_writes}
        positions = [k for k, spec in enumerate(self.lowered.inputs) if spec.name in written]
        return bool(aot.written_input_overlaps(args, positions))

    @property
    def kernel_count(self) -> int:
        return sum(isinstance(i, Kernel) for i in self.items)

    @property
    def fallback_count(self) -> int:
        return len(self.items) - self.kernel_count

    def __call__(self, *args: Any) -> Any:
        if len(args) == 1 and isinstance(args[0], list) and len(self.input_keys) != 1:
            args = tuple(args[0])  # the boxed calling convention
        needs_grad = torch.is_grad_enabled() and any(
            isinstance(a, torch.Tensor) and a.requires_grad for a in args
        )
        usable = not self.broken and not needs_grad
        matched = usable and self._matches(args)  # once: the check is per input, per call
        return self._call_checked(args, usable, matched)

    def _call_checked(self, args: tuple[Any, ...], usable: bool, matched: bool) -> Any:
        if usable and not matched:
            laid = self._laid_out(args)
            if laid is not args and self._matches(laid) and not self._writes_overlap(laid):
                launched = self.launched
                result = self._run(laid)
                # a call that needed a copy proves nothing of the caller's layout: prechecked
                # calls keep checking until one passes as it is
                self.launched = launched
                return result
        if not matched or self._writes_overlap(args):
            self.eager_calls += 1
            if self.eager_calls == 1:  # said once a graph: a per-call loss of the compiled code
                hints.debug("%s", self._why_eager(args, usable, matched))
            return self.gm(*args)
        return self._run(args)

    def _why_eager(self, args: Sequence[Any], usable: bool, matched: bool) -> str:
        """Why this call runs the graph as it came instead of its kernels, in words."""
        head = "inductor_lite: a compiled graph runs eagerly (and will on every such call): "
        if self.broken:
            return head + "its kernels failed before (see the warning then)"
        if not usable:
            return head + (
                "called with grad enabled and an input that requires grad; the graph was "
                "compiled for inference (compile the training step through aot, the default "
                "backend's route, or call it under torch.no_grad())"
            )
        if matched:
            return head + "an input it writes in place overlaps another input"
        if not self.lowered.symbols and len(args) == len(self.input_keys):
            for k, (a, key) in enumerate(zip(args, self.input_keys, strict=True)):
                got = _meta_key(a)
                if got != key and not _same_but_unit_strides(got, key):
                    return head + (
                        f"input {k} is {_describe(got)} where it was compiled for "
                        f"{_describe(key)}"
                    )
        return head + "its inputs' sizes, strides or dtypes are not what it was compiled for"

    def _laid_out(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """``args`` with each tensor that differs from its example only in its strides copied
        into the example's layout, where that cannot change what the graph does: static sizes,
        not an input the graph writes, not one an output is a view of. A backward's saved
        activation can come from our forward in another layout than aot's meta says (mixtral's
        expert halves: contiguous (32, 64) where the meta has a (32, 128) buffer's view), and
        running the whole backward eagerly for it cost more than the copy (2-3x the step)."""
        if self.lowered.symbols or len(args) != len(self.input_keys):
            return args
        names = [spec.name for spec in self.lowered.inputs]
        held = {w.input for w in self.lowered.input_writes}
        held |= {o.ref.buf for o in self.lowered.outputs if o.ref is not None}
        out = list(args)
        for k, (a, key) in enumerate(zip(args, self.input_keys, strict=True)):
            if not isinstance(a, torch.Tensor) or _meta_key(a) == key:
                continue
            if not isinstance(key, tuple) or len(key) != 4:  # a tensor where a number was
                return args
            dtype, device, shape, strides = key  # a tensor example's meta_key
            if names[k] in held or (a.dtype, a.device, tuple(a.shape)) != (dtype, device, shape):
                return args
            out[k] = torch.empty_strided(shape, strides, dtype=dtype, device=device).copy_(a)
        return tuple(out)

    def call_as_before(self, *args: Any) -> Any:
        """A call whose caller vouches that the inputs are laid out as on every other call it
        vouched for (aot's runtime: a backward's saved values, each from a compiled run of the
        same forward on inputs of one static signature). The per-call input check (~1 us a
        tensor; a transformer's backward takes ~80) runs until one such call passes it as the
        inputs are, which proves the layout they all share, and is left out after that."""
        if self.vouched and not self.broken and not self._writes_overlap(args):
            return self._run(args)
        needs_grad = torch.is_grad_enabled() and any(
            isinstance(a, torch.Tensor) and a.requires_grad for a in args
        )
        usable = not self.broken and not needs_grad
        matched = usable and self._matches(args)
        if matched and not self._writes_overlap(args):
            result = self._run(args)
            self.vouched = not self.broken
            return result
        return self._call_checked(args, usable, matched)

    def call_prechecked(self, *args: Any) -> Any:
        """A call whose caller (aot's runtime, with static shapes) has checked that the
        inputs have the example inputs' sizes, strides, dtypes, devices and values, with
        grad off: our own check of the same (~0.2 ms per call on a 200-input graph) is left
        out, after one call that passed it (which proves the examples are the inputs'
        layout, so a caller's wrong examples cannot reach the kernels)."""
        if not self.launched or self.broken or self.check_write_overlap:
            return self(*args)
        return self._run(args)

    def _run(self, args: Sequence[Any]) -> Any:
        try:
            flat = self.run(args)
            self.launched = True
        except Exception as exc:
            # Triton compiles kernels at their first launch, and a wrapper or kernel of ours
            # can fail where eager would not: that must not surface as an error, nor give a
            # wrong result. The graph runs as it came; an error it raises too is eager's.
            result = self.gm(*args)
            self.broken = True
            what = "failed at first launch" if isinstance(exc, CompilerError) else "failed"
            msg = f"inductor_lite: kernels {what}, running this graph eagerly: {exc}"
            log.warning(msg)
            warnings.warn(msg, RuntimeWarning, stacklevel=3)
            self.eager_calls += 1
            return result
        return self.unflatten(flat)

    def boxed_call(self, args: list[Any], *, as_before: bool = False) -> Any:
        """Call with the inputs in a list, which is emptied: each input is released at its
        last use inside the call rather than when the call returns (aot's runtime hands the
        backward its saved activations this way, so they are freed as the backward goes).

        Until a call has launched every kernel (Triton compiles at the first launch, and a
        failure there reruns the graph eagerly, which needs the inputs) this is a plain call.
        ``as_before``: the caller vouches for the inputs' layout as ``call_as_before`` says;
        a graph without a boxed wrapper (C++) is then called through it.
        """
        if as_before and self.run_boxed is None:
            out = self.call_as_before(*args)
            args.clear()
            return out
        needs_grad = torch.is_grad_enabled() and any(
            isinstance(a, torch.Tensor) and a.requires_grad for a in args
        )
        if (
            self.run_boxed is None
            or not self.launched
            or self.broken
            or needs_grad
            or not self._matches(args)
            or self._writes_overlap(args)
        ):
            out = self(*args)
            args.clear()
            return out
        try:
            flat = self.run_boxed(args)
        except Exception as exc:
            # the inputs are gone (that is the point of the boxed call): the graph cannot be
            # rerun eagerly here, as __call__ does; later calls run it eagerly
            self.broken = True
            raise InductorError(
                f"inductor_lite: a compiled graph failed after its inputs were released: {exc}"
            ) from exc
        return self.unflatten(flat)


class _FirstCallCopies:
    """Runs the copying wrapper on the first call, the one storing into inputs after it.

    Triton compiles each kernel at its first launch, and a failure there reruns the graph
    eagerly (``CompiledGraph.__call__``): had a kernel already updated an input in place,
    the rerun would apply the update twice. The copying wrapper writes inputs only after
    every kernel ran, so the first call (every compile) is safe to redo.
    """

    def __init__(
        self,
        first: Callable[[Sequence[Any]], tuple[object, ...]],
        then: Callable[[Sequence[Any]], tuple[object, ...]],
    ) -> None:
        self.run = first
        self.then = then

    def __call__(self, args: Sequence[Any]) -> tuple[object, ...]:
        out = self.run(args)
        self.run = self.then
        return out


@dataclass
class EagerFallback:
    """What compile_fx returns when it could not compile: the graph itself, unchanged."""

    gm: torch.fx.GraphModule
    reason: str

    def __call__(self, *args: Any) -> Any:
        return self.gm(*args)


def compile_fx(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[object],
    *,
    config: InductorConfig | None = None,
) -> Callable[..., Any]:
    """Compile a torch-level FX graph into fused C++ kernels plus aten calls.

    Usable as the ``backend=`` of ``torch.compile`` and as compile_api's default backend.
    Any failure to lower or compile yields the original graph (one warning), unless
    ``config.fallback == "raise"``.
    """
    config = config or InductorConfig()
    subclass = _subclass_input(example_inputs)
    if subclass is not None:
        return _give_up(gm, UnsupportedGraph(subclass), config)
    symbolic = _symbolic_input(example_inputs)
    if symbolic is not None and not config.use_aot:
        # the inference-only route traces with make_fx on the examples: it has no shape
        # environment of its own, and tracing symbolic fakes would add symbols to the caller's
        return _give_up(
            gm,
            UnsupportedGraph(f"symbolic shapes need the aot route ({symbolic})"),
            config,
        )
    if config.use_aot:
        try:
            return _compile_with_aot(gm, example_inputs, config)
        except Exception as exc:
            if config.fallback == "raise":
                raise
            if symbolic is not None or _refused_for_semantics(exc):
                # aot refused what a functional graph cannot express (a write through an
                # overlapping view, an input's storage swapped): the inference trace below
                # functionalizes the same way and would be as wrong
                return _give_up(gm, exc, config)
            log.warning("aot could not handle this graph (%s); compiling for inference only", exc)
    try:
        aten_gm, out_spec = trace_to_aten(gm, example_inputs)
        compiled = _compile(gm, aten_gm, out_spec, example_inputs, config)
        compiled.check_write_overlap = True
        return _graphed(compiled, config)
    except Exception as exc:
        return _give_up(gm, exc, config)


def _graphed(compiled: CompiledGraph, config: InductorConfig) -> Callable[..., Any]:
    """``compiled``, replayed from CUDA graphs when the config asks for them."""
    if not config.cudagraphs:
        return compiled
    from .cudagraphs import cudagraph_runner

    return cudagraph_runner(compiled)


def _subclass_input(example_inputs: Sequence[object]) -> str | None:
    import aot

    for k, x in enumerate(example_inputs):
        if aot.has_torch_overrides(x):
            return (
                f"input {k} is a {type(x).__name__}, a tensor subclass with torch overrides "
                "(kernels would return plain tensors)"
            )
    return None


def _refused_for_semantics(exc: Exception) -> bool:
    import aot

    return isinstance(exc, aot.AotUnsupportedError)


def _symbolic_input(example_inputs: Sequence[object]) -> str | None:
    for k, x in enumerate(example_inputs):
        if isinstance(x, torch.SymInt | torch.SymFloat | torch.SymBool):
            return f"input {k} is a symbolic scalar"
        if isinstance(x, torch.Tensor) and not all(
            isinstance(s, int) for s in (*x.shape, *x.stride())
        ):
            return f"input {k} has symbolic sizes"
    return None


def compile_aten_graph(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[object],
    *,
    config: InductorConfig | None = None,
) -> Callable[..., Any]:
    """Compile a functional aten-level graph (what aot hands its compilers).

    The result takes the graph's flat inputs and returns what the graph returns.
    """
    config = config or InductorConfig()
    try:
        out_spec = _output_spec(gm)
        return _graphed(_compile(gm, gm, out_spec, example_inputs, config), config)
    except Exception as exc:
        return _give_up(gm, exc, config)


def _output_spec(gm: torch.fx.GraphModule) -> pytree.TreeSpec:
    out = next(n for n in gm.graph.nodes if n.op == "output")
    return pytree.tree_flatten(out.args[0])[1]


# Generated code and hints, for whoever listens (compile_api's output_code and perf_hints logs,
# its structured trace and debug dumps).
_code_log = logging.getLogger("strata.output_code")
_hints_log = logging.getLogger("strata.perf_hints")


def _show_code(
    kernel_source: str, wrapper_source: str, triton: bool, items: Sequence[object], nodes: int,
    *, origins: Mapping[str, Sequence[Origin]],
) -> None:
    """Log the generated kernels (with their source comments) and wrapper, and which ops
    stayed aten calls."""
    if _code_log.isEnabledFor(logging.DEBUG):
        language = "Triton" if triton else "C++"
        kernels = [i for i in items if isinstance(i, Kernel)]
        kernel_source = annotate_kernels(kernel_source, kernels, origins, triton=triton)
        _code_log.debug(
            "output_code:\n# inductor_lite output for an aten graph of %d nodes\n"
            "# ---- kernels (%s) ----\n%s\n# ---- wrapper (Python) ----\n%s",
            nodes, language, kernel_source, wrapper_source,
            extra={"strata_artifact": "output_code"},
        )
    if _hints_log.isEnabledFor(logging.DEBUG):
        fallbacks = [i for i in items if not isinstance(i, Kernel)]
        if fallbacks:
            names = sorted({str(getattr(i, "target", getattr(i, "name", i))) for i in fallbacks})
            _hints_log.debug(
                "inductor_lite: %d of %d steps run as aten calls, not generated kernels: %s",
                len(fallbacks), len(items), ", ".join(names[:20]),
            )


def _give_up(gm: torch.fx.GraphModule, exc: Exception, config: InductorConfig) -> EagerFallback:
    if config.fallback == "raise":
        raise exc
    refused = isinstance(exc, UnsupportedGraph) or _refused_for_semantics(exc)
    kind = "unsupported graph" if refused else "compile failure"
    msg = f"inductor_lite: {kind}, running this graph eagerly: {exc}"
    _hints_log.debug("this graph runs eagerly, not compiled: %s", exc)
    if not isinstance(exc, InductorError) and not refused:
        log.exception(msg)
    else:
        log.warning(msg)
    warnings.warn(msg, RuntimeWarning, stacklevel=3)
    return EagerFallback(gm, str(exc))


def _compile_for_inference(
    gm: torch.fx.GraphModule, example_inputs: Sequence[object], config: InductorConfig
) -> Callable[..., Any] | None:
    """Under no_grad, a graph that writes no input needs nothing of aot's runtime.

    aot's per-call work (its cache key over every input, its autograd.Function) was ~70 us
    of a 2 ms CNN call with 18 inputs. The inference trace (``trace_to_aten``) reaches the
    same aten graph; a call with grad enabled later runs the graph as it came (the capture
    layer's grad-mode guard recompiles before that). None when this route does not apply:
    symbolic sizes, fake example inputs, or a graph that writes an input (aot's runtime
    writes those back).
    """
    if (
        torch.is_grad_enabled()
        # a graph that switches grad mode may enable it inside: aot traces it per region
        or any(n.target is torch._C._set_grad_enabled for n in gm.graph.nodes)
        or _symbolic_input(example_inputs) is not None
        # inside torch.compile (its tracing context, or its fake tensors): make_fx would trace
        # in its fake mode and add sizes to its shape environment that it cannot guard
        or torch._guards.TracingContext.try_get() is not None
        or any(isinstance(x, FakeTensor) for x in example_inputs)
        # sizes symbolic in the capture (compile_api's dynamic=True): aot keeps them
        or _symbolic_input(
            [
                n.meta.get("example_value", n.meta.get("val"))
                for n in gm.graph.nodes
                if n.op == "placeholder"
            ]
        )
        is not None
    ):
        return None
    try:
        aten_gm, out_spec = trace_to_aten(gm, example_inputs)
    except Exception as exc:
        log.debug("inference trace failed (%s); compiling through aot", exc)
        return None
    if any(
        isinstance(n.target, torch._ops.OpOverload) and n.target._schema.is_mutable
        for n in aten_gm.graph.nodes
    ):
        return None
    return _graphed(_compile(gm, aten_gm, out_spec, example_inputs, config), config)


def _compile_with_aot(
    gm: torch.fx.GraphModule, example_inputs: Sequence[object], config: InductorConfig
) -> Callable[..., Any]:
    inference = _compile_for_inference(gm, example_inputs, config)
    if inference is not None:
        return inference
    import aot

    table = dict(aot.core_decompositions())
    table.update(extra_decompositions())
    for op in kept_as_aten():
        table.pop(op, None)

    def backend(graph: torch.fx.GraphModule, inputs: Sequence[object]) -> Callable[..., Any]:
        return compile_aten_graph(graph, inputs, config=config)

    # inference graphs (an optimizer step) then end with copy_(input, new value): the kernel
    # computing the new value can store it straight into the input (input_writes.py)
    # min-cut on CUDA: the forward saves the cheapest set of values the backward can rebuild
    # the rest from with pointwise ops (a GELU's output is recomputed from its input inside
    # the backward's fused kernel instead of living in memory between the passes); on CPU
    # aot's cpu_partition, a min-cut that recomputes only what fuses into the backward's
    # kernels and counts each saved tensor's fixed cost (docs/saved-2026-11-27.md)
    cuda = any(isinstance(x, torch.Tensor) and x.is_cuda for x in example_inputs)
    return aot.aot_module_simplified(
        gm,
        example_inputs,
        backend,
        backend,
        partition_fn=aot.min_cut_partition if cuda else aot.cpu_partition,
        decompositions=table,
        keep_input_mutations=True,
    )


def _compile(
    gm: torch.fx.GraphModule,
    aten_gm: torch.fx.GraphModule,
    out_spec: pytree.TreeSpec,
    example_inputs: Sequence[object],
    config: InductorConfig,
) -> CompiledGraph:
    def compile_branch(branch: torch.fx.GraphModule, inputs: Sequence[object]) -> Any:
        return compile_aten_graph(branch, inputs, config=config)  # each cond branch

    lowered = lower_graph(aten_gm, example_inputs, config, compile_branch)
    items = schedule(lowered)
    use_triton = config.codegen == "triton" or (
        config.codegen == "auto" and lowered.device.type == "cuda"
    )
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    templates: list[str] = []
    if use_triton and config.max_autotune:
        from .autotune import autotune_matmuls

        items, templates = autotune_matmuls(lowered, items, config, interpret=interpret)
    for item in items:
        if isinstance(item, FallbackNode) and item.target in kept_as_aten():
            choice(str(item.target), "aten", "its fused kernel beats its decomposition")
    kernels = [i for i in items if isinstance(i, Kernel)]
    in_place = in_place_writes(lowered, items) if config.write_inputs_in_place else {}
    cache_hit = False
    run_boxed = None
    if use_triton:
        from .triton_codegen import generate_triton
        from .triton_runtime import triton_kernels

        local = kernel_local_buffers(lowered, items)
        kernel_source, tsources = generate_triton(
            kernels, lowered.buffers, interpret=interpret, local=local
        )
        kernel_source += "".join(f"\n{t}" for t in templates)  # shown, not loaded from here
        fns = (
            triton_kernels(
                kernel_source, tsources, config.triton_autotune_cache, config.triton_compile_threads
            )
            if kernels
            else {}
        )
        run, wrapper_source = build_wrapper(lowered, items, fns, pass_pointers=False)
        if not in_place and not lowered.guards:
            run_boxed, _ = build_wrapper(lowered, items, fns, pass_pointers=False, boxed=True)
        if in_place:
            copying = run
            stores, wrapper_source = build_wrapper(
                lowered, items, fns, pass_pointers=False, in_place=in_place, safe=copying
            )
            run = _FirstCallCopies(copying, stores)
    else:
        if lowered.device.type != "cpu":
            raise UnsupportedGraph("C++ code generation needs CPU tensors")
        libmvec = bool(kernels) and config.vector_libm and libmvec_available(config)
        kernel_source, sources = generate_cpp(
            kernels, lowered.buffers, config.parallel_threshold, libmvec=libmvec
        )
        cfns = {}
        check = None
        if kernels:
            loaded = load_library(kernel_source, config, ("-lmvec",) if libmvec else ())
            cache_hit = loaded.cache_hit
            loaded.lib.strata_set_num_threads(config.num_threads)
            cfns = ctypes_kernels(
                loaded.lib, sources, kernel_call_module(config.cache_dir, config.cxx)
            )
            check = loaded.lib.strata_take_index_error
            check.restype = ctypes.c_int
        kept = config.kept_buffer_bytes
        run, wrapper_source = build_wrapper(
            lowered, items, cfns, pass_pointers=True, index_check=check, kept_bytes=kept
        )
        if in_place:
            run, wrapper_source = build_wrapper(
                lowered, items, cfns, pass_pointers=True, index_check=check,
                in_place=in_place, safe=run, kept_bytes=kept,
            )
    log.info(
        "compiled graph: %d kernels, %d aten fallbacks, %d matmul templates, %d/%d input writes "
        "in place (cache %s)%s",
        len(kernels),
        len(items) - len(kernels) - len(templates),
        len(templates),
        len(in_place),
        len(lowered.input_writes),
        "hit" if cache_hit else "miss",
        f", size symbols {[b.symbol.name for b in lowered.symbols]}" if lowered.symbols else "",
    )
    _show_code(
        kernel_source, wrapper_source, use_triton, items, len(aten_gm.graph.nodes),
        origins=lowered.origins,
    )
    input_check = None
    static_scalars: tuple[int, ...] = ()
    if lowered.symbols:
        input_check = build_input_check(lowered)
        bound = set(lowered.scalar_inputs) | set(lowered.float_inputs)
        bound |= {b.input for b in lowered.symbols if b.boolean}
        static_scalars = tuple(
            k
            for k, a in enumerate(example_inputs)
            if not isinstance(a, torch.Tensor) and k not in bound
        )
    else:
        input_check = static_input_check(example_inputs)
    return CompiledGraph(
        gm,
        run,
        out_spec,
        tuple(_meta_key(a) for a in example_inputs),
        items,
        kernel_source,
        wrapper_source,
        cache_hit,
        lowered,
        input_check=input_check,
        static_scalars=static_scalars,
        run_boxed=run_boxed,
    )
