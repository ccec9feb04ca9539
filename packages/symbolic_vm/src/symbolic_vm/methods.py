"""Methods the VM implements on tracked values: tensors, lists, dicts, constants, iterators."""

from __future__ import annotations

import inspect
import operator
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from symbolic_vm import (
    attributes,
    higher_order,
    sets,
    slot_calls,
    tensor_attrs,
    torch_calls,
)
from symbolic_vm import operations as ops
from symbolic_vm.errors import TracedException, Unsupported, folding_error, throw
from symbolic_vm.guard_api import MethodCallSource
from symbolic_vm.modules import module_iterator
from symbolic_vm.object_operators import compare_op
from symbolic_vm.tensor_attrs import DATA_DEPENDENT_METHODS, FACT_METHODS, TENSOR_META_METHODS
from symbolic_vm.type_trackers import user_class
from symbolic_vm.values import (
    STALE_ITERATOR,
    ConstVar,
    DictBox,
    DictVar,
    DictViewVar,
    GeneratorContextVar,
    GeneratorVar,
    GradModeVar,
    IteratorVar,
    IterBox,
    ListBox,
    ListVar,
    MethodVar,
    ModuleVar,
    NewObjectVar,
    ObjectVar,
    SetBox,
    SetVar,
    SymVar,
    TensorVar,
    TupleVar,
    Var,
)

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter
    from symbolic_vm.output import Output

