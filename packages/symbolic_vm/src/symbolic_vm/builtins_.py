"""Python builtins on tracked values: len, isinstance, range, zip, min/max/sum, getattr, ..."""

from __future__ import annotations

import builtins
import dataclasses
import functools
import math
import operator
import sys
import types
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch

from guards import TypeSource
from symbolic_vm import attr_stores, attributes, object_model, object_operators, sets, type_trackers
from symbolic_vm import operations as ops
from symbolic_vm.errors import TracedException, Unsupported, folding_error, throw
from symbolic_vm.methods import next_value, sort_values, tensor_to_scalar
from symbolic_vm.module_tables import module_len
from symbolic_vm.output import MadeObjectId
from symbolic_vm.values import (
    BoundMethodVar,
    ConstVar,
    DeletedAttrVar,
    DictBox,
    DictVar,
    DictViewVar,
    FunctionVar,
    GeneratorVar,
    IteratorVar,
    IterBox,
    ListBox,
    ListVar,
    ModuleVar,
    NestedFunctionVar,
    NewObjectVar,
    ObjectVar,
    PartialVar,
    SequentialSliceVar,
    SetBox,
    SetVar,
    SuperVar,
    SymVar,
    TensorVar,
    TupleVar,
    Var,
)

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter

BuiltinImpl = Callable[["Interpreter", list[Var], dict[str, Var]], Var]
_IMPLS: dict[object, BuiltinImpl] = {}
_KEEP: list[object] = []
# Implementations for every instance of a type (functools' lru_cache wrappers): see stdlib/.
_TYPE_IMPLS: dict[
    type, Callable[[Interpreter, ObjectVar, list[Var], dict[str, Var]], Var | None]
] = {}


def _key(fn: object) -> object:
    """The table key of ``fn``: its identity, or for a C class method (``dict.fromkeys``,
    ``itertools.chain.from_iterable``: a new bound object on every read) its class and name."""
    owner = getattr(fn, "__self__", None)
    if isinstance(fn, types.BuiltinMethodType) and isinstance(owner, type):
        return (id(owner), fn.__name__)
    return id(fn)


def implements(*fns: object) -> Callable[[BuiltinImpl], BuiltinImpl]:
    """Register the VM's implementation of builtin ``fns``."""

    def register(impl: BuiltinImpl) -> BuiltinImpl:
        for fn in fns:
            _IMPLS[_key(fn)] = impl
            _KEEP.append(fn)
        return impl

    return register


def implementation(fn: object) -> BuiltinImpl | None:
    """The VM's own implementation of ``fn`` registered with ``@implements``, if any."""
    return _IMPLS.get(_key(fn))


# Pure functions on constants: folded by calling them on the Python values.
_PURE: frozenset[int] = frozenset(
    id(f)
    for f in (
        builtins.int, builtins.float, builtins.bool, builtins.str, builtins.round, builtins.divmod,
        builtins.pow, builtins.repr, builtins.chr, builtins.ord, builtins.hash, builtins.format,
        builtins.frozenset, builtins.set, builtins.slice,
        *(getattr(math, n) for n in dir(math) if callable(getattr(math, n))),
        *(getattr(operator, n) for n in dir(operator) if not n.startswith("_")
          and callable(getattr(operator, n))),
    )
)

# Builtins whose result is not a number: on a symbolic int they specialise it (guarded by its
# value), as torch.compile does; traced on the SymInt they would give its symbol's name ("s0").
_SPECIALISING: frozenset[int] = frozenset(
    id(f) for f in (builtins.str, builtins.repr, builtins.format, builtins.hash, builtins.chr)
)

# Builtins and math functions whose call on a SymInt/SymFloat would specialise it (``float(s0)``
# asks the shape environment for the value), and torch's symbolic spelling of the same function,
# recorded in the graph instead so that the int stays symbolic (one compile for every value).
_SYMBOLIC_EQUIVALENTS: dict[int, Any] = {
    id(builtins.float): torch.sym_float,
    id(builtins.int): torch.sym_int,
    **{
        id(getattr(math, name)): getattr(torch, f"_sym_{name}")
        for name in ("sqrt", "cos", "cosh", "sin", "sinh", "tan", "tanh", "asin", "acos",
                     "atan", "log2")
        if hasattr(torch, f"_sym_{name}")
    },
}

