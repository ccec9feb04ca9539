"""Compiled DistributedDataParallel: split captured graphs at DDP's gradient-bucket boundaries.

DDP all-reduces a bucket of gradients as soon as every gradient in it is ready. A frame compiled
into one graph with one opaque backward (aot-based backends give each graph one
``torch.autograd.Function``) produces every gradient at the very end of that backward, so all
all-reduces wait for the whole backward. ``ddp_split_backend`` cuts the graph into consecutive
subgraphs whose parameters fill one DDP bucket each and compiles each subgraph on its own; each
bucket's backward then ends in its own compiled region and DDP's hooks reduce it while the next
region computes.

The frame compiler calls ``maybe_wrap_for_ddp(backend, config.optimize_ddp)`` once per frame:
inside ``DistributedDataParallel.forward`` (which torch marks by setting the active DDP module)
it returns the splitting wrapper, elsewhere the backend unchanged.
"""

from __future__ import annotations

import copy
import itertools
import logging
import sys
import warnings
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import torch
import torch.fx
from torch.fx.passes.split_module import split_module

from .backends import Backend
from .state import state

if TYPE_CHECKING:
    from torch.nn.parallel import DistributedDataParallel

__all__ = [
    "Bucket",
    "DDPSplitBackend",
    "SplitCompiled",
    "SplitRecord",
    "active_ddp_module",
    "assign_buckets",
    "ddp_split_backend",
    "is_fsdp_module",
    "maybe_wrap_for_ddp",
    "warn_if_fsdp",
]

log = logging.getLogger("strata.compile_api")

_COMPUTE_OPS = ("call_function", "call_method", "call_module")

# torch.distributed._DEFAULT_FIRST_BUCKET_BYTES, for builds without torch.distributed
_DEFAULT_FIRST_BUCKET_BYTES = 1024 * 1024


@attrs.frozen
class Bucket:
    """One DDP bucket's share of a graph: consecutive compute nodes and their parameters."""

    nodes: tuple[str, ...]
    """Names of the compute nodes, in graph (forward) order."""
    params: tuple[str, ...]
    """Names of the parameters whose gradients complete in this bucket's backward."""
    nbytes: int
    """Bytes of those parameters (numel * element size), as DDP counts them."""


@attrs.frozen
class SplitRecord:
    """How one graph was split: its buckets in forward order and the caps that made them."""

    buckets: tuple[Bucket, ...]
    bucket_bytes_cap: int
    first_bucket_bytes_cap: int
    reason_unsplit: str = ""
    """Why the graph was compiled whole although it had more than one bucket ('' when split)."""

    @property
    def num_subgraphs(self) -> int:
        """Compiled regions the graph runs as (1 when it was not split)."""
        return len(self.buckets) if not self.reason_unsplit else 1


# ---------------------------------------------------------------------------------------------
# Bucket assignment


def _qualified_attr(root: torch.nn.Module, target: str) -> object:
    value: object = root
    for part in target.split("."):
        value = getattr(value, part)
    return value


