"""aot_function, aot_module and aot_module_simplified: the public entry points."""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
import warnings
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

import attrs
import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils import _pytree as pytree

from aot.analysis import FunctionMeta, analyse, fresh_fake_inputs
from aot.decompositions import DecompositionTable
from aot.errors import AotUnsupportedError
from aot.higher_order import outside_capture_context
from aot.partition import PartitionStats, default_partition, partition_stats
from aot.rng_replay import replay_checkpointed_random_ops
from aot.runtime import (
    CompiledCallable,
    make_inference_runtime,
    make_training_runtime,
    written_input_overlaps,
)
from aot.signature import leaf_key, overrides, signature_check
from aot.source_meta import SourceTracing
from aot.trace import keep_mutations_in_forward, trace_inference, trace_joint

__all__ = [
    "AotCallable",
    "AotFunction",
    "AotModule",
    "CompiledArtifacts",
    "Compiler",
    "PartitionFn",
    "aot_function",
    "aot_module",
    "aot_module_simplified",
]

log = logging.getLogger("strata.aot")


class Compiler(Protocol):
    """A backend: compiles an aten graph for the given (fake) example inputs."""

    def __call__(
        self, gm: torch.fx.GraphModule, example_inputs: Sequence[object], /
    ) -> CompiledCallable: ...


class PartitionFn(Protocol):
    """Splits a joint graph into (forward graph, backward graph)."""

    def __call__(
        self, joint_gm: torch.fx.GraphModule, joint_inputs: Sequence[object], /, *,
        num_fwd_outputs: int,
    ) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule]: ...


@attrs.define
class CompiledArtifacts:
    """One specialization's graphs, kept for inspection, tests and benchmarks."""

    meta: FunctionMeta
    out_spec: pytree.TreeSpec
    fw_gm: torch.fx.GraphModule  # the inference graph when bw_gm is None
    bw_gm: torch.fx.GraphModule | None
    joint_gm: torch.fx.GraphModule | None
    stats: PartitionStats | None  # what the forward saves for the backward (training only)
    run: Callable[[Sequence[object]], list[object]]
    unflatten: Callable[[list[object]], Any] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.unflatten = _unflattener(self.out_spec)


# aot's graphs as text, for whoever listens (compile_api's aot_graphs log, trace and dumps).
_graphs_log = logging.getLogger("strata.aot_graphs")


def _show_graph(kind: str, gm: torch.fx.GraphModule) -> None:
    """Log ``gm`` with shapes and source lines under ``kind``, when someone listens."""
    if not _graphs_log.isEnabledFor(logging.DEBUG):
        return
    try:
        text = gm.print_readable(print_output=False, include_stride=True, include_device=True)
    except Exception:  # a graph print_readable cannot render: its plain code
        text = gm.code
    _graphs_log.debug("%s:\n%s", kind, text, extra={"strata_artifact": kind})


def _unflattener(spec: pytree.TreeSpec) -> Callable[[list[object]], Any]:
    """``tree_unflatten`` for one output structure, with the common shapes (one value; a flat
    tuple or list of values) done directly: pytree's general walk costs ~5 us per call, more
    than the rest of a small compiled call's overhead."""
    if spec.is_leaf():
        return lambda flat: flat[0]
    children = spec.children() if callable(getattr(spec, "children", None)) else spec.children_specs
    flat_children = all(c.is_leaf() for c in children)
    if flat_children and spec.type is tuple:
        return tuple
    if flat_children and spec.type is list:
        return list
    return lambda flat: pytree.tree_unflatten(flat, spec)


def _overlap(flat_args: Sequence[object], written: Sequence[int]) -> bool:
    # A tensor subclass's __torch_function__ is user code: reading strides and offsets must not
    # run it (eager would not), so the check reads them with overrides off.
    with torch._C.DisableTorchFunctionSubclass():
        return written_input_overlaps(flat_args, written)


def _placeholder_vals(gm: torch.fx.GraphModule) -> list[object]:
    return [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]


def _is_symbolic(value: object) -> bool:
    if isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool):
        return True
    if isinstance(value, torch.Tensor):
        dims = (*value.shape, *value.stride(), value.storage_offset())
        return any(isinstance(d, torch.SymInt) for d in dims)
    return False


