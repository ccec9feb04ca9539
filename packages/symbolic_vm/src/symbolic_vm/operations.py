"""Python semantics over tracked values: constants, graph calls, operators, truth, items,
iteration and subscripts (attribute reads are ``attributes``'s, stores ``attr_stores``'s)."""

from __future__ import annotations

import inspect
import operator
import types
from collections.abc import Callable
from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

from fxbuild import FakePropagationError
from symbolic_vm.aliasing import identity_predicate
from symbolic_vm.constant_values import MadeObjectId, is_constant_value, specialize
from symbolic_vm.errors import Unsupported, fake_reason, folding_error, throw
from symbolic_vm.generator_steps import generator_next
from symbolic_vm.graph_inputs import unguarded_contents
from symbolic_vm.guard_api import DictCopySource
from symbolic_vm.module_tables import iterate_module, module_len, submodule_item
from symbolic_vm.numpy_values import depend_numpy_scalar, numpy_scalar_value
from symbolic_vm.output import Output
from symbolic_vm.side_effects import ContainerWrite, DictSubclassWrite
from symbolic_vm.values import (
    NULL,
    STALE_ITERATOR,
    BoundMethodVar,
    ConstVar,
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
    NullVar,
    ObjectVar,
    PartialVar,
    SequentialSliceVar,
    SetBox,
    SetVar,
    SliceVar,
    SymVar,
    TensorVar,
    TupleVar,
    Var,
)

BINARY_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod, "**": operator.pow, "@": operator.matmul,
    "&": operator.and_, "|": operator.or_, "^": operator.xor, "<<": operator.lshift,
    ">>": operator.rshift,
    "+=": operator.iadd, "-=": operator.isub, "*=": operator.imul, "/=": operator.itruediv,
    "//=": operator.ifloordiv, "%=": operator.imod, "**=": operator.ipow, "@=": operator.imatmul,
    "&=": operator.iand, "|=": operator.ior, "^=": operator.ixor, "<<=": operator.ilshift,
    ">>=": operator.irshift,
}
COMPARE_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne,
    ">": operator.gt, ">=": operator.ge,
}
# In-place operators fall back to the plain ones on immutable values.
_PLAIN_OF_INPLACE = {
    operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
    operator.itruediv: operator.truediv, operator.ifloordiv: operator.floordiv,
    operator.imod: operator.mod, operator.ipow: operator.pow, operator.imatmul: operator.matmul,
    operator.iand: operator.and_, operator.ior: operator.or_, operator.ixor: operator.xor,
    operator.ilshift: operator.lshift, operator.irshift: operator.rshift,
}


def is_graph_value(var: Var) -> bool:
    """True for values that live in the graph (tensors, symbolic numbers)."""
    return isinstance(var, (TensorVar, SymVar))


def const_value(out: Output, var: Var, _made: dict[int, Any] | None = None) -> Any:
    """The Python value of a constant-like var, guarding every source it came from."""
    if isinstance(var, ConstVar):
        out.depend(var)
        return var.value
    if isinstance(var, TupleVar):
        out.depend(var)
        return tuple(const_value(out, v, _made) for v in var.items)
    if isinstance(var, (ListVar, DictVar)):  # one value per box: ``l.append(l)`` holds itself
        out.depend(var)
        made = {} if _made is None else _made
        if id(var.box) not in made and isinstance(var, ListVar):
            made[id(var.box)] = items = list[Any]()
            items.extend(const_value(out, v, made) for v in var.box.items)
        elif id(var.box) not in made and isinstance(var, DictVar):
            made[id(var.box)] = table = dict[Any, Any]()
            table.update((k, const_value(out, v, made)) for k, v in var.box.items.items())
        return made[id(var.box)]
    if isinstance(var, DictViewVar):
        # a view of a fresh dict with the same items: ==, set operations, list() as Python's
        # (keys need no values: those may be tensors)
        if var.kind == "keys":
            out.depend(var.dict)
            return dict.fromkeys(var.dict.box.items).keys()
        return getattr(const_value(out, var.dict), var.kind)()
    if isinstance(var, SetVar):
        out.depend(var)
        return var.cls(var.box.items)  # a plain subclass's own (its repr names it)
    if isinstance(var, ObjectVar) and numpy_scalar_value(var.value) is not None:
        depend_numpy_scalar(out, var)  # its value, not only its type (a user instance's guard)
        return var.value
    if isinstance(var, ObjectVar) and var.source is not None and unguarded_contents(var.value):
        raise Unsupported(f"reading the contents of {var.source.describe()} (a list/set "
                          "subclass's, not guarded: could go stale); the statement runs eagerly")
    if isinstance(var, (ObjectVar, FunctionVar)):
        out.depend(var)
        return var.value if isinstance(var, ObjectVar) else var.fn
    if isinstance(var, ModuleVar):
        out.depend(var)
        if out.module_shared(var.source):
            # The object itself flows into the trace (a dict key, an argument folded away):
            # only this module may reuse the code (a shared one is otherwise pinned by class).
            assert var.source is not None
            out.request("ID_MATCH", var.source, var.module)
        return var.module
    if isinstance(var, SliceVar):
        return slice(*(const_value(out, p) for p in (var.start, var.stop, var.step)))
    if isinstance(var, SymVar):
        # Specialise: the ShapeEnv records the guard, emitted as a SHAPE guard at the end.
        return specialize(var.example)
    raise Unsupported(f"expected a Python constant, got {describe(var)}")


