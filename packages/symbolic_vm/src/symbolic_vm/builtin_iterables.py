"""Builtins over iterables on tracked values: ``len``, ``range``, ``enumerate``, ``zip``,
``reversed``, ``iter``/``next``, the container constructors, ``sorted``/``min``/``max``/``sum``,
``map``/``filter``/``functools.reduce`` and ``any``/``all`` (over a generator: lazily, resuming it
exactly when Python's builtin would)."""

from __future__ import annotations

import builtins
import functools
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from symbolic_vm import attributes, object_model, object_operators, sets, type_trackers
from symbolic_vm import operations as ops
from symbolic_vm.builtin_table import implements
from symbolic_vm.errors import TracedException, Unsupported, throw
from symbolic_vm.methods import next_value, sort_values
from symbolic_vm.module_tables import module_len
from symbolic_vm.values import (
    STALE_ITERATOR,
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
    ObjectVar,
    SequentialSliceVar,
    SetBox,
    SetVar,
    SymVar,
    TensorVar,
    TupleVar,
    Var,
)

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter


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
        return _over_generator(vm, _lazy_enumerate, args, kwargs, slice(0, 1))
    start = _int_arg(vm, args[1] if len(args) > 1 else kwargs.get("start", ConstVar(0)))
    values = ops.iterate(vm.out, args[0])
    box = IterBox([TupleVar((ConstVar(start + i), v)) for i, v in enumerate(values)])
    return IteratorVar(box.watch(args[0]))


@implements(builtins.zip)
def _zip(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    strict = bool(ops.const_value(vm.out, kwargs["strict"])) if "strict" in kwargs else False
    if _has_generator(args) and not strict:
        return _over_generator(vm, _lazy_zip, args, {}, slice(0, None))
    columns = [ops.iterate(vm.out, a) for a in args]
    if strict and len({len(c) for c in columns}) > 1:
        raise Unsupported("ValueError raised by zip(strict=True)")
    box = IterBox([TupleVar(tuple(row)) for row in zip(*columns, strict=False)])
    for arg in args:
        box.watch(arg)
    return IteratorVar(box)


@implements(builtins.reversed)
def _reversed(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    return IteratorVar(IterBox(list(reversed(ops.iterate(vm.out, args[0])))).watch(
        args[0], aligned=False))


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
    if iterator.box.stale():
        raise Unsupported(STALE_ITERATOR)
    if iterator.box.index >= len(iterator.box.items) and len(args) > 1:
        iterator.box.finish()
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


@implements(set.__new__)
def _set_new(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """``set.__new__(cls, ...)``: an empty set of class ``cls`` (its arguments are
    ``__init__``'s, which fills it), from a set subclass's own ``super().__new__(cls)``."""
    if not args:
        raise throw(TypeError, "set.__new__(): not enough arguments")
    return object_model.new_builtin_instance(vm, args[0], SetVar(SetBox(set())))


@implements(frozenset.__new__)
def _frozenset_new(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """``frozenset.__new__(cls, iterable=())``: a frozenset of class ``cls``."""
    if kwargs or not 1 <= len(args) <= 2:
        raise Unsupported("frozenset.__new__ with these arguments")
    items = frozenset(sets.set_operand(vm, args[1])) if len(args) > 1 else frozenset()
    return object_model.new_builtin_instance(vm, args[0], ObjectVar(items))


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
        symbolic = _symbolic_minmax(vm, values, pick)
        if symbolic is not None:
            return symbolic
        raise Unsupported(f"{name}() over tensors compares tensor data")
    keyed = values if key is None else [vm.call(key, [v], {}) for v in values]
    keys = [ops.const_value(vm.out, k) for k in keyed]
    try:
        index: int = pick(range(len(values)), key=keys.__getitem__)  # the first equal one wins
    except TypeError as exc:
        raise throw(TypeError, *exc.args) from exc
    return values[index]


def _symbolic_minmax(vm: Interpreter, values: list[Var], pick: Any) -> Var | None:
    """``max(n - 4, 0)`` of symbolic ints (a cache's offset as it grows): ``torch.sym_max`` in
    the graph, as torch.compile records it, so the int stays symbolic. Only ints or only
    floats: with both, Python returns the first of equal values, whose type sym_max loses."""
    kinds = set()
    for v in values:
        example = v.example if isinstance(v, SymVar) else getattr(v, "value", None)
        if not isinstance(v, SymVar | ConstVar) or type(example) not in _SYM_NUMBERS:
            return None
        kinds.add(_SYM_NUMBERS[type(example)])
    if len(kinds) != 1:
        return None
    fn = torch.sym_max if pick is builtins.max else torch.sym_min
    return functools.reduce(lambda a, b: ops.graph_call(vm.out, fn, [a, b], {}), values)


_SYM_NUMBERS = {int: int, torch.SymInt: int, float: float, torch.SymFloat: float}


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


@implements(builtins.map)
def _map(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if _has_generator(args[1:]) or not isinstance(args[0], ConstVar):
        # a function of the program runs per item as it is consumed (its effects in order)
        return _over_generator(vm, _lazy_map, args, kwargs, slice(1, None))
    columns = [ops.iterate(vm.out, a) for a in args[1:]]
    rows = zip(*columns, strict=False)
    box = IterBox([vm.call(args[0], list(row), {}) for row in rows])
    for arg in args[1:]:
        box.watch(arg)
    return IteratorVar(box)


@implements(builtins.filter)
def _filter(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if _has_generator(args[1:]) or not isinstance(args[0], ConstVar):
        return _over_generator(vm, _lazy_filter, args, kwargs, slice(1, None))
    kept = []
    for value in ops.iterate(vm.out, args[1]):
        test = value if isinstance(args[0], ConstVar) else vm.call(args[0], [value], {})
        if ops.truth(vm.out, test):
            kept.append(value)
    return IteratorVar(IterBox(kept).watch(args[1], aligned=False))


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


def _over_generator(
    vm: Interpreter, lazy: Any, args: list[Var], kwargs: dict[str, Var], iterables: slice
) -> Var:
    """``lazy`` run as a generator over ``args``, whose ``iterables`` are made iterators now,
    as the builtin calls iter() on them when made (a set changed after raises then)."""
    picked = range(len(args))[iterables]
    made = [_iter(vm, [a], {}) if k in picked else a for k, a in enumerate(args)]
    return vm.call(FunctionVar(lazy), made, kwargs)


def _has_generator(args: list[Var]) -> bool:
    # an iterator argument too: the builtin takes its items one at a time (zip(it, range(1))
    # leaves the rest of it to the program)
    return any(isinstance(a, (GeneratorVar, IteratorVar)) for a in args)