def _param_nodes(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any]
) -> dict[torch.fx.Node, tuple[str, torch.Tensor]]:
    """Graph nodes that stand for parameters: placeholders fed a Parameter, get_attr of one."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        raise ValueError(
            f"the graph has {len(placeholders)} placeholders but {len(example_inputs)} "
            "example inputs were given"
        )
    found: dict[torch.fx.Node, tuple[str, torch.Tensor]] = {}
    for node, value in zip(placeholders, example_inputs, strict=True):
        if isinstance(value, torch.nn.Parameter):
            found[node] = (node.name, value)
    for node in gm.graph.nodes:
        if node.op == "get_attr" and isinstance(node.target, str):
            attr = _qualified_attr(gm, node.target)
            if isinstance(attr, torch.nn.Parameter):
                found[node] = (node.target, attr)
    return found


def _params_used_by(
    node: torch.fx.Node,
    gm: torch.fx.GraphModule,
    param_nodes: dict[torch.fx.Node, tuple[str, torch.Tensor]],
) -> list[tuple[str, torch.Tensor]]:
    used: list[tuple[str, torch.Tensor]] = []
    if node.op == "call_module" and isinstance(node.target, str):
        module = gm.get_submodule(node.target)
        used.extend((f"{node.target}.{name}", p) for name, p in module.named_parameters())
    used.extend(param_nodes[i] for i in node.all_input_nodes if i in param_nodes)
    return used


@attrs.define
class _Building:
    nodes: list[torch.fx.Node] = attrs.field(factory=list)
    params: list[str] = attrs.field(factory=list)
    nbytes: int = 0


def _bucket_nodes(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    bucket_bytes_cap: int,
    first_bucket_bytes_cap: int,
    ignored: Collection[torch.Tensor],
) -> list[_Building]:
    if bucket_bytes_cap <= 0 or first_bucket_bytes_cap <= 0:
        raise ValueError(
            f"bucket caps must be positive, got bucket_bytes_cap={bucket_bytes_cap}, "
            f"first_bucket_bytes_cap={first_bucket_bytes_cap}"
        )
    ignored_ids = {id(p) for p in ignored}
    param_nodes = _param_nodes(gm, example_inputs)
    compute = [n for n in gm.graph.nodes if n.op in _COMPUTE_OPS]
    # A gradient is complete once backward has passed the parameter's earliest use, so each
    # parameter counts in the bucket of its first user (tied weights count once).
    first_use: dict[torch.fx.Node, list[tuple[str, torch.Tensor]]] = {}
    seen: set[int] = set()
    for node in compute:
        for name, param in _params_used_by(node, gm, param_nodes):
            # DDP leaves out frozen parameters and those it was told to ignore
            if id(param) in seen or id(param) in ignored_ids or not param.requires_grad:
                continue
            seen.add(id(param))
            first_use.setdefault(node, []).append((name, param))
    # Gradients become ready in reverse order of use: walk backwards, closing a bucket once it
    # reaches its cap, as DDP's bucket assignment does. The first bucket DDP fills (the last
    # layers) has its own, usually smaller, cap. A new bucket starts only at a node that brings
    # parameters, so no bucket is left without any.
    reversed_buckets = [_Building()]
    for node in reversed(compute):
        brings = first_use.get(node, [])
        current = reversed_buckets[-1]
        cap = first_bucket_bytes_cap if len(reversed_buckets) == 1 else bucket_bytes_cap
        if brings and current.params and current.nbytes >= cap:
            current = _Building()
            reversed_buckets.append(current)
        # built back to front: prepend, so nodes and parameters end up in forward order
        current.nodes.insert(0, node)
        current.params[:0] = [name for name, _ in brings]
        current.nbytes += sum(param.numel() * param.element_size() for _, param in brings)
    return list(reversed(reversed_buckets))


def assign_buckets(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    bucket_bytes_cap: int,
    *,
    first_bucket_bytes_cap: int | None = None,
    ignored_parameters: Collection[torch.Tensor] = (),
) -> tuple[Bucket, ...]:
    """The DDP buckets of ``gm``'s compute nodes, in forward order.

    Parameters are the graph's placeholders whose example input is a ``torch.nn.Parameter``, its
    ``get_attr`` nodes of parameters and the parameters of the modules it calls; only those that
    require grad and are not in ``ignored_parameters`` count, as in DDP.
    """
    first = bucket_bytes_cap if first_bucket_bytes_cap is None else first_bucket_bytes_cap
    return _frozen(_bucket_nodes(gm, example_inputs, bucket_bytes_cap, first, ignored_parameters))


def _frozen(built: list[_Building]) -> tuple[Bucket, ...]:
    return tuple(
        Bucket(nodes=tuple(n.name for n in b.nodes), params=tuple(b.params), nbytes=b.nbytes)
        for b in built
    )


# ---------------------------------------------------------------------------------------------
# Splitting and compiling


class _CompiledSubmodule(torch.nn.Module):
    """Stands in for one split submodule: calls its compiled form, unwraps a single output."""

    def __init__(self, compiled: Callable[..., Any], single_output: bool) -> None:
        super().__init__()
        self.compiled = compiled
        self.single_output = single_output

    def forward(self, *args: Any) -> Any:
        out = self.compiled(*args)
        return out[0] if self.single_output else out


class SplitCompiled:
    """The callable a split graph runs as: its compiled subgraphs, called in order."""

    def __init__(
        self,
        record: SplitRecord,
        run: Callable[..., Any],
        split_gm: torch.fx.GraphModule | None,
    ) -> None:
        self.record = record
        self.split_gm = split_gm
        """The top-level graph calling ``submod_<i>`` (None when the graph was compiled whole)."""
        self._run = run

    @property
    def num_subgraphs(self) -> int:
        """How many separately compiled regions one call runs."""
        return self.record.num_subgraphs

    def __call__(self, *args: Any) -> Any:
        return self._run(*args)


def _returns_tuple(gm: torch.fx.GraphModule) -> bool:
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    return isinstance(output.args[0], (tuple, list))


def _make_tuple_returning(gm: torch.fx.GraphModule) -> None:
    # Backends (aot's above all) expect a graph to return a tuple, as captured graphs do;
    # split_module returns a lone value bare, so wrap it and unwrap after the call.
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    output.args = ((output.args[0],),)
    gm.recompile()


def _example_for(fake: object) -> object:
    """A real tensor shaped like an intermediate value, to give the backend as example input."""
    if not isinstance(fake, torch.Tensor):
        return fake
    if fake.is_contiguous():
        real = torch.zeros(fake.shape, dtype=fake.dtype, device=fake.device)
    else:
        # only the layout matters to a backend here; the values are never read for results
        real = torch.empty_strided(fake.shape, fake.stride(), dtype=fake.dtype, device=fake.device)
    return real.requires_grad_(fake.requires_grad)


def _unsplittable(example_inputs: Sequence[Any]) -> str:
    """Why a graph with these example inputs must be compiled whole, or '' when it can be split.

    The split makes real example inputs for the values that cross between subgraphs; it
    relies on the graph's own inputs being real values, as the capture layer passes them.
    """
    from torch._subclasses.fake_tensor import FakeTensor

    if any(isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)) for v in example_inputs):
        return "the example inputs hold symbolic numbers"
    if any(isinstance(v, FakeTensor) for v in example_inputs):
        return "the example inputs are fake tensors"
    return ""


_EXAMPLE_META = ("example_value", "val")


_SCALAR_TYPES = (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool)


def _is_scalar_node(node: torch.fx.Node) -> bool:
    """A size-like value (``x.size(0)``, ``x.shape``, arithmetic on them), by its example value."""
    if node.op not in ("call_function", "call_method"):
        return False
    value = node.meta.get("example_value", node.meta.get("val"))
    if isinstance(value, (tuple, list)):  # torch.Size included
        return bool(value) and all(isinstance(v, _SCALAR_TYPES) for v in value)
    return isinstance(value, _SCALAR_TYPES)


def _localize_scalars(
    gm: torch.fx.GraphModule, partition: dict[torch.fx.Node, int]
) -> tuple[torch.fx.GraphModule, dict[torch.fx.Node, int]]:
    """A copy of ``gm`` where each piece computes the sizes it uses itself.

    Sizes would otherwise travel from one piece to a later one as (symbolic) number outputs,
    which backends handle poorly (aot refuses symbolic non-tensor outputs); recomputing
    ``x.size(0)`` is free. The copy shares ``gm``'s parameters and submodules.
    """
    graph = copy.deepcopy(gm.graph)  # node copies keep their names and (shallow) meta
    by_name = {node.name: node for node in graph.nodes}
    part = {by_name[node.name]: i for node, i in partition.items()}
    for node in reversed(list(graph.nodes)):
        if node not in part or not _is_scalar_node(node):
            continue
        elsewhere: dict[int, set[torch.fx.Node]] = {}
        for user in node.users:
            if user in part and part[user] != part[node]:
                elsewhere.setdefault(part[user], set()).add(user)
        for piece, users in elsewhere.items():
            first = next(n for n in graph.nodes if n in users)
            with graph.inserting_before(first):
                clone = graph.node_copy(node)
            part[clone] = piece
            for user in users:
                user.replace_input_with(node, clone)
        if not node.users:
            graph.erase_node(node)
            del part[node]
    return torch.fx.GraphModule(gm, graph), part


def _split(gm: torch.fx.GraphModule, built: list[_Building]) -> torch.fx.GraphModule:
    """``gm`` as a top-level graph calling ``submod_<i>``, one per bucket, in bucket order.

    Every node of a subgraph keeps its name and its example value (fake, symbolic where the
    capture made sizes dynamic), and each subgraph's placeholders carry the example values of
    the nodes they stand for: a backend sees a subgraph as it would see a whole captured graph.
    """
    work, partition = _localize_scalars(
        gm, {node: i for i, b in enumerate(built) for node in b.nodes}
    )
    # split_module wants every size symbol in the example values bound by a SymInt input of the
    # graph; ours live in tensor sizes, so split without them (on the copy) and put them on the
    # subgraphs' nodes afterwards.
    saved = {
        node.name: {k: node.meta.pop(k) for k in _EXAMPLE_META if k in node.meta}
        for node in work.graph.nodes
    }
    # keep_original_order: independent pieces must still run in bucket order
    split_gm = split_module(
        work,
        work,
        lambda node: partition[node],
        keep_original_order=True,
        keep_original_node_name=True,
    )
    before = sum(1 for n in gm.graph.nodes if n.op == "placeholder")
    after = sum(1 for n in split_gm.graph.nodes if n.op == "placeholder")
    calls = [n for n in split_gm.graph.nodes if n.op == "call_module"]
    if after != before or len(calls) != len(built):
        raise RuntimeError(
            f"split_module gave {after} inputs and {len(calls)} subgraphs, "
            f"expected {before} and {len(built)}"
        )
    for call in calls:
        submod = split_gm.get_submodule(str(call.target))
        if isinstance(submod, torch.fx.GraphModule):
            for node in submod.graph.nodes:
                node.meta.update(saved.get(node.name, {}))
    return split_gm


def _submodule_examples(
    split_gm: torch.fx.GraphModule, example_inputs: Sequence[Any]
) -> list[tuple[str, list[object]]]:
    """Example inputs of every ``submod_<i>`` of ``split_gm``, in call order.

    Walks the top-level graph with fake values so that no part of the model runs (running it
    would repeat its side effects, e.g. BatchNorm's running statistics): the graph's own inputs
    are passed as they are (parameters stay the real ``torch.nn.Parameter`` objects), and values
    made by an earlier subgraph as real tensors of the same size, layout and requires_grad.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    fake_mode = FakeTensorMode(allow_non_fake_inputs=True)

    def to_fake(value: object) -> object:
        return fake_mode.from_tensor(value) if isinstance(value, torch.Tensor) else value

    real: dict[torch.fx.Node, object] = {}
    fake: dict[torch.fx.Node, object] = {}
    inputs = iter(example_inputs)
    examples: list[tuple[str, list[object]]] = []
    for node in split_gm.graph.nodes:
        if node.op == "placeholder":
            real[node] = next(inputs)
            fake[node] = to_fake(real[node])
        elif node.op == "get_attr" and isinstance(node.target, str):
            real[node] = _qualified_attr(split_gm, node.target)
            fake[node] = to_fake(real[node])
        elif node.op == "call_module" and isinstance(node.target, str):
            submod = split_gm.get_submodule(node.target)
            args = [a for a in node.args if isinstance(a, torch.fx.Node)]
            if len(args) != len(node.args) or node.kwargs:
                raise TypeError(f"{node.target} is called with non-node arguments")
            # The subgraph's own parameters and buffers go in as fakes too, so that in-place
            # updates (BatchNorm's running statistics) land on fakes, not on the model.
            fake_state: dict[str, Any] = {
                name: to_fake(t)
                for name, t in itertools.chain(
                    submod.named_parameters(remove_duplicate=False),
                    submod.named_buffers(remove_duplicate=False),
                )
            }
            with fake_mode:
                fake[node] = torch.func.functional_call(
                    submod, fake_state, tuple(fake[a] for a in args)
                )
            examples.append(
                (node.target, [real[a] if a in real else _example_for(fake[a]) for a in args])
            )
        elif node.op == "call_function":
            # only getitem on a submodule's outputs appears here
            fake_args = [fake[a] if isinstance(a, torch.fx.Node) else a for a in node.args]
            fake[node] = node.target(*fake_args)  # type: ignore[operator]
    return examples


def _compile_submodules(
    split_gm: torch.fx.GraphModule,
    examples: list[tuple[str, list[object]]],
    backend: Backend,
) -> None:
    """Replace every ``submod_<i>`` of ``split_gm`` by its compiled form."""
    for target, example_args in examples:
        submod = split_gm.get_submodule(target)
        if not isinstance(submod, torch.fx.GraphModule):
            raise TypeError(f"expected split_module to make a GraphModule at {target}")
        single = not _returns_tuple(submod)
        if single:
            _make_tuple_returning(submod)
        compiled = backend(submod, example_args)
        setattr(split_gm, target, _CompiledSubmodule(compiled, single))


class DDPSplitBackend:
    """A backend that splits each graph at DDP bucket boundaries and compiles the pieces.

    Every graph it compiles leaves a ``SplitRecord`` in ``records``; the callable it returns is a
    ``SplitCompiled`` whose ``num_subgraphs`` says how many regions the graph runs as.
    """

    def __init__(
        self,
        backend: Backend,
        bucket_bytes_cap: int,
        first_bucket_bytes_cap: int,
        ignored_parameters: Collection[torch.Tensor] = (),
    ) -> None:
        self.backend = backend
        self.bucket_bytes_cap = bucket_bytes_cap
        self.first_bucket_bytes_cap = first_bucket_bytes_cap
        self.ignored_parameters = tuple(ignored_parameters)
        self.records: list[SplitRecord] = []
        self.__name__ = f"ddp_split({getattr(backend, '__name__', type(backend).__name__)})"

    def _whole(
        self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], record: SplitRecord
    ) -> SplitCompiled:
        self.records.append(record)
        return SplitCompiled(record, self.backend(gm, example_inputs), None)

    def _unsplit(
        self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], record: SplitRecord
    ) -> SplitCompiled:
        """Compile whole a graph that was to be split, saying why (the split is an optimization)."""
        log.warning(
            "DDP: compiling a graph of %d buckets whole (%s); its gradients are "
            "all-reduced only after its whole backward",
            len(record.buckets),
            record.reason_unsplit,
        )
        return self._whole(gm, example_inputs, record)

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> SplitCompiled:
        built = _bucket_nodes(
            gm,
            example_inputs,
            self.bucket_bytes_cap,
            self.first_bucket_bytes_cap,
            self.ignored_parameters,
        )
        buckets = _frozen(built)
        caps = (self.bucket_bytes_cap, self.first_bucket_bytes_cap)
        if len(built) <= 1:
            log.debug(
                "DDP: graph fits in one bucket (%d bytes); not split",
                sum(b.nbytes for b in buckets),
            )
            return self._whole(gm, example_inputs, SplitRecord(buckets, *caps))
        reason = _unsplittable(example_inputs)
        if not reason:
            try:
                split_gm = _split(gm, built)
                examples = _submodule_examples(split_gm, example_inputs)
            except Exception as err:  # the split is an optimization: compile whole instead
                reason = f"splitting failed: {type(err).__name__}: {err}"
        if reason:
            record = SplitRecord(buckets, *caps, reason_unsplit=reason)
            return self._unsplit(gm, example_inputs, record)
        try:
            _compile_submodules(split_gm, examples, self.backend)
        except Exception as err:
            # A backend may refuse a piece it would take whole (e.g. a symbolic size handed from
            # one piece to the next); the split must never cost the graph its compilation. If
            # the backend fails on the whole graph too, that error goes to the frame compiler.
            reason = f"the backend failed on a subgraph: {type(err).__name__}: {err}"
            record = SplitRecord(buckets, *caps, reason_unsplit=reason)
            return self._unsplit(gm, example_inputs, record)
        record = SplitRecord(buckets, *caps)
        self.records.append(record)
        log.info(
            "DDP: split a graph into %d subgraphs at bucket boundaries "
            "(bucket cap %d bytes, first bucket cap %d bytes); bucket bytes %s",
            len(built),
            self.bucket_bytes_cap,
            self.first_bucket_bytes_cap,
            [b.nbytes for b in buckets],
        )
        if log.isEnabledFor(logging.DEBUG):
            for i, b in enumerate(buckets):
                log.debug(
                    "DDP bucket %d: %d bytes, params %s, nodes %s", i, b.nbytes, b.params, b.nodes
                )
        return SplitCompiled(record, split_gm.forward, split_gm)


