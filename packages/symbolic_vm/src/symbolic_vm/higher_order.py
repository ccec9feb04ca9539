"""torch's higher-order functions, recognised by identity inside traced code.

``torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False)`` (with grad on) becomes one
``torch.ops.higher_order.tag_activation_checkpoint`` node over ``fn``'s body traced into a
subgraph, as torch.compile captures it. Run eagerly, that op is torch's checkpoint of the body
(activations dropped, the body recomputed in backward); aot traces it, and its partitioners
save the region's inputs and recompute the tagged ops in the backward graph (a random op there
replays the generator state saved before it in the forward, so dropout draws the forward's
mask, as eager's checkpoint restores the RNG state). A reentrant checkpoint and checkpoint under
no_grad are traced as the call ``fn(*args)`` (results and gradients equal eager's; no memory
saved): eager's reentrant checkpoint is an autograd.Function the graph cannot replay.

``torch.cond(pred, true_fn, false_fn, operands)`` with a Python predicate calls the taken branch,
as eager torch.cond does. With a tensor (or SymBool) predicate both branches are traced, each
into an ``fxbuild`` subgraph whose inputs are the outer tensors it reads, and the graph gets one
``torch.ops.higher_order.cond`` node over them (what torch.compile captures).

``torch.func.functional_call(module, tensors, args)`` traces the module's call with its named
parameters and buffers (and those tied to them) read as the given tensors, through attribute
overlays undone after the call; a module that reaches a replaced tensor another way
(``parameters()``) is refused, a graph break.

``torch.func.vmap`` / ``torch.vmap``, ``torch.func.grad`` and ``grad_and_value``: calling the
transform gives a pending call (a partial of ``_apply_transform``); calling that adds one graph
node that runs the transform on the function when the graph runs (``_transform_node``). The
tensors the function reads from outside (its closure cells, the globals its code names) become
that node's inputs, and the function is rebuilt around them at run time, so aot traces through
the transform with them as graph inputs (their gradients flow). The function runs once on
fakes while tracing (Python side effects in it happen there too); anything it reaches that is
not a tensor input, a constant or a plain function (a module's parameters, a global tensor of
a callee) fails that fake run, and the call is a graph break with the reason.

``torch._higher_order_ops.wrap.wrap(fn, *args)`` calls ``fn(*args)``: the body is traced inline
(torch.compile puts it in a ``wrap_body`` subgraph called through the ``wrap`` op; the results,
the graph and frame counts are the same). ``control_flow.map(f, xs, *args)`` is unrolled over
``xs``'s leading dimension, a static size (guarded with the tensor's shape), and the steps'
results stacked, as eager's map computes it.

``dispatch`` is consulted where Python functions are called (``calls._call_function``), after
the function's identity is guarded (the same guard as any inlined call: nothing extra).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.utils._pytree as pytree
import torch.utils.checkpoint
from torch.fx.experimental.proxy_tensor import get_proxy_mode

from fxbuild import FakePropagationError, SubgraphBuilder
from symbolic_vm import controls, pytrees, torch_calls
from symbolic_vm import operations as ops
from symbolic_vm.errors import Unsupported
from symbolic_vm.mapped_calls import control_flow_map
from symbolic_vm.side_effects import HookRegistration
from symbolic_vm.values import (
    ConstVar,
    DictVar,
    FunctionVar,
    ListBox,
    ListVar,
    ModuleVar,
    NestedFunctionVar,
    ObjectVar,
    PartialVar,
    SymVar,
    TensorVar,
    TupleVar,
    Var,
)

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter
    from symbolic_vm.output import Output

__all__ = ["dispatch", "is_higher_order", "register_hook"]

# A handler's result: the traced value, or None for "trace the function's own code".
_Handler = Callable[["Interpreter", list[Var], dict[str, Var]], Var | None]

# checkpoint's own keywords; the rest go to the checkpointed function (non-reentrant only).
_CHECKPOINT_OPTIONS = frozenset(
    {
        "use_reentrant",
        "context_fn",
        "determinism_check",
        "debug",
        "early_stop",
        "preserve_rng_state",
    }
)


def _call(vm: Interpreter, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    return vm.call(fn, args, kwargs)


def _checkpoint(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    out = vm.out
    if not args:
        raise Unsupported("torch.utils.checkpoint.checkpoint() without a function")
    fn, fn_args = args[0], args[1:]
    fn_kwargs = {k: v for k, v in kwargs.items() if k not in _CHECKPOINT_OPTIONS}
    reentrant_var = kwargs.get("use_reentrant")
    # None (the default) means reentrant, with a warning, in torch 2.13.
    reentrant = reentrant_var is None or ops.const_value(out, reentrant_var) in (None, True)
    if "context_fn" in kwargs:
        context_fn = ops.const_value(out, kwargs["context_fn"])
        if context_fn is not torch.utils.checkpoint.noop_context_fn:
            raise Unsupported(
                "torch.utils.checkpoint.checkpoint with a context_fn (selective activation "
                "checkpointing) is not traced; it runs eagerly"
            )
    if reentrant and fn_kwargs:
        raise Unsupported("reentrant checkpoint with keyword arguments (eager raises ValueError)")
    if (
        reentrant
        and torch.is_grad_enabled()
        and not any(isinstance(a, TensorVar) and bool(a.example.requires_grad) for a in fn_args)
    ):
        # Eager's reentrant checkpoint is an autograd.Function: with no input that requires
        # grad, its outputs are cut from the parameters' gradients. Inlining would not cut them.
        raise Unsupported(
            "reentrant checkpoint where no input requires grad (its outputs then require no "
            "grad in eager); pass use_reentrant=False"
        )
    if reentrant or not torch.is_grad_enabled() or _TAG_CHECKPOINT is None:
        return _call(vm, fn, fn_args, fn_kwargs)
    return _checkpoint_node(vm, fn, fn_args, fn_kwargs)


def _calls_random(gm: torch.fx.GraphModule) -> bool:
    """Whether a traced body draws random numbers (a dropout in training, torch.rand)."""
    for node in gm.graph.nodes:
        if node.op == "call_method":
            name = str(node.target)
        elif node.op == "call_function":
            name = getattr(node.target, "__name__", "")
        else:
            continue
        if any(part in name.lower() for part in _RANDOM_NAME_PARTS) and not _no_op_dropout(node):
            return True
    return False


def _no_op_dropout(node: torch.fx.Node) -> bool:
    """``F.dropout(x, p, training)`` / ``torch.dropout(x, p, train)`` with a constant ``p`` of 0
    or training off: no draw (transformers' configs with dropout 0, a module in eval mode)."""
    if node.target is torch.nn.functional.dropout:
        params: tuple[str, ...] = ("input", "p", "training")
    elif node.target is torch.dropout:
        params = ("input", "p", "train")
    else:
        return False
    given: dict[str, object] = {**dict(zip(params, node.args, strict=False)), **node.kwargs}
    return given.get("p", 0.5) == 0 or given.get(params[2], True) is False


_RANDOM_NAME_PARTS = (
    "rand", "dropout", "bernoulli", "multinomial", "normal", "uniform", "exponential",
    "cauchy", "geometric", "poisson", "rrelu",
)  # fmt: skip


def checkpoint_keeping_rng(gmod: torch.fx.GraphModule, *args: Any, **kwargs: Any) -> Any:
    """The graph's op for a checkpointed body with random ops.

    Traced (fake tensors, make_fx: aot), it is torch's ``tag_activation_checkpoint``, whose
    tagged random ops aot replays from the saved generator state. Run eagerly (the eager
    backend), it is torch's checkpoint with ``preserve_rng_state=True``: the op itself turns
    that off (torch's compiler replays random numbers in its code generator), which would
    recompute dropout with a new mask.
    """
    if get_proxy_mode() is not None or torch._guards.detect_fake_mode(args) is not None:
        return _TAG_CHECKPOINT(gmod, *args, **kwargs)

    def run(*inputs: Any) -> Any:
        return torch.fx.Interpreter(gmod).run(*inputs)

    return torch.utils.checkpoint.checkpoint(
        run, *args, use_reentrant=False, preserve_rng_state=True, early_stop=False
    )


def _wrap(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if not args:
        raise Unsupported("wrap() without a function")
    return _call(vm, args[0], args[1:], kwargs)


def _checkpoint_node(
    vm: Interpreter, fn: Var, fn_args: list[Var], fn_kwargs: dict[str, Var]
) -> Var:
    """Non-reentrant ``checkpoint(fn, *args)`` as one ``tag_activation_checkpoint`` node over
    ``fn``'s traced body, as torch.compile captures it: the eager backend runs torch's
    checkpoint on the body (activations dropped, recomputed in backward, with the RNG state
    it had in the forward); aot traces that recomputation into its backward graph, random ops
    replayed from the generator state saved before them."""
    out = vm.out
    try:
        sub, outputs, shape = _trace_subgraph(
            vm, fn, fn_args, fn_kwargs, "a checkpointed function"
        )
    except _NotTensorOutputs:
        # (hidden, None) from a transformers layer, an input handed back: traced inline (the
        # trace above changed no Python state, so tracing it again is safe).
        return _call(vm, fn, fn_args, fn_kwargs)
    inputs = list(sub.lifted)
    sub.order_inputs(inputs)
    body = sub.finish(outputs)
    attr = out.builder.submodule("wrap_body", body)
    op = checkpoint_keeping_rng if _calls_random(body) else _TAG_CHECKPOINT
    try:
        node = out.builder.call_function(op, (attr, *inputs), {"use_reentrant": False})
    except FakePropagationError:
        # torch's checkpoint op cannot run this body (a torch.cond inside: its caching mode
        # has no rule for it): traced inline instead.
        out.builder.graph.erase_node(attr)
        return _call(vm, fn, fn_args, fn_kwargs)
    return _unflatten(ops.wrap_example(out, node), shape)


def _unflatten(results: Var, shape: _Shape) -> Var:
    """A subgraph op's flat results in the structure its function returned."""
    items = results.items if isinstance(results, TupleVar) else cast(Any, results).box.items
    if shape is None:
        return cast(Var, items[0])
    kind, _count = shape
    return TupleVar(tuple(items)) if kind == "tuple" else ListVar(ListBox(list(items)))


def _cond(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    out = vm.out
    names = ("pred", "true_fn", "false_fn", "operands")
    bound = dict(zip(names, args, strict=False))
    for key, value in kwargs.items():
        if key not in names or key in bound:
            raise Unsupported(f"torch.cond() got an unexpected argument {key!r}")
        bound[key] = value
    if not {"pred", "true_fn", "false_fn"} <= bound.keys():
        raise Unsupported("torch.cond() needs pred, true_fn and false_fn")
    pred = bound["pred"]
    operands = ops.items(out, bound["operands"]) if "operands" in bound else []
    if isinstance(pred, (TensorVar, SymVar)):
        return _cond_node(vm, pred, bound["true_fn"], bound["false_fn"], operands)
    taken = bound["true_fn"] if ops.const_value(out, pred) else bound["false_fn"]
    return _call(vm, taken, operands, {})


def _cond_node(
    vm: Interpreter, pred: TensorVar | SymVar, true_fn: Var, false_fn: Var, operands: list[Var]
) -> Var:
    """One ``torch.ops.higher_order.cond`` node whose branches are subgraphs traced here.

    Each branch is traced on the operands into a graph of its own; the outer tensors a branch
    reads (operands, closures, globals) are lifted to its placeholders, and both branches take
    the union of them, operands first, as the node's operands.
    """
    out = vm.out
    if not all(isinstance(o, TensorVar) for o in operands):
        raise Unsupported("torch.cond with operands that are not tensors is not traced")
    branches = [
        _trace_subgraph(vm, fn, operands, {}, "a torch.cond branch") for fn in (true_fn, false_fn)
    ]
    true_shape, false_shape = branches[0][2], branches[1][2]
    if true_shape != false_shape:
        raise Unsupported(
            "torch.cond branches return different structures "
            f"({true_shape!r} and {false_shape!r}); torch requires the same"
        )
    builder = out.builder
    # Nodes of the graph the cond node goes in (itself a branch when conds nest).
    inputs = list(dict.fromkeys(builder.lift(cast(TensorVar, o).node) for o in operands))
    for sub, _, _ in branches:
        inputs += [n for n in sub.lifted if n not in inputs]
    gms = []
    for sub, outputs, _ in branches:
        sub.order_inputs(inputs)
        gms.append(sub.finish(outputs))
    try:
        node = builder.call_function(
            torch.ops.higher_order.cond,
            (
                pred.node,
                builder.submodule("cond_true", gms[0]),
                builder.submodule("cond_false", gms[1]),
                tuple(inputs),
            ),
        )
    except FakePropagationError as exc:
        raise Unsupported(f"torch.cond could not be captured: {exc}") from exc
    return _unflatten(ops.wrap_example(out, node), true_shape)


# A branch's result: None for one tensor, else ("tuple" or "list", length).
_Shape = tuple[str, int] | None


def _trace_subgraph(
    vm: Interpreter, fn: Var, args: list[Var], kwargs: dict[str, Var], what: str
) -> tuple[SubgraphBuilder, list[Any], _Shape]:
    """Trace ``fn(*args, **kwargs)`` into a subgraph of the graph being built: the subgraph,
    its output nodes (tensors, flat) and the structure they came in."""
    out = vm.out
    outer = out.builder
    sub = outer.subgraph()
    marks = (len(out.side_effects), len(out.attr_overlay), len(out.global_overlay))
    out.builder = sub
    try:
        result = _call(vm, fn, args, kwargs)
    finally:
        out.builder = outer
    if marks != (len(out.side_effects), len(out.attr_overlay), len(out.global_overlay)):
        raise Unsupported(
            f"{what} changes Python state (torch.compile refuses side effects there too); "
            "it runs eagerly"
        )
    shape: _Shape
    leaves: list[Var]
    if isinstance(result, TensorVar):
        shape, leaves = None, [result]
    elif isinstance(result, (TupleVar, ListVar)):
        leaves = list(result.items if isinstance(result, TupleVar) else result.box.items)
        shape = ("tuple" if isinstance(result, TupleVar) else "list", len(leaves))
    else:
        raise _NotTensorOutputs(f"{what} returning something other than tensors is not traced")
    if not all(isinstance(leaf, TensorVar) for leaf in leaves):
        raise _NotTensorOutputs(f"{what} returning something other than tensors is not traced")
    nodes = [sub.lift(leaf.node) for leaf in leaves if isinstance(leaf, TensorVar)]
    if any(node.op == "placeholder" for node in nodes):
        raise _NotTensorOutputs(f"{what} returning one of its inputs (an alias) is not traced")
    return sub, nodes, shape


class _NotTensorOutputs(Unsupported):
    """A subgraph's function returned something a higher-order op cannot return."""


def _register_hook_fallback(tensor: Any, hook_body: Any, *freevars: Any) -> Any:
    """What ``torch.ops.higher_order.register_hook`` does, for torches without it."""
    tensor.register_hook(lambda grad: hook_body(grad, *freevars))
    return tensor


_REGISTER_HOOK: Any = getattr(torch.ops.higher_order, "register_hook", _register_hook_fallback)


def register_hook(
    vm: Interpreter, tensor: TensorVar, args: list[Var], kwargs: dict[str, Var]
) -> Var:
    """``t.register_hook(fn)`` on a tensor made in the graph, as torch.compile captures it.

    The hook's body is traced into a subgraph taking the gradient (then the outer tensors it
    reads); one ``register_hook`` node registers it on the tensor when the graph runs, and the
    tensor's later uses read that node, so the node stays in the graph and aot, tracing the
    backward, runs the hook there. A hook with Python side effects breaks (as in torch), and so
    does a call whose handle is kept (removing the hook later is not traced).
    """
    out = vm.out
    if len(args) != 1 or kwargs:
        raise Unsupported("Tensor.register_hook() with these arguments is not traced")
    if isinstance(out.builder, SubgraphBuilder):
        raise Unsupported("Tensor.register_hook() inside a torch.cond branch is not traced")
    if not tensor.example.requires_grad:
        raise Unsupported("Tensor.register_hook() on a tensor that does not require grad")
    if vm.instructions[vm.ip].opname != "POP_TOP":
        raise Unsupported("the handle Tensor.register_hook() returns is used: not traced")
    if tensor.node.op == "placeholder":
        # A frame input: the real hook is registered on it after the graph (it then runs in
        # backward as in eager, side effects included, and stays on the tensor).
        if tensor.source is None or args[0].source is None:
            raise Unsupported(
                "Tensor.register_hook() on a graph input with a hook made in the function"
            )
        out.side_effects.append(HookRegistration(tensor, args[0]))
        return ConstVar(None)
    outer = out.builder
    sub = outer.subgraph()
    with outer.fake_mode:
        grad_example = tensor.example.detach()
    grad = sub.argument("grad", grad_example)
    marks = (len(out.side_effects), len(out.attr_overlay), len(out.global_overlay))
    out.builder = sub
    try:
        result = _call(vm, args[0], [TensorVar(grad, grad_example)], {})
    finally:
        out.builder = outer
    if marks != (len(out.side_effects), len(out.attr_overlay), len(out.global_overlay)):
        raise Unsupported(
            "a tensor hook that changes Python state is not traced (torch.compile breaks too)"
        )
    if isinstance(result, ConstVar) and result.value is None:
        value = grad
    elif isinstance(result, TensorVar):
        value = sub.lift(result.node)
    else:
        raise Unsupported("a tensor hook returning something other than a tensor or None")
    inputs = list(sub.lifted)
    sub.order_inputs(inputs, first=[grad])
    body = sub.finish([value])
    output = next(n for n in reversed(body.graph.nodes) if n.op == "output")
    output.args = (value,)  # a hook returns the gradient itself, not a tuple
    body.recompile()
    hooked = outer.call_function(
        _REGISTER_HOOK, (tensor.node, outer.submodule("hook_body", body), *inputs)
    )
    # Later uses of the tensor read the node (the op hands back its input).
    outer.redirect(tensor.node, hooked)
    return ConstVar(None)


def _functional_call(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """``functional_call(module, tensors, args, kwargs)``: the module's call traced with its
    named parameters and buffers read as the given tensors (attribute overlays, undone after),
    tied ones too unless ``tie_weights=False``. A module that reaches a replaced tensor any other
    way (``self.parameters()``, ``_flat_weights``) would see the old one: that is refused."""
    out = vm.out
    names = ("module", "parameter_and_buffer_dicts", "args", "kwargs")
    bound = dict(zip(names, args, strict=False))
    options = {"tie_weights": True, "strict": False}
    for key, value in kwargs.items():
        if key in options:
            options[key] = bool(ops.const_value(out, value))
        elif key in names and key not in bound:
            bound[key] = value
        else:
            raise Unsupported(f"functional_call() got an unexpected argument {key!r}")
    module_var = bound.get("module")
    if not isinstance(module_var, ModuleVar) or options["strict"]:
        raise Unsupported(
            "torch.func.functional_call of this module (or with strict=True) is not traced; "
            "it runs eagerly"
        )
    module = module_var.module
    tensors = _named_tensors(out, bound.get("parameter_and_buffer_dicts"))
    call_args = bound.get("args", TupleVar(()))
    arg_list: list[Var] = (
        [call_args] if isinstance(call_args, TensorVar) else ops.items(out, call_args)
    )
    call_kwargs: dict[str, Var] = {}
    if "kwargs" in bound and not (
        isinstance(bound["kwargs"], ConstVar) and bound["kwargs"].value is None
    ):
        if not isinstance(bound["kwargs"], DictVar):
            raise Unsupported("functional_call() with kwargs that are not a dict")
        call_kwargs = {str(k): v for k, v in bound["kwargs"].box.items.items()}
    tensors = {k: v for k, v in tensors.items() if not _is_current(out, module, k, v)}
    overlays, replaced = _overlays(module, tensors, tie=options["tie_weights"])
    users_before = {
        id(out.input_value(v)): len(v.node.users) for v in out.tensor_inputs()
    }
    saved = {slot: out.attr_overlay.get(slot) for slot in overlays}
    out.attr_overlay.update(overlays)
    try:
        result = _call(vm, module_var, arg_list, call_kwargs)
        changed = [slot for slot, var in overlays.items() if out.attr_overlay.get(slot) is not var]
    finally:
        for slot, previous in saved.items():
            if previous is None:
                out.attr_overlay.pop(slot, None)
            else:
                out.attr_overlay[slot] = previous
    if changed:
        raise Unsupported("functional_call of a module that assigns its own parameters")
    for v in out.tensor_inputs():
        real_id = id(out.input_value(v))
        if real_id in replaced and len(v.node.users) > users_before.get(real_id, 0):
            raise Unsupported(
                "functional_call of a module that reads a replaced tensor other than as its "
                "attribute (parameters(), a cached list): not traced; it runs eagerly"
            )
    return result


def _is_current(out: Output, module: torch.nn.Module, name: str, var: Var) -> bool:
    """Whether ``var`` is the very tensor ``module`` holds under ``name`` (a dict made from the
    module's own ``named_parameters()``): replacing it changes nothing, and reads of it by any
    path are right."""
    if not isinstance(var, TensorVar) or var.node.op != "placeholder":
        return False
    try:
        real = out.input_value(var)
    except KeyError:
        return False
    for lookup in (module.get_parameter, module.get_buffer):
        try:
            return real is lookup(name)
        except AttributeError:
            continue
    return False


def _named_tensors(out: Output, dicts: Var | None) -> dict[str, Var]:
    """The name -> tensor var entries of functional_call's dict (or tuple of dicts)."""
    if dicts is None:
        raise Unsupported("functional_call() without its tensors")
    parts = [dicts] if isinstance(dicts, DictVar) else ops.items(out, dicts)
    merged: dict[str, Var] = {}
    for part in parts:
        if not isinstance(part, DictVar):
            raise Unsupported("functional_call() tensors that are not a dict")
        for key, value in part.box.items.items():
            if not isinstance(key, str) or key in merged or not isinstance(value, TensorVar):
                raise Unsupported("functional_call() with these names or values is not traced")
            merged[key] = value
    return merged


def _overlays(
    module: torch.nn.Module, tensors: dict[str, Var], *, tie: bool
) -> tuple[dict[tuple[int, str], Var], set[int]]:
    """The attribute overlays that make ``module`` read ``tensors``, and the ids of the real
    tensors they replace."""
    overlays: dict[tuple[int, str], Var] = {}
    by_real: dict[int, Var] = {}
    for name, var in tensors.items():
        owner_path, _, leaf = name.rpartition(".")
        try:
            owner = module.get_submodule(owner_path)
        except AttributeError:
            raise Unsupported(
                f"functional_call(): the module has no submodule for {name!r}"
            ) from None
        table = next(
            (t for t in ("_parameters", "_buffers") if leaf in owner.__dict__.get(t, {})), None
        )
        if table is None:
            raise Unsupported(f"functional_call(): {name!r} is not a parameter or buffer")
        overlays[(id(owner), leaf)] = var
        real = owner.__dict__[table][leaf]
        if real is not None:
            by_real[id(real)] = var
    if tie:
        for _, owner in module.named_modules(remove_duplicate=False):
            for table in ("_parameters", "_buffers"):
                for leaf, real in owner.__dict__.get(table, {}).items():
                    if real is not None and id(real) in by_real:
                        overlays.setdefault((id(owner), leaf), by_real[id(real)])
    return overlays, set(by_real)


# Each transform's parameters after the function, in order, with their defaults.
_TRANSFORMS: dict[str, tuple[Any, tuple[tuple[str, object], ...]]] = {
    "vmap": (
        torch.func.vmap,
        (("in_dims", 0), ("out_dims", 0), ("randomness", "error"), ("chunk_size", None)),
    ),
    "grad": (torch.func.grad, (("argnums", 0), ("has_aux", False))),
    "grad_and_value": (torch.func.grad_and_value, (("argnums", 0), ("has_aux", False))),
}


def _apply_transform(*args: Any, **kwargs: Any) -> Any:
    """The pending call a traced ``vmap(fn, ...)`` returns (never run: dispatched below)."""
    raise AssertionError("traced only")


def _make_transform(kind: str) -> _Handler:
    def handler(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
        params = _TRANSFORMS[kind][1]
        if not args or len(args) > 1 + len(params):
            raise Unsupported(f"torch.func.{kind}() with these arguments is not traced")
        given = dict(zip((p for p, _ in params), args[1:], strict=False))
        for key, value in kwargs.items():
            if key not in dict(params) or key in given:
                raise Unsupported(f"torch.func.{kind}() got an unexpected argument {key!r}")
            given[key] = value
        options = {p: ops.const_value(vm.out, given[p]) for p, _ in params if p in given}
        return PartialVar(
            func=FunctionVar(cast(types.FunctionType, _apply_transform)),
            args=(ConstVar(kind), ConstVar(tuple(sorted(options.items()))), args[0]),
            kwargs={},
        )

    return handler


def _global_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _plain_value(vm: Interpreter, var: Var, what: str) -> object:
    """The real value of a non-tensor the function reads (guarded as the VM guards it)."""
    if isinstance(var, (ConstVar, FunctionVar)) or (
        isinstance(var, ObjectVar) and not isinstance(var.value, torch.nn.Module)
    ):
        return ops.const_value(vm.out, var)
    raise Unsupported(
        f"a function passed to a torch.func transform reads {what}, which is not a tensor, a "
        "constant or a plain function: the call runs eagerly"
    )


def _lifted_globals(
    vm: Interpreter, code: types.CodeType, f_globals: dict[str, Any], lifted: list[TensorVar]
) -> dict[str, int]:
    """Global name -> index in ``lifted`` of each tensor global the function's code names."""

    tensors = [n for n in sorted(_global_names(code)) if isinstance(f_globals.get(n), torch.Tensor)]
    if tensors and f_globals is not vm.out.f_globals:
        raise Unsupported("a torch.func transform of another module's function reading tensors")
    slots = {}
    for name in tensors:
        var = vm.load_global(name)
        if not isinstance(var, TensorVar):
            raise Unsupported(f"global {name!r} read by a torch.func transform's function")
        slots[name] = len(lifted)
        lifted.append(var)
    return slots


Rebuild = Callable[[tuple[Any, ...]], Any]


def _rebuild_plan(vm: Interpreter, fn: Var, lifted: list[TensorVar]) -> Rebuild:
    """How to remake the traced function at run time from the lifted tensors."""
    if isinstance(fn, ObjectVar) and not isinstance(
        fn.value, (types.FunctionType, torch.nn.Module)
    ):
        value = ops.const_value(vm.out, fn)  # a torch op or builtin: used as it is
        return lambda tensors: value
    if isinstance(fn, FunctionVar):
        real = ops.const_value(vm.out, fn)
        cells = real.__closure__ or ()
        if any(isinstance(c.cell_contents, torch.Tensor) for c in cells):
            raise Unsupported("a torch.func transform of a closure over tensors from outside")
        code, f_globals = real.__code__, real.__globals__
        defaults, kwdefaults, closure = real.__defaults__, real.__kwdefaults__, cells or None
    elif isinstance(fn, NestedFunctionVar):
        code, f_globals = fn.code, fn.f_globals
        defaults = tuple(_plain_value(vm, d, "a default") for d in fn.defaults) or None
        kwdefaults = {k: _plain_value(vm, d, "a default") for k, d in fn.kwdefaults.items()}
        contents: list[tuple[str, object]] = []  # ("tensor", index) or ("value", value)
        for name, cell in zip(code.co_freevars, fn.closure, strict=True):
            if cell.value is None:
                raise Unsupported(f"free variable {name!r} referenced before assignment")
            if isinstance(cell.value, TensorVar):
                contents.append(("tensor", len(lifted)))
                lifted.append(cell.value)
            else:
                contents.append(("value", _plain_value(vm, cell.value, f"the variable {name!r}")))
        closure = None
    else:
        raise Unsupported(
            f"a torch.func transform of a {type(fn).__name__} is not traced; it runs eagerly"
        )
    slots = _lifted_globals(vm, code, f_globals, lifted)
    fixed_closure = closure

    def rebuild(tensors: tuple[Any, ...]) -> Any:
        namespace = f_globals
        if slots:
            namespace = dict(f_globals)
            namespace.update({name: tensors[i] for name, i in slots.items()})
        cells = fixed_closure
        if cells is None and code.co_freevars:
            cells = tuple(
                types.CellType(tensors[cast(int, v)] if kind == "tensor" else v)
                for kind, v in contents
            )
        made = types.FunctionType(code, namespace, code.co_name, defaults, cells)
        made.__kwdefaults__ = kwdefaults or None
        return made

    return rebuild


def _transform_node(
    kind: str, options: dict[str, Any], n_lifted: int, rebuild: Rebuild, args_spec: Any
) -> Any:
    transform = _TRANSFORMS[kind][0]

    def run(*tensors: Any) -> Any:
        args = pytree.tree_unflatten(list(tensors[n_lifted:]), args_spec)
        return transform(rebuild(tensors[:n_lifted]), **options)(*args)

    run.__name__ = run.__qualname__ = f"torch_func_{kind}"
    return run


def _apply(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    kind_var, options_var, fn, *call_args = args
    assert isinstance(kind_var, ConstVar) and isinstance(options_var, ConstVar)
    # The arguments may be tuples, lists and dicts of tensors (associative_scan's vmap of a
    # combine function over pairs): the node takes the leaves and rebuilds them.
    leaves, args_spec = pytrees.flatten(TupleVar(tuple(call_args)))
    if kwargs or not all(isinstance(a, TensorVar) for a in leaves):
        raise Unsupported(
            f"torch.func.{kind_var.value} called with keyword or non-tensor arguments is not "
            "traced; it runs eagerly"
        )
    lifted: list[TensorVar] = []
    rebuild = _rebuild_plan(vm, fn, lifted)
    options = dict(options_var.value)
    target = _transform_node(kind_var.value, options, len(lifted), rebuild, args_spec)
    return ops.graph_call(vm.out, target, [*lifted, *leaves], {})


def _associative_scan(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var | None:
    """``associative_scan(combine_fn, xs, dim, reverse, combine_mode)``: the ``generic`` mode is
    Python over ``torch.vmap(combine_fn)`` (transformers' Mamba takes it on CPU under a
    compiler), traced as its own code; the ``pointwise`` mode compiles a kernel with torch's
    compiler (CUDA only) and stays a graph break."""
    mode = kwargs.get("combine_mode", args[4] if len(args) > 4 else ConstVar("pointwise"))
    if isinstance(mode, ConstVar) and mode.value == "generic":
        return None
    raise Unsupported("associative_scan with combine_mode='pointwise' is not traced")


def _table() -> dict[int, tuple[object, _Handler]]:
    if _TABLE:
        return _TABLE
    entries: list[tuple[object, _Handler]] = [
        *((fn, _make_transform(kind)) for kind, (fn, _) in _TRANSFORMS.items()),
        (_apply_transform, _apply),
        (torch.utils.checkpoint.checkpoint, _checkpoint),
        # The undecorated function under torch's wrapper, should code reach it directly.
        (getattr(torch.utils.checkpoint.checkpoint, "__wrapped__", None), _checkpoint),
        (_TORCH_COND, _cond),
        (_WRAP, _wrap),
        (_MAP, control_flow_map),
        (torch_calls.ASSOCIATIVE_SCAN, _associative_scan),
        (torch.func.functional_call, _functional_call),
        (getattr(torch.nn.utils.stateless, "functional_call", None), _functional_call),
    ]
    for fn, handler in entries:
        if fn is not None:
            _TABLE[id(fn)] = (fn, handler)
    return _TABLE


_TABLE: dict[int, tuple[object, _Handler]] = {}
_TAG_CHECKPOINT: Any = getattr(torch.ops.higher_order, "tag_activation_checkpoint", None)
_TORCH_COND: Any = getattr(torch, "cond", None)
_HOPS: Any = getattr(torch, "_higher_order_ops", None)
_WRAP: Any = getattr(getattr(_HOPS, "wrap", None), "wrap", None)
# The package re-exports map's function over its module of the same name.
_MAP: Any = getattr(_HOPS, "map", None)
if isinstance(_MAP, types.ModuleType):
    _MAP = getattr(_MAP, "map", None)
_CHECKPOINT_IMPL: Any = getattr(torch.utils.checkpoint.checkpoint, "__wrapped__", None)
if isinstance(_CHECKPOINT_IMPL, types.FunctionType):
    # A checkpoint call that runs eagerly (its function breaks): a compiled forward and an
    # uncompiled recomputation would save different tensors, so neither is compiled (torch
    # disables its compiler under checkpoint the same way).
    controls.run_unhooked(_CHECKPOINT_IMPL.__code__)
if _TORCH_COND is not None:
    # Eager torch.cond (after a break, or in a frame run eagerly) compiles with torch's own
    # compiler: neither it nor anything it calls may be compiled by Strata too.
    controls.run_unhooked(_TORCH_COND.__code__)
if isinstance(_MAP, types.FunctionType):
    # The same for eager control_flow.map, which runs torch's compiler on its steps.
    controls.run_unhooked(_MAP.__code__)


def is_higher_order(fn: object) -> bool:
    """True if calling ``fn`` is handled here."""
    entry = _table().get(id(fn))
    return entry is not None and entry[0] is fn


def dispatch(vm: Interpreter, fn: object, args: list[Var], kwargs: dict[str, Var]) -> Var | None:
    """The traced result of ``fn(*args, **kwargs)`` if ``fn`` is handled here; None if not (or
    if its own code is to be traced: ``associative_scan``'s generic mode)."""
    entry = _table().get(id(fn))
    if entry is None or entry[0] is not fn:
        return None
    return entry[1](vm, args, kwargs)
