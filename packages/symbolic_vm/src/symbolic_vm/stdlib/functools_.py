"""``functools``: a partial's ``func``/``args``/``keywords`` read (guarded by their sources
where the partial came from the frame), and ``lru_cache``/``cache`` wrappers run through to the
wrapped function (``functools.partial`` and ``reduce`` themselves are in builtins_); the
attributes of a function made in the frame (``functools.wraps`` applied there reads and sets
them; the stores are attr_stores').

A cached function is traced on every call instead of answered from the cache: the result is
the same as long as the function is pure, which is checked (a call that changes an object
outside the trace is Unsupported: eager would skip that change on a cache hit). The cache's
statistics are not updated, as under torch.compile.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from symbolic_vm import attributes, type_trackers
from symbolic_vm import operations as ops
from symbolic_vm.builtin_table import implements
from symbolic_vm.errors import Unsupported, throw
from symbolic_vm.guard_api import AttrSource
from symbolic_vm.stdlib.polyfill import calls_of, polyfill
from symbolic_vm.values import (
    ConstVar,
    DictBox,
    DictVar,
    NestedFunctionVar,
    NewObjectVar,
    ObjectBox,
    ObjectVar,
    PartialVar,
    TupleVar,
    Var,
)

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter


def _partial_attr(vm: Interpreter, obj: PartialVar, name: str) -> Var | None:
    where = obj.source
    if name == "func":
        return obj.func
    if name == "args":
        vm.out.depend(obj)  # the argument count the trace now relies on
        return TupleVar(obj.args, source=None if where is None else AttrSource(where, "args"))
    if name == "keywords":
        # The partial's own keyword table: a store through it changes later calls, and one
        # from the frame is guarded (its keys) and replayed like any dict read at its source.
        vm.out.depend(obj)
        return DictVar(
            DictBox(obj.kwargs), source=None if where is None else AttrSource(where, "keywords")
        )
    return None


attributes.MORE_ATTRS[PartialVar] = _partial_attr


@calls_of(functools._lru_cache_wrapper)
def _call_cached(vm: Interpreter, fn: ObjectVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    vm.out.depend(fn)
    wrapped = fn.value.__wrapped__
    source = None if fn.source is None else AttrSource(fn.source, "__wrapped__")
    name = getattr(wrapped, "__qualname__", "function")
    return _call_through(vm, vm.out.wrap(wrapped, source), name, args, kwargs)


def _call_through(
    vm: Interpreter, wrapped: Var, name: str, args: list[Var], kwargs: dict[str, Var]
) -> Var:
    """Call the function a cache wraps; Unsupported when it has effects (see the module doc)."""
    effects = len(vm.out.side_effects)
    result = vm.call(wrapped, args, kwargs)
    if len(vm.out.side_effects) != effects:
        raise Unsupported(
            f"the lru_cache'd {name} changes objects outside the compiled function (eager "
            "skips that on a cache hit)"
        )
    return result


# A cache wrapper made in the frame (``@functools.cache`` on an inner function: lru_cache's
# Python code reaches ``_lru_cache_wrapper(user_function, maxsize, typed, _CacheInfo)``): an
# object whose box keeps what it was made from under these names, beside the attributes
# ``update_wrapper`` stores on it; codegen.make_object rebuilds it from them when it escapes.
LRU_FUNCTION = "__strata_lru_function__"
LRU_MAXSIZE = "__strata_lru_maxsize__"
LRU_TYPED = "__strata_lru_typed__"


@implements(functools._lru_cache_wrapper)
def _make_cached(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if len(args) != 4 or kwargs:
        raise Unsupported("functools._lru_cache_wrapper called other than as lru_cache does")
    function, maxsize, typed, _ = args
    return NewObjectVar(ObjectBox(functools._lru_cache_wrapper, {
        LRU_FUNCTION: function,
        LRU_MAXSIZE: ConstVar(ops.const_value(vm.out, maxsize)),
        LRU_TYPED: ConstVar(ops.const_value(vm.out, typed)),
    }))


class _CacheWrapperTracker(type_trackers.TypeTracker):
    """Calling a cache wrapper made in the frame: its function traced on every call."""

    def call(
        self, vm: Interpreter, obj: Var, args: list[Var], kwargs: dict[str, Var]
    ) -> Var | None:
        if not (isinstance(obj, NewObjectVar) and LRU_FUNCTION in obj.box.attrs):
            return None
        return _call_through(vm, obj.box.attrs[LRU_FUNCTION], "function", args, kwargs)


type_trackers.register(functools._lru_cache_wrapper)(_CacheWrapperTracker)


# -- functions made while tracing: what functools.update_wrapper reads and writes -----------

# Attributes a function reads from its code and creation: what a store of the same name would
# change about calling it is refused (attr_stores), the rest are kept in ``specials``.
_FROM_CODE = ("__name__", "__qualname__", "__doc__", "__module__")


def nested_function_attr(vm: Interpreter, fn: NestedFunctionVar, name: str) -> Var | None:
    """``f.name`` on a function made by MAKE_FUNCTION while tracing: what was stored on it
    (``functools.wraps``'s ``__name__``, ``__wrapped__``, ...), else what CPython's function
    object answers (its name, qualname, docstring and module from its code and globals, its
    defaults, annotations, ``__dict__``). AttributeError for a name it lacks."""
    if name in fn.specials:
        return fn.specials[name]
    if name in fn.fn_dict.items:
        return fn.fn_dict.items[name]
    if name == "__dict__":
        return DictVar(fn.fn_dict)
    if name in _FROM_CODE:
        cells = tuple(types.CellType() for _ in fn.code.co_freevars)
        real = types.FunctionType(fn.code, {"__name__": fn.f_globals.get("__name__")},
                                  closure=cells)
        return ConstVar(getattr(real, name))
    if name == "__defaults__":
        return TupleVar(fn.defaults) if fn.defaults else ConstVar(None)
    if name == "__kwdefaults__":
        return DictVar(DictBox(dict(fn.kwdefaults))) if fn.kwdefaults else ConstVar(None)
    if name == "__code__":
        return ObjectVar(fn.code)
    if name == "__annotations__":
        # CPython turns MAKE_FUNCTION's (name, value, ...) tuple into a dict on first read.
        pairs = ops.items(vm.out, fn.annotations) if fn.annotations is not None else []
        made = DictVar(DictBox({
            ops.const_value(vm.out, pairs[i]): pairs[i + 1] for i in range(0, len(pairs), 2)
        }))
        fn.specials[name] = made
        return made
    if name == "__type_params__":
        return TupleVar(())
    if name in ("__globals__", "__closure__", "__builtins__"):
        raise Unsupported(f"reading {name} of a function made in the compiled function")
    if name.startswith("__") and hasattr(types.FunctionType, name):
        return None  # a method of function objects (__get__, __call__, ...): not modelled
    raise throw(AttributeError, f"'function' object has no attribute {name!r}")


attributes.MORE_ATTRS[NestedFunctionVar] = nested_function_attr


class _CmpKey:
    """What ``functools.cmp_to_key(mycmp)(obj)`` makes: compared through ``mycmp`` (C's
    KeyWrapper, as plain Python the VM traces; sorts call only ``<``)."""

    __hash__ = None  # type: ignore[assignment]  # unhashable, as C's

    def __init__(self, obj: Any, cmp: Callable[[Any, Any], Any]) -> None:
        self.obj = obj
        self.cmp = cmp

    def __lt__(self, other: _CmpKey) -> bool:
        return bool(self.cmp(self.obj, other.obj) < 0)

    def __gt__(self, other: _CmpKey) -> bool:
        return bool(self.cmp(self.obj, other.obj) > 0)

    def __le__(self, other: _CmpKey) -> bool:
        return bool(self.cmp(self.obj, other.obj) <= 0)

    def __ge__(self, other: _CmpKey) -> bool:
        return bool(self.cmp(self.obj, other.obj) >= 0)

    def __eq__(self, other: object) -> bool:
        assert isinstance(other, _CmpKey)
        return bool(self.cmp(self.obj, other.obj) == 0)


@polyfill(functools.cmp_to_key)
def cmp_to_key(mycmp: Callable[[Any, Any], Any]) -> Callable[[Any], _CmpKey]:
    def key(obj: Any) -> _CmpKey:
        return _CmpKey(obj, mycmp)

    return key
