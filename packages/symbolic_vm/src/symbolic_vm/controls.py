"""torch's own compiler controls, recognised inside traced code so it keeps its meaning.

Code written for torch.compile marks functions with ``torch.compiler.disable``, forces breaks
with torch's ``graph_break()``, asks ``is_compiling()``, registers ``allow_in_graph`` functions
and marks tensors dynamic or static, and ``assume_constant_result`` marks a function whose
result is a constant of the trace. The VM recognises each of those functions by identity (or,
for a disabled function, by the marker attribute torch's decorator puts on its wrapper) and
gives it torch.compile's meaning. It never calls into torch's compiler frontend: the frontend's
package is looked up in ``sys.modules`` only (so a control is known once the user's code has
loaded it), and only its functions' identities and its registry of allowed ids are read.

``dispatch`` is consulted where calls are dispatched (``calls.call``), before anything else.
"""

from __future__ import annotations

import contextlib
import dis
import enum
import sys
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
import torch

from symbolic_vm import operations as ops
from symbolic_vm import torch_calls
from symbolic_vm.constant_values import is_constant_value
from symbolic_vm.errors import Unsupported
from symbolic_vm.values import ConstVar, Var

if TYPE_CHECKING:
    from symbolic_vm.output import Output

__all__ = [
    "Control",
    "ControlKind",
    "control_for",
    "disabled_module_class",
    "dispatch",
    "no_op_context",
    "is_torch_disabled",
    "note_torch_disabled",
    "run_unhooked",
    "torch_disabled_code",
    "torch_frontend_module",
]

# torch's public compiler package.
_COMPILER: Any = getattr(torch, "compiler")  # noqa: B009 - spelled as an attribute on purpose


def _frontend_name() -> str | None:
    """The name of the package behind torch's public compiler controls: the module that
    ``torch.compiler.set_stance`` imports when called, read from its bytecode (the function is
    never called, the package never imported here). None if a torch release stops importing
    one there: its controls are then not recognised (they run as ordinary calls)."""
    set_stance = getattr(_COMPILER, "set_stance", None)
    if not isinstance(set_stance, types.FunctionType):
        return None
    for inst in dis.get_instructions(set_stance):
        if inst.opname == "IMPORT_NAME" and isinstance(inst.argval, str):
            return inst.argval
    return None


# A sys.modules key, read for identities and state, never imported or called.
_FRONTEND = _frontend_name()
# The attributes torch's disable decorator sets on the wrapper it returns.
_DISABLE_MARK = "_torchdynamo_disable"
_RECURSIVE_MARK = "_torchdynamo_disable_recursive"
_ORIGINAL = "_torchdynamo_orig_callable"
# Code objects of torch-disabled functions seen so far -> True: run it and everything it calls
# without the frame hook (a recursive disable's wrapper); False: never compile this frame, its
# callees may be (the function under a recursive=False disable). Never cleared: the marks are
# on the functions, which outlive any compile cache.
_DISABLED_CODES: dict[types.CodeType, bool] = {}


class ControlKind(enum.Enum):
    """What a control call does inside traced code."""

    BREAK = "break"  # runs eagerly between graphs (torch.compile breaks there too)
    FOLD = "fold"  # its answer is known while compiling: a constant
    IN_GRAPH = "in_graph"  # one opaque node (torch.compiler.allow_in_graph)
    NO_OP_CONTEXT = "no_op_context"  # a profiler range: a context manager that does nothing


@attrs.frozen
class Control:
    """The meaning of one call: its kind, the break reason or the folded value."""

    kind: ControlKind
    reason: str = ""
    value: object = None


def torch_frontend_module(name: str = "") -> types.ModuleType | None:
    """torch's compiler frontend package (or its submodule ``name``) if the user's process has
    loaded it, else None. Only looked up in ``sys.modules``: Strata reads identities and state
    from it and never imports or calls it."""
    if _FRONTEND is None:
        return None
    return sys.modules.get(f"{_FRONTEND}.{name}" if name else _FRONTEND)