# Keyed by id (the operator functions live as long as the module): the callee looked up may be
# any object, unhashable (an OrderedDict) or with a user __eq__/__hash__ that must not run here.
_OPERATOR_BINARY = {id(v): k for k, v in ops.BINARY_OPS.items()}
_OPERATOR_COMPARE = {id(v): k for k, v in ops.COMPARE_OPS.items()}


def call_builtin(
    vm: Interpreter, fn: ObjectVar, args: list[Var], kwargs: dict[str, Var]
) -> Var | None:
    """The VM's answer to calling builtin ``fn``; None when it is not one of ours."""
    value = fn.value
    impl = _IMPLS.get(_key(value))
    if impl is not None:
        return impl(vm, _with_user_iterators(vm, value, args), kwargs)
    per_type = _TYPE_IMPLS.get(type(value))
    found = per_type(vm, fn, args, kwargs) if per_type is not None else None
    if found is not None:
        return found
    if (value is int or value is float or value is bool) and len(args) == 1 and isinstance(
        args[0], TensorVar
    ):
        # int(t): an item() under capture_scalar_outputs
        scalar = None if kwargs else tensor_to_scalar(vm, value, args[0])
        if scalar is not None:
            return scalar
    # by identity: ``value`` may be unhashable (an OrderedDict's bound method's self, ...)
    text_kind = next((kind for f, kind in _TEXT.items() if f is value), None)
    if text_kind and 1 <= len(args) <= (2 if value is builtins.format else 1) and not kwargs:
        text = object_model.text_of(vm, args[0], text_kind, args[1] if len(args) > 1 else None)
        if text is not None:  # a user __str__/__repr__/__format__, traced
            return text
    if value is builtins.hash and len(args) == 1 and not kwargs:
        hashed = object_model.hash_of(vm, args[0])  # a user __hash__ (a dataclass's)
        if hashed is not None:
            return hashed
    if value is builtins.bool and len(args) == 1 and not kwargs:
        truth = object_model.truth(vm, args[0])  # a user __bool__/__len__, a deque's items
        if truth is not None:
            return ConstVar(truth)
    if id(value) in _OPERATOR_BINARY and not kwargs and len(args) == 2:
        return object_operators.binary_op(vm, _OPERATOR_BINARY[id(value)], args[0], args[1])
    if id(value) in _OPERATOR_COMPARE and not kwargs and len(args) == 2:
        return object_operators.compare_op(vm, _OPERATOR_COMPARE[id(value)], args[0], args[1])
    sym_equivalent = _SYMBOLIC_EQUIVALENTS.get(id(value))
    if sym_equivalent is not None and not kwargs and any(isinstance(a, SymVar) for a in args):
        return ops.graph_call(vm.out, sym_equivalent, args, kwargs)
    if id(value) in _PURE:
        specialise = id(value) in _SPECIALISING and not any(isinstance(a, TensorVar) for a in args)
        if not specialise and any(ops.is_graph_value(a) for a in args):
            return ops.graph_call(vm.out, value, args, kwargs)
        py_args = [ops.const_value(vm.out, a) for a in args]
        py_kwargs = {k: ops.const_value(vm.out, v) for k, v in kwargs.items()}
        if value is not builtins.bool and any(
            isinstance(a, MadeObjectId) for a in (*py_args, *py_kwargs.values())
        ):
            raise Unsupported(f"{_name_of(value)}() of the id() of an object made in the "
                              "compiled function (its number is only known when the code runs)")
        try:
            return vm.out.wrap(value(*py_args, **py_kwargs), None)
        except Exception as exc:  # int("x"), math.sqrt(-1): eager raises the same
            raise folding_error(exc, "a builtin") from None
    return None