def is_plain_value(var: Var, _seen: set[int] | None = None) -> bool:
    """A value made only of constants: sets and frozensets of them, and tuples, lists and
    dicts of such values (reading it as a Python value runs no user code)."""
    if isinstance(var, (ConstVar, SetVar)) or _is_set(var):
        return True
    if isinstance(var, TupleVar):
        return all(is_plain_value(v, _seen) for v in var.items)
    if isinstance(var, (ListVar, DictVar)):
        seen = set() if _seen is None else _seen
        if id(var.box) in seen:  # a list that holds itself: its other items decide
            return True
        seen.add(id(var.box))
        values = var.box.items if isinstance(var, ListVar) else var.box.items.values()
        return all(is_plain_value(v, seen) for v in values)
    return False


def is_constant(var: Var) -> bool:
    """True when const_value(var) would succeed without touching the graph."""
    if isinstance(var, ConstVar):
        return True
    if isinstance(var, TupleVar):
        return all(is_constant(v) for v in var.items)
    return isinstance(var, SetVar)


def describe(var: Var) -> str:
    """A short description of a value for error messages."""
    if isinstance(var, TensorVar):
        return "a tensor"
    if isinstance(var, ConstVar):
        return f"constant {var.value!r}"
    if isinstance(var, ObjectVar):
        return f"{type(var.value).__name__} object {getattr(var.value, '__name__', '')}".strip()
    if isinstance(var, DictViewVar):
        return f"a dict {var.kind} view"
    return type(var).__name__.removesuffix("Var").lower()


_PYTHON_DTYPES: dict[type, torch.dtype] = {
    int: torch.int64, float: torch.float64, bool: torch.bool, complex: torch.complex128,
}


def graph_arg(out: Output, var: Var) -> Any:
    """A value as an fx argument: nodes for graph values, Python values for constants."""
    if isinstance(var, (TensorVar, SymVar)):
        return var.node
    if isinstance(var, TupleVar):
        return tuple(graph_arg(out, v) for v in var.items)
    if isinstance(var, ListVar):
        return [graph_arg(out, v) for v in var.box.items]
    if isinstance(var, DictVar):
        return {k: graph_arg(out, v) for k, v in var.box.items.items()}
    if isinstance(var, ConstVar):
        if isinstance(var.value, MadeObjectId):
            raise Unsupported("the id() of an object made in the compiled function passed to a "
                              "torch operation")
        out.depend(var)
        number = numpy_scalar_value(var.value)  # np.float64 is a float: fx can't print it
        return var.value if number is None else number
    if isinstance(var, SliceVar):
        return slice(graph_arg(out, var.start), graph_arg(out, var.stop), graph_arg(out, var.step))
    if isinstance(var, ObjectVar) and isinstance(var.value, (torch.dtype, torch.device)):
        out.depend(var)
        return var.value
    if isinstance(var, ObjectVar) and any(var.value is t for t in _PYTHON_DTYPES):
        # torch takes int/float/bool/complex as dtypes (``torch.tensor(i, dtype=int)``, in
        # transformers' caches): the dtype its argument parser maps each to
        out.depend(var)
        return _PYTHON_DTYPES[var.value]
    if isinstance(var, ObjectVar) and numpy_scalar_value(var.value) is not None:
        depend_numpy_scalar(out, var)  # torch takes a NumPy scalar as the number it holds
        return numpy_scalar_value(var.value)
    raise Unsupported(f"{describe(var)} cannot be passed to a torch operation in the graph")


