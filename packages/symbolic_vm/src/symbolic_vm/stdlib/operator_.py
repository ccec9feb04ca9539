"""``operator``: the functions whose meaning depends on the operand's kind (subscripts, ``in``,
truth, identity, the in-place operators that mutate lists and dicts) as one-line Python the VM
inlines, so each runs exactly as its operator statement would (a list's ``+=`` extends it, a
tensor's ``[i]`` is a graph node). The plain binary and comparison functions (``operator.add``,
``operator.lt``, ...) are answered by builtins_ directly as the VM's binary operations.

``itemgetter``/``attrgetter``/``methodcaller`` objects (made while tracing from constants, or
passed in: immutable, pinned by identity) are called through their ``__reduce__`` parts.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from symbolic_vm.errors import Unsupported
from symbolic_vm.stdlib.polyfill import calls_of, polyfill, python_function
from symbolic_vm.values import ObjectVar, Var

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter

# ruff: noqa: E704 (one-line definitions read as the table they are)


@polyfill(operator.getitem)
def getitem(a: Any, b: Any) -> Any: return a[b]
@polyfill(operator.setitem)
def setitem(a: Any, b: Any, c: Any) -> None: a[b] = c
@polyfill(operator.delitem)
def delitem(a: Any, b: Any) -> None: del a[b]
@polyfill(operator.contains)
def contains(a: Any, b: Any) -> bool: return b in a
@polyfill(operator.truth)
def truth(a: Any) -> bool: return bool(a)
@polyfill(operator.not_)
def not_(a: Any) -> bool: return not a
@polyfill(operator.is_)
def is_(a: Any, b: Any) -> bool: return a is b
@polyfill(operator.is_not)
def is_not(a: Any, b: Any) -> bool: return a is not b
@polyfill(operator.concat)
def concat(a: Any, b: Any) -> Any: return a + b
@polyfill(operator.countOf)
def count_of(a: Any, b: Any) -> int: return sum(1 for v in a if v is b or v == b)
@polyfill(operator.call)
def call(obj: Any, /, *args: Any, **kwargs: Any) -> Any: return obj(*args, **kwargs)
@polyfill(operator.iadd)
def iadd(a: Any, b: Any) -> Any: a += b; return a  # noqa: E702
@polyfill(operator.iconcat)
def iconcat(a: Any, b: Any) -> Any: a += b; return a  # noqa: E702
@polyfill(operator.isub)
def isub(a: Any, b: Any) -> Any: a -= b; return a  # noqa: E702
@polyfill(operator.imul)
def imul(a: Any, b: Any) -> Any: a *= b; return a  # noqa: E702
@polyfill(operator.imatmul)
def imatmul(a: Any, b: Any) -> Any: a @= b; return a  # noqa: E702
@polyfill(operator.itruediv)
def itruediv(a: Any, b: Any) -> Any: a /= b; return a  # noqa: E702
@polyfill(operator.ifloordiv)
def ifloordiv(a: Any, b: Any) -> Any: a //= b; return a  # noqa: E702
@polyfill(operator.imod)
def imod(a: Any, b: Any) -> Any: a %= b; return a  # noqa: E702
@polyfill(operator.ipow)
def ipow(a: Any, b: Any) -> Any: a **= b; return a  # noqa: E702
@polyfill(operator.ilshift)
def ilshift(a: Any, b: Any) -> Any: a <<= b; return a  # noqa: E702
@polyfill(operator.irshift)
def irshift(a: Any, b: Any) -> Any: a >>= b; return a  # noqa: E702
@polyfill(operator.iand)
def iand(a: Any, b: Any) -> Any: a &= b; return a  # noqa: E702
@polyfill(operator.ior)
def ior(a: Any, b: Any) -> Any: a |= b; return a  # noqa: E702
@polyfill(operator.ixor)
def ixor(a: Any, b: Any) -> Any: a ^= b; return a  # noqa: E702


@polyfill(operator.indexOf)
def index_of(a: Any, b: Any) -> int:
    for i, v in enumerate(a):
        if v is b or v == b:
            return i
    raise ValueError("sequence.index(x): x not in sequence")


def _parts(vm: Interpreter, fn: ObjectVar) -> tuple[Any, tuple[Any, ...]]:
    """What an itemgetter/attrgetter/methodcaller was made with (it is immutable: the identity
    guard on it, or its making from constants, fixes them)."""
    vm.out.depend(fn)
    maker, args = fn.value.__reduce__()[:2]
    return maker, tuple(args)


def _run(vm: Interpreter, helper: Callable[..., Any], consts: list[object], args: list[Var],
         kwargs: dict[str, Var]) -> Var:
    wrapped = [vm.out.wrap(c, None) for c in consts]
    return vm.call(python_function(helper), [*wrapped, *args], kwargs)


@calls_of(operator.itemgetter)
def _call_itemgetter(
    vm: Interpreter, fn: ObjectVar, args: list[Var], kwargs: dict[str, Var]
) -> Var:
    return _run(vm, _get_items, [_parts(vm, fn)[1]], args, kwargs)


def _get_items(items: tuple[Any, ...], obj: Any) -> Any:
    if len(items) == 1:
        return obj[items[0]]
    return tuple(obj[i] for i in items)


@calls_of(operator.attrgetter)
def _call_attrgetter(
    vm: Interpreter, fn: ObjectVar, args: list[Var], kwargs: dict[str, Var]
) -> Var:
    return _run(vm, _get_attrs, [_parts(vm, fn)[1]], args, kwargs)


def _get_attrs(names: tuple[str, ...], obj: Any) -> Any:
    found = []
    for name in names:
        value = obj
        for part in name.split("."):
            value = getattr(value, part)
        found.append(value)
    return found[0] if len(found) == 1 else tuple(found)


@calls_of(operator.methodcaller)
def _call_methodcaller(
    vm: Interpreter, fn: ObjectVar, args: list[Var], kwargs: dict[str, Var]
) -> Var:
    maker, margs = _parts(vm, fn)
    keywords: dict[str, Any] = {}
    if isinstance(maker, functools.partial):
        # With keywords, __reduce__ gives (partial(methodcaller, name, **kwargs), args).
        keywords = dict(maker.keywords)
        margs = (*maker.args, *margs)
    if len(args) != 1 or kwargs:
        raise Unsupported("a methodcaller called with other than one argument")
    name, *rest = margs
    return _run(vm, _call_method, [name, tuple(rest), keywords], args, {})


def _call_method(name: str, args: tuple[Any, ...], kwargs: dict[str, Any], obj: Any) -> Any:
    return getattr(obj, name)(*args, **kwargs)
