"""What a function does to its inputs and how its outputs alias, learned from one fake run.

The function runs once on fresh fake tensors (same sizes, strides, dtypes and requires_grad as the
real inputs, no data). From that run we read:

* which inputs it mutates (their version counter moved),
* for each output: a plain new tensor, an alias of an input, an alias of another output or of an
  intermediate (a view: we record the chain of view ops from its base so the runtime can rebuild a
  real view), or a non-tensor value passed through as is,
* which outputs require grad.

The traced graphs then compute only fresh tensors ("traced outputs"): the new outputs, the new
values of mutated inputs and the bases of aliased outputs. The runtime turns them back into the
function's real behaviour.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch
from torch._dispatch.python import enable_python_dispatcher
from torch._ops import HigherOrderOperator
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from aot.errors import AotTracingError, AotUnsupportedError

__all__ = [
    "FunctionMeta",
    "OutputInfo",
    "OutputKind",
    "TracedKind",
    "TracedOutput",
    "ViewStep",
    "analyse",
    "fresh_fake_inputs",
    "has_torch_overrides",
    "may_overlap_itself",
    "storage_id",
]

log = logging.getLogger("strata.aot")

FlatFn = Callable[..., Sequence[object]]


class OutputKind(enum.Enum):
    """How one flat user output is produced at runtime."""

    TENSOR = "tensor"  # a traced output as is
    ALIAS_OF_INPUT = "alias_of_input"  # a view (or the object itself) of a real input
    ALIAS_OF_TRACED = "alias_of_traced"  # a view of another traced output (an output or a base)
    CONSTANT = "constant"  # a non-tensor value, passed through
    SYMBOLIC = "symbolic"  # a SymInt/SymFloat/SymBool: a traced output, a plain number at runtime


class TracedKind(enum.Enum):
    """Where one output of the traced graph comes from."""

    USER = "user"  # flat user output `index`
    MUTATION = "mutation"  # the new value of input `index`
    BASE = "base"  # the `_base` of flat user output `index`


@attrs.frozen
class ViewStep:
    """One view op to replay on a real tensor: `op(src, *args, **kwargs)[item]`."""

    op: Any  # an aten OpOverload
    args: tuple[Any, ...]  # the op's arguments after the source tensor
    kwargs: dict[str, Any]
    item: int | None  # which result, for view ops returning several tensors

    def apply(
        self, src: torch.Tensor, resolve: Callable[[Any], Any] | None = None
    ) -> torch.Tensor:
        """Run the view op on `src` (through autograd, so the result is a real view).

        `resolve` turns symbolic sizes in the recorded arguments into this call's integers.
        """
        args, kwargs = self.args, self.kwargs
        if resolve is not None:
            args, kwargs = resolve(args), resolve(kwargs)
        result = self.op(src, *args, **kwargs)
        if self.item is not None:
            result = result[self.item]
        assert isinstance(result, torch.Tensor)
        return result


@attrs.frozen
class OutputInfo:
    """How to produce one flat user output from the traced outputs and the inputs."""

    kind: OutputKind
    index: int = -1  # traced index (TENSOR, ALIAS_OF_TRACED) or input index (ALIAS_OF_INPUT)
    # View ops from the base to the output; None when unknown (the runtime then uses as_strided).
    view_chain: tuple[ViewStep, ...] | None = ()
    size: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    storage_offset: int = 0  # relative to the base's storage offset
    requires_grad: bool = False
    constant: object = None


@attrs.frozen
class TracedOutput:
    """One output of the traced forward graph: a tensor, or a symbolic number (no gradient)."""

    kind: TracedKind
    index: int
    requires_grad: bool
    example: Any  # the fake tensor (or SymInt/SymFloat/SymBool) from the analysis run


@attrs.frozen
class FunctionMeta:
    """Everything the tracer and runtime need to know about one flat function."""

    input_requires_grad: tuple[bool, ...]
    input_is_tensor: tuple[bool, ...]
    mutated_inputs: tuple[int, ...]
    outputs: tuple[OutputInfo, ...]
    traced: tuple[TracedOutput, ...]
    # (sympy symbol, input index, dim or None for an int input): where each size symbol used in
    # a recorded view chain comes from, so the runtime can bind it to this call's sizes.
    size_symbols: tuple[tuple[Any, int, int | None], ...] = ()
    # mutated inputs written only under no_grad / inference mode: the runtime copies their new
    # values back with grad off too (a leaf parameter updated by an optimizer step would
    # otherwise refuse the in-place copy, and must not gain autograd history)
    mutated_without_grad: tuple[int, ...] = ()
    # mutated inputs whose new values the traced graph writes itself, as a final
    # ``aten.copy_(input, new_value)`` (a compiler that asked for it: it can then store the
    # new values straight into the inputs' memory); the runtime copies back only the others
    mutations_in_graph: tuple[int, ...] = ()
    # Grad mode when the function is called and when it returns: a function may switch it
    # (``torch.set_grad_enabled(b)`` as a statement, an ``enable_grad()`` block under no_grad).
    # Ops run in the mode of their own region, so a graph entered under no_grad that enables
    # grad inside is a training graph; the runtime leaves the mode as the function does.
    grad_mode_at_entry: bool = True
    grad_mode_at_exit: bool = True

    @property
    def grad_inputs(self) -> tuple[int, ...]:
        """Indices of the inputs that require grad."""
        return tuple(i for i, rg in enumerate(self.input_requires_grad) if rg)

    @property
    def differentiable_traced(self) -> tuple[int, ...]:
        """Indices of the traced outputs that require grad (each gets a tangent)."""
        return tuple(k for k, t in enumerate(self.traced) if t.requires_grad)


@attrs.define
class _ViewRecord:
    out: torch.Tensor
    src: torch.Tensor
    step: ViewStep


def _is_view_op(func: Any) -> bool:
    schema = getattr(func, "_schema", None)
    if schema is None or schema.is_mutable or not schema.returns:
        return False
    alias = schema.returns[0].alias_info
    return alias is not None and not alias.is_write


def storage_id(t: torch.Tensor) -> int:
    """An identity for the memory a tensor lives in (shared by all its views)."""
    return int(t.untyped_storage()._cdata)


_PLAIN_TORCH_DISPATCH = torch.Tensor.__torch_dispatch__  # type: ignore[attr-defined]


def has_torch_overrides(value: object) -> bool:
    """Whether ``value`` is a tensor of a subclass that takes part in torch ops: one with
    ``__torch_function__`` (even Tensor's own, which gives results the subclass's type) or
    ``__torch_dispatch__``. A graph lowered to aten drops its overrides and its type, so
    only the graph as captured (run as is) gives eager's result. ``nn.Parameter`` (which
    disables ``__torch_function__``) and the fake tensors of a trace are plain."""
    if not isinstance(value, torch.Tensor) or type(value) is torch.Tensor:
        return False
    if isinstance(value, FakeTensor):
        return False
    cls = type(value)
    return (
        cls.__torch_function__ is not torch._C._disabled_torch_function_impl
        or cls.__torch_dispatch__ is not _PLAIN_TORCH_DISPATCH
    )


def may_overlap_itself(t: torch.Tensor) -> bool:
    """Whether two elements of ``t`` may share memory (False when its strides prove not).

    Dims sorted by stride must each step over everything the smaller ones span. Symbolic
    sizes are not decided (False): only a user's as_strided makes such views.
    """
    if _is_symbolic(t):  # int() would specialise the sizes: decide nothing on them
        return False
    dims = sorted(
        (int(st), int(sz)) for sz, st in zip(t.shape, t.stride(), strict=True) if int(sz) != 1
    )
    if any(sz == 0 for _, sz in dims):
        return False
    span = 0
    for stride, size in dims:
        if stride <= span:
            return True
        span += stride * (size - 1)
    return False


def _written_tensors(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    schema = getattr(func, "_schema", None)
    if schema is None or not schema.is_mutable:
        return []
    written: list[Any] = []
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = args[i] if i < len(args) else kwargs.get(arg.name)
        written.extend(value if isinstance(value, (list, tuple)) else [value])
    return [w for w in written if isinstance(w, torch.Tensor)]


_aten = torch.ops.aten
# In-place ops that change a tensor's sizes, strides or storage rather than its values.
_METADATA_MUTATORS = frozenset(
    {
        _aten.set_,
        _aten.resize_,
        _aten.resize_as_,
        _aten.as_strided_,
        _aten.t_,
        _aten.transpose_,
        _aten.squeeze_,
        _aten.unsqueeze_,
        _aten.swapdims_,
        _aten.swapaxes_,
    }
)


class _ViewRecorder(TorchDispatchMode):  # type: ignore[misc,no-untyped-call]
    """Remembers, for every tensor made by a view op, the op and its source tensor, and the
    storages that ops write to (an input can be written through a view of it)."""

    # torch.cond runs as itself below this mode: its branches may not write their inputs or
    # return views of them (torch checks that), so there is nothing to record inside. Other
    # higher-order ops (some write their inputs) still fail here, and aot refuses the graph.
    supports_higher_order_operators = True

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.records: dict[int, _ViewRecord] = {}
        self.written_storages: set[int] = set()
        # storages written at least once with grad mode on (the others only under no_grad /
        # inference mode: an optimizer step's in-place update of its parameters)
        self.written_with_grad: set[int] = set()
        # what wrote through a self-overlapping view (as_strided), if anything: eager's result
        # then depends on the order of the element writes, which a functional graph drops
        self.overlapping_write: str | None = None
        # storages of tensors whose sizes, strides or storage an op changed in place
        self.metadata_written: set[int] = set()

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if isinstance(func, HigherOrderOperator):
            if func is not torch.ops.higher_order.cond:
                return NotImplemented
            return func(*args, **kwargs)
        # A write autograd records: grad mode on and a tensor taking part requires grad. One
        # through ``.data`` or ``.detach()`` (an EMA update, a hand-written optimizer step)
        # is invisible to autograd, and its copy back must be too.
        grad = torch.is_grad_enabled() and any(
            isinstance(a, torch.Tensor) and a.requires_grad
            for a in pytree.tree_leaves((args, kwargs))
        )
        packet = getattr(func, "overloadpacket", None)
        if packet in _METADATA_MUTATORS and args and isinstance(args[0], torch.Tensor):
            self.metadata_written.add(storage_id(args[0]))
        for t in _written_tensors(func, args, kwargs):
            self.written_storages.add(storage_id(t))
            if grad:
                self.written_with_grad.add(storage_id(t))
            if self.overlapping_write is None and may_overlap_itself(t):
                self.overlapping_write = f"{func} writes a tensor whose elements may share memory"
        out = func(*args, **kwargs)
        if _is_view_op(func) and args and isinstance(args[0], torch.Tensor):
            rest = tuple(args[1:])
            if not any(isinstance(a, torch.Tensor) for a in rest):
                if isinstance(out, torch.Tensor):
                    self._record(out, args[0], ViewStep(func, rest, dict(kwargs), None))
                elif isinstance(out, (list, tuple)):
                    for i, o in enumerate(out):
                        if isinstance(o, torch.Tensor):
                            self._record(o, args[0], ViewStep(func, rest, dict(kwargs), i))
        return out

    def _record(self, out: torch.Tensor, src: torch.Tensor, step: ViewStep) -> None:
        self.records[id(out)] = _ViewRecord(out, src, step)

    def chain(self, out: torch.Tensor, base: torch.Tensor) -> tuple[ViewStep, ...] | None:
        """The view ops leading from `base` to `out`, or None when a link is missing."""
        steps: list[ViewStep] = []
        cur = out
        while cur is not base:
            rec = self.records.get(id(cur))
            if rec is None or rec.out is not cur:
                return None
            steps.append(rec.step)
            cur = rec.src
            if len(steps) > 64:
                return None
        return tuple(reversed(steps))


def _is_symbolic(t: torch.Tensor) -> bool:
    dims = (*t.shape, *t.stride(), t.storage_offset())
    return any(isinstance(d, torch.SymInt) for d in dims)


def _mentions_symbols(chain: tuple[ViewStep, ...]) -> bool:
    leaves = [a for step in chain for a in (*step.args, *step.kwargs.values())]
    flat: list[object] = []
    for a in leaves:
        flat.extend(a if isinstance(a, (list, tuple)) else [a])
    return any(isinstance(a, torch.SymInt | torch.SymFloat | torch.SymBool) for a in flat)


def _symbolic_leaves(value: object) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in _symbolic_leaves(v)]
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _symbolic_leaves(v)]
    return [value] if isinstance(value, torch.SymInt) else []


def _size_symbols(
    fake_inputs: Sequence[object], infos: Sequence[OutputInfo]
) -> tuple[tuple[Any, int, int | None], ...]:
    """Where the symbols in the outputs' view chains come from; refuses what cannot be bound."""
    sources: dict[Any, tuple[Any, int, int | None]] = {}
    for i, x in enumerate(fake_inputs):
        if isinstance(x, torch.SymInt) and x.node.expr.is_Symbol:
            sources.setdefault(x.node.expr, (x.node.expr, i, None))
        elif isinstance(x, torch.Tensor):
            for d, s in enumerate(x.shape):
                if isinstance(s, torch.SymInt) and s.node.expr.is_Symbol:
                    sources.setdefault(s.node.expr, (s.node.expr, i, d))
    for info in infos:
        for step in info.view_chain or ():
            for leaf in _symbolic_leaves((step.args, step.kwargs)):
                missing = set(leaf.node.expr.free_symbols) - set(sources)
                if missing:
                    raise AotUnsupportedError(
                        f"an output view uses sizes {sorted(map(str, missing))} that are not "
                        "sizes of the inputs; return a copy (.clone()) of it instead"
                    )
    return tuple(sources.values())


