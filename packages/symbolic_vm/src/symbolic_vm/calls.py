"""Calling tracked values: inlining Python functions, torch ops into the graph, builtins."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import inspect
import reprlib
import types
import weakref
from typing import Any, cast

import torch
from torch.nn.modules import module as module_impl

from symbolic_vm import (
    attr_stores,
    attributes,
    builtins_,
    class_statements,  # noqa: F401 (registers __build_class__ and dataclass in builtins_)
    controls,
    eager_errors,
    function_effects,
    higher_order,
    logging_calls,
    methods,
    nonstrict_args,
    numpy_scalars,  # noqa: F401  (registers NumPy's scalar folds)
    object_model,
    optimizer_state,
    pytrees,  # noqa: F401  (registers torch.utils._pytree's flatten/unflatten/map)
    runtime_checks,
    slot_calls,
    # for the @implements it and the stdlib models register in builtin_table's tables: imported
    # here, above both, so that builtins_ never imports what imports it (issue 24)
    stdlib_calls,  # noqa: F401
    torch_calls,
)
from symbolic_vm import operations as ops
from symbolic_vm.errors import TracedException, Unsupported, throw
from symbolic_vm.guard_api import AttrSource, ItemSource, MethodCallSource
from symbolic_vm.interpreter import Interpreter
from symbolic_vm.made_classes import made_classes
from symbolic_vm.modules import call_module, call_sequential_slice
from symbolic_vm.registries import ALLOW_IN_GRAPH, DISABLED, NONSTRICT_TRACE, graph_break
from symbolic_vm.type_trackers import tracker_of
from symbolic_vm.values import (
    AutocastExitVar,
    BoundMethodVar,
    Cell,
    ConstVar,
    ContextExitVar,
    DictBox,
    DictVar,
    FunctionVar,
    GeneratorBox,
    GeneratorContextVar,
    GeneratorVar,
    GradModeFunctionVar,
    GradModeVar,
    MethodVar,
    ModuleVar,
    NestedFunctionVar,
    NewObjectVar,
    ObjectBox,
    ObjectVar,
    PartialVar,
    SequentialSliceVar,
    SetVar,
    TensorVar,
    TupleVar,
    Var,
    WeakRefVar,
)

_CO_VARARGS = inspect.CO_VARARGS
_CO_VARKEYWORDS = inspect.CO_VARKEYWORDS
_CO_GENERATOR_LIKE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def call(vm: Interpreter, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """``fn(*args, **kwargs)`` on tracked values."""
    try:
        return _call(vm, fn, args, kwargs)
    except eager_errors.ARGUMENT_ERRORS as err:
        # a builtin's handler failed on arguments eager refuses: eager's own error instead
        eager = eager_errors.eager_error(vm.out, fn, args, kwargs, err)
        if eager is None:
            raise
        raise eager from None


def _call(vm: Interpreter, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    out = vm.out
    if out.with_entries and out.block_may_raise(fn):
        raise Unsupported(
            "the with block of a user context manager holds graph ops that may raise on tensor "
            "data (an index, an assert, ...): eager calls its __exit__ with that error, so the "
            "with statement runs as Python"
        )
    if isinstance(fn, FunctionVar):
        return _call_function(vm, fn, args, kwargs)
    if isinstance(fn, ConstVar) and isinstance(fn.value, types.FunctionType):
        # a function keying a dict from the frame (graph_inputs._is_dict_key), read back as a
        # key: DICT_KEYS pinned it by identity
        return _call_function(vm, FunctionVar(fn.value), args, kwargs)
    if isinstance(fn, NestedFunctionVar):
        return inline(
            vm, fn.code, fn.f_globals, fn.defaults, fn.kwdefaults, fn.closure, args, kwargs
        )
    if isinstance(fn, BoundMethodVar | ObjectVar):
        # a library's logging helper (transformers' logger.warning_once): called after the graph
        deferred = logging_calls.defer_logging_call(out, fn, args, kwargs)
        if deferred is not None:
            return deferred
    if isinstance(fn, BoundMethodVar):
        owner = fn.self_var
        if (
            isinstance(owner, ObjectVar)
            and isinstance(owner.value, type)
            and issubclass(owner.value, torch.autograd.Function)
            and isinstance(fn.func, FunctionVar)
            and fn.func.fn.__name__ == "apply"
        ):
            # A custom autograd.Function: one node calling its apply (forward run on fakes),
            # unless its Python side effects would then run once instead of on every call.
            # Its backward runs only if autograd records the call: grad mode on (the tracer
            # follows the graph's mode) and a tensor argument requiring grad (TENSOR_MATCH).
            backward = torch.is_grad_enabled() and any(
                isinstance(a, TensorVar) and a.example.requires_grad
                for a in (*args, *kwargs.values())
            )
            if not backward:
                return _function_forward(vm, owner, args, kwargs)
            effect = function_effects.python_effect(owner.value, backward=backward)
            if effect is not None:
                raise Unsupported(f"custom autograd.Function with a Python side effect: {effect}")
            out.depend(owner)
            target = torch_calls.autograd_function_apply(owner.value)
            return torch_calls.opaque_call(out, target, args, kwargs)
        return call(vm, fn.func, [fn.self_var, *args], kwargs)
    if isinstance(fn, PartialVar):
        out.depend(fn)
        return call(vm, fn.func, [*fn.args, *args], {**fn.kwargs, **kwargs})
    if isinstance(fn, MethodVar):
        return methods.call_method(vm, fn, args, kwargs)
    if isinstance(fn, ModuleVar):
        disabled = controls.disabled_module_class(fn.module)
        if disabled is not None:
            raise Unsupported(disabled)
        return call_module(vm, fn, args, kwargs)
    if isinstance(fn, SequentialSliceVar):
        return call_sequential_slice(vm, fn, args, kwargs)
    if isinstance(fn, AutocastExitVar):
        torch_calls.exit_autocast(out, fn)
        return ConstVar(None)
    if isinstance(fn, ContextExitVar):
        torch_calls.set_grad_mode(out, fn.restore)
        return ConstVar(None)
    if isinstance(fn, ObjectVar):
        value = fn.value
        if controls.no_op_context(
            value, args, kwargs, lambda: [i.opname for i in vm.instructions[vm.ip : vm.ip + 2]]
        ):
            out.depend(fn)
            return construct(vm, ObjectVar(contextlib.nullcontext), [], {})
        handled = controls.dispatch(out, fn, value, args, kwargs)
        if handled is not None:
            return handled
        if value is graph_break:
            raise Unsupported("graph_break() called inside the compiled function")
        if value in DISABLED:
            raise Unsupported(f"call to {_name(value)}, which is disabled for compilation")
        if value in ALLOW_IN_GRAPH or value in NONSTRICT_TRACE:
            out.depend(fn)
            return _opaque_call(vm, value, args, kwargs)
        if value is object.__setattr__ and len(args) == 3 and not kwargs:
            # Skips the class's own __setattr__ (unlike setattr()): attr_stores tells them apart.
            name = ops.const_value(out, args[1])
            if not isinstance(name, str):
                raise Unsupported("object.__setattr__ with a non-string name")
            attr_stores.setattr_var(vm, args[0], name, args[2], through_object=True)
            return ConstVar(None)
        if (
            value is type.__call__
            and args
            and isinstance(args[0], ObjectVar)
            and isinstance(args[0].value, type)
        ):
            # type.__call__(cls, ...), reached from a metaclass's own __call__ through super()
            return construct(vm, args[0], args[1:], kwargs, metaclass_call=False)
        if value is object.__new__ and len(args) == 1 and not kwargs and isinstance(
            args[0], ObjectVar
        ):
            # object.__new__(cls): from a class's own __new__ (super().__new__(cls)) or a
            # metaclass's __call__. With more arguments eager may raise: not modelled.
            return blank_instance(vm, args[0])
        if value is dict.__new__ and args and isinstance(args[0], ObjectVar):
            # dict.__new__(cls, ...): an empty dict of class cls (its arguments are
            # __init__'s); a class's own __new__ through super(), or called by name.
            if args[0].value is dict:
                vm.out.depend(args[0])
                return DictVar(DictBox({}))
            if isinstance(args[0].value, type) and issubclass(args[0].value, dict):
                return blank_instance(vm, args[0])
        if isinstance(value, weakref.ref):
            # Before the builtin and torch tables: a weakref hashes as its referent, which
            # may be unhashable (a hook handle's OrderedDict) or run a user __hash__.
            # Only a referent the trace already tracks (by identity) can be answered.
            target = value()
            if isinstance(fn, WeakRefVar) and target is not None:
                return fn.target  # made here: the very var it refers to, source and all
            out.depend(fn)
            if type(target) in (list, dict, set):
                # the very list/dict/set the trace tracks, never a second copy of it
                known = out.tracked(target)
                if known is None:
                    raise Unsupported("calling a weak reference to a list/dict/set the trace "
                                      "has not read")
                return known
            # What a reference from the frame answers is guarded at ``r.__call__()`` (a dead
            # one answers None), so a reference to another object, or to one whose attributes
            # changed, fails the guards of what the trace read through it
            source = None if fn.source is None else MethodCallSource(fn.source, "__call__")
            if source is None and target is not None:
                raise Unsupported("calling a weak reference the trace cannot guard")
            return out.wrap(target, source)
        if isinstance(value, torch._C.ScriptFunction):
            return _call_script_function(vm, fn, args, kwargs)
        if higher_order.is_higher_order(value):  # a HigherOrderOperator instance (wrap)
            out.depend(fn)
            return cast(Var, higher_order.dispatch(vm, value, args, kwargs))
        handled = builtins_.call_builtin(vm, fn, args, kwargs)
        if handled is not None:
            return handled
        handled = object_model.call_slot(vm, value, args, kwargs)
        if handled is not None:
            return handled
        handled = torch_calls.call_torch(vm, fn, args, kwargs)
        if handled is not None:
            return handled
        if isinstance(value, type):
            return construct(vm, fn, args, kwargs)
        dunder_call = _class_call(type(value))
        if isinstance(dunder_call, types.FunctionType):
            out.depend(fn)
            return call(vm, BoundMethodVar(fn, FunctionVar(dunder_call)), args, kwargs)
        raise Unsupported(f"call to {_name(value)} ({type(value).__name__}) is not supported")
    if isinstance(fn, NewObjectVar) and issubclass(fn.box.cls, torch.nn.Module):
        # A module made here has no hooks of its own: calling it calls forward.
        if _has_global_hooks():
            raise Unsupported(f"calling {fn.box.cls.__name__} with global module hooks registered")
        return call(vm, attributes.getattr_var(vm, fn, "forward"), args, kwargs)
    if isinstance(fn, NewObjectVar):
        dunder_call = _class_call(fn.box.cls)
        if isinstance(dunder_call, types.FunctionType):
            return call(vm, BoundMethodVar(fn, FunctionVar(dunder_call)), args, kwargs)
        tracker = tracker_of(fn)
        handled = tracker.call(vm, fn, args, kwargs) if tracker is not None else None
        if handled is not None:
            return handled
    if isinstance(fn, GradModeVar):
        return _grad_mode_decorator(fn, args, kwargs)
    if isinstance(fn, GradModeFunctionVar):
        return _call_in_grad_mode(vm, fn, args, kwargs)
    raise Unsupported(f"calling {type(fn).__name__.removesuffix('Var').lower()}")


class _ForwardContext(torch.autograd.function.FunctionCtx):
    """The ``ctx`` of a forward traced by ``_function_forward``: FunctionCtx's methods as
    plain Python the VM inlines (torch's are read as torch functions); no backward reads
    what they keep."""

    def save_for_backward(self, *tensors: Any) -> None:
        self.to_save = tensors

    def save_for_forward(self, *tensors: Any) -> None:
        self.saved_for_forward = tensors

    def mark_dirty(self, *args: Any) -> None:
        self.dirty_tensors = args

    def mark_non_differentiable(self, *args: Any) -> None:
        self.non_differentiable = args

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = value


def _function_forward(
    vm: Interpreter, owner: ObjectVar, args: list[Var], kwargs: dict[str, Var]
) -> Var:
    """``Fn.apply(*args)`` of a custom autograd.Function whose backward cannot run (grad mode
    off, or no tensor argument requiring grad): eager runs ``forward(ctx, *args)`` with grad
    mode off and keeps nothing for a backward, so its forward is traced like any code (its
    Python effects replayed, as eager makes them on every call), with ``ctx`` a FunctionCtx
    made here (``save_for_backward``, ``mark_dirty``, attributes: Python stores on it)."""
    cls = owner.value
    function_module = torch.autograd.function
    if inspect.getattr_static(cls, "setup_context") is not inspect.getattr_static(
        function_module._SingleLevelFunction, "setup_context"
    ):
        raise Unsupported(f"{cls.__name__}.apply with a separate setup_context")
    forward = inspect.getattr_static(cls, "forward")
    if not (isinstance(forward, staticmethod) and isinstance(forward.__func__, types.FunctionType)):
        raise Unsupported(f"{cls.__name__}.forward is not a Python staticmethod")
    vm.out.depend(owner)
    flags = TupleVar(tuple(ConstVar(False) for _ in args))
    ctx = NewObjectVar(ObjectBox(_ForwardContext, {"needs_input_grad": flags}))
    previous = torch.is_grad_enabled()
    torch_calls.set_grad_mode(vm.out, False)
    result = call(vm, FunctionVar(forward.__func__), [ctx, *args], kwargs)
    torch_calls.set_grad_mode(vm.out, previous)
    return result


def _grad_mode_decorator(mode: GradModeVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """``torch.no_grad()(fn)`` / ``@torch.enable_grad()``: the wrapper, as a value to call."""
    if mode.applied:
        # set_grad_enabled(b) has already switched the mode when it is used as a decorator
        raise Unsupported("torch.set_grad_enabled(...) used as a decorator")
    if kwargs or len(args) != 1:
        raise Unsupported("calling a grad-mode object with other than one function")
    fn = args[0]
    if isinstance(fn, GradModeFunctionVar):  # stacked decorators: each switches in turn
        return GradModeFunctionVar(mode.enabled, fn)
    if isinstance(fn, FunctionVar):
        code: types.CodeType = fn.fn.__code__
    elif isinstance(fn, NestedFunctionVar):
        code = fn.code
    else:
        raise Unsupported(f"a grad-mode decorator on a {type(fn).__name__}")
    if code.co_flags & _CO_GENERATOR_LIKE:
        # torch's decorator wraps a generator function so each resumption switches the mode
        raise Unsupported("a grad-mode decorator on a generator function")
    return GradModeFunctionVar(mode.enabled, fn)


def _call_in_grad_mode(
    vm: Interpreter, fn: GradModeFunctionVar, args: list[Var], kwargs: dict[str, Var]
) -> Var:
    """The decorated function's call: the mode switched around it in the graph, restored
    also when the call raises (the wrapper's ``with`` block)."""
    previous = torch.is_grad_enabled()
    torch_calls.set_grad_mode(vm.out, fn.enabled)
    try:
        result = call(vm, fn.fn, args, kwargs)
    except TracedException:
        torch_calls.set_grad_mode(vm.out, previous)
        raise
    torch_calls.set_grad_mode(vm.out, previous)
    return result


def _class_call(cls: type) -> object:
    """The ``__call__`` a class defines (looked up on the class, as Python's call does)."""
    return next((k.__dict__["__call__"] for k in cls.__mro__ if "__call__" in k.__dict__), None)


# Where torch's script/trace leave the Python function a ScriptFunction was compiled from, so
# that a compiler can trace that function instead of running the TorchScript one.
_SCRIPT_ORIGINAL = "_torchdynamo_inline"


def _call_script_function(
    vm: Interpreter, fn: ObjectVar, args: list[Var], kwargs: dict[str, Var]
) -> Var:
    """A call of a scripted (or traced) function: its original Python function is inlined, as
    torch.compile does (transformers' deberta_v2 calls a scripted ``make_log_bucket_position``).
    The ScriptFunction is guarded by identity, so the original read from it stays the same."""
    original = getattr(fn.value, _SCRIPT_ORIGINAL, None)
    if not isinstance(original, types.FunctionType):
        raise Unsupported(
            f"call to the TorchScript function {_name(fn.value)}: it keeps no Python function "
            "to trace (it runs eagerly)"
        )
    vm.out.depend(fn)
    source = None if fn.source is None else AttrSource(fn.source, _SCRIPT_ORIGINAL)
    return vm.call(vm.out.wrap(original, source), args, kwargs)


def _opaque_call(vm: Interpreter, fn: Any, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """allow_in_graph / nonstrict_trace ``fn`` (ours or torch's) as one node; user pytree
    objects passed to a nonstrict_trace function are flattened to their leaves first
    (``nonstrict_args``)."""
    nonstrict = fn in NONSTRICT_TRACE or controls.torch_nonstrict(fn)
    if nonstrict:
        flattened = nonstrict_args.flatten_user_arguments(vm, fn, args)
        if flattened is not None:
            fn, args = flattened
    return torch_calls.opaque_call(vm.out, fn, args, kwargs, nonstrict=nonstrict)


def _name(value: object) -> str:
    return str(getattr(value, "__qualname__", getattr(value, "__name__", repr(value))))


def _call_function(
    vm: Interpreter, fn: FunctionVar, args: list[Var], kwargs: dict[str, Var]
) -> Var:
    # mypy reads a FunctionType attribute through an instance as a bound method.
    func = cast(types.FunctionType, fn.fn)  # type: ignore[redundant-cast]
    out = vm.out
    handled = optimizer_state.init_group(vm, func, args, kwargs)  # before torch's disable mark
    if handled is not None:
        return handled
    if controls.torch_nonstrict(func):
        out.depend(fn)
        return _opaque_call(vm, func, args, kwargs)
    handled = controls.dispatch(out, fn, func, args, kwargs)
    if handled is not None:
        return handled
    if func is graph_break:
        raise Unsupported("graph_break() called inside the compiled function")
    if func in DISABLED:
        raise Unsupported(f"call to {_name(func)}, which is disabled for compilation")
    if func is runtime_checks.EXPECT_TRUE:  # torch._check's condition
        checked = runtime_checks.expect_true(vm, args, kwargs)
        if checked is not None:
            return checked
    out.depend(fn)
    handled = higher_order.dispatch(vm, func, args, kwargs)
    if handled is not None:
        return handled
    if func in ALLOW_IN_GRAPH or func in NONSTRICT_TRACE:
        return _opaque_call(vm, func, args, kwargs)
    if func.__code__ in _REPR_GUARDS and "user_function" in func.__code__.co_freevars:
        # A __repr__ behind reprlib's recursion guard (dataclasses' repr): the guard keys a
        # set by thread id and id(self); the repr itself is what runs (a recursive repr
        # reaches the inlining depth limit and breaks instead of printing "...").
        where = func.__code__.co_freevars.index("user_function")
        inner = _cell_contents(vm, (func.__closure__ or ())[where], fn, where)
        if inner is not None:
            return call(vm, inner, args, kwargs)
    modelled = builtins_.implementation(func)
    if modelled is not None:  # a Python function the VM answers itself (inspect.signature)
        return modelled(vm, args, kwargs)
    effects = torch_calls.effect_reason(func)
    if effects is not None:  # before any of its code runs on fake values
        raise Unsupported(f"{effects}: it runs eagerly, at a graph break")
    if torch_calls.is_torch_function(func) or func in torch_calls.MODE_QUERIES:
        handled = torch_calls.call_torch(vm, ObjectVar(func, source=fn.source), args, kwargs)
        if handled is not None:
            return handled
    defaults = tuple(
        out.wrap(d, _source_item(fn, "__defaults__", i))
        for i, d in enumerate(func.__defaults__ or ())
    )
    kwdefaults = {
        k: out.wrap(v, _source_item(fn, "__kwdefaults__", k))
        for k, v in (func.__kwdefaults__ or {}).items()
    }
    made = made_classes(out)  # a method of a class made in the trace: the trace's cells
    closure = tuple(
        made.traced_cell(cell) or Cell(_cell_contents(vm, cell, fn, i), external=True)
        for i, cell in enumerate(func.__closure__ or ())
    )
    return inline(vm, func.__code__, func.__globals__, defaults, kwdefaults, closure, args, kwargs)


def _repr_guard_codes() -> frozenset[types.CodeType]:
    def plain(self: object) -> str:
        return ""

    codes = {reprlib.recursive_repr()(plain).__code__}
    dataclass_guard = getattr(dataclasses, "_recursive_repr", None)  # 3.11's own copy
    if dataclass_guard is not None:
        codes.add(dataclass_guard(plain).__code__)
    return frozenset(codes)


_REPR_GUARDS = _repr_guard_codes()


def _source_item(fn: FunctionVar, attr: str, index: object) -> Any:
    if fn.source is None:
        return None
    return ItemSource(AttrSource(fn.source, attr), index)


def _cell_contents(vm: Interpreter, cell: types.CellType, fn: FunctionVar, i: int) -> Var | None:
    try:
        contents = cell.cell_contents
    except ValueError:
        return None
    source = None
    if fn.source is not None:
        source = AttrSource(ItemSource(AttrSource(fn.source, "__closure__"), i), "cell_contents")
    return vm.out.wrap(contents, source)


def inline(  # noqa: PLR0917 - mirrors a function object's parts
    vm: Interpreter,
    code: types.CodeType,
    f_globals: dict[str, Any],
    defaults: tuple[Var, ...],
    kwdefaults: dict[str, Var],
    closure: tuple[Cell, ...],
    args: list[Var],
    kwargs: dict[str, Var],
) -> Var:
    """Run ``code`` as a call with these arguments, inside the current capture."""
    is_generator = bool(code.co_flags & inspect.CO_GENERATOR)
    if code.co_flags & _CO_GENERATOR_LIKE and not is_generator:
        raise Unsupported(f"calling coroutine or async generator function {code.co_name}")
    vm.out.inlined_calls += 1
    bound = bind_arguments(code, defaults, kwdefaults, args, kwargs)
    builtins = f_globals.get("__builtins__", vm.f_builtins)
    if isinstance(builtins, types.ModuleType):
        builtins = vars(builtins)
    child = Interpreter(
        vm.out, code, f_globals, builtins, local_vars=bound, closure=closure,
        depth=vm.depth + 1, parent=vm,
    )
    if is_generator:
        # Nothing runs until the first next(): the frame waits, bound to its arguments.
        gen = GeneratorVar(GeneratorBox(child))
        vm.root_frame().made_generators.append(gen)  # closed at the frame's end
        return gen
    return child.run()


def bind_arguments(
    code: types.CodeType,
    defaults: tuple[Var, ...],
    kwdefaults: dict[str, Var],
    args: list[Var],
    kwargs: dict[str, Var],
) -> dict[str, Var]:
    """Python's argument binding for ``code``, on tracked values."""
    npos = code.co_argcount
    nkwonly = code.co_kwonlyargcount
    names = code.co_varnames
    posonly = code.co_posonlyargcount
    bound: dict[str, Var] = {}
    for name, value in zip(names[:npos], args, strict=False):
        bound[name] = value
    extra = args[npos:]
    index = npos + nkwonly
    if code.co_flags & _CO_VARARGS:
        bound[names[index]] = TupleVar(tuple(extra))
        index += 1
    elif extra:
        raise Unsupported(f"{code.co_name}() takes {npos} positional arguments, got {len(args)}")
    extra_kwargs: dict[str, Var] = {}
    for key, value in kwargs.items():
        if key in names[posonly : npos + nkwonly] and key not in bound:
            bound[key] = value
        elif key in bound and key in names[posonly:npos]:
            raise Unsupported(f"{code.co_name}() got multiple values for argument {key!r}")
        elif code.co_flags & _CO_VARKEYWORDS:
            extra_kwargs[key] = value
        else:
            raise Unsupported(f"{code.co_name}() got an unexpected keyword argument {key!r}")
    if code.co_flags & _CO_VARKEYWORDS:
        bound[names[index]] = DictVar(DictBox(extra_kwargs))
    first_default = npos - len(defaults)
    for i, name in enumerate(names[:npos]):
        if name not in bound:
            if i >= first_default:
                bound[name] = defaults[i - first_default]
            else:
                raise Unsupported(f"{code.co_name}() missing required argument {name!r}")
    for name in names[npos : npos + nkwonly]:
        if name not in bound:
            if name in kwdefaults:
                bound[name] = kwdefaults[name]
            else:
                raise Unsupported(f"{code.co_name}() missing keyword-only argument {name!r}")
    return bound


def _construct_namedtuple(
    vm: Interpreter, cls: type, args: list[Var], kwargs: dict[str, Var]
) -> Var:
    fields: tuple[str, ...] = cls._fields  # type: ignore[attr-defined]
    defaults: dict[str, object] = getattr(cls, "_field_defaults", {})
    if len(args) > len(fields):
        raise Unsupported(f"{cls.__name__}() takes {len(fields)} arguments")
    values = dict(zip(fields, args, strict=False))
    for name, var in kwargs.items():
        if name not in fields or name in values:
            raise Unsupported(f"{cls.__name__}() got an unexpected argument {name!r}")
        values[name] = var
    items: list[Var] = []
    for name in fields:
        if name in values:
            items.append(values[name])
        elif name in defaults:
            items.append(vm.out.wrap(defaults[name], None))
        else:
            raise Unsupported(f"{cls.__name__}() missing argument {name!r}")
    return TupleVar(tuple(items), fields=fields, named_type=cls)


def _generator_context(vm: Interpreter, args: list[Var]) -> Var:
    """``_GeneratorContextManager(func, args, kwds)``, made by a ``@contextmanager`` function:
    the generator is created now (nothing runs until ``__enter__``)."""
    func, call_args, call_kwargs = args
    if not isinstance(call_kwargs, DictVar):
        raise Unsupported("a @contextmanager call with keyword arguments the VM cannot read")
    gen = call(vm, func, ops.items(vm.out, call_args), dict(call_kwargs.box.items))
    if not isinstance(gen, GeneratorVar):
        raise Unsupported("a @contextmanager function that does not return a generator")
    return GeneratorContextVar(gen)


def _own_metaclass_call(cls: type) -> bool:
    """Whether calling ``cls`` runs something other than ``type.__call__`` (a metaclass with
    its own ``__call__``); other metaclasses (ABCMeta, ...) make instances as ``type`` does."""
    return type(cls).__call__ is not type.__call__  # type: ignore[comparison-overlap]


def _has_global_hooks() -> bool:
    """Module hooks registered for every module (torch.nn.modules.module.register_module_*)."""
    tables = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
              "_global_backward_pre_hooks")
    return any(bool(getattr(module_impl, name, None)) for name in tables)


def _is_torch_class(cls: type) -> bool:
    return cls.__module__ == "torch" or cls.__module__.startswith("torch.")


def _construct_torch_module(
    vm: Interpreter, cls_var: ObjectVar, args: list[Var], kwargs: dict[str, Var]
) -> Var:
    """``torch.nn.ReLU()`` and other torch.nn classes made inside the function.

    Built for real from constant arguments (torch.nn constructors only set attributes), with
    the RNG state restored afterwards. A module that owns parameters or buffers is refused:
    eager makes fresh tensors on every call, which a graph cannot take as inputs.
    """
    out = vm.out
    cls = cls_var.value
    out.depend(cls_var)
    py_args = [ops.const_value(out, a) for a in args]
    py_kwargs = {k: ops.const_value(out, v) for k, v in kwargs.items()}
    with torch.random.fork_rng(devices=[]):
        try:
            module = cls(*py_args, **py_kwargs)
        except Exception as exc:
            raise Unsupported(f"{type(exc).__name__} raised by {cls.__name__}(): {exc}") from exc
    if any(True for _ in module.parameters()) or any(True for _ in module.buffers()):
        raise Unsupported(
            f"creating module {cls.__name__} with parameters or buffers inside a compiled "
            "function (create it outside and pass it in)"
        )
    return ModuleVar(module, created=True)


def construct(
    vm: Interpreter,
    cls_var: ObjectVar,
    args: list[Var],
    kwargs: dict[str, Var],
    *,
    metaclass_call: bool = True,
) -> Var:
    """``cls(*args)`` for a user class: a new object whose ``__init__`` is inlined.

    A metaclass's own ``__call__`` is inlined instead, as Python calls it; its
    ``super().__call__(...)`` (``type.__call__``) comes back here with ``metaclass_call=False``.
    """
    cls = cls_var.value
    if metaclass_call and _own_metaclass_call(cls):
        meta_call = next(
            (k.__dict__["__call__"] for k in type(cls).__mro__ if "__call__" in k.__dict__), None
        )
        if not isinstance(meta_call, types.FunctionType):
            raise Unsupported(f"creating an instance of {cls.__name__}: its metaclass's __call__ "
                              "is not a Python function")
        vm.out.depend(cls_var)  # pins the class, and so its metaclass
        return call(vm, BoundMethodVar(cls_var, FunctionVar(meta_call)), args, kwargs)
    if slot_calls.plain_set_subclass(cls) and not kwargs:  # class S(set): pass
        plain = call(vm, ObjectVar(set), args, {})
        assert isinstance(plain, SetVar)
        vm.out.depend(cls_var)
        return SetVar(plain.box, cls=cls)
    if slot_calls.plain_subclass(cls, tuple) and not kwargs and len(args) <= 1:
        vm.out.depend(cls_var)  # class T(tuple): pass -- a tuple whose type is T
        items = ops.iterate(vm.out, args[0]) if args else []
        return TupleVar(tuple(items), named_type=cls)
    if issubclass(cls, BaseException):
        # Only ever raised (which is unsupported) or inspected: keep a real instance.
        py_args = [ops.const_value(vm.out, a) for a in args]
        return ObjectVar(cls(*py_args))
    if issubclass(cls, tuple) and hasattr(cls, "_make") and hasattr(cls, "_fields"):
        return _construct_namedtuple(vm, cls, args, kwargs)
    if cls is contextlib._GeneratorContextManager:
        return _generator_context(vm, args)
    if issubclass(cls, torch.nn.Module) and _is_torch_class(cls):
        return _construct_torch_module(vm, cls_var, args, kwargs)
    new = cls.__new__
    if new in (object.__new__, dict.__new__):
        obj: Var = blank_instance(vm, cls_var)
    elif new in (tuple.__new__, set.__new__, frozenset.__new__):
        # a tuple/set subclass with code of its own: a user object that is the tuple/set
        obj = call(vm, ObjectVar(new), [cls_var, *args], kwargs)
    elif isinstance(new, types.FunctionType):
        # A class's own __new__ (a staticmethod, given the class): inlined; type.__call__ then
        # runs __init__ only on an instance of the class it was asked for.
        vm.out.depend(cls_var)
        obj = call(vm, FunctionVar(new), [cls_var, *args], kwargs)
        if isinstance(obj, NewObjectVar):
            made: type = obj.box.cls
        elif isinstance(obj, ObjectVar) and obj.source is not None:
            vm.out.depend(obj)  # an existing instance (a pool, a cache): its class is guarded
            made = type(obj.value)
        else:
            return obj  # not a user object: never an instance of ``cls``
        if not issubclass(made, cls):
            return obj
    else:
        raise Unsupported(f"creating an instance of {cls.__name__} (its __new__ is not Python)")
    if isinstance(obj, NewObjectVar):
        made = obj.box.cls
    init = next(
        (k.__dict__["__init__"] for k in made.__mro__ if "__init__" in k.__dict__), object.__init__
    )
    if init is object.__init__ or init is torch.nn.Module.__init__:
        if (args or kwargs) and new in (object.__new__, dict.__new__):
            raise Unsupported(f"{cls.__name__}() takes no arguments")
        return obj
    if isinstance(obj, NewObjectVar) and (
        obj.box.items is not None or obj.box.base is not None
    ) and not isinstance(init, types.FunctionType):
        # dict.__init__(obj, ...), set.__init__(obj, ...)
        object_model.call_slot(vm, init, [obj, *args], kwargs)
        return obj
    if not isinstance(init, types.FunctionType):
        raise Unsupported(f"{made.__name__}.__init__ is not a Python function")
    result = call(vm, FunctionVar(init), [obj, *args], kwargs)
    if not (isinstance(result, ConstVar) and result.value is None):
        raise Unsupported(f"{made.__name__}.__init__ returned a value")
    return obj


def blank_instance(vm: Interpreter, cls_var: ObjectVar) -> NewObjectVar:
    """``object.__new__(cls)`` (``dict.__new__`` for a dict subclass): an instance of a user
    class made in the trace, with no attributes yet."""
    cls = cls_var.value
    if not isinstance(cls, type):
        raise Unsupported(f"object.__new__({ops.describe(cls_var)})")
    if cls is object:  # object(): a sentinel, no attributes (codegen.make_object rebuilds it)
        return NewObjectVar(ObjectBox(object, {}, cls_source=cls_var.source))
    if cls.__module__ in ("builtins", "torch") or cls.__module__.startswith("torch."):
        raise Unsupported(f"creating an instance of {cls.__module__}.{cls.__name__}")
    if object_model.builtin_base(cls) not in (object, dict, collections.OrderedDict) and not (
        issubclass(cls, torch.nn.Module)
    ):
        raise Unsupported(f"creating an instance of {cls.__name__}, a C type's subclass")
    if "__slots__" in cls.__dict__ and issubclass(cls, (dict, torch.nn.Module)):
        raise Unsupported(f"creating an instance of {cls.__name__}, which uses __slots__")
    items = object_model.new_items(cls)
    vm.out.depend(cls_var)
    if getattr(cls, "__abstractmethods__", None):
        # object.__new__ refuses an abstract class (abc): raise what eager raises, with its
        # own message (asked of object.__new__ itself: it fails before making anything)
        try:
            object.__new__(cls)
        except TypeError as exc:
            raise throw(TypeError, *exc.args) from None
    obj = NewObjectVar(ObjectBox(cls, {}, cls_source=cls_var.source, items=items))
    if issubclass(cls, torch.nn.Module):
        # A user module made here: its __init__ is inlined like any class's (nn.Module's own
        # __init__ reached through super() is a no-op); a fresh module is in training mode.
        if _has_global_hooks():
            raise Unsupported(f"creating module {cls.__name__} while global module hooks exist")
        obj.box.attrs["training"] = ConstVar(True)
    return obj