def ddp_split_backend(
    backend: Backend,
    bucket_bytes_cap: int,
    *,
    first_bucket_bytes_cap: int | None = None,
    ignored_parameters: Collection[torch.Tensor] = (),
) -> DDPSplitBackend:
    """Wrap ``backend`` so that each graph is split at DDP bucket boundaries and compiled per piece.

    ``bucket_bytes_cap`` is DDP's ``bucket_bytes_cap``; ``first_bucket_bytes_cap`` the cap of the
    bucket filled first (the graph's last parameters), the same as ``bucket_bytes_cap`` unless
    given. Each piece gets the real parameters and user inputs it reads as example inputs, and
    zero tensors shaped like the values it receives from the pieces before it.
    """
    first = bucket_bytes_cap if first_bucket_bytes_cap is None else first_bucket_bytes_cap
    if bucket_bytes_cap <= 0 or first <= 0:
        raise ValueError(
            f"bucket caps must be positive, got bucket_bytes_cap={bucket_bytes_cap}, "
            f"first_bucket_bytes_cap={first}"
        )
    return DDPSplitBackend(backend, bucket_bytes_cap, first, ignored_parameters)


# ---------------------------------------------------------------------------------------------
# Hook-up with DDP


def active_ddp_module() -> DistributedDataParallel | None:
    """The DistributedDataParallel module whose forward is running now, if any.

    DDP sets it around the call of its inner module (``_get_active_ddp_module``, the hook torch
    provides for compilers); it is unset with the Python reducer, which needs no split.
    """
    if not torch.distributed.is_available():
        return None
    from torch.nn.parallel import DistributedDataParallel

    getter = getattr(DistributedDataParallel, "_get_active_ddp_module", None)
    if getter is None:
        return None
    module = getter()
    return module if isinstance(module, DistributedDataParallel) else None