def _unviewed_base(
    o: torch.Tensor,
    fake_inputs: Sequence[object],
    input_storages: dict[int, int],
    traced_storages: dict[int, torch.Tensor],
) -> torch.Tensor | None:
    """The input or traced output whose memory ``o`` shares though autograd calls it no view
    (``detach()``, ``.data``), or None for fresh memory: eager's result aliases it."""
    key = storage_id(o)
    if key in input_storages:
        base = fake_inputs[input_storages[key]]
        assert isinstance(base, torch.Tensor)
        return base
    return traced_storages.get(key)


def _layout(x: torch.Tensor) -> tuple[object, ...]:
    """Sizes, strides, offset and storage, compared without guarding symbolic sizes (their
    expressions are compared, not their values)."""

    def plain(v: object) -> object:
        return v.node.expr if isinstance(v, torch.SymInt) else v

    return (
        tuple(map(plain, x.shape)),
        tuple(map(plain, x.stride())),
        plain(x.storage_offset()),
        storage_id(x),
    )


def _geometry(o: torch.Tensor, base: torch.Tensor) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """Size, stride and storage offset relative to the base (for as_strided); () if symbolic."""
    if _is_symbolic(o) or _is_symbolic(base):
        return (), (), 0
    size = tuple(int(s) for s in o.shape)
    stride = tuple(int(s) for s in o.stride())
    return size, stride, int(o.storage_offset()) - int(base.storage_offset())


