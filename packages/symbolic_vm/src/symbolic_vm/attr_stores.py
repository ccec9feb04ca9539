"""Attribute stores (``obj.name = value``, ``setattr``) and the class-level protocols around them.

A store is kept in the VM (an overlay read back by later loads, or a made object's attributes)
and replayed on the real object after the graph. That is only the store eager makes when the
class leaves it to ``object.__setattr__`` and no data descriptor owns the name; otherwise:

- a ``property`` with a setter: the setter is traced as a call (its own stores, logs, ... are
  tracked like any other code);
- any other data descriptor (a user ``__set__``, a read-only property, a C getset) or a class
  that overrides ``__setattr__``: Unsupported, so the store runs eagerly at a graph break,
  calling the user's code once -- never a silent instance-dict write the descriptor or the
  user ``__setattr__`` would not have made;
- ``__slots__`` members (member descriptors) of an argument: a plain store, replayed by
  ``setattr``.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

import torch

from symbolic_vm.class_dicts import MISSING, class_lookup, has_instance_dict, is_data_descriptor
from symbolic_vm.errors import Unsupported, throw
from symbolic_vm.guard_api import AttrSource, ClassDictSource, InstanceAttrSource, TypeSource
from symbolic_vm.object_attrs import guard_class_attribute
from symbolic_vm.operations import const_value, describe
from symbolic_vm.side_effects import AttrDelete, AttrWrite, ContainerWrite
from symbolic_vm.tensor_attrs import set_tensor_attr
from symbolic_vm.type_trackers import store_attribute
from symbolic_vm.values import (
    ConstVar,
    DeletedAttrVar,
    DictVar,
    ModuleVar,
    NestedFunctionVar,
    NewObjectVar,
    ObjectVar,
    TensorVar,
    Var,
)

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter
    from symbolic_vm.output import Output

def _own_setattr(cls: type) -> bool:
    """Whether stores on instances of ``cls`` go through something other than the default
    ``__setattr__`` (``object``'s, or ``nn.Module``'s for a module, which the VM models)."""
    found = getattr(cls, "__setattr__", object.__setattr__)
    if issubclass(cls, torch.nn.Module):
        return found is not torch.nn.Module.__setattr__
    return found is not object.__setattr__


def setattr_var(
    vm: Interpreter, obj: Var, name: str, value: Var, *, through_object: bool = False
) -> None:
    """``obj.name = value``: kept in the VM and replayed on real objects after the graph
    (or traced through a property setter, or Unsupported: see the module doc).

    ``through_object``: the store is ``object.__setattr__(obj, name, value)``, which skips the
    class's own ``__setattr__`` (a frozen dataclass's ``__init__``). Exact on an object made
    here (its attributes are rebuilt into its ``__dict__``); on an argument it is Unsupported
    all the same, since the replay would go through the class's ``__setattr__``.
    """
    out = vm.out
    if isinstance(obj, TensorVar):
        set_tensor_attr(out, obj, name, value)
        return
    if isinstance(obj, NestedFunctionVar):
        _store_on_function(vm, obj, name, value)
        return
    if isinstance(obj, NewObjectVar):
        cls = obj.box.cls
    elif isinstance(obj, (ObjectVar, ModuleVar)) and obj.source is not None:
        real = obj.value if isinstance(obj, ObjectVar) else obj.module
        cls = type(real)
    else:
        raise Unsupported(f"attribute assignment on {describe(obj)}")
    if isinstance(obj, ObjectVar) and isinstance(obj.value, type) and type(obj.value) is type:
        cls = object  # a plain class: type.__setattr__ stores in its dict like object's
    if _own_setattr(cls) and not through_object and store_attribute(vm, obj, name, value):
        return  # the class's Python __setattr__, traced as a call
    own_setattr = _own_setattr(cls)
    if own_setattr and not (through_object and isinstance(obj, (NewObjectVar, ObjectVar))):
        raise Unsupported(f"storing {name!r} on a {cls.__name__}, whose class defines __setattr__")
    cls_attr = class_lookup(cls, name)
    if cls_attr is not MISSING and is_data_descriptor(cls_attr):
        _store_through_descriptor(vm, obj, name, cls_attr, value, raw=own_setattr)
        return
    if isinstance(obj, NewObjectVar):
        if not has_instance_dict(cls):
            # 3.13 says why the store cannot go to the instance
            why = "" if sys.version_info < (3, 13) else (
                " and no __dict__ for setting new attributes"
            )
            raise throw(AttributeError, f"{cls.__name__!r} object has no attribute {name!r}{why}")
        obj.box.attrs[name] = value
        return
    if (
        isinstance(obj, ModuleVar)
        and isinstance(value, TensorVar)
        and name in dict(obj.module.named_parameters(recurse=False))
    ):
        raise Unsupported("assigning to a module parameter inside a compiled function")
    out.depend(obj)
    out.attr_overlay[(id(real), name)] = value
    # Past the class's own __setattr__ (it ran in the trace): replayed as object.__setattr__.
    out.side_effects.append(AttrWrite(obj, name, value, raw=own_setattr))
    _show_in_dict_view(out, real, name, value)


# Stores that would change how a function made in the trace runs (the VM calls it from its
# code, defaults and closure): refused; the other special attributes are only read back.
_FUNCTION_CALL_STATE = frozenset({
    "__code__", "__defaults__", "__kwdefaults__", "__closure__", "__globals__", "__dict__",
    "__builtins__",
})
_FUNCTION_SPECIALS = frozenset({
    "__name__", "__qualname__", "__doc__", "__module__", "__annotations__", "__type_params__",
})


def _store_on_function(vm: Interpreter, fn: NestedFunctionVar, name: str, value: Var) -> None:
    """``f.name = value`` on a function made while tracing (``functools.update_wrapper``): a
    special attribute kept for reads, anything else into its ``__dict__``. The function never
    leaves the frame (codegen refuses that), so nothing is replayed."""
    if name in _FUNCTION_CALL_STATE:
        raise Unsupported(f"storing {name} on a function made in the compiled function")
    if name in _FUNCTION_SPECIALS:
        if name in ("__name__", "__qualname__") and not isinstance(
            const_value(vm.out, value), str
        ):
            raise throw(TypeError, f"{name} must be set to a string object")
        fn.specials[name] = value
        return
    fn.fn_dict.items[name] = value


def _show_in_dict_view(out: Output, real: object, name: str, value: Var) -> None:
    """``obj.__dict__``, once read in the trace, is a second view of the attributes stored
    here: the store shows in it too. Else a later read of the view misses the store, and
    writing the view back after the graph (a descriptor's ``obj.__dict__[k] = v``) undoes it."""
    try:
        instance_dict = object.__getattribute__(real, "__dict__")
    except AttributeError:
        return  # __slots__ only
    view = out.tracked(instance_dict)
    if isinstance(view, DictVar):
        view.box.items[name] = value
        if not view.box.mutated:
            view.box.mutated = True
            out.side_effects.append(ContainerWrite(view))


def _store_through_descriptor(
    vm: Interpreter, obj: Var, name: str, attr: object, value: Var, *, raw: bool = False
) -> None:
    """A store to a name a data descriptor of the class owns: trace a property's setter."""
    if isinstance(attr, property) and attr.fset is not None:
        if isinstance(obj, NewObjectVar):
            if obj.box.cls_source is not None:
                guard_class_attribute(vm.out, obj.box.cls_source, name, attr)
        elif obj.source is not None:
            vm.out.depend(obj)
            guard_class_attribute(vm.out, TypeSource(obj.source), name, attr)
        vm.call(vm.out.wrap(attr.fset, None), [obj, value], {})
        return
    setter = class_lookup(type(attr), "__set__")
    if isinstance(setter, types.FunctionType) and isinstance(obj, (ObjectVar, NewObjectVar)):
        _call_user_set(vm, obj, name, attr, setter=setter, value=value)
        return
    if isinstance(attr, types.MemberDescriptorType) and isinstance(obj, NewObjectVar):
        obj.box.attrs[name] = value  # a __slots__ member of an object made here
        return
    if isinstance(attr, types.MemberDescriptorType) and not isinstance(obj, NewObjectVar):
        # A __slots__ member of an argument: setattr replays exactly this store.
        vm.out.depend(obj)
        vm.out.attr_overlay[(id(_real(obj)), name)] = value
        vm.out.side_effects.append(AttrWrite(obj, name, value, raw=raw))
        return
    raise Unsupported(
        f"storing {name!r}, a data descriptor ({type(attr).__name__}) of the class: "
        "the store runs eagerly"
    )


def _call_user_set(
    vm: Interpreter, obj: ObjectVar | NewObjectVar, name: str, desc: object, *, setter: Any,
    value: Var,
) -> None:
    """``type(desc).__set__(desc, obj, value)`` traced as a call (its effects replayed, run as
    often as eager runs it); guards pin the descriptor, read from the class dicts."""
    out = vm.out
    if isinstance(obj, NewObjectVar):
        cls_source = obj.box.cls_source
    else:
        out.depend(obj)
        cls_source = TypeSource(obj.source) if obj.source is not None else None
    where = ClassDictSource(cls_source, name) if cls_source is not None else None
    if where is not None:
        out.request("ID_MATCH", where, desc)
        out.request("ID_MATCH", AttrSource(TypeSource(where), "__set__"), setter)
    vm.call(out.wrap(setter, None), [out.wrap(desc, where), obj, value], {})


def _real(obj: Var) -> Any:
    if isinstance(obj, ObjectVar):
        return obj.value
    if isinstance(obj, ModuleVar):
        return obj.module
    raise Unsupported("a store on an object the VM does not hold")


def delattr_var(vm: Interpreter, obj: Var, name: str, *, through_object: bool = False) -> None:
    """``del obj.name`` / ``delattr(obj, name)`` on an object made while tracing, as
    ``object.__delattr__`` does it: a class's own Python ``__delattr__`` is traced as a call, a
    property's deleter is called, else the name leaves the instance dict (AttributeError when it
    is not there). The object is rebuilt after the graph from its attributes, so nothing is
    replayed. On a plain object from the frame: ``_delete_on_frame_object``."""
    if isinstance(obj, ObjectVar) and obj.source is not None:
        _delete_on_frame_object(vm, obj, name)
        return
    if not isinstance(obj, NewObjectVar):
        raise Unsupported(f"deleting attribute {name!r} of {describe(obj)}")
    cls = obj.box.cls
    hook = class_lookup(cls, "__delattr__")
    if hook is not object.__delattr__ and not through_object:
        if not isinstance(hook, types.FunctionType):
            raise Unsupported(f"deleting {name!r} of a {cls.__name__}: its __delattr__ is C code")
        if obj.box.cls_source is not None:
            guard_class_attribute(vm.out, obj.box.cls_source, "__delattr__", hook)
        vm.call(vm.out.wrap(hook, None), [obj, ConstVar(name)], {})
        return
    cls_attr = class_lookup(cls, name)
    if isinstance(cls_attr, types.MemberDescriptorType):  # a __slots__ member
        if name not in obj.box.attrs:
            raise throw(AttributeError, name)
        del obj.box.attrs[name]
        return
    if cls_attr is not MISSING and is_data_descriptor(cls_attr):
        if isinstance(cls_attr, property) and cls_attr.fdel is not None:
            if obj.box.cls_source is not None:
                guard_class_attribute(vm.out, obj.box.cls_source, name, cls_attr)
            vm.call(vm.out.wrap(cls_attr.fdel, None), [obj], {})
            return
        raise Unsupported(
            f"deleting {name!r}, a data descriptor ({type(cls_attr).__name__}) of the class"
        )
    if name not in obj.box.attrs:
        raise throw(AttributeError, f"{cls.__name__!r} object has no attribute {name!r}")
    del obj.box.attrs[name]


def _delete_on_frame_object(vm: Interpreter, obj: ObjectVar, name: str) -> None:
    """``del obj.name`` on an instance from the frame whose class deletes as ``object`` does:
    the trace sees the name gone (``attr_overlay`` holds a DeletedAttrVar) and the deletion is
    replayed by ``delattr`` after the graph, in program order with the stores. Whether the
    instance had the name is guarded (read from its ``__dict__``, running no user code)."""
    out = vm.out
    real = obj.value
    cls = type(real)
    plain = (
        cls.__flags__ & _HEAPTYPE
        and has_instance_dict(cls)
        and not isinstance(real, (type, torch.nn.Module, dict))
        and class_lookup(cls, "__delattr__") is object.__delattr__
    )
    cls_attr = class_lookup(cls, name)
    if not plain or (cls_attr is not MISSING and is_data_descriptor(cls_attr)):
        raise Unsupported(f"deleting attribute {name!r} of {describe(obj)}")
    instance_dict = object.__getattribute__(real, "__dict__")
    if out.tracked(instance_dict) is not None:
        # obj.__dict__ was read as a dict in the trace: that view would miss the deletion
        raise Unsupported(f"deleting attribute {name!r} of an object whose __dict__ was read")
    key = (id(real), name)
    overlay = out.attr_overlay.get(key)
    if overlay is None:
        assert obj.source is not None
        out.depend(obj)
        present = name in instance_dict
        where = obj.source.describe()
        test = "in" if present else "not in"
        out.predicate(
            f"{name!r} {test} d",
            f"{where} {'has' if present else 'has no'} attribute {name!r} of its own",
            d=InstanceAttrSource(obj.source, "__dict__"),
        )
    else:
        present = not isinstance(overlay, DeletedAttrVar)
    if not present:
        raise throw(AttributeError, f"{cls.__name__!r} object has no attribute {name!r}")
    out.attr_overlay[key] = DeletedAttrVar()
    out.side_effects.append(AttrDelete(obj, name))


_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement


__all__ = [
    "MISSING",
    "class_lookup",
    "delattr_var",
    "is_data_descriptor",
    "setattr_var",
]