def _first_bucket_bytes_cap(ddp: DistributedDataParallel) -> int:
    cap = int(ddp.bucket_bytes_cap)
    config = getattr(ddp, "_bucket_config", None)
    first = getattr(config, "first_bucket_bytes_cap", None)
    if isinstance(first, int):
        return first
    # older DDP: a smaller first bucket only when the user left bucket_cap_mb at its default
    if getattr(ddp, "bucket_bytes_cap_default", False):
        default = getattr(torch.distributed, "_DEFAULT_FIRST_BUCKET_BYTES", None)
        return int(default) if isinstance(default, int) else _DEFAULT_FIRST_BUCKET_BYTES
    return cap


def maybe_wrap_for_ddp(backend: Backend, config_flag: bool) -> Backend:
    """``backend`` wrapped by ``ddp_split_backend`` when a DDP forward is active and the flag is on.

    Called once per frame by the frame compiler with ``config.optimize_ddp``; takes the bucket
    caps and the ignored parameters from the active DDP instance.
    """
    if not config_flag:
        return backend
    ddp = active_ddp_module()
    if ddp is None:
        return backend
    ignore_names = set(getattr(ddp, "parameters_to_ignore", ()) or ())
    ignored = [p for name, p in ddp.module.named_parameters() if name in ignore_names]
    log.debug(
        "DDP forward active: splitting graphs at bucket boundaries (cap %d bytes)",
        ddp.bucket_bytes_cap,
    )
    return ddp_split_backend(
        backend,
        int(ddp.bucket_bytes_cap),
        first_bucket_bytes_cap=_first_bucket_bytes_cap(ddp),
        ignored_parameters=ignored,
    )


