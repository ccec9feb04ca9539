"""GraphBuilder: one torch.fx graph, its placeholders, and fake-tensor example values."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
from collections.abc import Callable, Collection, Sequence
from typing import Any, cast

import torch
import torch.fx
from torch._dispatch.python import enable_python_dispatcher
from torch._guards import GuardSource, Source
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensor,
    FakeTensorMode,
    UnsupportedOperatorException,
)
from torch.fx.experimental.symbolic_shapes import (
    DimDynamic,
    GuardOnDataDependentSymNode,
    ShapeEnv,
    StatelessSymbolicContext,
    compute_unbacked_bindings,
    expect_true,
    free_unbacked_symbols,
)
from torch.fx.node import map_aggregate, map_arg
from torch.fx.passes.runtime_assert import insert_deferred_runtime_asserts
from torch.utils._pytree import tree_leaves

from fxbuild.errors import FakePropagationError

_EXPECT_TRUE = expect_true  # what torch._check traces to on a symbolic condition
log = logging.getLogger("strata.fxbuild")

_DATA_DEPENDENT_ERRORS: tuple[type[BaseException], ...] = (
    DataDependentOutputException,
    DynamicOutputShapeException,
    GuardOnDataDependentSymNode,
    UnsupportedOperatorException,
)


@dataclasses.dataclass(frozen=True)
class _PlaceholderSource(Source):  # type: ignore[misc]
    """Names a graph input for the ShapeEnv (symbol provenance in its guards and messages)."""

    input_name: str

    @property
    def _name_template(self) -> str:
        return self.input_name

    @functools.cached_property
    def guard_source(self) -> GuardSource:
        return GuardSource.LOCAL


def _target_name(target: object) -> str:
    name = getattr(target, "__name__", None)
    return name if isinstance(name, str) else repr(target)


class GraphBuilder:
    """Builds one ``torch.fx.GraphModule`` with an example value on every node.

    Placeholders take the names they are given (the user's locals), other nodes take the names
    torch.fx gives by default (``abs_1``, ``add``, ``sum_1``). Every node's
    ``meta["example_value"]`` is computed by running its target on fake tensors; with
    ``dynamic=True`` every dimension of size >= 2 of every tensor input is a symbol of the
    builder's ShapeEnv, and ``dynamic_dims`` on :meth:`placeholder` makes chosen dimensions
    symbolic whatever ``dynamic`` says.
    """

    _nested = False  # a SubgraphBuilder: outer nodes in arguments are lifted

    def __init__(
        self,
        *,
        dynamic: bool | None = False,
        unbacked_scalars: bool = False,
        unbacked_sizes: bool = False,
    ) -> None:
        self.dynamic = dynamic
        # Data-dependent results allowed as unbacked symbols (torch.compile's
        # capture_scalar_outputs / capture_dynamic_output_shape_ops); refused when off.
        self.unbacked_scalars = unbacked_scalars
        self.unbacked_sizes = unbacked_sizes
        # One ShapeEnv always: mark_dynamic-style dims need it even when dynamic is off.
        self.shape_env: ShapeEnv = ShapeEnv()
        self.fake_mode: FakeTensorMode = FakeTensorMode(shape_env=self.shape_env)
        self.graph = torch.fx.Graph()
        self._example_inputs: list[object] = []
        self._redirects: dict[torch.fx.Node, torch.fx.Node] = {}
        self._submodules: dict[str, torch.nn.Module] = {}
        self._finished = False

    # -- inputs -----------------------------------------------------------------------------

    @property
    def example_inputs(self) -> list[object]:
        """The real input values, in placeholder order."""
        return list(self._example_inputs)

    def placeholder(
        self,
        name: str,
        example: object,
        *,
        dynamic_dims: Collection[int] = (),
        static: bool = False,
        symbolic: bool | None = None,
    ) -> torch.fx.Node:
        """Add a graph input named ``name`` whose real value is ``example``.

        Tensors get a fake twin (symbolic sizes where dynamic); ``static=True`` keeps a tensor's
        sizes static whatever the builder's ``dynamic`` says (``dynamic_dims`` still apply): what
        torch.compile does for module parameters and buffers. An int becomes a SymInt when
        ``symbolic`` (default: the builder's ``dynamic``): a fresh symbol of its own (never
        shared with an equal size), any sign, 0 and 1 included (the caller decides which ints
        to keep constant); a float becomes a SymFloat the same way. Any other value is kept as
        its own example.
        """
        self._check_open()
        # Placeholders stay first even when added after other nodes (lifted parameters).
        anchor = next((n for n in self.graph.nodes if n.op != "placeholder"), None)
        if anchor is None:
            node = self.graph.placeholder(_identifier(name))
        else:
            with self.graph.inserting_before(anchor):
                node = self.graph.placeholder(_identifier(name))
        node.meta["example_value"] = self._fake_input(
            node.name, example, dynamic_dims, static=static, symbolic=symbolic
        )
        self._example_inputs.append(example)
        return node

    def _fake_input(
        self,
        name: str,
        example: object,
        dynamic_dims: Collection[int],
        *,
        static: bool,
        symbolic: bool | None,
    ) -> object:
        source = _PlaceholderSource(name)
        if isinstance(example, torch.Tensor):
            dims = set(dynamic_dims)
            if self.dynamic and not static:
                dims |= {i for i, size in enumerate(example.shape) if size >= 2}
            if not dims:
                return self.fake_mode.from_tensor(example, static_shapes=True)
            sizes = [
                DimDynamic.DYNAMIC if i in dims else DimDynamic.STATIC for i in range(example.dim())
            ]
            context: Any = StatelessSymbolicContext(dynamic_sizes=sizes)
            return self.fake_mode.from_tensor(example, source=source, symbolic_context=context)
        if symbolic is None:
            symbolic = bool(self.dynamic)
        if symbolic and isinstance(example, int) and not isinstance(example, bool):
            # DYNAMIC, not DUCK: an int equal to a size by chance must not become that size.
            symbol = self.shape_env.create_unspecified_symbol(
                example, source, dynamic_dim=DimDynamic.DYNAMIC
            )
            return self.shape_env.create_symintnode(symbol, hint=example, source=source)
        if symbolic and type(example) is float:  # a SymFloat (an optimizer's changing lr)
            symbol = self.shape_env.create_unspecified_symbol(
                example, source, dynamic_dim=DimDynamic.DYNAMIC
            )
            return self.shape_env.create_symfloatnode(symbol, hint=example, source=source)
        return example

    # -- operations -------------------------------------------------------------------------

    def call_function(
        self,
        target: Callable[..., Any],
        args: Sequence[object],
        kwargs: dict[str, object] | None = None,
    ) -> torch.fx.Node:
        """Add a ``call_function`` node; its example value comes from ``target`` run on fakes."""
        return self._add("call_function", target, tuple(args), dict(kwargs or {}))

    def call_method(
        self, name: str, args: Sequence[object], kwargs: dict[str, object] | None = None
    ) -> torch.fx.Node:
        """Add a ``call_method`` node (``args[0]`` is the receiver)."""
        return self._add("call_method", name, tuple(args), dict(kwargs or {}))

    def submodule(self, stem: str, module: torch.nn.Module) -> torch.fx.Node:
        """A ``get_attr`` node naming ``module``, installed on the finished GraphModule under a
        fresh name from ``stem`` (a higher-order op's branch or body graph)."""
        self._check_open()
        name = _identifier(stem)
        index = 0
        while f"{name}_{index}" in self._submodules:
            index += 1
        name = f"{name}_{index}"
        self._submodules[name] = module
        node = self.graph.get_attr(name)
        node.meta["example_value"] = module
        return node

    def subgraph(self) -> SubgraphBuilder:
        """A builder for a graph nested in this one (a branch of ``torch.cond``).

        It shares this builder's fake mode and ShapeEnv. A node of an enclosing graph used as
        an argument there becomes one of its placeholders (``lifted`` maps each such outer
        node to it); a new input placeholder is added to the outermost graph.
        """
        self._check_open()
        return SubgraphBuilder(self)

    def lift(self, node: torch.fx.Node) -> torch.fx.Node:
        """``node`` as a value of this graph (the root graph holds all its own values)."""
        return node

    def example_value(self, node: torch.fx.Node) -> object:
        """The fake example value of ``node``."""
        return node.meta["example_value"]

    def redirect(self, node: torch.fx.Node, replacement: torch.fx.Node) -> None:
        """From now on, arguments and outputs that name ``node`` use ``replacement`` instead.

        For a value the program rebinds in place where the graph cannot (an ``out=`` write that
        resizes its tensor is built as the plain op, whose result then stands for the tensor).
        """
        self._redirects[node] = replacement

    def _resolve(self, node: torch.fx.Node) -> torch.fx.Node:
        while node in self._redirects:
            node = self._redirects[node]
        return node

    def _add(
        self, op: str, target: Any, args: tuple[object, ...], kwargs: dict[str, object]
    ) -> torch.fx.Node:
        self._check_open()
        if self._redirects:
            args = cast(tuple[object, ...], map_arg(cast(Any, args), self._resolve))
            kwargs = cast(dict[str, object], map_arg(cast(Any, kwargs), self._resolve))
        if self._nested:
            args = cast(tuple[object, ...], map_arg(cast(Any, args), self.lift))
            kwargs = cast(dict[str, object], map_arg(cast(Any, kwargs), self.lift))
        example = self._propagate(op, target, args, kwargs)
        node = self.graph.create_node(op, target, args, kwargs)  # type: ignore[arg-type]
        node.meta["example_value"] = example
        if self.shape_env.pending_fresh_unbacked_symbols:
            # The op made new data-dependent symbols (allowed above): bind them to this node.
            bindings = compute_unbacked_bindings(self.shape_env, example)
            if bindings:
                node.meta["unbacked_bindings"] = bindings
        return node

    def _propagate(
        self, op: str, target: Any, args: tuple[object, ...], kwargs: dict[str, object]
    ) -> object:
        def to_example(value: Any) -> Any:
            return value.meta["example_value"] if isinstance(value, torch.fx.Node) else value

        # map_aggregate also descends into slices (x[:n] with a symbolic n), unlike pytree.
        fake_args: Any = map_aggregate(cast(Any, args), to_example)
        fake_kwargs: Any = map_aggregate(cast(Any, kwargs), to_example)
        name = target if isinstance(target, str) else _target_name(target)
        # With symbols about, ops run under the Python dispatcher as the graph's own tracing
        # (aot) does: its SymInt-aware decompositions keep sizes symbolic where a C++ composite
        # reads concrete sizes and specialises them (F.pad with zero padding pinned the batch
        # of timm's Swin to its first value under dynamic=True).
        symbols = _has_backed_symbols(self.shape_env)
        dispatcher = enable_python_dispatcher() if symbols else contextlib.nullcontext()
        try:
            with dispatcher, self.fake_mode:
                if op == "call_method":
                    receiver, *rest = fake_args
                    result = getattr(receiver, target)(*rest, **fake_kwargs)
                else:
                    result = target(*fake_args, **fake_kwargs)
        except _DATA_DEPENDENT_ERRORS as exc:
            raise FakePropagationError(
                f"{name} depends on tensor data and cannot run on fake tensors: {exc}",
                target=name,
                data_dependent=True,
            ) from exc
        except Exception as exc:
            raise FakePropagationError(
                f"{name} failed on fake example values: {type(exc).__name__}: {exc}",
                target=name,
                data_dependent=False,
            ) from exc
        # With a ShapeEnv, nonzero/item succeed on fakes with fresh unbacked symbols: kept
        # where the builder allows that kind (a number, or a tensor's sizes), else reported
        # like the fake-mode refusals above.
        fresh = self.shape_env.pending_fresh_unbacked_symbols
        if fresh and _has_unbacked_symbols(result):
            scalar = isinstance(result, (torch.SymInt, torch.SymFloat, torch.SymBool))
            if not (self.unbacked_scalars if scalar else self.unbacked_sizes):
                fresh.clear()
                raise FakePropagationError(
                    f"{name} has an output that depends on tensor data",
                    target=name,
                    data_dependent=True,
                )
        elif fresh:
            fresh.clear()
        return result

    # -- output -----------------------------------------------------------------------------

    def finish(self, outputs: Sequence[object]) -> torch.fx.GraphModule:
        """Close the graph with an output node returning ``tuple(outputs)``; return the module."""
        self._check_open()
        if self._redirects:
            outputs = cast(Sequence[object], map_arg(cast(Any, tuple(outputs)), self._resolve))
        if self._nested:
            outputs = cast(Sequence[object], map_arg(cast(Any, tuple(outputs)), self.lift))
        self.graph.output(tuple(outputs))  # type: ignore[arg-type]
        self._checks_as_assertions()
        self.graph.lint()
        self._finished = True
        root = torch.nn.Module()
        for name, module in self._submodules.items():
            root.add_module(name, module)
        gm = torch.fx.GraphModule(root, self.graph)
        if not self._nested and any(self.shape_env.deferred_runtime_asserts.values()):
            # torch._check(...) on unbacked sizes (a nonzero's length) is recorded by the
            # ShapeEnv, not traced: it becomes assertions the graph checks when it runs, as
            # eager would raise (without, a failed check returned a value)
            insert_deferred_runtime_asserts(gm, self.shape_env, "strata")
            gm.recompile()
        log.debug("built graph:\n%s", gm.code)
        return gm

    def _checks_as_assertions(self) -> None:
        """``torch._check(cond)`` on a symbolic cond is traced as ``expect_true(cond)``, which
        on real values returns False instead of raising: each one whose result nothing reads
        becomes the assertion eager's check makes (also inside a cond branch, where the
        ShapeEnv's deferred assertions are not inserted)."""
        for node in list(self.graph.nodes):
            if node.op != "call_function" or node.target is not _EXPECT_TRUE or node.users:
                continue
            (condition,) = node.args
            example = getattr(condition, "meta", {}).get("example_value")
            node.target = torch.ops.aten._assert_scalar.default
            node.args = (condition, f"Runtime assertion failed for expression {example}")
            node.meta.pop("example_value", None)

    def _check_open(self) -> None:
        if self._finished:
            raise RuntimeError("GraphBuilder.finish() was already called")


class SubgraphBuilder(GraphBuilder):
    """A graph nested in another builder's graph; see :meth:`GraphBuilder.subgraph`."""

    _nested = True

    def __init__(self, parent: GraphBuilder) -> None:
        super().__init__(
            dynamic=parent.dynamic,
            unbacked_scalars=parent.unbacked_scalars,
            unbacked_sizes=parent.unbacked_sizes,
        )
        self.parent = parent
        self.shape_env = parent.shape_env
        self.fake_mode = parent.fake_mode
        # Outer node -> this graph's placeholder for it, in the order lifted.
        self.lifted: dict[torch.fx.Node, torch.fx.Node] = {}

    def placeholder(
        self,
        name: str,
        example: object,
        *,
        dynamic_dims: Collection[int] = (),
        static: bool = False,
        symbolic: bool | None = None,
    ) -> torch.fx.Node:
        """A new input belongs to the outermost graph; it is lifted here when used."""
        return self.parent.placeholder(
            name, example, dynamic_dims=dynamic_dims, static=static, symbolic=symbolic
        )

    def lift(self, node: torch.fx.Node) -> torch.fx.Node:
        """This graph's placeholder for a node of an enclosing graph (made on first use)."""
        if node.graph is self.graph:
            return node
        outer = self.parent.lift(self.parent._resolve(node))
        known = self.lifted.get(outer)
        if known is not None:
            return known
        anchor = next((n for n in self.graph.nodes if n.op != "placeholder"), None)
        if anchor is None:
            lifted = self.graph.placeholder(_identifier(outer.name))
        else:
            with self.graph.inserting_before(anchor):
                lifted = self.graph.placeholder(_identifier(outer.name))
        lifted.meta["example_value"] = outer.meta["example_value"]
        self.lifted[outer] = lifted
        return lifted

    def argument(self, name: str, example: object) -> torch.fx.Node:
        """A placeholder of this graph's own (not lifted) whose example value is ``example``
        (a fake tensor: the gradient a hook body takes)."""
        self._check_open()
        node = self.graph.placeholder(_identifier(name))
        node.meta["example_value"] = example
        return node

    def order_inputs(
        self, outer_nodes: Sequence[torch.fx.Node], *, first: Sequence[torch.fx.Node] = ()
    ) -> None:
        """Make the placeholders ``first`` (this graph's own arguments) then exactly
        ``outer_nodes`` lifted, in that order (unused ones added), so sibling subgraphs share
        one signature."""
        self._check_open()
        placeholders = [*first, *(self.lift(node) for node in outer_nodes)]
        extra = [
            p
            for p in self.graph.nodes
            if p.op == "placeholder" and p not in placeholders
        ]
        if extra:
            raise ValueError(f"order_inputs misses inputs {[p.name for p in extra]}")
        for node in reversed(placeholders):  # each moved to the front: the last one first
            head = next(iter(self.graph.nodes))
            if head is not node:
                head.prepend(node)


def _has_unbacked_symbols(result: object) -> bool:
    """True when a tensor or symbolic number in ``result`` has a data-dependent symbol."""
    symbolic = (torch.Tensor, torch.SymInt, torch.SymFloat, torch.SymBool)
    leaves = [leaf for leaf in tree_leaves(result) if isinstance(leaf, symbolic)]
    return bool(leaves) and bool(free_unbacked_symbols(leaves))


def _identifier(name: str) -> str:
    cleaned = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name)
    if not cleaned or cleaned[0].isdigit():
        cleaned = "_" + cleaned
    return cleaned


def is_fake(value: object) -> bool:
    """True when ``value`` is a fake tensor (an example value)."""
    return isinstance(value, FakeTensor)


__all__ = ["GraphBuilder", "SubgraphBuilder", "is_fake"]


def _has_backed_symbols(shape_env: Any) -> bool:
    """Whether ``shape_env`` has made a backed symbol (torch 2.13 renamed ``var_to_val``, which
    now warns on every read, to ``backed_var_to_val``; 2.11 has both)."""
    table = getattr(shape_env, "backed_var_to_val", None)
    return bool(shape_env.var_to_val if table is None else table)