def _frontend() -> types.ModuleType | None:
    return torch_frontend_module()


def _submodule(name: str) -> types.ModuleType | None:
    return torch_frontend_module(name)


def is_torch_disabled(fn: object) -> bool:
    """True for a function wrapped by ``torch.compiler.disable`` (its wrapper's marker)."""
    if not isinstance(fn, types.FunctionType):
        return False
    return fn.__dict__.get(_DISABLE_MARK) is True


def note_torch_disabled(fn: object) -> bool:
    """Remember ``fn``'s code if torch.compiler.disable wrapped it; True if it did.

    compile_api calls it on what it is asked to compile; the VM on every call it traces.
    """
    if not is_torch_disabled(fn):
        return False
    assert isinstance(fn, types.FunctionType)
    if fn.__dict__.get(_RECURSIVE_MARK, True) is not False:
        _DISABLED_CODES[fn.__code__] = True
    else:
        inner = getattr(fn.__dict__.get(_ORIGINAL), "__code__", None)
        if isinstance(inner, types.CodeType):
            _DISABLED_CODES[inner] = False
    return True


def run_unhooked(code: types.CodeType) -> None:
    """Run ``code`` and everything it calls without the frame hook, as a recursive disable.

    For torch entry points that run torch's own compiler when called eagerly (torch.cond on a
    tensor predicate): Strata must not compile that compiler's frames.
    """
    _DISABLED_CODES[code] = True


def torch_disabled_code(code: types.CodeType) -> bool | None:
    """How the frame hook must treat ``code`` under torch.compiler.disable.

    True: the wrapper of a recursive disable (run it and its callees without the hook);
    False: a function disabled with recursive=False (skip its frame only); None: not disabled.
    """
    return _DISABLED_CODES.get(code)


def _name(fn: object) -> str:
    return str(getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn))))


def _table() -> dict[int, tuple[object, Control]]:
    """id -> (function, control) for every control torch has loaded so far."""
    frontend = _frontend()
    key = id(frontend)
    if _TABLE_FOR[0] == key:
        return _TABLE
    _TABLE.clear()
    # Profiler ranges (DDP's forward opens one) are ignored while compiling, as torch.compile
    # does: no break, nothing in the graph.
    no_op = Control(ControlKind.NO_OP_CONTEXT)
    entries: list[tuple[object, Control]] = [
        (torch.autograd.profiler.record_function, no_op),
        (getattr(torch.profiler, "record_function", None), no_op),
        (_COMPILER.is_compiling, Control(ControlKind.FOLD, value=True)),
        (getattr(_COMPILER, "is_dynamo_compiling", None), Control(ControlKind.FOLD, value=True)),
    ]
    stateful = "changes the compiler's state; it runs eagerly between graphs"
    for name in ("set_stance", "reset", "disable", "allow_in_graph"):
        entries.append(
            (getattr(_COMPILER, name, None), Control(ControlKind.BREAK, f"{name}() {stateful}"))
        )
    if frontend is not None:
        entries.append(
            (
                getattr(frontend, "graph_break", None),
                Control(ControlKind.BREAK, "graph_break() called inside the compiled function"),
            )
        )
        entries.append(
            (getattr(frontend, "is_compiling", None), Control(ControlKind.FOLD, value=True))
        )
        external = _submodule("external_utils")
        if external is not None:
            entries.append(
                (getattr(external, "is_compiling", None), Control(ControlKind.FOLD, value=True))
            )
        marks = "marks a tensor for the next compile; it runs eagerly between graphs"
        for name in ("mark_dynamic", "maybe_mark_dynamic", "mark_static", "mark_static_address"):
            entries.append(
                (getattr(frontend, name, None), Control(ControlKind.BREAK, f"{name}() {marks}"))
            )
        for name in ("reset", "disable", "allow_in_graph"):
            entries.append(
                (getattr(frontend, name, None), Control(ControlKind.BREAK, f"{name}() {stateful}"))
            )
    for fn, control in entries:
        if fn is not None:
            _TABLE[id(fn)] = (fn, control)
    _TABLE_FOR[0] = key
    return _TABLE


