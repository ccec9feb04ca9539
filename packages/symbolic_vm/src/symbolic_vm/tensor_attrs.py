"""Facts about tensors that TENSOR_MATCH does not check (autograd history, views), a tensor's
``.grad``, read and written (an input's from the real tensor, guarded by value at its source),
and the plain attributes a program stores on a tensor (``x.offloading_activation = flag``)."""

from __future__ import annotations

from typing import Any

from symbolic_vm.class_dicts import MISSING, class_lookup
from symbolic_vm.errors import Unsupported
from symbolic_vm.guard_api import AttrSource, InstanceAttrSource, ItemSource
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
    written = out.attr_overlay.get((_identity(out, obj), "grad"))
    if written is not None:
        return written  # assigned earlier in the trace (set_tensor_grad)
    if not _is_input(obj) or obj.source is None:
        return ConstVar(None)
    grad = out.real_input(obj).grad
    return out.wrap(grad, AttrSource(obj.source, "grad"))


def set_tensor_grad(out: Output, obj: TensorVar, value: Var) -> None:
    """``x.grad = None`` / ``x.grad = t``: replayed after the graph, in order with the other side
    effects (as torch.compile does), on the real tensor of an input or parameter, or on the
    graph's output for a tensor made in the graph; later reads of ``x.grad`` in the trace see
    ``value``. A gradient eager would refuse (another shape, dtype or device, the tensor
    itself) is refused here too (a graph break: the assignment then runs for real)."""
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
    if _is_input(obj):
        out.depend(obj)
    out.attr_overlay[(_identity(out, obj), "grad")] = value
    out.side_effects.append(AttrWrite(obj, "grad", value))


def set_tensor_attr(out: Output, obj: TensorVar, name: str, value: Var) -> None:
    """``x.name = value`` for a name the tensor's class does not define (a plain instance-dict
    store, as eager makes it): later reads in the trace see ``value``, and the store is
    replayed after the graph on the real tensor (an input) or on the graph's output (a tensor
    made in the graph), so the caller finds it on the tensor it holds. A name the class
    defines (a property, a method, ``requires_grad``, ``data``) or a tensor class with its own
    ``__setattr__`` is Unsupported: the store then runs eagerly."""
    if name == "grad":
        set_tensor_grad(out, obj, value)
        return
    cls = out.tensor_type(obj)
    if cls is None or getattr(cls, "__setattr__", None) is not object.__setattr__:
        raise Unsupported("attribute assignment on a tensor of a subclass with its own "
                          "__setattr__ or __torch_function__")
    if class_lookup(cls, name) is not MISSING:
        raise Unsupported(f"assigning tensor attribute {name!r}, which {cls.__name__} defines")
    if _is_input(obj):
        out.depend(obj)
    out.attr_overlay[(_identity(out, obj), name)] = value
    out.side_effects.append(AttrWrite(obj, name, value))


def stored_tensor_attr(out: Output, obj: TensorVar, name: str) -> Var | None:
    """What the trace stored as ``obj.name`` (set_tensor_attr), or else what an input tensor
    holds in its own ``__dict__`` (``x.tag = 1`` before the call: read at its source, so
    guarded); None when neither has it."""
    stored = out.attr_overlay.get((_identity(out, obj), name))
    if stored is not None or not _is_input(obj) or obj.source is None:
        return stored
    own = out.real_input(obj).__dict__
    if name not in own:
        return None
    return out.wrap(own[name], ItemSource(InstanceAttrSource(obj.source, "__dict__"), name))


def tensor_has_attr(out: Output, obj: TensorVar, name: str) -> bool:
    """``hasattr(obj, name)``: its class's attributes (TENSOR_MATCH pins the class), what the
    trace stored on it, and for an input what its own ``__dict__`` holds (guarded: a later
    call with a tensor that has it, or lacks it, recompiles). Never the fake value's own
    attributes (a FakeTensor has some a real tensor lacks)."""
    cls = out.tensor_type(obj)
    if cls is None:
        raise Unsupported("hasattr() on a tensor made by a tensor subclass's operation")
    out.depend(obj)
    if class_lookup(cls, name) is not MISSING:
        real = out.real_input(obj) if _is_input(obj) else obj.example
        return hasattr(real, name)
    if out.attr_overlay.get((_identity(out, obj), name)) is not None:
        return True
    if not _is_input(obj) or obj.source is None:
        return False  # a tensor made in the graph has only what the trace stored
    present = name in out.real_input(obj).__dict__
    out.predicate(
        f"{name!r} {'in' if present else 'not in'} d",
        f"{obj.source.describe()}.{name} is {'set' if present else 'unset'}",
        d=InstanceAttrSource(obj.source, "__dict__"),
    )
    return present


def _is_input(obj: TensorVar) -> bool:
    return bool(obj.node.op == "placeholder" and obj.source is not None)


def _identity(out: Output, obj: TensorVar) -> int:
    """The key the trace keeps ``obj``'s attribute writes under in ``Output.attr_overlay``: its
    real tensor for an input (as for any object from the frame), its graph node for a tensor
    made in the graph (the node is that tensor's identity in the trace, as for ``is``)."""
    if _is_input(obj):
        return id(out.real_input(obj))
    return id(obj.node)


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
    "set_tensor_attr",
    "set_tensor_grad",
    "stored_tensor_attr",
    "tensor_has_attr",
    "tensor_fact",
    "tensor_grad",
]