def wrap_example(out: Output, node: Any) -> Var:
    """The var of a freshly added node, by the type of its example value."""
    example = node.meta["example_value"]
    if isinstance(example, torch.Tensor):
        return TensorVar(node, example)
    if isinstance(example, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return SymVar(node, example)
    if isinstance(example, (tuple, list)):
        items = [
            wrap_example(out, out.builder.call_function(operator.getitem, (node, i)))
            for i in range(len(example))
        ]
        if isinstance(example, list):
            return ListVar(ListBox(items))
        fields = getattr(type(example), "_fields", None) or _structseq_fields(example)
        named = type(example) if type(example) is not tuple else None
        return TupleVar(tuple(items), fields=tuple(fields), named_type=named)
    if isinstance(example, slice) and not all(
        p is None or is_constant_value(p) for p in (example.start, example.stop, example.step)
    ):
        # Its parts are fake values: as a constant it would leave the trace into the code.
        raise Unsupported("a slice of traced values made by a torch operation")
    if example is None or is_constant_value(example):
        return ConstVar(example)
    raise Unsupported(f"a torch operation returned {type(example).__name__}, unsupported")


def _structseq_fields(example: object) -> tuple[str, ...]:
    names = getattr(type(example), "__match_args__", ())
    return tuple(str(n) for n in names)


def graph_call(out: Output, target: Any, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """Add ``target(*args, **kwargs)`` to the graph."""
    try:
        node = out.builder.call_function(
            target,
            tuple(graph_arg(out, a) for a in args),
            {k: graph_arg(out, v) for k, v in kwargs.items()},
        )
    except FakePropagationError as exc:
        raise Unsupported(fake_reason(exc)) from exc
    return _same_object(wrap_example(out, node), args, kwargs)


def _same_object(result: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """The argument itself when the op returned it (``x.add_(1)``, ``x += y``, ``relu(x,
    inplace=True)``, ``x.contiguous()`` on a contiguous x): eager gives back the same tensor
    object, and fake propagation the same fake, so ``is`` and every later use see one value."""
    if not isinstance(result, TensorVar):
        return result
    for arg in (*args, *kwargs.values()):
        if isinstance(arg, TensorVar) and arg.example is result.example:
            return arg
    return result


def graph_method(out: Output, name: str, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """Add ``args[0].name(*args[1:], **kwargs)`` to the graph."""
    try:
        node = out.builder.call_method(
            name,
            tuple(graph_arg(out, a) for a in args),
            {k: graph_arg(out, v) for k, v in kwargs.items()},
        )
    except FakePropagationError as exc:
        raise Unsupported(fake_reason(exc)) from exc
    return _same_object(wrap_example(out, node), args, kwargs)


# -- operators --------------------------------------------------------------------------------


def binary(out: Output, symbol: str, a: Var, b: Var) -> Var:
    """``a <symbol> b`` for BINARY_OP."""
    fn = BINARY_OPS[symbol]
    if is_graph_value(a) or is_graph_value(b):
        if not isinstance(a, TensorVar):
            # ``n += t`` on an int (or SymInt) rebinds n: the plain op (fx would emit
            # ``3 += t`` for an in-place node on a literal).
            fn = _PLAIN_OF_INPLACE.get(fn, fn)
        return graph_call(out, fn, [a, b], {})
    plain = _PLAIN_OF_INPLACE.get(fn, fn)
    if isinstance(a, ListVar) and fn is operator.iadd:
        a.box.items.extend(iterate(out, b))
        note_mutation(out, a)
        return a
    sequences = (TupleVar, ListVar)
    if isinstance(a, sequences) and isinstance(b, sequences) and plain is operator.add:
        if type(a) is not type(b):
            raise Unsupported("adding a tuple and a list")
        return _sequence(a, items(out, a) + items(out, b))
    if (
        plain is operator.mul and isinstance(b, (TupleVar, ListVar)) and isinstance(a, ConstVar)
        and isinstance(a.value, int)
    ):
        a, b = b, a  # n * seq: the sequence repeated, as seq * n
    if isinstance(a, (TupleVar, ListVar)) and isinstance(b, ConstVar) and plain is operator.mul:
        times = const_value(out, b)
        if not isinstance(times, int):
            raise throw(TypeError, "can't multiply sequence by non-int of type "
                        f"'{type(times).__name__}'")
        if isinstance(a, ListVar) and fn is operator.imul:  # l *= n: the list itself
            a.box.items[:] = items(out, a) * times
            note_mutation(out, a)
            return a
        return _sequence(a, items(out, a) * times)
    if _is_set(a) and _is_set(b):
        return _set_binary(out, fn, a, b)
    if (_is_set(a) or _is_set(b)) and is_plain_value(a) and is_plain_value(b):
        # a set and a non-set (``p - 1``): eager's TypeError (folded on copies)
        folded = _fold(plain, const_value(out, a), const_value(out, b))  # a subclass's name
        return out.wrap(folded, None)
    if isinstance(a, DictVar) and isinstance(b, DictVar) and plain is operator.or_:
        out.depend(b)
        if fn is operator.ior:  # d |= other: d updated in place
            a.box.items.update(b.box.items)
            note_mutation(out, a)
            return a
        out.depend(a)
        return DictVar(DictBox({**a.box.items, **b.box.items}))
    if isinstance(a, DictViewVar) or isinstance(b, DictViewVar):
        # keys/items views are set-like: ``d.keys() & other`` is a new set
        result = _fold(plain, const_value(out, a), const_value(out, b))
        return SetVar(SetBox(result)) if isinstance(result, set) else ConstVar(result)
    if (is_constant(a) and is_constant(b)) or (_is_plain(a) and _is_plain(b)):
        return ConstVar(_fold(plain, const_value(out, a), const_value(out, b)))
    if (
        plain is operator.mod and isinstance(a, ConstVar) and isinstance(a.value, str)
        and isinstance(b, DictVar)
    ):
        # ``"%(name)s" % {...}``: a dict of constants formats as its plain value
        return ConstVar(_fold(plain, a.value, const_value(out, b)))
    raise Unsupported(f"operator {symbol} on {describe(a)} and {describe(b)}")


def _is_set(var: Var) -> bool:
    return isinstance(var, SetVar) or (
        isinstance(var, ObjectVar) and isinstance(var.value, (set, frozenset))
    )


def _set_binary(out: Output, fn: Callable[[Any, Any], Any], a: Var, b: Var) -> Var:
    """``|``, ``&``, ``-``, ``^`` and their in-place forms on sets (frozensets stay objects)."""
    right = _set_object(out, b)
    plain = _PLAIN_OF_INPLACE.get(fn, fn)
    if isinstance(a, SetVar) and fn is not plain:
        note_set_mutation(out, a)
        fn(a.box.items, right)  # in place on the private copy, as Python changes the set
        return a
    # On the set objects themselves: CPython's copy-then-merge decides the result's order.
    result = _fold(plain, _set_object(out, a), right)
    if isinstance(result, frozenset):
        return ObjectVar(result)
    return SetVar(SetBox(result))


def _set_object(out: Output, var: Var) -> Any:
    out.depend(var)
    return var.box.items if isinstance(var, SetVar) else const_value(out, var)


def note_set_mutation(out: Output, var: SetVar) -> None:
    """A set is about to change: its contents were read first, and a set from the frame gets
    its difference written back after the graph."""
    out.depend(var)
    if var.source is not None and not var.box.mutated:
        var.box.mutated = True
        out.side_effects.append(ContainerWrite(var))


def _is_plain(var: Var) -> bool:
    return isinstance(var, (ConstVar, TupleVar)) and is_constant(var)


def _fold_error(fn: Callable[[Any, Any], Any], a: Any, b: Any) -> Exception:
    """The exception ``fn(a, b)`` raises (it must raise one)."""
    try:
        fn(a, b)
    except Exception as exc:  # returned to be raised in the traced program
        return exc
    raise AssertionError(f"{fn.__name__} did not raise")


def _fold(fn: Callable[[Any, Any], Any], a: Any, b: Any) -> Any:
    try:
        return fn(a, b)
    except Exception as exc:
        raise folding_error(exc, "constants") from None


def _sequence(like: Var, values: list[Var]) -> Var:
    return TupleVar(tuple(values)) if isinstance(like, TupleVar) else ListVar(ListBox(values))


def compare(out: Output, symbol: str, a: Var, b: Var) -> Var:
    """``a <symbol> b`` for COMPARE_OP."""
    fn = COMPARE_OPS[symbol]
    if is_graph_value(a) or is_graph_value(b):
        if isinstance(a, TensorVar) or isinstance(b, TensorVar) or symbol in ("==", "!="):
            return graph_call(out, fn, [a, b], {})
        return graph_call(out, fn, [a, b], {})
    if isinstance(a, (TupleVar, ListVar)) or isinstance(b, (TupleVar, ListVar)):
        # One real object per list/dict box on both sides: ``l == l`` of a list holding
        # itself meets the same object inside, which == takes as equal (as eager does)
        made: dict[int, Any] = {}
        return ConstVar(fn(const_value(out, a, made), const_value(out, b, made)))
    if isinstance(a, DictVar) and isinstance(b, DictVar):
        return ConstVar(_fold(fn, const_value(out, a), const_value(out, b)))
    if isinstance(a, DictViewVar) or isinstance(b, DictViewVar):
        return ConstVar(_fold(fn, const_value(out, a), const_value(out, b)))
    if (_is_set(a) or _is_set(b)) and is_plain_value(a) and is_plain_value(b):
        # a set or frozenset (of constants) against another or a plain value: folded
        return ConstVar(_fold(fn, const_value(out, a), const_value(out, b)))
    if symbol in ("==", "!=") and not (is_constant(a) and is_constant(b)):
        if not (_equal_means_identical(a) and _equal_means_identical(b)):
            # a dataclass, or any class with its own __eq__: identity would be a wrong answer
            raise Unsupported(f"{describe(a)} {symbol} {describe(b)} (a class's own __eq__)")
        same = identical(out, a, b)
        return ConstVar(same if symbol == "==" else not same)
    return ConstVar(_fold(fn, const_value(out, a), const_value(out, b)))


def _equal_means_identical(var: Var) -> bool:
    """Whether ``==`` against ``var`` is an identity test: its class keeps object's
    ``__eq__``/``__ne__`` (constants compare unequal to other types, leaving it to the other
    side)."""
    if isinstance(var, NewObjectVar):
        cls: Any = var.box.cls
    elif isinstance(var, ModuleVar):
        cls = type(var.module)
    elif isinstance(var, ObjectVar):
        cls = type(var.value)
    else:
        return True
    return cls.__eq__ is object.__eq__ and cls.__ne__ is object.__ne__


def identical(out: Output, a: Var, b: Var) -> bool:
    """``a is b`` on tracked values."""
    if a is b:
        return True
    if isinstance(a, TensorVar) and isinstance(b, TensorVar):
        return a.node is b.node
    if isinstance(a, (ListVar, DictVar, SetVar)) and isinstance(b, (ListVar, DictVar, SetVar)):
        same = a.box is b.box
        guard = identity_predicate(a, b, same)
        if guard is not None:
            out.predicate(guard[0], guard[1], **guard[2])
        return same
    if isinstance(a, NewObjectVar) and isinstance(b, NewObjectVar):
        return a.box is b.box
    if isinstance(a, NewObjectVar) or isinstance(b, NewObjectVar):
        return False  # made in this trace: no other value (and no real object) is it
    for box_var, other in ((a, b), (b, a)):
        if (
            isinstance(box_var, (ListVar, DictVar, SetVar)) and isinstance(other, ObjectVar)
            and not isinstance(other.value, (list, dict, set, frozenset))
        ):
            # A list/dict/set is never an object of another kind (a sentinel, a function):
            # ``arg is _MISSING`` in library code (dataclasses' __init__) on a list.
            out.depend(other)
            return False
    real_a, real_b = _identity(a), _identity(b)
    if real_a is not _UNKNOWN and real_b is not _UNKNOWN:
        out.depend(a)
        out.depend(b)
        guard = identity_predicate(a, b, real_a is real_b)
        if guard is not None:
            out.predicate(guard[0], guard[1], **guard[2])
        return real_a is real_b
    if isinstance(a, ConstVar) or isinstance(b, ConstVar):
        # A constant (None, True, ...) is never the same object as a tensor/container/function.
        out.depend(a)
        out.depend(b)
        return False
    raise Unsupported(f"identity test between {describe(a)} and {describe(b)}")


_UNKNOWN = object()


def _identity(var: Var) -> object:
    if isinstance(var, ConstVar):
        return var.value
    if isinstance(var, ObjectVar):
        return var.value
    if isinstance(var, ModuleVar):
        return var.module
    if isinstance(var, FunctionVar):
        return var.fn
    return _UNKNOWN


def unary(out: Output, fn: Callable[[Any], Any], a: Var) -> Var:
    """``-a``, ``~a``, ``+a``."""
    if is_graph_value(a):
        return graph_call(out, fn, [a], {})
    return ConstVar(fn(const_value(out, a)))


def truth(out: Output, var: Var) -> bool:
    """``bool(var)`` for branches; a branch on tensor data cannot be captured."""
    if isinstance(var, ConstVar):
        out.depend(var)
        return bool(var.value)
    if isinstance(var, (TupleVar, ListVar, DictVar)):
        out.depend(var)
        return len(items(out, var) if not isinstance(var, DictVar) else var.box.items) > 0
    if isinstance(var, SetVar):
        out.depend(var)
        return bool(var.box.items)
    if isinstance(var, TensorVar):
        raise Unsupported(
            "data-dependent branch: the condition is a tensor, whose value is unknown while tracing"
        )
    if isinstance(var, SymVar):
        # A branch on sizes: take the branch the example sizes take and guard on it. bool() of
        # the SymInt guards only what the branch needs (n != 0), not n's value.

        try:
            return bool(var.example)
        except GuardOnDataDependentSymNode:
            # An unbacked symbol (from .item() or nonzero): no value to branch on.
            raise Unsupported(
                "data-dependent branch: the condition depends on a value read from a tensor "
                "(.item(), nonzero), unknown while tracing"
            ) from None
    if isinstance(var, ModuleVar):
        cls = type(var.module)
        if getattr(cls, "__bool__", None) is None and getattr(cls, "__len__", None) is None:
            return True
        size = module_len(out, var) if getattr(cls, "__bool__", None) is None else None
        if size is None:
            raise Unsupported(f"truth value of a {cls.__name__} (its own __bool__/__len__)")
        return size > 0  # a module container is false when empty, as in eager
    if isinstance(var, (FunctionVar, NestedFunctionVar, BoundMethodVar, PartialVar, GeneratorVar)):
        return True
    if isinstance(var, ObjectVar):
        cls = type(var.value)
        if getattr(cls, "__bool__", None) is None and getattr(cls, "__len__", None) is None:
            out.depend(var)
            return True
        if isinstance(var.value, (type, types.ModuleType, types.BuiltinFunctionType)):
            return True
    if (
        isinstance(var, NewObjectVar)
        and getattr(var.box.cls, "__bool__", None) is None
        and getattr(var.box.cls, "__len__", None) is None
    ):
        return True
    raise Unsupported(f"truth value of {describe(var)}")


# -- sequences --------------------------------------------------------------------------------


def items(out: Output, var: Var) -> list[Var]:
    """The elements of a tuple/list (guarding its length)."""
    if isinstance(var, TupleVar):
        out.depend(var)
        return list(var.items)
    if isinstance(var, ListVar):
        out.depend(var)
        return list(var.box.items)
    raise Unsupported(f"expected a tuple or list, got {describe(var)}")


def iterate(out: Output, var: Var) -> list[Var]:
    """Every value ``iter(var)`` would yield."""
    if isinstance(var, (TupleVar, ListVar)):
        return items(out, var)
    if isinstance(var, DictViewVar):
        return view_items(out, var)
    if isinstance(var, SequentialSliceVar):
        return list(var.items)
    if isinstance(var, DictVar):
        out.depend(var)
        return [ConstVar(k) for k in var.box.items]
    if isinstance(var, SetVar):
        out.depend(var)
        return [out.wrap(v, None) for v in var.box.items]
    if isinstance(var, IteratorVar):
        if var.box.stale():
            raise Unsupported(STALE_ITERATOR)
        rest = var.box.items[var.box.index :]
        var.box.finish()
        return rest
    if isinstance(var, GeneratorVar):
        values: list[Var] = []
        while (value := generator_next(out, var)) is not None:
            values.append(value)
        return values
    if isinstance(var, ConstVar) and isinstance(var.value, (range, str, torch.Size, bytes, tuple)):
        out.depend(var)
        return [ConstVar(v) for v in var.value]
    if isinstance(var, ConstVar) and not hasattr(type(var.value), "__iter__") and not hasattr(
        type(var.value), "__getitem__"
    ):
        out.depend(var)  # the program's TypeError (``lst.extend(1)``), as eager raises it
        raise throw(TypeError, f"'{type(var.value).__name__}' object is not iterable")
    if isinstance(var, ModuleVar):
        return iterate_module(out, var)
    if isinstance(var, TensorVar):
        out.depend(var)
        length = var.example.shape[0] if var.example.dim() else None
        if not isinstance(length, int):
            raise Unsupported("iterating over a 0-d tensor or a tensor of symbolic length")
        return [getitem(out, var, ConstVar(i)) for i in range(length)]
    if isinstance(var, ObjectVar) and isinstance(var.value, (set, frozenset)):
        if not all(is_constant_value(v) for v in var.value):
            raise Unsupported(f"iterating over a set of objects ({describe(var)})")
        out.depend(var)
        return [out.wrap(v, None) for v in var.value]
    frozen = frozen_mapping(var)
    if frozen is not None:
        return [ConstVar(k) for k in frozen]
    raise Unsupported(f"iterating over {describe(var)}")


def frozen_mapping(var: Var) -> dict[Any, Any] | None:
    """The items of ``inspect.signature(f).parameters`` computed in the trace (a read-only view
    of the immutable Signature's own dict, so a constant); None for any other value. A class's
    ``__dict__`` is a mappingproxy too, but the class can change: never answered here."""
    if not isinstance(var, ObjectVar) or var.source is not None:
        return None
    value = var.value
    if not isinstance(value, types.MappingProxyType):
        return None
    if not all(isinstance(k, str) and isinstance(v, inspect.Parameter) for k, v in value.items()):
        return None
    return dict(value)


def view_items(out: Output, view: DictViewVar) -> list[Var]:
    """What a dict view holds now (the dict as it is at this point of the trace)."""
    out.depend(view.dict)
    entries = view.dict.box.items
    if view.kind == "keys":
        return [ConstVar(k) for k in entries]
    if view.kind == "values":
        return list(entries.values())
    return [TupleVar((ConstVar(k), v)) for k, v in entries.items()]


def make_iterator(out: Output, var: Var) -> IteratorVar | GeneratorVar:
    """``iter(var)``."""
    if isinstance(var, (IteratorVar, GeneratorVar)):
        return var
    if isinstance(var, ListVar):
        out.depend(var)
        # The list's own items, not a copy: a list iterator reads the list at each next(), so
        # items appended while iterating are yielded too, as in Python.
        return IteratorVar(IterBox(var.box.items, over=var))
    exact = isinstance(var, TupleVar) or (
        isinstance(var, ConstVar) and isinstance(var.value, (range, str, bytes, tuple))
    )
    return IteratorVar(IterBox(iterate(out, var), exact=exact).watch(var))


def getitem(out: Output, obj: Var, key: Var) -> Var:
    """``obj[key]``."""
    if isinstance(obj, TensorVar):
        if (
            isinstance(key, SymVar)
            and isinstance(key.example, torch.SymInt)
            and obj.example.dim() > 0
        ):
            # ``t[n]`` on a symbolic n: fake getitem specialises n (a guard per value, one
            # recompile each); select, the same view, keeps it symbolic with a bounds guard.
            return graph_call(out, torch.select, [obj, ConstVar(0), key], {})
        return graph_call(out, operator.getitem, [obj, _index_var(out, key)], {})
    if isinstance(obj, (TupleVar, ListVar)):
        index = const_value(out, key)
        values = items(out, obj)
        if isinstance(index, slice):
            return _sequence(obj, values[index])
        try:
            item: Var = values[index]
        except (IndexError, TypeError) as exc:
            # eager's message names the tuple ("tuple index out of range")
            error = _fold_error(operator.getitem, tuple(values), index) if isinstance(
                obj, TupleVar
            ) else exc
            raise throw(type(error), *error.args) from None
        return item
    if isinstance(obj, SequentialSliceVar):
        index = const_value(out, key)
        if isinstance(index, slice):
            return SequentialSliceVar(obj.items[index])
        try:
            member: Var = obj.items[index]
        except (IndexError, TypeError) as exc:
            raise throw(type(exc), *exc.args) from None
        return member
    if isinstance(obj, DictVar):
        k = const_value(out, key)
        if k not in obj.box.items:
            out.depend(obj)
            raise throw(KeyError, k)
        return obj.box.items[k]
    if isinstance(obj, ModuleVar):
        index = const_value(out, key)
        out.depend(obj)
        try:
            sub = obj.module[index]
        except (IndexError, KeyError, TypeError) as exc:
            raise Unsupported(f"indexing module {type(obj.module).__name__}: {exc}") from exc
        if isinstance(index, slice):
            if type(obj.module).__getitem__ is torch.nn.Sequential.__getitem__:
                return SequentialSliceVar(tuple(iterate(out, obj)[index]))
            if type(obj.module).__getitem__ is not torch.nn.ModuleList.__getitem__:
                raise Unsupported(f"slicing module {type(obj.module).__name__}")
            # A ModuleList slice (``self.layers[:n]``, to iterate): its submodules, read through
            # the list's _modules. A tuple, not a new ModuleList (known limit: type() differs).
            return TupleVar(tuple(iterate(out, obj)[index]))
        return submodule_item(out, obj, index, sub)
    if isinstance(obj, ConstVar):
        out.depend(obj)
        return ConstVar(_fold(operator.getitem, obj.value, const_value(out, key)))
    raise Unsupported(f"indexing {describe(obj)}")


def _index_var(out: Output, key: Var) -> Var:
    """``key`` as a tensor index: a 0-d integer tensor bounding a slice is read through its
    ``__index__`` when the indexing runs, i.e. its ``item()`` (an unbacked symbol under
    capture_scalar_outputs; fake indexing with the tensor itself needs its value)."""
    if isinstance(key, TupleVar) and not key.named_type and not key.is_size:
        items = tuple(_index_var(out, k) for k in key.items)
        if any(a is not b for a, b in zip(items, key.items, strict=True)):
            return TupleVar(items)
        return key
    if isinstance(key, SliceVar):
        parts = [_slice_bound(out, p) for p in (key.start, key.stop, key.step)]
        if any(a is not b for a, b in zip(parts, (key.start, key.stop, key.step), strict=True)):
            return SliceVar(*parts)
    return key


def _slice_bound(out: Output, part: Var) -> Var:
    if not (isinstance(part, TensorVar) and out.builder.unbacked_scalars):
        return part
    example = part.example
    if example.dim() != 0 or example.dtype.is_floating_point or example.dtype.is_complex:
        return part
    if example.dtype is torch.bool:
        return part
    return graph_method(out, "item", [part], {})


def setitem(out: Output, obj: Var, key: Var, value: Var) -> None:
    """``obj[key] = value``."""
    if isinstance(obj, TensorVar):
        graph_call(out, operator.setitem, [obj, _index_var(out, key), value], {})
        return
    if isinstance(obj, ListVar):
        index = const_value(out, key)
        # ``lst[a:b] = it`` stores the items of ``it`` (a Var is not iterable: TypeError)
        obj.box.items[index] = iterate(out, value) if isinstance(index, slice) else value
        note_mutation(out, obj)
        return
    if isinstance(obj, DictVar):
        obj.box.items[const_value(out, key)] = value
        note_mutation(out, obj)
        return
    raise Unsupported(f"item assignment on {describe(obj)}")


def note_mutation(out: Output, var: Var) -> None:
    """A list/dict changed: if it came from the frame, its new contents must be written back,
    for the length/keys the trace saw (``lst[0] = v`` once truncated a longer list)."""
    if var.source is None or not isinstance(var, (ListVar, DictVar)):
        return
    out.depend(var)
    if not var.box.mutated:
        var.box.mutated = True
        if isinstance(var.source, DictCopySource):  # a frame dict subclass's items
            out.side_effects.append(DictSubclassWrite(var))
        else:
            out.side_effects.append(ContainerWrite(var))


__all__ = [
    "NULL", "NullVar", "binary", "compare", "const_value", "generator_next",
    "getitem", "graph_call", "iterate", "truth",
]
