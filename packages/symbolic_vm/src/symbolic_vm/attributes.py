"""Attribute reads (``obj.name``, LOAD_ATTR) on every kind of tracked value: tensors (facts
TENSOR_MATCH checks, sizes, autograd history), modules, named tuples, constants, functions and
user objects (``object_attrs``), and the kinds the stdlib models register in ``MORE_ATTRS``.
Stores and deletions are ``attr_stores``'s."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from symbolic_vm import object_attrs, slot_calls, tensor_attrs, type_trackers
from symbolic_vm.class_dicts import class_lookup
from symbolic_vm.errors import Unsupported, throw
from symbolic_vm.guard_api import AttrSource
from symbolic_vm.modules import module_attr
from symbolic_vm.operations import describe, graph_call
from symbolic_vm.values import (
    BoundMethodVar,
    ClassNamespaceVar,
    ConstVar,
    DictVar,
    FunctionVar,
    GeneratorContextVar,
    GeneratorVar,
    GradModeVar,
    IteratorVar,
    ListVar,
    MethodVar,
    ModuleVar,
    NewObjectVar,
    ObjectVar,
    SetVar,
    SuperVar,
    SymVar,
    TensorVar,
    TupleVar,
    Var,
)

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter
    from symbolic_vm.output import Output

_TENSOR_TENSOR_ATTRS = frozenset({"T", "mT", "H", "mH", "real", "imag", "data"})


def _class_overlay_read(out: Output, obj: Var, name: str) -> Var | None:
    """``obj.name`` where the trace stored or deleted ``name`` on a class ``obj`` finds it
    through (an instance's class or a base class): the lookups below read the real class
    dicts, which do not have the trace's write yet. For an instance made in the trace without
    an attribute of that name, or a class (a subclass of the one written), a plain value (a
    constant, tensor, container) stored there is the answer when no class before it in the
    MRO defines the name (guarded where the class has a source); anything else breaks (eager
    reads the new value). None: no such write before a class defining the name, the normal
    lookup answers."""
    own: object = None  # a class read directly: its own overlay is object_attrs' to answer
    if isinstance(obj, NewObjectVar):
        classes: tuple[type, ...] = obj.box.cls.__mro__
        where = obj.box.cls_source
        plain_lookup = (
            name not in obj.box.attrs
            and class_lookup(classes[0], "__getattribute__") is object.__getattribute__
        )
    else:
        assert isinstance(obj, ObjectVar)
        value = obj.value
        if isinstance(value, type):
            classes, where, own = value.__mro__, obj.source, value
            plain_lookup = class_lookup(type(value), "__getattribute__") is type.__getattribute__
        else:
            classes, where = type(value).__mro__, None
            plain_lookup = False
    for index, klass in enumerate(classes):
        stored = out.attr_overlay.get((id(klass), name))
        if stored is None:
            if name in klass.__dict__:
                return None  # found before any class the trace wrote: the real dicts answer
            continue
        if klass is own:
            return None
        if plain_lookup and isinstance(
            stored, (ConstVar, TensorVar, SymVar, ListVar, DictVar, TupleVar)
        ):
            if where is not None and index:
                out.predicate(
                    " and ".join(f"{name!r} not in c.__mro__[{i}].__dict__" for i in range(index)),
                    f"no class before {klass.__qualname__} in the MRO of {classes[0].__qualname__}"
                    f" defines {name!r}",
                    c=where,
                )
            return stored
        raise Unsupported(
            f"reading {name!r} through {describe(obj)} after the trace changed it on class "
            f"{klass.__qualname__}"
        )
    return None


def getattr_var(vm: Interpreter, obj: Var, name: str) -> Var:
    """``obj.name``."""
    out = vm.out
    if isinstance(obj, TensorVar):
        return _tensor_attr(out, obj, name)
    if isinstance(obj, SymVar):
        return MethodVar(obj, name)
    if isinstance(obj, ModuleVar):
        return module_attr(vm, obj, name)
    if isinstance(obj, TupleVar) and name in obj.fields:
        return obj.items[obj.fields.index(name)]
    if isinstance(obj, TupleVar) and obj.named_type is not None and TupleVar in MORE_ATTRS:
        found = MORE_ATTRS[TupleVar](vm, obj, name)  # a named tuple's class data (_fields)
        if found is not None:
            return found
    if isinstance(
        obj, (ListVar, DictVar, TupleVar, IteratorVar, GeneratorVar, SetVar, GeneratorContextVar)
    ):
        return MethodVar(obj, name)
    if isinstance(obj, ConstVar):
        value = obj.value
        try:
            attr = getattr(value, name)
        except AttributeError as missing:  # eager raises it here: getattr's default, except
            out.depend(obj)
            raise throw(AttributeError, str(missing)) from None
        if callable(attr):
            return MethodVar(obj, name)
        out.depend(obj)
        return ConstVar(attr)
    if slot_calls.container_type(obj) is frozenset and isinstance(
        getattr(frozenset, name, None), (types.MethodDescriptorType, types.WrapperDescriptorType)
    ):
        return MethodVar(obj, name)  # a frozenset's methods fold on it (slot_calls)
    if isinstance(obj, MethodVar) and name in ("__name__", "__qualname__"):
        kind = slot_calls.container_type(obj.self_var)
        if kind is not None:  # ``p.append.__name__`` (unittest's assertRaises reads it)
            return ConstVar(getattr(getattr(kind, obj.name), name))
    if isinstance(obj, ClassNamespaceVar):
        found = MORE_ATTRS[ClassNamespaceVar](vm, obj, name)  # cls.__dict__.keys, .get, ...
        if found is not None:
            return found
    if isinstance(obj, (NewObjectVar, ObjectVar)) and out.attr_overlay:
        written = _class_overlay_read(out, obj, name)
        if written is not None:
            return written
    if isinstance(obj, (NewObjectVar, ObjectVar)):
        found = type_trackers.getattr_hook(vm, obj, name)
        if found is not None:
            return found
    if isinstance(obj, NewObjectVar):
        return object_attrs.new_object_attr(vm, obj, name)
    if isinstance(obj, SuperVar):
        return object_attrs.super_attr(vm, obj, name)
    if isinstance(obj, FunctionVar):
        out.depend(obj)
        try:
            found = getattr(obj.fn, name)
        except AttributeError as exc:
            _guard_function_attr_missing(out, obj, name)
            raise throw(AttributeError, *exc.args) from None
        return out.wrap(found, _attr(obj, name))
    if isinstance(obj, ObjectVar):
        return object_attrs.object_attr(vm, obj, name)
    if isinstance(obj, GradModeVar):
        return MethodVar(obj, name)
    if isinstance(obj, BoundMethodVar) and name in ("__func__", "__self__"):
        return obj.func if name == "__func__" else obj.self_var
    more = MORE_ATTRS.get(type(obj))  # registered by the stdlib models (partial.func, ...)
    found = more(vm, obj, name) if more is not None else None
    if found is not None:
        return found
    raise Unsupported(f"attribute {name!r} of {describe(obj)}")


# Attribute reads on other kinds of tracked value, by the value's class; None: not one of its.
MORE_ATTRS: dict[type, Callable[[Interpreter, Any, str], Var | None]] = {}


def _guard_function_attr_missing(out: Output, fn: FunctionVar, name: str) -> None:
    """The trace relies on ``fn.name`` being absent: a function's own attributes live in its
    ``__dict__`` (the type's are fixed), so the guard reads that dict, running no user code."""
    if fn.source is None:
        raise Unsupported(f"reading the missing attribute {name!r} of {fn.fn.__qualname__}, "
                          "a function with no source to guard")
    out.predicate(
        f"{name!r} not in f.__dict__",
        f"{fn.source.describe()} has no attribute {name!r}",
        f=fn.source,
    )


def _attr(obj: Var, name: str) -> Any:
    return AttrSource(obj.source, name) if obj.source is not None else None


# Tensor attributes that are facts TENSOR_MATCH checks (class, dtype, device, layout,
# requires_grad, dispatch keys, sizes, strides): read from the fake value, which has them.
_TENSOR_MATCHED_ATTRS = frozenset({
    "dtype", "device", "layout", "requires_grad", "is_cuda", "is_cpu", "is_mps", "is_xpu",
    "is_sparse", "is_sparse_csr", "is_quantized", "is_meta", "is_nested", "is_mkldnn",
    "itemsize", "nbytes",
})
# Facts about a tensor's autograd history or views that TENSOR_MATCH does not check: an
# input's are read from the real tensor and guarded by value; a tensor made in the graph has
# them by how it was made (its fake has the same).
_HISTORY_ATTRS = frozenset({"is_leaf", "grad_fn", "_base"})


def _tensor_attr(out: Output, obj: TensorVar, name: str) -> Var:
    example = obj.example
    if name == "shape":
        return size_of(out, obj)
    if name in _TENSOR_MATCHED_ATTRS:
        out.depend(obj)
        return ConstVar(getattr(example, name))
    if name == "ndim":
        out.depend(obj)
        return ConstVar(example.dim())
    if name in _HISTORY_ATTRS:
        return tensor_attrs.tensor_fact(out, obj, AttrSource, name)
    if name in _TENSOR_TENSOR_ATTRS:
        return graph_call(out, getattr, [obj, ConstVar(name)], {})
    if name == "grad":
        return tensor_attrs.tensor_grad(out, obj)
    if name == "__class__":
        cls = out.tensor_type(obj)
        if cls is None:
            raise Unsupported("the class of a tensor made from a tensor subclass's operation")
        out.depend(obj)  # TENSOR_MATCH checks an input's class
        return ObjectVar(cls)
    stored = tensor_attrs.stored_tensor_attr(out, obj, name)
    if stored is not None:
        return stored  # x.name = value earlier in the trace
    attr = getattr(torch.Tensor, name, None)
    if attr is None or not callable(attr):
        # Any other data attribute (_version, output_nr, names, ...) would be a value the
        # guards do not check.
        raise Unsupported(f"tensor attribute {name!r}")
    return MethodVar(obj, name)


def size_of(out: Output, obj: TensorVar, dim: int | None = None) -> Var:
    """``x.shape`` / ``x.size(dim)``: constants when static, graph values when symbolic."""
    out.depend(obj)
    shape = obj.example.shape
    dims = range(len(shape)) if dim is None else [dim]
    values: list[Var] = []
    for d in dims:
        size = shape[d]
        if isinstance(size, int):
            values.append(ConstVar(size))
        else:
            node = out.builder.call_method("size", (obj.node, d))
            values.append(SymVar(node, node.meta["example_value"]))
    if dim is not None:
        return values[0]
    if all(isinstance(v, ConstVar) for v in values):
        return ConstVar(torch.Size([v.value for v in values if isinstance(v, ConstVar)]))
    return TupleVar(tuple(values), is_size=True)


__all__ = ["MORE_ATTRS", "getattr_var", "size_of"]