def _refuse_overrides(flat_args: Sequence[object]) -> None:
    for i, a in enumerate(flat_args):
        if isinstance(a, torch.Tensor) and type(a) is not torch.Tensor and overrides(a):
            raise AotUnsupportedError(
                f"input {i} is a {type(a).__name__}, a tensor subclass that takes part in "
                "torch ops; aot traces plain tensors (its type and overrides would be lost)"
            )


def _fake_mode_for(flat_args: Sequence[object]) -> Any:
    for a in flat_args:
        if isinstance(a, FakeTensor):
            return a.fake_mode
    # Real tensors held by the function itself (module constants) are faked on the fly.
    return FakeTensorMode(allow_non_fake_inputs=True)


def _drop_pending_unbacked(fake_mode: Any) -> None:
    """Forget unbacked symbols that were allocated but never bound to an op's output.

    make_fx checks, after each op it records, that every freshly allocated unbacked symbol
    (from `.item()`, `nonzero`, ...) appears in that op's output. Symbols still pending here were
    allocated outside our trace: by the capture layer's fake propagation of an op it then dropped
    (e.g. `bool(t)` before a graph break), or by our own analysis run, which records no graph.
    Neither belongs to the trace about to start, so leaving them would fail it with
    PendingUnbackedSymbolNotFound on its first op.
    """
    shape_env = getattr(fake_mode, "shape_env", None)
    pending = getattr(shape_env, "pending_fresh_unbacked_symbols", None)
    if pending:
        log.debug("dropping unbacked symbols allocated outside aot's trace: %s", pending)
        pending.clear()


@contextmanager
def preserved_rng_state() -> Iterator[None]:
    """Compiling draws no random numbers the program would see: the global CPU (and, when
    initialised, CUDA) generators are put back as they were, so a seeded program's first
    compiled call draws eager's dropout masks."""
    cpu = torch.random.get_rng_state()
    cuda_on = torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
    cuda = torch.cuda.get_rng_state_all() if cuda_on else None
    try:
        yield
    finally:
        torch.random.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


# how many signatures keep a generated check (a call that alternates grad modes, or a few
# shapes, finds its graphs without building a key)
_RECENT_SIGNATURES = 4

class _FailedBefore(AotUnsupportedError):
    """An input signature whose compile failed earlier (it is not retried)."""


def _warn_outside_strata(message: str) -> None:
    """One RuntimeWarning (per message) attributed to the first frame outside torch and
    Strata's layers: the user's line that ran the compiled code."""
    frame = sys._getframe(1)
    while frame.f_back is not None and (
        frame.f_code.co_filename.startswith(_LIBRARY_DIRS)
        or frame.f_code.co_filename.startswith("<strata")
    ):
        frame = frame.f_back
    if message in _warned:
        return
    _warned.add(message)
    warnings.warn_explicit(
        message, RuntimeWarning, frame.f_code.co_filename, frame.f_lineno, module="aot"
    )


_warned: set[str] = set()
# torch's and Strata's callers of aot: skipped when a warning looks for the user's line
_LIBRARY_DIRS = tuple(
    os.path.dirname(origin) + os.sep
    for name in ("torch", "aot", "inductor_lite", "compile_api")
    if (spec := importlib.util.find_spec(name)) is not None and (origin := spec.origin)
)