def _name_of(fn: object) -> str:
    return str(getattr(fn, "__name__", fn))


_TEXT: dict[object, str] = {builtins.str: "str", builtins.repr: "repr", builtins.format: "format"}


# Builtins that iterate over their arguments: from which position on (min/max: only a lone
# iterable argument). A user object's own __iter__ is called first, as Python's iter() would.
_ITERATING: dict[int, int] = {
    **{id(f): 0 for f in (builtins.zip, builtins.enumerate, builtins.list, builtins.tuple,
                          builtins.sorted, builtins.sum, builtins.any, builtins.all,
                          builtins.set, builtins.frozenset, builtins.min, builtins.max)},
    id(builtins.map): 1,
    id(builtins.filter): 1,
}
_ONLY_FIRST = frozenset(id(f) for f in (
    builtins.enumerate, builtins.list, builtins.tuple, builtins.sorted, builtins.sum,
    builtins.any, builtins.all, builtins.set, builtins.frozenset, builtins.min, builtins.max,
))


# The builtins that size their result by the iterable's length hint after iter() (list_extend).
_SIZED = frozenset(id(f) for f in (builtins.list, builtins.tuple, builtins.sorted))


def _with_user_iterators(vm: Interpreter, fn: object, args: list[Var]) -> list[Var]:
    start = _ITERATING.get(id(fn))
    if start is None or (id(fn) in (id(builtins.min), id(builtins.max)) and len(args) != 1):
        return args
    stop = start + 1 if id(fn) in _ONLY_FIRST else len(args)
    converted = list(args)
    for i in range(start, min(stop, len(args))):
        found = object_model.iterate(vm, args[i])
        if found is not None:
            if id(fn) in _SIZED:
                object_model.length_hint(vm, args[i])
            converted[i] = found
    return converted


