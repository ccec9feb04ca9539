"""``functools``: a partial's ``func``/``args``/``keywords`` read (guarded by their sources
where the partial came from the frame), and ``lru_cache``/``cache`` wrappers run through to the
wrapped function (``functools.partial`` and ``reduce`` themselves are in builtins_).

A cached function is traced on every call instead of answered from the cache: the result is
the same as long as the function is pure, which is checked (a call that changes an object
outside the trace is Unsupported: eager would skip that change on a cache hit). The cache's
statistics are not updated, as under torch.compile.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from symbolic_vm import operations as ops
from symbolic_vm.errors import Unsupported
from symbolic_vm.guard_api import AttrSource
from symbolic_vm.stdlib.polyfill import calls_of
from symbolic_vm.values import DictBox, DictVar, ObjectVar, PartialVar, TupleVar, Var

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


ops.MORE_ATTRS[PartialVar] = _partial_attr


@calls_of(functools._lru_cache_wrapper)
def _call_cached(vm: Interpreter, fn: ObjectVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    from symbolic_vm.calls import call

    out = vm.out
    out.depend(fn)
    wrapped = fn.value.__wrapped__
    source = None if fn.source is None else AttrSource(fn.source, "__wrapped__")
    effects = len(out.side_effects)
    result = call(vm, out.wrap(wrapped, source), args, kwargs)
    if len(out.side_effects) != effects:
        raise Unsupported(
            f"the lru_cache'd {getattr(wrapped, '__qualname__', 'function')} changes objects "
            "outside the compiled function (eager skips that on a cache hit)"
        )
    return result