_TABLE: dict[int, tuple[object, Control]] = {}
_TABLE_FOR: list[int] = [0]


def _allowed_in_graph(fn: object) -> bool:
    """``torch.compiler.allow_in_graph(fn)`` was called: torch keeps fn's id in a set."""
    # A function made by exec() in a namespace without __name__ (dataclasses' generated
    # __eq__ in such a module) has __module__ None.
    if not isinstance(fn, types.FunctionType) or (fn.__module__ or "").startswith("torch"):
        return False
    return _registered("_allowed_callable_ids", fn)


def torch_nonstrict(fn: object) -> bool:
    """torch's own ``nonstrict_trace`` made ``fn`` (torch also counts it as allowed in graph):
    the call is one node, with pytree arguments and results (``calls._opaque_call``)."""
    if not isinstance(fn, types.FunctionType) or (fn.__module__ or "").startswith("torch"):
        return False
    return _registered("_nonstrict_trace_callable_ids", fn)


def _registered(registry_name: str, fn: object) -> bool:
    """Whether torch's frontend registry ``registry_name`` (a set of ids behind a lazily
    built table) holds ``fn``; read, never initialised."""
    registry = getattr(_submodule("trace_rules"), registry_name, None)
    ids = getattr(registry, "function_ids", None)
    return isinstance(ids, set) and id(fn) in ids


def disabled_module_class(module: object) -> str | None:
    """The break reason when ``module``'s class was decorated with torch.compiler.disable,
    else None. torch's decorator replaces the class's ``__call__`` and ``_call_impl`` (and
    ``__init__``) with disabled wrappers, so a call of an instance runs eagerly, pre-hooks
    included; the VM inlines module calls without looking at those, so it asks here."""
    for name in ("_call_impl", "__call__"):
        for klass in type(module).__mro__:
            if name in klass.__dict__:
                if note_torch_disabled(klass.__dict__[name]):
                    return (
                        f"call of a {type(module).__name__}, a module class "
                        "torch.compiler.disable marked as never compiled; it runs eagerly"
                    )
                break
    return None


# torch's profiler sessions (the torch.profiler one and the legacy autograd one).
_PROFILERS: tuple[object, ...] = tuple(
    p for p in (getattr(torch.profiler, "profile", None), torch.autograd.profiler.profile) if p
)


def no_op_context(
    fn: object, args: list[Var], kwargs: dict[str, Var], following: Callable[[], list[str]]
) -> bool:
    """Whether ``fn(*args, **kwargs)`` makes a context manager the trace replaces with one that
    does nothing (the caller traces a ``contextlib.nullcontext()`` in its place, so a break in
    its block resumes inside it as in any user ``with``): a profiler range (record_function),
    or a profiler session made with no arguments and entered by the ``with`` at once, the
    object unbound (``with profile():``; ``following`` names the next two instructions).
    torch.compile ignores a profiler inside the compiled code so that the block compiles; the
    session is left out only where that is unobservable: with no ``on_trace_ready``/
    ``schedule`` and no object to read results from, it leaves nothing behind after the block.
    Bound (``as prof``) or configured, it breaks and runs eagerly (torch runs the whole frame
    eagerly then)."""
    entry = _table().get(id(fn))
    if entry is not None and entry[0] is fn:
        return entry[1].kind is ControlKind.NO_OP_CONTEXT
    return (
        not args
        and not kwargs
        and any(fn is p for p in _PROFILERS)
        and following() == ["BEFORE_WITH", "POP_TOP"]
    )


