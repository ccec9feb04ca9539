"""Facts about tensors that TENSOR_MATCH does not check (autograd history, views) and a tensor's
``.grad``, read and written: an input's from the real tensor, guarded by value at its source."""

from __future__ import annotations

from typing import Any

from symbolic_vm.errors import Unsupported
from symbolic_vm.guard_api import AttrSource
from symbolic_vm.output import Output
from symbolic_vm.side_effects import AttrWrite
from symbolic_vm.values import ConstVar, TensorVar, Var


def tensor_fact(out: Output, obj: TensorVar, kind: Any, name: str) -> Var:
    """``obj.name`` (``kind`` AttrSource) or ``obj.name()`` (MethodCallSource), a fact TENSOR_MATCH
    does not check: for a graph input the real tensor's answer, guarded by value at
    ``kind(source, name)``; for a tensor made in the graph, its fake's. Only None, bool and int
    answers are folded (a grad_fn or a _base tensor is not)."""
    real: Any = obj.example
    if obj.node.op == "placeholder" and obj.source is not None:
        real = out.real_input(obj)
    value = getattr(real, name)
    if kind is not AttrSource:
        value = value()
    if not (value is None or type(value) in (bool, int)):
        raise Unsupported(f"tensor {name} that is not None (a value the VM does not model)")
    if real is not obj.example:
        out.depend(obj)
        assert obj.source is not None
        out.request("CONSTANT_MATCH", kind(obj.source, name), value)
    return ConstVar(value)


def tensor_grad(out: Output, obj: TensorVar) -> Var:
    """``x.grad``: an input's real ``.grad`` (itself an input, or None), guarded at its source.

    A tensor made inside the graph has no gradient yet: backward cannot have run on it.
    """
    if obj.node.op != "placeholder" or obj.source is None:
        return ConstVar(None)
    written = out.attr_overlay.get((id(out.real_input(obj)), "grad"))
    if written is not None:
        return written  # assigned earlier in the trace (set_tensor_grad)
    grad = out.real_input(obj).grad
    return out.wrap(grad, AttrSource(obj.source, "grad"))


def set_tensor_grad(out: Output, obj: TensorVar, value: Var) -> None:
    """``x.grad = None`` / ``x.grad = t`` on a graph input or parameter: replayed on the real
    tensor after the graph, in order with the other side effects (as torch.compile does); later
    reads of ``x.grad`` in the trace see ``value``. A tensor made in the graph, or a gradient
    eager would refuse (another shape, dtype or device, the tensor itself), is refused here too
    (a graph break: the assignment then runs for real)."""
    if obj.node.op != "placeholder" or obj.source is None:
        raise Unsupported("assigning .grad of a tensor made inside the compiled function")
    if isinstance(value, TensorVar):
        if value is obj:
            raise Unsupported("assigning a tensor as its own .grad")
        out.depend(obj)
        out.depend(value)
        mine, given = obj.example, value.example
        if (
            given.shape != mine.shape or given.dtype != mine.dtype
            or given.device != mine.device
        ):
            raise Unsupported("assigning a .grad of another shape, dtype or device")
    elif not (isinstance(value, ConstVar) and value.value is None):
        raise Unsupported(f"assigning a {type(value).__name__} to a tensor's .grad")
    out.attr_overlay[(id(out.real_input(obj)), "grad")] = value
    out.side_effects.append(AttrWrite(obj, "grad", value))


# Tensor methods answered from metadata (methods.tensor_method; torch_calls for Tensor.<m>(x)).
TENSOR_META_METHODS = frozenset({
    "dim", "ndimension", "numel", "nelement", "element_size", "is_floating_point",
    "is_complex", "is_contiguous", "get_device", "stride", "is_signed", "storage_offset",
})
DATA_DEPENDENT_METHODS = frozenset(
    {"item", "tolist", "numpy", "__bool__", "__index__", "data_ptr"}
)
# Answers TENSOR_MATCH does not check (see tensor_attrs.tensor_fact): whether an input is a view.
FACT_METHODS = frozenset({"_is_view"})


def answers_from_metadata(name: str) -> bool:
    """Whether methods.tensor_method answers ``Tensor.<name>`` itself (a Python value from the
    tensor's metadata, guarded) rather than adding an op to the graph."""
    return name in TENSOR_META_METHODS or name in FACT_METHODS or name in (
        "size", "is_set_to", *DATA_DEPENDENT_METHODS
    )


__all__ = [
    "DATA_DEPENDENT_METHODS",
    "FACT_METHODS",
    "TENSOR_META_METHODS",
    "answers_from_metadata",
    "set_tensor_grad",
    "tensor_fact",
    "tensor_grad",
]