class AotFunction:
    """A function of flat inputs, compiled once per input signature.

    The signature is the grad mode plus, per input, its shape, strides, dtype, device and
    requires_grad (tensors) or its value (other hashable inputs). A new signature traces and
    compiles again. Calls return what the function returns (any pytree).
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        fw_compiler: Compiler,
        bw_compiler: Compiler | None,
        partition_fn: PartitionFn,
        decompositions: DecompositionTable | None,
        *,
        symbolic_inputs: Sequence[object] | None = None,
        keep_input_mutations: bool = False,
        traced_fn: Callable[..., Any] | None = None,
        sources: SourceTracing | None = None,
    ) -> None:
        self.fn = fn
        # What is traced, when it differs from fn: a captured graph run node by node so that
        # the aten graphs keep its source lines (sources, see aot.source_meta).
        self.traced_fn = traced_fn if traced_fn is not None else fn
        self.sources = sources
        # inference graphs write mutated inputs themselves (final copy_ nodes)
        self.keep_input_mutations = keep_input_mutations
        # With dynamic shapes every compile traces these symbolic values (one per input),
        # whatever the concrete sizes of the call that missed the cache.
        self.symbolic_inputs = list(symbolic_inputs) if symbolic_inputs is not None else None
        self.dynamic = symbolic_inputs is not None
        self.fw_compiler = fw_compiler
        self.bw_compiler = bw_compiler if bw_compiler is not None else fw_compiler
        self.partition_fn = partition_fn
        self.decompositions = decompositions
        self.cache: dict[Hashable, CompiledArtifacts | None] = {}
        # A backend body (aot_module_simplified): a signature that fails to compile after the
        # first runs the function itself (the captured graph, eager-correct), with a warning.
        self.eager_on_error = False
        self.last: CompiledArtifacts | None = None
        # (check, artifacts) of the signatures hit last, most recent first: a call tries these
        # generated checks before it builds the signature's key
        self._recent: list[tuple[Callable[[Sequence[object]], bool], CompiledArtifacts]] = []
        self._out_spec: pytree.TreeSpec | None = None

    def __call__(self, *flat_args: object) -> Any:
        """Run on flat inputs."""
        if self.eager_on_error:
            try:
                art = self.artifacts_for(flat_args)
            except _FailedBefore:
                return self.fn(*flat_args)  # warned at its first failure
            except Exception as exc:  # a later signature's compile: the function is correct
                log.debug("aot could not compile a new input signature", exc_info=True)
                _warn_outside_strata(
                    f"aot could not compile this graph for a new input signature "
                    f"({type(exc).__name__}: {exc}); running it eagerly for such calls"
                )
                return self.fn(*flat_args)
        else:
            art = self.artifacts_for(flat_args)
        if art.meta.mutated_inputs and _overlap(flat_args, art.meta.mutated_inputs):
            # the graphs assume separate inputs; the function itself is eager-correct
            log.debug("a mutated input overlaps another input: running the function eagerly")
            return self.fn(*flat_args)
        return art.unflatten(art.run(flat_args))

    def artifacts_for(self, flat_args: Sequence[object]) -> CompiledArtifacts:
        """The compiled graphs for this input signature, compiling them on a miss."""
        with torch._C.DisableTorchFunctionSubclass():  # metadata reads run no user override
            # the signatures seen most recently, each as one generated check (no key built)
            for n, (check, art) in enumerate(self._recent):
                if check(flat_args):
                    if n:
                        self._recent.insert(0, self._recent.pop(n))
                    self.last = art
                    return art
            grad = torch.is_grad_enabled()
            key = (grad, tuple(leaf_key(a, self.dynamic) for a in flat_args))
        if key in self.cache:
            cached = self.cache[key]
            if cached is None:
                raise _FailedBefore("this input signature failed to compile before")
            art = cached
        else:
            self.cache[key] = None  # a failure below is not retried on every call
            with preserved_rng_state(), outside_capture_context():
                art = self._compile(flat_args)
            self.cache[key] = art
        with torch._C.DisableTorchFunctionSubclass():
            self._recent.insert(0, (signature_check(flat_args, self.dynamic, grad), art))
        del self._recent[_RECENT_SIGNATURES:]
        self.last = art
        return art

    def _flat_fn(self, *flat_args: object) -> list[object]:
        flat_out, self._out_spec = pytree.tree_flatten(self.traced_fn(*flat_args))
        return list(flat_out)

    def _compile(self, flat_args: Sequence[object]) -> CompiledArtifacts:
        _refuse_overrides(flat_args)
        rg = [isinstance(a, torch.Tensor) and bool(a.requires_grad) for a in flat_args]
        if self.symbolic_inputs is not None:
            flat_args = self.symbolic_inputs  # sizes from here; requires_grad from the call
        fake_mode = _fake_mode_for(flat_args)
        _drop_pending_unbacked(fake_mode)
        # In the caller's grad mode, restored after (the function may switch it): whether any
        # output needs grad is decided op by op, in the mode of each op's own region, so a
        # function entered under no_grad that enables grad inside still trains.
        with torch.set_grad_enabled(torch.is_grad_enabled()):
            meta = analyse(self._flat_fn, fresh_fake_inputs(flat_args, fake_mode, requires_grad=rg),
                           fake_mode)
        out_spec = self._out_spec
        assert out_spec is not None
        trace_inputs = fresh_fake_inputs(flat_args, fake_mode, requires_grad=[False] * len(rg))
        _drop_pending_unbacked(fake_mode)
        if not any(rg) or not meta.differentiable_traced:
            if self.keep_input_mutations and meta.mutated_inputs:
                meta = attrs.evolve(meta, mutations_in_graph=meta.mutated_inputs)
            gm = trace_inference(self._flat_fn, meta, trace_inputs, fake_mode,
                                 self.decompositions)
            _show_graph("aot_inference_graph", gm)
            compiled = self.fw_compiler(gm, _placeholder_vals(gm))
            log.info("compiled an inference graph with %d nodes", len(gm.graph.nodes))
            return CompiledArtifacts(meta, out_spec, gm, None, None, None,
                                     make_inference_runtime(meta, compiled,
                                                            prechecked=not self.dynamic))
        annotate = self.sources.annotate_backward if self.sources else None
        joint = trace_joint(self._flat_fn, meta, trace_inputs, fake_mode, self.decompositions,
                            before_backward=annotate)
        replay_checkpointed_random_ops(joint.gm)  # recomputed dropout: the forward's mask
        fw_gm, bw_gm = self.partition_fn(
            joint.gm, joint.example_inputs, num_fwd_outputs=joint.num_fwd_outputs
        )
        stats = partition_stats(fw_gm, joint.num_fwd_outputs)
        num_fwd_outputs = joint.num_fwd_outputs
        if self.keep_input_mutations:
            kept = keep_mutations_in_forward(fw_gm, meta, num_fwd_outputs)
            meta = attrs.evolve(meta, mutations_in_graph=kept)
            num_fwd_outputs -= len(kept)
        _show_graph("aot_joint_graph", joint.gm)
        _show_graph("aot_forward_graph", fw_gm)
        _show_graph("aot_backward_graph", bw_gm)
        compiled_fw = self.fw_compiler(fw_gm, _placeholder_vals(fw_gm))
        compiled_bw = self.bw_compiler(bw_gm, _placeholder_vals(bw_gm))
        log.info(
            "compiled forward (%d nodes) and backward (%d nodes); %d values (%d bytes) saved",
            len(fw_gm.graph.nodes), len(bw_gm.graph.nodes), stats.num_saved, stats.saved_bytes,
        )
        run = make_training_runtime(meta, compiled_fw, compiled_bw, num_fwd_outputs,
                                    gradless_inputs=joint.gradless_inputs(meta),
                                    prechecked=not self.dynamic, bw_gm=bw_gm)
        return CompiledArtifacts(meta, out_spec, fw_gm, bw_gm, joint.gm, stats, run)


class AotCallable:
    """What aot_function returns: call it like the original function.

    One `AotFunction` per input pytree structure; each caches its graphs per signature.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        fw_compiler: Compiler,
        bw_compiler: Compiler | None,
        partition_fn: PartitionFn,
        decompositions: DecompositionTable | None,
        *,
        keep_input_mutations: bool = False,
    ) -> None:
        self.fn = fn
        self.__wrapped__ = fn
        self._options = (fw_compiler, bw_compiler, partition_fn, decompositions)
        self._keep_input_mutations = keep_input_mutations
        self._by_spec: dict[str, AotFunction] = {}
        self._last: AotFunction | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the compiled function (tracing and compiling first for a new signature)."""
        flat, in_spec = pytree.tree_flatten((args, kwargs))
        compiled = self._by_spec.get(repr(in_spec))
        if compiled is None:
            fn = self.fn

            def unflattened(*flat_args: object) -> Any:
                a, kw = pytree.tree_unflatten(list(flat_args), in_spec)
                return fn(*a, **kw)

            compiled = AotFunction(unflattened, *self._options,
                                   keep_input_mutations=self._keep_input_mutations)
            self._by_spec[repr(in_spec)] = compiled
        self._last = compiled
        return compiled(*flat)

    @property
    def artifacts(self) -> CompiledArtifacts | None:
        """The graphs used by the most recent call (None before the first call)."""
        return self._last.last if self._last is not None else None


def aot_function(
    fn: Callable[..., Any],
    fw_compiler: Compiler,
    bw_compiler: Compiler | None = None,
    partition_fn: PartitionFn = default_partition,
    decompositions: DecompositionTable | None = None,
    *,
    keep_input_mutations: bool = False,
) -> AotCallable:
    """Compile `fn` ahead of time: forward and backward aten graphs behind one autograd op.

    `fn` takes and returns pytrees of tensors (and other values). On each new input signature it
    is traced to a functional aten joint graph, split by `partition_fn`, and the two halves are
    compiled with `fw_compiler` and `bw_compiler` (default: `fw_compiler`). With grad mode off or
    no input requiring grad only a forward graph is traced and compiled.

    `keep_input_mutations=True` is for a compiler that can write inputs in place: an inference
    graph then ends with one `aten.copy_(input, new_value)` per mutated input (its only mutating
    nodes) instead of returning the new values for the runtime to copy back. Training graphs
    always return them.
    """
    return AotCallable(fn, fw_compiler, bw_compiler, partition_fn, decompositions,
                       keep_input_mutations=keep_input_mutations)


class AotModule(torch.nn.Module):
    """A module whose forward runs through aot; parameters and buffers are graph inputs.

    It holds the original module as `orig_module`, so `parameters()`, `state_dict()` and
    optimizers see the very same tensors, and buffer updates (BatchNorm running statistics) land
    in the original buffers.
    """

    def __init__(self, module: torch.nn.Module, compiled: AotCallable) -> None:
        super().__init__()
        self.orig_module = module
        self._compiled = compiled

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the compiled module on the current parameters, buffers and training flags."""
        state: dict[str, torch.Tensor] = dict(
            self.orig_module.named_parameters(remove_duplicate=False)
        )
        state.update(self.orig_module.named_buffers(remove_duplicate=False))
        modes = tuple(m.training for m in self.orig_module.modules())
        return self._compiled(modes, state, *args, **kwargs)

    @property
    def artifacts(self) -> CompiledArtifacts | None:
        """The graphs used by the most recent call."""
        return self._compiled.artifacts