def _compiler_builtin(fn: object) -> bool:
    """A builtin of the C extension behind torch's compiler frontend (``torch._C.<frontend>``:
    frame-hook setters, cache inspection, its test helper ``unsupported``). Those are the
    compiler's own machinery, never tensor operations: running one on fake values while
    tracing or as a graph node would be wrong, so a call breaks and runs eagerly, as
    torch.compile does (``torch_calls.is_torch_function`` would take it for a torch op)."""
    if _FRONTEND is None or not isinstance(fn, types.BuiltinFunctionType):
        return False
    c_module = getattr(torch._C, _FRONTEND.rsplit(".", 1)[-1], None)
    owner = getattr(getattr(fn, "__self__", None), "__name__", None)
    if not isinstance(c_module, types.ModuleType) or not isinstance(owner, str):
        return False
    return owner == c_module.__name__ or owner.startswith(c_module.__name__ + ".")


def control_for(fn: object) -> Control | None:
    """What calling ``fn`` means if it is one of torch's compiler controls; None if it is not."""
    if _registered("_disallowed_callable_ids", fn):
        # torch's disallow_in_graph(fn) (a torch op): every call of it is a graph break
        return Control(
            ControlKind.BREAK,
            f"call to {_name(fn)}, which disallow_in_graph excluded from graphs; it runs eagerly",
        )
    if note_torch_disabled(fn):
        return Control(
            ControlKind.BREAK,
            f"call to {_name(fn)}, which torch.compiler.disable marked as never compiled; "
            "it runs eagerly",
        )
    entry = _table().get(id(fn))
    if entry is not None and entry[0] is fn:
        return entry[1]
    if _compiler_builtin(fn):
        return Control(
            ControlKind.BREAK,
            f"call to {_name(fn)}, a C function of torch's compiler runtime (not a tensor "
            "operation); it runs eagerly",
        )
    if _allowed_in_graph(fn):
        return Control(ControlKind.IN_GRAPH)
    return None


def dispatch(
    out: Output, var: Var, fn: object, args: list[Var], kwargs: dict[str, Var]
) -> Var | None:
    """The traced result of calling ``fn`` (tracked as ``var``) if it is a control; None if not.

    A break raises Unsupported (the call then runs eagerly between graphs); a folded answer or
    an in-graph call is guarded on ``fn``'s identity.
    """
    if isinstance(fn, types.FunctionType) and fn.__dict__.get(_CONSTANT_MARK) is True:
        return _assumed_constant(out, var, fn, args, kwargs)
    control = control_for(fn)
    if control is None:
        return None
    if control.kind is ControlKind.BREAK:
        raise Unsupported(control.reason)
    out.depend(var)
    if control.kind is ControlKind.FOLD:
        return ConstVar(control.value)
    if control.kind is ControlKind.NO_OP_CONTEXT:
        # A fresh stand-in made while tracing; the `with` then inlines its empty enter/exit.
        return out.wrap(contextlib.nullcontext(), None)

    return torch_calls.opaque_call(out, fn, args, kwargs)


# The marker torch's ``assume_constant_result`` puts on a function (transformers sets it itself
# on its install and version probes, ``is_torch_greater_or_equal``): its result is a constant
# of the trace.
_CONSTANT_MARK = "_dynamo_marked_constant"


def _assumed_constant(
    out: Output, var: Var, fn: types.FunctionType, args: list[Var], kwargs: dict[str, Var]
) -> Var:
    """Call a function marked as constant-valued now, on its constant arguments (guarded), and
    put its result in the trace as a constant, as torch.compile does; its code is not traced."""
    py_args = [ops.const_value(out, a) for a in args]
    py_kwargs = {k: ops.const_value(out, v) for k, v in kwargs.items()}
    out.depend(var)
    try:
        value = fn(*py_args, **py_kwargs)
    except Exception as exc:  # eager raises it again, at the break
        raise Unsupported(f"{_name(fn)}, marked constant-valued, raised {exc!r}") from exc
    if not is_constant_value(value):
        raise Unsupported(f"{_name(fn)}, marked constant-valued, returned {type(value).__name__}")
    return ConstVar(value)