@implements(builtins.len)
def _len(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    (obj,) = args
    found = object_model.length(vm, obj)
    if found is not None:
        return found
    if isinstance(obj, (TupleVar, ListVar)):
        return ConstVar(len(ops.items(vm.out, obj)))
    if isinstance(obj, DictVar):
        vm.out.depend(obj)
        return ConstVar(len(obj.box.items))
    if isinstance(obj, DictViewVar):
        return ConstVar(len(ops.view_items(vm.out, obj)))
    if isinstance(obj, SequentialSliceVar):
        return ConstVar(len(obj.items))
    if isinstance(obj, TensorVar):
        return attributes.size_of(vm.out, obj, 0)
    if isinstance(obj, ModuleVar):
        vm.out.depend(obj)
        size = module_len(vm.out, obj)
        if size is None:
            raise Unsupported(f"len() of a {type(obj.module).__name__} (its own __len__)")
        return ConstVar(size)
    return ConstVar(len(ops.const_value(vm.out, obj)))


def python_type(vm: Interpreter, var: Var) -> type:
    """The Python type of a tracked value (guarding what it was read from)."""
    return _python_type(vm, var)


def has_attribute(vm: Interpreter, obj: Var, name: str) -> bool:
    """``hasattr(obj, name)``; an attribute found missing on a frame object is guarded so."""
    if type_trackers.attribute_hooks(obj):
        # As hasattr does: the lookup, the class's __getattribute__/__getattr__ traced as calls
        # (run as often as eager runs them; guards never call them).
        try:
            attributes.getattr_var(vm, obj, name)
        except TracedException as raised:
            if not isinstance(raised.exception, AttributeError):
                raise
            return False
        return True
    found = _has_attr(vm, obj, name)
    if (
        isinstance(obj, ObjectVar)
        and obj.source is not None
        and (id(obj.value), name) not in vm.out.attr_overlay  # the trace set it: it is there
    ):
        # Either answer: an instance attribute comes and goes with no change of type.
        where = obj.source.describe()
        vm.out.predicate(
            f"hasattr(o, {name!r})" if found else f"not hasattr(o, {name!r})",
            f"{where} has {'an' if found else 'no'} attribute {name!r}",
            o=obj.source,
        )
    return found


def _python_type(vm: Interpreter, var: Var) -> type:
    """The Python type of a tracked value."""
    if isinstance(var, TensorVar):
        vm.out.depend(var)
        cls = vm.out.tensor_type(var)
        if cls is None:
            raise Unsupported("the class of a tensor computed from a tensor subclass input")
        return cls
    if isinstance(var, ConstVar):
        vm.out.depend(var)
        return int if isinstance(var.value, MadeObjectId) else type(var.value)
    if isinstance(var, TupleVar):
        return var.named_type or tuple
    if isinstance(var, ListVar):
        return list
    if isinstance(var, DictVar):
        return dict
    if isinstance(var, DictViewVar):
        return type(getattr({}, var.kind)())
    if isinstance(var, SequentialSliceVar):
        return torch.nn.Sequential
    if isinstance(var, SetVar):
        return set
    if isinstance(var, ModuleVar):
        vm.out.depend(var)
        return type(var.module)
    if isinstance(var, ObjectVar):
        vm.out.depend(var)
        return type(var.value)
    if isinstance(var, NewObjectVar):
        return var.box.cls
    if isinstance(var, SymVar):  # the Python type the value has when the program runs
        example = var.example
        return bool if isinstance(example, torch.SymBool) else (
            float if isinstance(example, torch.SymFloat) else int
        )
    if isinstance(var, (FunctionVar, NestedFunctionVar)):
        return type(_python_type)
    if isinstance(var, PartialVar):
        return functools.partial
    if isinstance(var, BoundMethodVar):
        return types.MethodType
    raise Unsupported(f"type() of {ops.describe(var)}")


@implements(builtins.type)
def _type(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if len(args) != 1:
        raise Unsupported("type() with three arguments (creating a class)")
    obj = args[0]
    cls = _python_type(vm, obj)
    # Where the class can be read again: its attributes read or stored through it are then
    # guarded and replayed there (``type(self).count += 1``).
    source = obj.box.cls_source if isinstance(obj, NewObjectVar) else (
        TypeSource(obj.source) if obj.source is not None and not isinstance(obj, TupleVar)
        else None
    )
    return ObjectVar(cls, source=source)


# The metaclass of torch's legacy tensor types (torch.FloatTensor, ...): their isinstance asks
# the tensor's dtype, device and layout, not its class.
_LEGACY_TENSOR_TYPE = type(torch.FloatTensor)


@implements(builtins.isinstance)
def _isinstance(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    obj, classes = args
    cls = ops.const_value(vm.out, classes)
    options = cls if isinstance(cls, tuple) else (cls,)
    if isinstance(obj, TensorVar) and any(type(c) is _LEGACY_TENSOR_TYPE for c in options):
        # TENSOR_MATCH (depended on by _python_type) guards dtype, device and layout.
        py_type = _python_type(vm, obj)
        return ConstVar(any(
            isinstance(obj.example, c) if type(c) is _LEGACY_TENSOR_TYPE else issubclass(py_type, c)
            for c in options
        ))
    if any(_user_instancecheck(c) is not None for c in options):
        return ConstVar(_isinstance_through_hooks(vm, obj, classes, options))
    py_type = _python_type(vm, obj)
    if issubclass(py_type, cls):
        return ConstVar(True)
    if _overrides_class(py_type):
        # CPython then asks obj.__class__ (a proxy's property): read as eager reads it
        claimed = ops.const_value(vm.out, attributes.getattr_var(vm, obj, "__class__"))
        return ConstVar(
            claimed is not py_type and isinstance(claimed, type) and issubclass(claimed, cls)
        )
    return ConstVar(False)


def _overrides_class(cls: type) -> bool:
    """Whether instances of ``cls`` may answer ``__class__`` with another class (a property or
    attribute named ``__class__`` in a class dict): isinstance consults it."""
    return any("__class__" in k.__dict__ for k in cls.__mro__ if k is not object)


_CHECK = "__instancecheck__"


def _user_instancecheck(cls: object) -> types.FunctionType | None:
    """A user metaclass's own ``__instancecheck__`` (Python code isinstance calls), or None
    where isinstance is a subclass test of the object's type (``type``'s, ABCMeta's, torch's
    and typing's metaclasses, answered as before)."""
    if not isinstance(cls, type):
        return None
    meta: type = type(cls)
    hook = next(
        (k.__dict__[_CHECK] for k in meta.__mro__ if _CHECK in k.__dict__), None
    )
    if not isinstance(hook, types.FunctionType):
        return None
    module = hook.__module__ or ""
    if module.split(".")[0] in ("torch", "typing", "abc", "_py_abc", "typing_extensions"):
        return None
    return hook


def _isinstance_through_hooks(
    vm: Interpreter, obj: Var, classes: Var, options: tuple[Any, ...]
) -> bool:
    """``isinstance(obj, classes)`` as CPython runs it when a class's metaclass has its own
    ``__instancecheck__``: an exact type match first, then the hook (traced as a call), per
    class in order."""
    py_type = _python_type(vm, obj)
    for i, c in enumerate(options):
        if py_type is c:
            return True
        hook = _user_instancecheck(c)
        if hook is None:
            if issubclass(py_type, c):
                return True
            continue
        if isinstance(classes, TupleVar):
            c_var = classes.items[i]
        elif isinstance(classes, ObjectVar):
            c_var = classes
        else:
            c_var = ObjectVar(c)
        found = vm.call(BoundMethodVar(c_var, FunctionVar(hook)), [obj], {})
        if ops.truth(vm.out, found):
            return True
    return False


@implements(builtins.issubclass)
def _issubclass(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    return ConstVar(issubclass(ops.const_value(vm.out, args[0]), ops.const_value(vm.out, args[1])))


@implements(builtins.callable)
def _callable(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    (obj,) = args
    if isinstance(obj, (FunctionVar, NestedFunctionVar, BoundMethodVar, PartialVar, ModuleVar)):
        return ConstVar(True)
    if isinstance(obj, (TensorVar, TupleVar, ListVar, DictVar, ConstVar)):
        return ConstVar(isinstance(obj, ConstVar) and callable(obj.value))
    return ConstVar(callable(_python_type(vm, obj)))


@implements(builtins.range)
def _range(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    return ConstVar(range(*[_int_arg(vm, a) for a in args]))


def _int_arg(vm: Interpreter, var: Var) -> int:
    value = ops.const_value(vm.out, var)
    if not isinstance(value, int):
        raise Unsupported(f"expected an int, got {type(value).__name__}")
    return value


@implements(builtins.enumerate)
def _enumerate(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if _has_generator(args):
        return _over_generator(vm, _lazy_enumerate, args, kwargs)
    start = _int_arg(vm, args[1] if len(args) > 1 else kwargs.get("start", ConstVar(0)))
    values = ops.iterate(vm.out, args[0])
    return IteratorVar(IterBox([TupleVar((ConstVar(start + i), v)) for i, v in enumerate(values)]))


@implements(builtins.zip)
def _zip(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    strict = bool(ops.const_value(vm.out, kwargs["strict"])) if "strict" in kwargs else False
    if _has_generator(args) and not strict:
        return _over_generator(vm, _lazy_zip, args, {})
    columns = [ops.iterate(vm.out, a) for a in args]
    if strict and len({len(c) for c in columns}) > 1:
        raise Unsupported("ValueError raised by zip(strict=True)")
    return IteratorVar(IterBox([TupleVar(tuple(row)) for row in zip(*columns, strict=False)]))


@implements(builtins.reversed)
def _reversed(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    return IteratorVar(IterBox(list(reversed(ops.iterate(vm.out, args[0])))))


@implements(builtins.iter)
def _iter(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    found = object_model.iter_object(vm, args[0]) if len(args) == 1 else None
    return found if found is not None else ops.make_iterator(vm.out, args[0])


@implements(builtins.next)
def _next(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    iterator = args[0]
    if isinstance(iterator, GeneratorVar):
        value = ops.generator_next(vm.out, iterator)
        if value is not None:
            return value
        if len(args) > 1:
            return args[1]
        raise throw(StopIteration)
    if type_trackers.user_class(iterator) is not None:
        try:
            return object_model.next_of(vm, iterator)
        except TracedException as raised:
            if len(args) > 1 and isinstance(raised.exception, StopIteration):
                return args[1]
            raise
    if not isinstance(iterator, IteratorVar):
        raise Unsupported(f"next() on {ops.describe(iterator)}")
    if iterator.box.index >= len(iterator.box.items) and len(args) > 1:
        return args[1]
    return next_value(iterator)


@implements(builtins.list)
def _list(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    return ListVar(ListBox(ops.iterate(vm.out, args[0]) if args else []))


@implements(builtins.tuple)
def _tuple(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    return TupleVar(tuple(ops.iterate(vm.out, args[0])) if args else ())


@implements(builtins.set)
def _set(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:

    return SetVar(SetBox(set(sets.set_operand(vm, args[0])) if args else set()))


@implements(builtins.frozenset)
def _frozenset(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:

    return ObjectVar(frozenset(sets.set_operand(vm, args[0])) if args else frozenset())


@implements(builtins.dict)
def _dict(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    items: dict[Any, Var] = {}
    if args:
        source = args[0]
        mapping = object_model.mapping_items(vm, source)
        if mapping is not None:
            items.update(mapping)
        elif isinstance(source, DictVar):
            vm.out.depend(source)
            items.update(source.box.items)
        else:
            for pair in ops.iterate(vm.out, source):
                key, value = ops.items(vm.out, pair)
                items[ops.const_value(vm.out, key)] = value
    items.update(kwargs)
    return DictVar(DictBox(items))


@implements(builtins.sorted)
def _sorted(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    return ListVar(ListBox(sort_values(vm, ops.iterate(vm.out, args[0]), kwargs)))


def _reduce_minmax(vm: Interpreter, args: list[Var], kwargs: dict[str, Var], pick: Any) -> Var:
    """``max``/``min`` with ``key=`` (called on each value, traced) and ``default=``; the
    keys compared must be constants, the values need not be (``max(ts, key=len)``)."""
    name = pick.__name__
    if set(kwargs) - {"key", "default"}:
        raise Unsupported(f"{name}() with keywords {sorted(set(kwargs) - {'key', 'default'})}")
    if len(args) != 1 and "default" in kwargs:
        raise throw(TypeError, f"Cannot specify a default for {name}() with multiple "
                    "positional arguments")
    values = ops.iterate(vm.out, args[0]) if len(args) == 1 else list(args)
    key = kwargs.get("key")
    if isinstance(key, ConstVar) and key.value is None:
        key = None
    if not values:
        if "default" in kwargs:
            return kwargs["default"]
        try:
            pick(())
        except ValueError as exc:  # the running Python's own message
            raise throw(ValueError, *exc.args) from exc
    if key is None and any(ops.is_graph_value(v) for v in values):
        raise Unsupported(f"{name}() over tensors compares tensor data")
    keyed = values if key is None else [vm.call(key, [v], {}) for v in values]
    keys = [ops.const_value(vm.out, k) for k in keyed]
    try:
        index: int = pick(range(len(values)), key=keys.__getitem__)  # the first equal one wins
    except TypeError as exc:
        raise throw(TypeError, *exc.args) from exc
    return values[index]


@implements(builtins.max)
def _max(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    return _reduce_minmax(vm, args, kwargs, max)


@implements(builtins.min)
def _min(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    return _reduce_minmax(vm, args, kwargs, min)


_NUMBERS = (int, float, bool, complex)


@implements(builtins.sum)
def _sum(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    start: Var = args[1] if len(args) > 1 else kwargs.get("start", ConstVar(0))
    values = ops.iterate(vm.out, args[0])
    # CPython adds a run of numbers in C, and from 3.12 sums floats with compensation
    # (Neumaier): a left fold of `+` differs in the last bits (sum([-0.77, 0.18, 0.59]) is
    # -5.55e-17 on 3.12, -1.11e-16 folded). So the builtin itself adds the leading run of
    # constant numbers; what follows a tensor or another object is added by `+` as CPython
    # does once it leaves that run.
    run = 0
    if isinstance(start, ConstVar) and type(start.value) in _NUMBERS:
        while (
            run < len(values)
            and isinstance(values[run], ConstVar)
            and type(values[run].value) in _NUMBERS  # type: ignore[attr-defined]
        ):
            run += 1
    if sys.version_info >= (3, 12) and _float_run_meets_symbol([start, *values]):
        # the compensation term of a float run is not a graph op: the frame runs eagerly
        raise Unsupported("sum() of floats with a symbolic number (CPython compensates float sums)")
    total = (
        ConstVar(
            builtins.sum(
                [ops.const_value(vm.out, v) for v in values[:run]],
                ops.const_value(vm.out, start),
            )
        )
        if run
        else start
    )
    for value in values[run:]:
        total = object_operators.binary_op(vm, "+", total, value)
    return total


def _float_run_meets_symbol(values: list[Var]) -> bool:
    """Whether the leading run of numbers of ``values`` (start first) holds a float and a
    symbolic number: CPython 3.12+ carries a compensation term through that run, which the
    graph cannot; after the run (a tensor or another object) it adds with `+`."""
    floating = symbolic = False
    for v in values:
        if isinstance(v, SymVar):
            symbolic = True
            floating = floating or isinstance(v.example, (float, torch.SymFloat))
        elif isinstance(v, ConstVar) and type(v.value) in _NUMBERS:
            floating = floating or type(v.value) is float
        else:
            break
    return floating and symbolic


@implements(builtins.abs)
def _abs(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    return object_operators.unary_op(vm, operator.abs, args[0])


@implements(builtins.getattr)
def _getattr(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    name = ops.const_value(vm.out, args[1])
    if len(args) > 2:
        try:
            return attributes.getattr_var(vm, args[0], name)
        except TracedException as raised:
            if not isinstance(raised.exception, AttributeError):
                raise
            return args[2]
        except Unsupported:
            if _has_attr(vm, args[0], name):
                raise
            return args[2]
    return attributes.getattr_var(vm, args[0], name)


def _has_attr(vm: Interpreter, obj: Var, name: str) -> bool:
    if isinstance(obj, TensorVar):
        vm.out.depend(obj)
        return hasattr(obj.example, name)
    if isinstance(obj, ModuleVar):
        vm.out.depend(obj)
        return hasattr(obj.module, name)
    if isinstance(obj, ObjectVar):
        vm.out.depend(obj)
        overlay = vm.out.attr_overlay.get((id(obj.value), name))
        if isinstance(overlay, DeletedAttrVar):  # deleted in the trace: the class may have it
            return hasattr(type(obj.value), name)
        if overlay is not None:
            return True
        return hasattr(obj.value, name)
    if isinstance(obj, NewObjectVar):
        slot = isinstance(attr_stores.class_lookup(obj.box.cls, name), types.MemberDescriptorType)
        return name in obj.box.attrs or (not slot and hasattr(obj.box.cls, name))
    if isinstance(obj, ConstVar):
        return hasattr(obj.value, name)
    if isinstance(obj, NestedFunctionVar):
        try:
            attributes.getattr_var(vm, obj, name)
        except TracedException as raised:
            if not isinstance(raised.exception, AttributeError):
                raise
            return False
        return True
    raise Unsupported(f"hasattr() on {ops.describe(obj)}")


@implements(builtins.hasattr)
def _hasattr(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    return ConstVar(has_attribute(vm, args[0], ops.const_value(vm.out, args[1])))


@implements(builtins.setattr, object.__setattr__)
def _setattr(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    attr_stores.setattr_var(vm, args[0], ops.const_value(vm.out, args[1]), args[2])
    return ConstVar(None)


@implements(builtins.super)
def _super(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if args:
        return SuperVar(ops.const_value(vm.out, args[0]), args[1])
    code = vm.code
    if "__class__" not in code.co_freevars or not code.co_varnames:
        raise Unsupported("super() without arguments outside a method")
    cls_var = vm.cell("__class__").value
    if cls_var is None:
        raise Unsupported("super(): __class__ cell is empty")
    return SuperVar(ops.const_value(vm.out, cls_var), vm.load_local(code.co_varnames[0]))


@implements(functools.partial)
def _partial(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    return PartialVar(args[0], tuple(args[1:]), dict(kwargs))


@implements(builtins.print, builtins.input, builtins.open, builtins.breakpoint)
def _side_effecting(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    raise Unsupported("call to a builtin with effects outside the program (print/open/...)")


@implements(dataclasses.fields)
def _fields(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    cls = _python_type(vm, args[0]) if not isinstance(args[0], ObjectVar) else args[0].value
    return TupleVar(tuple(ObjectVar(f) for f in dataclasses.fields(cls)))


@implements(builtins.map)
def _map(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if _has_generator(args[1:]):
        return _over_generator(vm, _lazy_map, args, kwargs)
    columns = [ops.iterate(vm.out, a) for a in args[1:]]
    rows = zip(*columns, strict=False)
    return IteratorVar(IterBox([vm.call(args[0], list(row), {}) for row in rows]))


@implements(builtins.filter)
def _filter(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if _has_generator(args[1:]):
        return _over_generator(vm, _lazy_filter, args, kwargs)
    kept = []
    for value in ops.iterate(vm.out, args[1]):
        test = value if isinstance(args[0], ConstVar) else vm.call(args[0], [value], {})
        if ops.truth(vm.out, test):
            kept.append(value)
    return IteratorVar(IterBox(kept))


@implements(functools.reduce)
def _reduce(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    values = ops.iterate(vm.out, args[1])
    if len(args) > 2:
        values = [args[2], *values]
    if not values:
        raise Unsupported("TypeError: reduce() of empty iterable with no initial value")
    total = values[0]
    for value in values[1:]:
        total = vm.call(args[0], [total, value], {})
    return total


@implements(builtins.any)
def _any(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    return ConstVar(any(ops.truth(vm.out, v) for v in _pull(vm, args[0])))


@implements(builtins.all)
def _all(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    return ConstVar(all(ops.truth(vm.out, v) for v in _pull(vm, args[0])))


def _pull(vm: Interpreter, var: Var) -> Iterator[Var]:
    """The values of ``var`` one at a time: a generator is resumed only as far as the caller
    reads (any/all stop early, as in Python)."""
    if not isinstance(var, GeneratorVar):
        yield from ops.iterate(vm.out, var)
        return
    while (value := ops.generator_next(vm.out, var)) is not None:
        yield value


# Lazy versions of builtins over a generator, interpreted by the VM like user code so that the
# generator is resumed exactly when Python's builtin would resume it.


def _lazy_enumerate(iterable: Any, start: int = 0) -> Any:
    index = start
    for value in iterable:
        yield index, value
        index += 1


def _lazy_zip(*iterables: Any) -> Any:
    iterators = [iter(it) for it in iterables]
    while True:
        row = []
        for it in iterators:
            for value in it:
                row.append(value)
                break
            else:
                return
        yield tuple(row)


def _lazy_map(fn: Any, *iterables: Any) -> Any:
    for row in zip(*iterables, strict=False):
        yield fn(*row)


def _lazy_filter(fn: Any, iterable: Any) -> Any:
    for value in iterable:
        if (value if fn is None else fn(value)):
            yield value


def _over_generator(vm: Interpreter, lazy: Any, args: list[Var], kwargs: dict[str, Var]) -> Var:
    return vm.call(FunctionVar(lazy), args, kwargs)


def _has_generator(args: list[Var]) -> bool:
    return any(isinstance(a, GeneratorVar) for a in args)