def aot_module(
    module: torch.nn.Module,
    fw_compiler: Compiler,
    bw_compiler: Compiler | None = None,
    partition_fn: PartitionFn = default_partition,
    decompositions: DecompositionTable | None = None,
    *,
    keep_input_mutations: bool = False,
) -> AotModule:
    """Compile a module's forward with aot; parameters and buffers become graph inputs.

    Training flags (`module.train()` / `.eval()`) are part of the compiled signature, so switching
    modes traces again instead of reusing a graph traced in the other mode.
    `keep_input_mutations` as for `aot_function`.
    """

    def functional_forward(
        modes: tuple[bool, ...], state: dict[str, torch.Tensor], *args: Any, **kwargs: Any
    ) -> Any:
        del modes  # only part of the cache key: the module's flags are read directly
        return torch.func.functional_call(module, state, args, kwargs)

    compiled = aot_function(functional_forward, fw_compiler, bw_compiler, partition_fn,
                            decompositions, keep_input_mutations=keep_input_mutations)
    return AotModule(module, compiled)


def _symbolic_examples(
    gm: torch.nn.Module, example_inputs: Sequence[object]
) -> list[object] | None:
    """The graph's own symbolic example values, when the inputs are dynamic; else None.

    A capture layer that made sizes symbolic passes SymInts (and maybe real tensors) as example
    inputs; the fake tensors with symbolic sizes live on the placeholders' metadata.
    """
    values: list[object] = []
    if isinstance(gm, torch.fx.GraphModule):
        values = [n.meta.get("example_value", n.meta.get("val"))
                  for n in gm.graph.nodes if n.op == "placeholder"]
    # Symbolic either in the inputs themselves (torch.compile passes SymInts) or only on the
    # placeholders (a capture layer may pass the real values as example inputs).
    # A graph with data-dependent (unbacked) symbols, from .item() or nonzero, is traced in
    # its capture layer's fake mode too: that mode's ShapeEnv knows those symbols.
    unbacked = isinstance(gm, torch.fx.GraphModule) and any(
        "unbacked_bindings" in n.meta for n in gm.graph.nodes
    )
    if not unbacked and not any(_is_symbolic(e) for e in [*example_inputs, *values]):
        return None
    if not values:
        raise AotUnsupportedError(
            "dynamic example inputs need a GraphModule with placeholder metadata"
        )
    if len(values) != len(example_inputs) or any(
        isinstance(e, torch.Tensor | torch.SymInt) and v is None
        for e, v in zip(example_inputs, values, strict=True)
    ):
        raise AotUnsupportedError(
            "dynamic example inputs without symbolic example values on the graph's placeholders"
        )
    return [v if isinstance(e, torch.Tensor | torch.SymInt) else e
            for e, v in zip(example_inputs, values, strict=True)]