# Tensor methods whose result is a Python value read from metadata (no graph node).
def call_method(vm: Interpreter, method: MethodVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """Call a MethodVar."""
    target = method.self_var
    name = method.name
    out = vm.out
    if isinstance(target, TensorVar):
        return tensor_method(vm, target, name, args, kwargs)
    dunder = slot_calls.call_dunder(vm, target, name, args, kwargs)
    if dunder is not None:  # p.__add__(q), p.__eq__(r), it.__iter__()
        return dunder
    if slot_calls.container_type(target) is frozenset:
        assert isinstance(target, ObjectVar)
        return slot_calls.frozenset_method(vm, target, name, args, kwargs)
    if isinstance(target, SymVar):
        return ops.graph_method(out, name, [target, *args], kwargs)
    if isinstance(target, ListVar):
        _check_arguments(list, name, args, kwargs)
        return _list_method(vm, target, name, args, kwargs)
    if isinstance(target, DictVar):
        _check_arguments(dict, name, args, kwargs)
        return _dict_method(vm, target, name, args, kwargs)
    if isinstance(target, SetVar):
        _check_arguments(set, name, args, kwargs)
        return _set_method(vm, target, name, args, kwargs)
    if isinstance(target, TupleVar) and name in ("index", "count"):
        _check_arguments(tuple, name, args, kwargs)
        values = tuple(_const_items(vm, ops.items(out, target)))
        try:  # a missing value raises the program's ValueError
            return ConstVar(getattr(values, name)(*(ops.const_value(out, a) for a in args)))
        except (ValueError, TypeError) as exc:
            raise folding_error(exc, f"tuple.{name}()") from None
    if isinstance(target, TupleVar) and target.is_size and name == "numel" and not (args or kwargs):
        total: Var = ConstVar(1)  # a torch.Size with symbolic entries: their product
        for item in target.items:
            total = ops.binary(out, "*", total, item)
        return total
    if isinstance(target, ConstVar) and name in ("__enter__", "__exit__"):
        # A constant used as a manager (``with torch.device("cpu"):`` pushes a torch function
        # mode): calling it here would change the real interpreter state while tracing (and
        # leave it changed when the trace breaks); the graph would not record it either.
        raise Unsupported(f"{type(target.value).__name__} used as a context manager")
    if isinstance(target, ConstVar):
        if (
            name == "join" and isinstance(target.value, str) and len(args) == 1
            and isinstance(args[0], (GeneratorVar, IteratorVar, DictViewVar))
        ):
            # ``sep.join(str(i) for i in ...)``: join consumes its argument whole, at once
            args = [TupleVar(tuple(ops.iterate(out, args[0])))]
        py_args = [ops.const_value(out, a) for a in args]
        py_kwargs = {k: ops.const_value(out, v) for k, v in kwargs.items()}
        out.depend(target)
        try:
            return out.wrap(getattr(target.value, name)(*py_args, **py_kwargs), None)
        except Exception as exc:
            raise Unsupported(f"{type(exc).__name__} raised by {name}() on a constant") from exc
    if isinstance(target, ModuleVar):
        return module_iterator(vm, target, name, args, kwargs)
    if isinstance(target, GradModeVar) and name == "__enter__":
        return torch_calls.enter_grad_mode(out, target)
    if isinstance(target, IteratorVar) and name == "__next__":
        return next_value(target)
    if isinstance(target, GeneratorVar) and name == "__next__":
        value = ops.generator_next(out, target)
        if value is None:
            raise Unsupported("StopIteration raised by next() on an exhausted generator")
        return value
    if isinstance(target, GeneratorVar) and name == "__iter__":
        return target
    if isinstance(target, GeneratorVar) and name == "send" and len(args) == 1:
        value = ops.generator_next(out, target, args[0])
        if value is None:
            raise Unsupported("StopIteration raised by send() on a generator that returned")
        return value
    if isinstance(target, GeneratorVar) and name == "throw" and len(args) == 1 and not kwargs:
        return _generator_throw(vm, target, args[0])
    if isinstance(target, GeneratorContextVar):
        return _generator_context_method(vm, target, name, args)
    more = MORE_METHODS.get(type(target))  # registered by the stdlib models (namedtuples)
    found = more(vm, target, name, args, kwargs) if more is not None else None
    if found is not None:
        return found
    raise Unsupported(f"method {name}() of {ops.describe(target)}")


# Methods of other kinds of tracked value, by the value's class; None: not one of its.
MethodImpl = Callable[["Interpreter", Any, str, list[Var], dict[str, Var]], Var | None]
MORE_METHODS: dict[type, MethodImpl] = {}


def _check_arguments(kind: type, name: str, args: list[Var], kwargs: dict[str, Var]) -> None:
    """Eager's TypeError, raised in the traced program, for a list/dict/set method called with
    arguments it does not take (``lst.pop(1, 2)`` popped and returned a value).

    The count and keywords are checked against the method's signature; eager's own message
    comes from calling the method on an empty container with as many placeholders (CPython
    checks the count before the values). Methods without a signature are left to their
    handlers, but for dict.update's one positional argument."""
    real = getattr(kind, name, None)
    if not isinstance(real, (types.MethodDescriptorType, types.WrapperDescriptorType)):
        return  # not an instance method taking self (dict.fromkeys is bound to the class)
    try:
        inspect.signature(real).bind(None, *args, **kwargs)
        return
    except ValueError:  # no signature: dict.update(other=(), /, **kwargs) is the one we check
        if not (kind is dict and name == "update" and len(args) > 1):
            return
    except TypeError:
        pass
    try:
        getattr(kind(), name)(*([None] * len(args)), **dict.fromkeys(kwargs))
    except TypeError as exc:
        raise folding_error(exc, f"{kind.__name__}.{name}()") from None
    except Exception:  # pragma: no cover - not an argument error: the handler decides
        return


def _const_items(vm: Interpreter, values: list[Var]) -> list[Any]:
    return [ops.const_value(vm.out, v) for v in values]


def next_value(iterator: IteratorVar) -> Var:
    """``next(iterator)``; exhausting it inside traced code is not supported."""
    box = iterator.box
    if box.stale():
        raise Unsupported(STALE_ITERATOR)
    if box.index >= len(box.items):
        box.finish()
        raise throw(StopIteration)
    value = box.items[box.index]
    box.index += 1
    return value


def tensor_method(
    vm: Interpreter, tensor: TensorVar, name: str, args: list[Var], kwargs: dict[str, Var]
) -> Var:
    """``tensor.name(*args, **kwargs)``."""
    out = vm.out
    if name == "item" and not args and not kwargs and out.builder.unbacked_scalars:
        return ops.graph_method(out, name, [tensor], {})  # an unbacked symbol
    if name == "tolist" and not args and not kwargs and out.builder.unbacked_scalars:
        found = _tolist(out, tensor)
        if found is not None:
            return found
    if name in DATA_DEPENDENT_METHODS:
        raise Unsupported(
            f"Tensor.{name}() needs the tensor's data, which is unknown while tracing"
        )
    if name == "is_set_to":
        raise Unsupported("Tensor.is_set_to() compares storages, which the trace does not model")
    if name in ("size", "shape"):
        dim_var = args[0] if args else kwargs.get("dim")
        if len(args) + len(kwargs) > 1 or (kwargs and dim_var is None):
            raise Unsupported(f"Tensor.{name}() with arguments {sorted(kwargs)}")
        if dim_var is not None:
            dim = ops.const_value(out, dim_var)
            if dim is None:
                return attributes.size_of(out, tensor)
            return attributes.size_of(out, tensor, dim if dim >= 0 else dim + tensor.example.dim())
        return attributes.size_of(out, tensor)
    if name == "storage_offset" and not args and not kwargs:
        return _storage_offset(out, tensor)
    if name in TENSOR_META_METHODS:
        out.depend(tensor)
        py_args = [ops.const_value(out, a) for a in args]
        # Keywords too: is_contiguous(memory_format=...), stride(dim=0) answer other questions.
        py_kwargs = {k: ops.const_value(out, v) for k, v in kwargs.items()}
        value = getattr(tensor.example, name)(*py_args, **py_kwargs)
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return ops.graph_method(out, name, [tensor, *args], kwargs)
        if isinstance(value, tuple) and not all(isinstance(v, int) for v in value):
            return ops.graph_method(out, name, [tensor, *args], kwargs)
        return ConstVar(value)
    if name in FACT_METHODS and not args and not kwargs:
        return tensor_attrs.tensor_fact(out, tensor, MethodCallSource, name)
    if name == "type" and not args and not kwargs:
        out.depend(tensor)
        return ConstVar(tensor.example.type())
    if name == "requires_grad_" and tensor.node.op == "placeholder":
        return _input_requires_grad(vm, tensor, args, kwargs)
    if name == "register_hook":
        return higher_order.register_hook(vm, tensor, args, kwargs)
    if name in ("__enter__", "__exit__", "backward", "retain_grad"):
        raise Unsupported(f"Tensor.{name}() inside a compiled function")
    if name == "new_tensor" and len(args) == 1 and torch_calls.holds_symbol(out, args[0]):
        # as torch.tensor(n), but with this tensor's dtype and device unless given
        options = {
            "dtype": ConstVar(tensor.example.dtype),
            "device": ConstVar(tensor.example.device),
            **kwargs,
        }
        return torch_calls.tensor_of_symbols(out, args[0], options)
    return ops.graph_method(out, name, [tensor, *args], kwargs)


def _storage_offset(out: Output, tensor: TensorVar) -> Var:
    """``x.storage_offset()``: always a number, never a graph op (a backend that retraces the
    graph on fresh example inputs would see their offsets, 0). An input's is its real one,
    guarded by value; a tensor made in the graph has its fake's (a view of an input: offsets
    of the inputs sharing its storage are guarded), unless that depends on dynamic sizes."""
    out.depend(tensor)
    if tensor.node.op == "placeholder" and tensor.source is not None:
        offset = out.real_input(tensor).storage_offset()
        out.request("CONSTANT_MATCH", MethodCallSource(tensor.source, "storage_offset"), offset)
        return ConstVar(offset)
    value = tensor.example.storage_offset()
    if not isinstance(value, int):
        raise Unsupported("storage_offset() of a view whose offset depends on dynamic sizes")
    out.depend_storage_offset(tensor)
    return ConstVar(value)


def _generator_context_method(
    vm: Interpreter, manager: GeneratorContextVar, name: str, args: list[Var]
) -> Var:
    """``__enter__``: run the generator to its yield; ``__exit__(None, None, None)`` (the body
    ended normally: exceptions are never traced) runs it to its end."""
    if name == "__enter__":
        value = ops.generator_next(vm.out, manager.gen)
        if value is None:
            raise Unsupported("RuntimeError: generator didn't yield (@contextmanager)")
        return value
    if name == "__exit__":
        if all(isinstance(a, ConstVar) and a.value is None for a in args):
            if ops.generator_next(vm.out, manager.gen) is not None:
                raise Unsupported("RuntimeError: generator didn't stop (@contextmanager)")
            return ConstVar(None)
        return _generator_context_throw(vm, manager, args)
    raise Unsupported(f"method {name}() of a @contextmanager manager")


def _generator_throw(vm: Interpreter, gen: GeneratorVar, exc: Var) -> Var:
    """``gen.throw(exc)`` (an exception object or class) on a generator paused at a yield:
    its next yielded value; its return raises StopIteration, as in Python."""
    if isinstance(exc, ObjectVar) and isinstance(exc.value, type) and issubclass(
        exc.value, BaseException
    ):
        vm.out.depend(exc)
        exc = vm.call(exc, [], {})
    if not (isinstance(exc, ObjectVar) and isinstance(exc.value, BaseException)):
        raise Unsupported("throw() of something that is not an exception the VM holds")
    value = ops.generator_next(vm.out, gen, thrown=exc)
    if value is None:
        raise throw(StopIteration)
    return value


def _generator_context_throw(vm: Interpreter, manager: GeneratorContextVar, args: list[Var]
                             ) -> Var:
    """``__exit__(type, exc, tb)`` of a @contextmanager block left by exception ``exc``: thrown
    into the generator at its yield, as contextlib does. The generator returning suppresses
    it (True); raising ``exc`` again lets it go on (False); raising another replaces it."""
    exc = args[1] if len(args) == 3 else None
    if not (isinstance(exc, ObjectVar) and isinstance(exc.value, BaseException)):
        raise Unsupported("a @contextmanager block left by an exception the VM does not hold")
    if isinstance(exc.value, StopIteration | GeneratorExit):
        raise Unsupported(f"{type(exc.value).__name__} thrown into a @contextmanager generator")
    try:
        value = ops.generator_next(vm.out, manager.gen, thrown=exc)
    except TracedException as raised:
        if raised.value.value is exc.value:
            return ConstVar(False)
        raise
    if value is not None:
        raise Unsupported("RuntimeError: generator didn't stop after throw() (@contextmanager)")
    return ConstVar(True)


def _input_requires_grad(
    vm: Interpreter, tensor: TensorVar, args: list[Var], kwargs: dict[str, Var]
) -> Var:
    """``x.requires_grad_(flag)`` on a graph input: a no-op when the flag already holds
    (TENSOR_MATCH guards it); changing an input's autograd metadata inside the graph is not
    something a backend can replay, so that is refused (a graph break)."""
    out = vm.out
    flag_var = args[0] if args else kwargs.get("requires_grad", ConstVar(True))
    flag = bool(ops.const_value(out, flag_var))
    out.depend(tensor)
    if tensor.example.requires_grad == flag:
        return tensor
    raise Unsupported("Tensor.requires_grad_() changing a graph input's requires_grad")


def sort_values(vm: Interpreter, values: list[Var], kwargs: dict[str, Var]) -> list[Var]:
    """``sorted(values, key=..., reverse=...)`` (list.sort and sorted()): the keys must be
    constants, the values need not."""
    unknown = set(kwargs) - {"key", "reverse"}
    if unknown:
        raise Unsupported(f"sorting with {sorted(unknown)}")
    reverse = bool(ops.const_value(vm.out, kwargs["reverse"])) if "reverse" in kwargs else False
    key = kwargs.get("key")
    if key is not None and isinstance(key, ConstVar) and key.value is None:
        key = None
    key_vars = [v if key is None else vm.call(key, [v], {}) for v in values]
    if any(isinstance(k, NewObjectVar) for k in key_vars):  # their own __lt__, traced
        return _small_sort(vm, key_vars, values, reverse)
    keys = [ops.const_value(vm.out, k) for k in key_vars]
    try:
        order = sorted(range(len(values)), key=lambda i: keys[i], reverse=reverse)
    except TypeError as exc:
        raise Unsupported(f"TypeError raised by sorting: {exc}") from exc
    return [values[i] for i in order]


def _small_sort(vm: Interpreter, keys: list[Var], values: list[Var], reverse: bool) -> list[Var]:
    """CPython's list sort of fewer than 64 items, whose keys are compared by their own
    ``__lt__`` (traced: called as often and in the order eager calls it): the first run
    (reversed when strictly descending), then binary insertion of the rest; ``reverse``
    reverses before and after, which keeps equal items in order."""
    if len(keys) >= 64:
        raise Unsupported("sorting 64 or more objects compared by their own __lt__")

    def less(a: Var, b: Var) -> bool:
        return ops.truth(vm.out, compare_op(vm, "<", a, b))

    pairs = list(zip(keys, values, strict=True))
    if reverse:
        pairs.reverse()
    if len(pairs) > 1:
        run = 2
        if less(pairs[1][0], pairs[0][0]):
            while run < len(pairs) and less(pairs[run][0], pairs[run - 1][0]):
                run += 1
            pairs[:run] = pairs[:run][::-1]
        else:
            while run < len(pairs) and not less(pairs[run][0], pairs[run - 1][0]):
                run += 1
        for start in range(run, len(pairs)):
            pivot = pairs[start]
            low, high = 0, start
            while low < high:
                mid = low + ((high - low) >> 1)
                if less(pivot[0], pairs[mid][0]):
                    high = mid
                else:
                    low = mid + 1
            pairs[low + 1 : start + 1] = pairs[low:start]
            pairs[low] = pivot
    if reverse:
        pairs.reverse()
    return [value for _, value in pairs]


def _list_method(
    vm: Interpreter, lst: ListVar, name: str, args: list[Var], kwargs: dict[str, Var]
) -> Var:
    out = vm.out
    box = lst.box
    mutating = {"append", "extend", "insert", "pop", "remove", "clear", "reverse", "sort"}
    if name in mutating:
        out.depend(lst)
        ops.note_mutation(out, lst)
    if name == "append":
        box.items.append(args[0])
        return ConstVar(None)
    if name == "extend":
        box.items.extend(ops.iterate(out, args[0]))
        return ConstVar(None)
    if name == "insert":
        box.items.insert(ops.const_value(out, args[0]), args[1])
        return ConstVar(None)
    if name == "pop":
        index = ops.const_value(out, args[0]) if args else -1
        try:
            return box.items.pop(index)
        except (IndexError, TypeError) as exc:  # the program's own error, as eager raises it
            raise folding_error(exc, "list.pop()") from None
    if name == "clear":
        box.items.clear()
        return ConstVar(None)
    if name == "reverse":
        box.items.reverse()
        return ConstVar(None)
    if name == "copy":
        return ListVar(ListBox(ops.items(out, lst)))
    if name in ("index", "count"):
        values = _const_items(vm, ops.items(out, lst))
        try:  # index's start/stop too; a missing value raises the program's ValueError
            return ConstVar(getattr(values, name)(*(ops.const_value(out, a) for a in args)))
        except (ValueError, TypeError) as exc:
            raise folding_error(exc, f"list.{name}()") from None
    if name == "sort" and not args:
        # As CPython, the list is empty while it sorts (a key function sees it so); one changed
        # meanwhile ends sorted anyway, and the sort raises ValueError.
        values = list(box.items)
        box.items.clear()
        try:
            ordered = sort_values(vm, values, kwargs)
        finally:
            changed = bool(box.items)
            box.items[:] = values
        box.items[:] = ordered
        if changed:
            raise throw(ValueError, "list modified during sort")
        return ConstVar(None)
    if name == "remove" and any(user_class(v) for v in (args[0], *box.items)):
        for index, candidate in enumerate(list(box.items)):
            # CPython's list.remove: identity, then ``candidate == x`` (a user __eq__)
            if ops.identical(out, candidate, args[0]) or ops.truth(
                out, compare_op(vm, "==", candidate, args[0])
            ):
                del box.items[index]
                return ConstVar(None)
        raise throw(ValueError, "list.remove(x): x not in list")
    if name == "remove":
        target = ops.const_value(out, args[0])
        values = _const_items(vm, box.items)
        if target not in values:
            raise throw(ValueError, "list.remove(x): x not in list")
        del box.items[values.index(target)]
        return ConstVar(None)
    if name == "__iter__":
        return IteratorVar(IterBox(ops.items(out, lst)))
    raise Unsupported(f"list.{name}()")


_SET_UPDATES = frozenset({
    "update", "intersection_update", "difference_update", "symmetric_difference_update",
})
_SET_RESULTS = frozenset({"union", "intersection", "difference", "symmetric_difference"})
_SET_TESTS = frozenset({"issubset", "issuperset", "isdisjoint"})


def _set_method(
    vm: Interpreter, target: SetVar, name: str, args: list[Var], kwargs: dict[str, Var]
) -> Var:
    """set methods on the private copy; every operand is read and checked before a change."""

    out = vm.out
    items = target.box.items
    slot_calls.check_set_call(vm, name, args, kwargs)
    if kwargs:
        raise Unsupported(f"set.{name}() with keyword arguments")
    if name in ("add", "discard", "remove"):
        (element,) = sets.set_elements(vm, args)
        if name == "remove" and element not in items:
            raise Unsupported(f"KeyError {element!r} raised by set.remove")
        ops.note_set_mutation(out, target)
        getattr(items, name)(element)
        return ConstVar(None)
    if name == "pop":
        out.depend(target)
        if not items:
            raise Unsupported("KeyError raised by pop() on an empty set")
        ops.note_set_mutation(out, target)
        return out.wrap(items.pop(), None)
    if name == "clear":
        ops.note_set_mutation(out, target)
        items.clear()
        return ConstVar(None)
    others = [sets.set_operand(vm, a) for a in args]
    if name in _SET_UPDATES:
        ops.note_set_mutation(out, target)
        for other in others:  # one at a time, as set.update(*others) does
            getattr(items, name)(other)
        return ConstVar(None)
    out.depend(target)
    if name in _SET_RESULTS:
        return SetVar(SetBox(getattr(items, name)(*others)))
    if name in _SET_TESTS:
        return ConstVar(getattr(items, name)(*others))
    if name == "copy":
        return SetVar(SetBox(items.copy()))
    if name == "__contains__":
        return ConstVar(sets.set_elements(vm, args)[0] in items)
    if name == "__len__":
        return ConstVar(len(items))
    if name == "__iter__":
        return IteratorVar(IterBox(ops.iterate(out, target)))
    raise Unsupported(f"set.{name}()")


def _dict_method(
    vm: Interpreter, d: DictVar, name: str, args: list[Var], kwargs: dict[str, Var]
) -> Var:
    out = vm.out
    box = d.box
    if name in ("keys", "values", "items"):
        return DictViewVar(d, name)
    if name == "get":
        key = ops.const_value(out, args[0])
        out.depend(d)
        if key in box.items:
            return box.items[key]
        return args[1] if len(args) > 1 else ConstVar(None)
    if name in ("update", "pop", "setdefault", "clear", "__setitem__"):
        ops.note_mutation(out, d)
    if name == "update":
        if args:
            other = args[0]
            if not isinstance(other, DictVar):
                # What dict(other) copies (a mapping's items, cls.__dict__'s entries, pairs):
                # dict.update reads its argument as dict() does.
                other = vm.call(ObjectVar(dict), [other], {})
                if not isinstance(other, DictVar):
                    raise Unsupported("dict.update() with a non-dict argument")
            box.items.update(other.box.items)
        box.items.update(kwargs)
        return ConstVar(None)
    if name == "pop":
        key = ops.const_value(out, args[0])
        if key in box.items:
            return box.items.pop(key)
        if len(args) > 1:
            return args[1]
        raise Unsupported(f"KeyError {key!r} raised by dict.pop")
    if name == "setdefault":
        key = ops.const_value(out, args[0])
        if key not in box.items:
            box.items[key] = args[1] if len(args) > 1 else ConstVar(None)
        return box.items[key]
    if name == "clear":
        box.items.clear()
        return ConstVar(None)
    if name == "copy":
        out.depend(d)
        return DictVar(DictBox(dict(box.items)))
    if name == "__contains__":
        return ConstVar(ops.const_value(out, args[0]) in box.items)
    raise Unsupported(f"dict.{name}()")


def _tolist(out: Output, tensor: TensorVar) -> Var | None:
    """``tensor.tolist()`` as torch.compile captures it under capture_scalar_outputs: one
    ``item()`` (an unbacked symbol) per element, nested as the tensor's static shape says;
    None for a symbolic shape or a non-integer tensor (the call then breaks, as torch's)."""
    shape = tuple(tensor.example.shape)
    dtype = tensor.example.dtype
    if (
        not all(isinstance(n, int) for n in shape)
        or dtype.is_floating_point
        or dtype.is_complex
        or dtype is torch.bool
    ):
        return None
    if not shape:
        return ops.graph_method(out, "item", [tensor], {})
    rows: list[Var] = []
    for k in range(shape[0]):
        row = ops.graph_call(out, operator.getitem, [tensor, ConstVar(k)], {})
        assert isinstance(row, TensorVar)
        item = _tolist(out, row)
        assert item is not None
        rows.append(item)
    return ListVar(ListBox(rows))


def tensor_to_scalar(vm: Interpreter, kind: type, tensor: TensorVar) -> Var | None:
    """``int(t)``, ``float(t)``, ``bool(t)`` under capture_scalar_outputs: ``t.item()`` (an
    unbacked symbol) converted as torch.compile does (``torch.sym_int``/``sym_float``, a
    comparison with 0 for ``bool``); None when the setting is off or the tensor has more than
    one element (or a symbolic size): the call then breaks."""
    out = vm.out
    shape = tuple(tensor.example.shape)
    if not out.builder.unbacked_scalars or not all(n == 1 for n in shape if isinstance(n, int)):
        return None
    if not all(isinstance(n, int) for n in shape):
        return None  # a symbolic size: eager raises unless it is 1 at run time
    dtype = tensor.example.dtype
    item = ops.graph_method(out, "item", [tensor], {})
    if kind is bool and dtype is not torch.bool:
        return ops.graph_call(out, operator.ne, [item, ConstVar(0)], {})  # nan is true too
    if kind is int and dtype.is_floating_point:
        return ops.graph_call(out, torch.sym_int, [item], {})
    if kind is float and not dtype.is_floating_point:
        return ops.graph_call(out, torch.sym_float, [item], {})
    return item