def fresh_fake_inputs(
    flat_inputs: Sequence[object], fake_mode: Any, *, requires_grad: Sequence[bool]
) -> list[object]:
    """Fake copies of the tensor inputs: same size/stride/dtype/device, no views, no data.

    Inputs that require grad become non-leaf fakes so that an in-place op on them traces (eager
    raises for leaves; the runtime's copy_ back into a real leaf raises the same error).
    """
    out: list[object] = []
    for value, rg in zip(flat_inputs, requires_grad, strict=True):
        if not isinstance(value, torch.Tensor):
            out.append(value)
            continue
        with fake_mode:
            fake = torch.empty_strided(
                tuple(value.shape), tuple(value.stride()), dtype=value.dtype, device=value.device
            )
            if rg:
                with torch.enable_grad():
                    fake = fake.requires_grad_(True).clone()
        out.append(fake)
    return out


def analyse(flat_fn: FlatFn, fake_inputs: Sequence[object], fake_mode: Any) -> FunctionMeta:
    """Run `flat_fn` once on `fake_inputs` (in the ambient grad mode) and describe it.

    The function's own grad-mode switches take effect while it runs; the caller restores the
    mode afterwards."""
    tensor_inputs = {id(x): i for i, x in enumerate(fake_inputs) if isinstance(x, torch.Tensor)}
    versions = {
        i: x._version for i, x in enumerate(fake_inputs) if isinstance(x, torch.Tensor)
    }
    layouts = {i: _layout(x) for i, x in enumerate(fake_inputs) if isinstance(x, torch.Tensor)}
    recorder = _ViewRecorder()
    entry_mode = torch.is_grad_enabled()
    try:
        # The Python dispatcher routes ops with hidden mutations (training batch norm) to forms
        # that declare them, so they are seen here and functionalized in the trace.
        with enable_python_dispatcher(), fake_mode, recorder:
            outs = list(flat_fn(*fake_inputs))
        exit_mode = torch.is_grad_enabled()
    except AotTracingError:
        raise
    except Exception as exc:
        raise AotTracingError(
            f"aot could not run the function on fake tensors: {type(exc).__name__}: {exc}"
        ) from exc
    if recorder.overlapping_write is not None:
        raise AotUnsupportedError(
            f"{recorder.overlapping_write} (an as_strided view with overlapping elements): "
            "eager writes them one after another, a functional graph cannot"
        )
    for i, x in enumerate(fake_inputs):
        # By op, too: the capture layer's example values (our inputs under dynamic shapes)
        # may already carry the op's effect, so before and after can look alike.
        if isinstance(x, torch.Tensor) and (
            _layout(x) != layouts[i] or layouts[i][3] in recorder.metadata_written
        ):
            raise AotUnsupportedError(
                f"input {i} changes its size, strides or storage in place (set_, resize_, "
                "as_strided_, ...); aot only writes new values into inputs"
            )
    mutated = tuple(
        i
        for i, x in enumerate(fake_inputs)
        if isinstance(x, torch.Tensor)
        and (x._version != versions[i] or storage_id(x) in recorder.written_storages)
    )
    traced: list[TracedOutput] = []
    symbolic_chains = False
    traced_ids: dict[int, int] = {}
    infos: list[OutputInfo] = []

    # Memory an output may share without being a view in autograd's sense (``detach()``):
    # the storages of the inputs and of the traced outputs so far.
    input_storages: dict[int, int] = {}
    for i, x in enumerate(fake_inputs):
        if isinstance(x, torch.Tensor):
            input_storages.setdefault(storage_id(x), i)
    traced_storages: dict[int, torch.Tensor] = {}

    def add_traced(kind: TracedKind, index: int, tensor: torch.Tensor) -> int:
        traced_ids[id(tensor)] = len(traced)
        traced_storages.setdefault(storage_id(tensor), tensor)
        traced.append(TracedOutput(kind, index, bool(tensor.requires_grad), tensor))
        return len(traced) - 1

    for k, o in enumerate(outs):
        if isinstance(o, torch.SymInt | torch.SymFloat | torch.SymBool):
            # Computed from the inputs' sizes or symbolic int inputs: the forward graph returns
            # it (the compiled graph yields a plain number at runtime); it never has a gradient.
            traced.append(TracedOutput(TracedKind.USER, k, False, o))
            infos.append(OutputInfo(OutputKind.SYMBOLIC, len(traced) - 1))
            continue
        if not isinstance(o, torch.Tensor):
            infos.append(OutputInfo(OutputKind.CONSTANT, constant=o))
            continue
        rg = bool(o.requires_grad)
        if id(o) in tensor_inputs:
            infos.append(OutputInfo(OutputKind.ALIAS_OF_INPUT, tensor_inputs[id(o)],
                                    requires_grad=rg))
            continue
        if o._is_view():
            base = o._base
        elif id(o) in traced_ids:
            base = None
        else:
            base = _unviewed_base(o, fake_inputs, input_storages, traced_storages)
        if base is not None:
            chain = recorder.chain(o, base)
            if chain is not None and _mentions_symbols(chain):
                symbolic_chains = True
            if chain is None and _is_symbolic(o):
                raise AotUnsupportedError(
                    "an output aliasing another tensor through an unrecorded view chain is not "
                    "supported with dynamic shapes"
                )
            size, stride, offset = _geometry(o, base)
            if id(base) in tensor_inputs:
                infos.append(OutputInfo(OutputKind.ALIAS_OF_INPUT, tensor_inputs[id(base)],
                                        view_chain=chain, size=size, stride=stride,
                                        storage_offset=offset, requires_grad=rg))
                continue
            base_index = traced_ids.get(id(base))
            if base_index is None:
                base_index = add_traced(TracedKind.BASE, k, base)
            infos.append(OutputInfo(OutputKind.ALIAS_OF_TRACED, base_index, view_chain=chain,
                                    size=size, stride=stride, storage_offset=offset,
                                    requires_grad=rg))
            continue
        index = traced_ids.get(id(o))
        if index is None:
            index = add_traced(TracedKind.USER, k, o)
        infos.append(OutputInfo(OutputKind.TENSOR, index, requires_grad=rg))
    without_grad = tuple(i for i in mutated if storage_id(fake_inputs[i]) not in  # type: ignore[arg-type]
                         recorder.written_with_grad)
    for i in mutated:
        x = fake_inputs[i]
        assert isinstance(x, torch.Tensor)
        add_traced(TracedKind.MUTATION, i, x)
        if i in without_grad:
            # written only under no_grad: the runtime's copy back runs with grad off too, so
            # the new value never carries a gradient (an optimizer step over leaf parameters
            # then traces as an inference graph, with no backward to build)
            traced[-1] = attrs.evolve(traced[-1], requires_grad=False)
    if mutated:
        log.debug("inputs mutated in place: %s", mutated)
    size_symbols = _size_symbols(fake_inputs, infos) if symbolic_chains else ()
    return FunctionMeta(
        size_symbols=size_symbols,
        input_requires_grad=tuple(
            isinstance(x, torch.Tensor) and bool(x.requires_grad) for x in fake_inputs
        ),
        input_is_tensor=tuple(isinstance(x, torch.Tensor) for x in fake_inputs),
        mutated_inputs=mutated,
        outputs=tuple(infos),
        traced=tuple(traced),
        mutated_without_grad=without_grad,
        grad_mode_at_entry=entry_mode,
        grad_mode_at_exit=exit_mode,
    )