# ---------------------------------------------------------------------------------------------
# FSDP


def _fsdp_types() -> tuple[type, ...]:
    # A module FSDP wraps or shards was made by an imported torch.distributed.fsdp; importing it
    # here for a model that has none would cost seconds of a cold compile() call.
    if not torch.distributed.is_available() or "torch.distributed.fsdp" not in sys.modules:
        return ()
    found: list[type] = []
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel

        found.append(FullyShardedDataParallel)
    except ImportError:
        pass
    try:
        from torch.distributed.fsdp import FSDPModule  # fully_shard's module class

        found.append(FSDPModule)
    except ImportError:
        pass
    return tuple(found)


def is_fsdp_module(module: object) -> bool:
    """Whether ``module`` or one of its submodules is sharded by FSDP (wrapper or fully_shard)."""
    if not isinstance(module, torch.nn.Module):
        return False
    types_ = _fsdp_types()
    for sub in module.modules():
        if types_ and isinstance(sub, types_):
            return True
        # FSDP1's wrapper keeps the user's module under this attribute
        if "_fsdp_wrapped_module" in sub._modules:
            return True
    return False


def warn_if_fsdp(module: object) -> bool:
    """Warn (once per process) that an FSDP module compiles with graph breaks; True when it is one.

    FSDP's all-gathers and reduce-scatters run in hooks and collectives the graph capture does
    not trace, so the module's frames break around them: results stay correct, the split into
    overlapped regions that DDP gets is not done.
    """
    if not is_fsdp_module(module):
        return False
    with state.lock:
        if ("ddp", "fsdp") in state.warned:
            return True
        state.warned.add(("ddp", "fsdp"))
    warnings.warn(
        "Strata: compiling an FSDP (FullyShardedDataParallel / fully_shard) module. FSDP is not "
        "optimized yet: its frames run with graph breaks around the collectives and stay "
        "correct, but communication is not overlapped by compiled regions.",
        RuntimeWarning,
        stacklevel=3,
    )
    return True