def _refuse_autograd_calls(gm: torch.nn.Module) -> None:
    """A graph that runs autograd itself (``torch.autograd.grad(y, x, create_graph=True)``, a
    gradient penalty) is not traced: the joint trace would differentiate through a backward
    run inside make_fx (double backward under functionalization, which crashed the process
    under torch.profiler), and the compiled region's own backward has no derivative. The
    graph as captured runs it eagerly."""
    if not isinstance(gm, torch.fx.GraphModule):
        return
    engine_calls = {torch.autograd.grad, torch.autograd.backward}
    for node in gm.graph.nodes:
        if (node.op == "call_function" and node.target in engine_calls) or (
            node.op == "call_method" and node.target == "backward"
        ):
            raise AotUnsupportedError(
                f"the graph calls autograd itself ({node.format_node()}); aot traces one "
                "forward and derives its backward"
            )


def aot_module_simplified(  # noqa: PLR0917 (signature fixed by docs/INTERFACES.md)
    gm: torch.nn.Module,
    example_inputs: Sequence[object],
    fw_compiler: Compiler,
    bw_compiler: Compiler | None = None,
    partition_fn: PartitionFn = default_partition,
    decompositions: DecompositionTable | None = None,
    *,
    keep_input_mutations: bool = False,
) -> Callable[..., Any]:
    """The body of a backend: compile `gm` for flat `example_inputs`, return a flat callable.

    The callable takes the same flat inputs as `gm` and returns what `gm` returns. Parameters and
    buffers that `gm` owns are passed to the graphs as extra leading inputs. Graphs are compiled
    now for the example inputs' signature (and again later for any new signature, e.g. another
    grad mode). `keep_input_mutations` as for `aot_function`.
    """
    _refuse_autograd_calls(gm)
    _refuse_overrides(example_inputs)  # before anything reads them (user hooks would run)
    names = [n for n, _ in gm.named_parameters(remove_duplicate=False)]
    names += [n for n, _ in gm.named_buffers(remove_duplicate=False)]
    owned: dict[str, torch.Tensor] = dict(gm.named_parameters(remove_duplicate=False))
    owned.update(gm.named_buffers(remove_duplicate=False))
    num_owned = len(names)

    def with_state(*flat_args: object) -> Any:
        if not num_owned:
            return gm(*flat_args)
        state = {n: v for n, v in zip(names, flat_args[:num_owned], strict=True)
                 if isinstance(v, torch.Tensor)}
        return torch.func.functional_call(gm, state, tuple(flat_args[num_owned:]))

    sources = SourceTracing(gm) if isinstance(gm, torch.fx.GraphModule) else None

    def traced(*flat_args: object) -> Any:
        assert sources is not None
        state = {n: v for n, v in zip(names, flat_args[:num_owned], strict=True)
                 if isinstance(v, torch.Tensor)}
        return sources.run(state, *flat_args[num_owned:])

    owned_values = [owned[n] for n in names]
    with torch._C.DisableTorchFunctionSubclass():  # as artifacts_for reads them
        examples = _symbolic_examples(gm, example_inputs)
    compiled = AotFunction(
        with_state, fw_compiler, bw_compiler, partition_fn, decompositions,
        symbolic_inputs=None if examples is None else [*owned_values, *examples],
        keep_input_mutations=keep_input_mutations,
        traced_fn=traced if sources is not None else None, sources=sources,
    )
    compiled.artifacts_for([*owned_values, *example_inputs])
    compiled.eager_on_error = True  # from now on (the first compile's errors go to the caller)

    def run(*args: object) -> Any:
        return compiled(*owned_values, *args)

    run.aot_function = compiled  # type: ignore[attr-defined]
    return run
