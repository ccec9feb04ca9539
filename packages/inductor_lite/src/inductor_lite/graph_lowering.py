"""From an aten-level FX graph to the loop IR (``LoweredGraph``)."""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch
import torch.fx

from . import runtime_values as rv
from .config import InductorConfig
from .conv_fold import GUARD_KEY, fold_conv_epilogues
from .errors import LoweringError, UnsupportedGraph
from .ir import (
    BufferSpec,
    FallbackNode,
    InputWrite,
    LoweredGraph,
    Node,
    Op,
    OutputSpec,
    PointwiseNode,
    ReductionNode,
    SymbolBinding,
    TensorRef,
    VExpr,
    contiguous_strides,
)
from .node_facts import (
    METADATA_QUERIES,
    broadcasts,
    is_dense,
    is_static_scalar,
    is_view_op,
    query_example,
    read_by_a_call,
    same_layout,
    static_tensor,
    sym_scalar,
    symbolic_value,
    takes,
)
from .op_lowerings import LOWERINGS, Lowering
from .origins import buffer_origins
from .spatial import pool_layout
from .symbolic import Size, is_static, same, to_size
from .tensorvalue import (
    SymScalar,
    TensorValue,
    broadcast_loader,
    buffers_read,
    cast,
    expr_cost,
    index_vars,
    realized,
)

__all__ = ["GraphLowering", "Lowering", "lower_graph"]

log = logging.getLogger("strata.inductor_lite")


def _broadcast_by_a_reader(node: torch.fx.Node, result: TensorValue) -> bool:
    """Whether a reader of ``node`` makes a value at least 8 times as large (it broadcasts
    ``node``'s value, a per-row or per-channel statistic)."""
    if not is_static(result.numel):
        return False
    vals = [user.meta.get("val") for user in node.users]
    return any(
        isinstance(v, torch.Tensor) and static_tensor(v) and v.numel() >= 8 * int(result.numel)
        for v in vals
    )


# aten ops whose CPU kernels assume the contiguous layout their composite op made (they fail,
# or read garbage, given another): group_norm's `X.is_contiguous(memory_format)` check
_LAYOUT_STRICT = frozenset({torch.ops.aten.native_group_norm.default})
_EQUALITY_TESTS = frozenset({torch.ops.aten.eq, torch.ops.aten.ne})


def _tests_equality(node: torch.fx.Node) -> bool:
    return getattr(node.target, "overloadpacket", None) in _EQUALITY_TESTS


class GraphLowering:
    """Walks an aten graph once, building buffers and loop-IR nodes in program order."""

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        config: InductorConfig,
        compile_subgraph: rv.SubgraphCompiler | None = None,
    ) -> None:
        self.gm = gm
        self.config = config
        self.compile_subgraph = compile_subgraph
        self.buffers: dict[str, BufferSpec] = {}
        self.nodes: list[Node] = []
        self.inputs: list[BufferSpec] = []
        self.constants: dict[str, torch.Tensor] = {}
        self.env: dict[torch.fx.Node, object] = {}
        self.device: torch.device | None = None
        self._counter = 0
        self.current: torch.fx.Node | None = None
        # a lazy value realized once keeps its buffer (keyed by identity; values are kept alive)
        self._realized: dict[int, tuple[TensorValue, TensorValue]] = {}
        # size symbols, each bound to the input size (or SymInt input) it is read from
        self.symbols: dict[Any, SymbolBinding] = {}
        self.scalar_inputs: dict[int, Size] = {}
        self.float_inputs: dict[int, str] = {}
        self.float_items: dict[torch.fx.Node, sympy.Symbol] = {}  # float item()s in Python
        self.python_floats: dict[int, tuple[SymScalar, sympy.Symbol]] = {}  # by id, kept alive
        self.guards: list[TensorRef] = []
        self.input_writes: list[InputWrite] = []
        self.made_by: dict[str, torch.fx.Node | None] = {}  # the node lowered at each buffer

    # ------------------------------------------------------------ buffers

    def new_buffer(
        self, sizes: Sequence[Size], dtype: torch.dtype, strides: Sequence[Size] | None = None
    ) -> BufferSpec:
        name = f"buf{self._counter}"
        self._counter += 1
        self.made_by[name] = self.current
        sizes = tuple(to_size(s) for s in sizes)
        spec = BufferSpec(
            name, sizes, tuple(strides) if strides is not None else contiguous_strides(sizes), dtype
        )
        self.buffers[name] = spec
        return spec

    def realize(self, tv: TensorValue, strides: Sequence[Size] | None = None) -> TensorValue:
        """Give ``tv`` memory: a no-op for a buffer view, a pointwise node otherwise."""
        if tv.ref is not None and strides is None:
            return tv
        if strides is None and id(tv) in self._realized:
            return self._realized[id(tv)][1]
        if strides is not None and not is_dense(tv.sizes, strides):
            strides = None
        if (
            strides is not None
            and all(is_static(x) for x in (*tv.sizes, *strides))
            and tuple(strides) != contiguous_strides(tv.sizes)
        ):
            # another dense layout (channels-last): loop in that layout's memory order, so the
            # stores are contiguous rather than a scatter; the buffer itself is declared with
            # ``tv``'s sizes and these strides, so that aten gets it as it is (no view made
            # per call)
            order = sorted(range(tv.ndim), key=lambda d: (-int(strides[d]), d))
            permuted = tv.permute(order)
            spec = self.new_buffer(tv.sizes, tv.dtype, strides)
            sizes = permuted.sizes
            self.nodes.append(
                PointwiseNode(
                    spec.name,
                    sizes,
                    permuted.loader(index_vars(len(sizes))),
                    contiguous_strides(sizes),
                    0,
                    True,
                )
            )
            return realized(TensorRef(spec.name, spec.sizes, spec.strides, 0, spec.dtype))
        spec = self.new_buffer(tv.sizes, tv.dtype, strides)
        body = tv.loader(index_vars(tv.ndim))
        self.nodes.append(
            PointwiseNode(
                spec.name,
                spec.sizes,
                body,
                spec.strides,
                0,
                spec.strides == contiguous_strides(spec.sizes),
            )
        )
        result = realized(TensorRef(spec.name, spec.sizes, spec.strides, 0, spec.dtype))
        if strides is None or spec.strides == contiguous_strides(spec.sizes):
            self._realized[id(tv)] = (tv, result)
        return result

    def reduce(  # noqa: PLR0917
        self,
        x: TensorValue,
        dims: Sequence[int],
        keepdim: bool,
        kind: Op,
        out_dtype: torch.dtype,
        body: Callable[[Sequence[Any]], VExpr] | None = None,
    ) -> TensorValue:
        """A reduction node over ``dims`` of ``x``; returns the (realized) result."""
        nd = x.ndim
        red = sorted({d % nd for d in dims}) if nd else []
        kept = [k for k in range(nd) if k not in red]
        out_sizes = tuple(x.sizes[k] for k in kept)
        red_sizes = tuple(x.sizes[k] for k in red)
        ovars = index_vars(len(kept), "i")
        rvars = index_vars(len(red), "r")
        idx: list[Any] = [None] * nd
        for pos, k in enumerate(kept):
            idx[k] = ovars[pos]
        for pos, k in enumerate(red):
            idx[k] = rvars[pos]
        value = (body or x.loader)(idx)
        spec = self.new_buffer(out_sizes, out_dtype)
        self.nodes.append(ReductionNode(spec.name, out_sizes, red_sizes, value, kind, out_dtype))
        result = realized(TensorRef(spec.name, spec.sizes, spec.strides, 0, out_dtype))
        if keepdim:
            for k in red:
                result = result.unsqueeze(k)
        return result

    def ref_of(self, tv: TensorValue) -> TensorRef:
        """A TensorRef for a fallback argument (lazy values get a contiguous buffer)."""
        if tv.ref is None and tv.perm_of is not None:
            base, dims = tv.perm_of
            b = self.realize(base).ref
            assert b is not None
            return TensorRef(b.buf, tv.sizes, tuple(b.strides[d] for d in dims), b.offset, b.dtype)
        ref = self.realize(tv).ref
        assert ref is not None
        return ref

    # ------------------------------------------------------------ the walk

    def run(self, example_inputs: Sequence[object]) -> LoweredGraph:

        graph = self.gm.graph
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(example_inputs):
            raise LoweringError("placeholder count does not match example inputs")
        outputs: list[OutputSpec] = []
        for node in graph.nodes:
            self.current = node
            if node.op == "placeholder":
                self.env[node] = self._input(node, example_inputs[len(self.inputs)])
            elif node.op == "get_attr":
                value = getattr(self.gm, node.target)
                if isinstance(value, torch.fx.GraphModule):
                    self.env[node] = value  # a cond's branch: compiled where the cond is
                    continue
                if not isinstance(value, torch.Tensor):
                    raise LoweringError(f"get_attr {node.target} is not a tensor")
                self.env[node] = self._constant(value)
            elif node.op == "call_function":
                target = node.target
                mutates = isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable
                guard = bool(node.meta.get(GUARD_KEY))
                if not node.users and not mutates and not guard and not node.is_impure():
                    continue  # dead code; a dead mutation, a runtime assertion still run
                self.env[node] = self._call(node, LOWERINGS)
                if guard:
                    self.guards.append(self._guard_ref(self.env[node]))
            elif node.op == "output":
                outputs = self._outputs(node)
            else:
                raise LoweringError(f"unsupported fx op {node.op}")
        return LoweredGraph(
            self.inputs,
            self.constants,
            self.buffers,
            self.nodes,
            outputs,
            self.device or torch.device("cpu"),
            list(self.symbols.values()),
            self.scalar_inputs,
            self.guards,
            input_writes=self.input_writes,
            float_inputs=self.float_inputs,
            origins=buffer_origins(self.env, self.made_by, self._realized),
        )

    def _guard_ref(self, value: object) -> TensorRef:
        if not isinstance(value, TensorValue) or value.ndim or value.dtype != torch.bool:
            raise LoweringError("a guard must be a 0-dim bool tensor")
        ref = self.realize(value).ref
        assert ref is not None
        return ref

    def _note_device(self, t: torch.Tensor) -> None:
        if t.device.type not in ("cpu", "cuda"):
            raise UnsupportedGraph(f"tensor on {t.device}: no code generation for it")
        if self.device is not None and t.device != self.device:
            raise UnsupportedGraph(f"graph mixes devices {self.device} and {t.device}")
        self.device = t.device

    def _bind(self, x: object, k: int, dim: int | None) -> None:
        if not isinstance(x, torch.SymInt):
            return
        node: Any = x.node
        expr = node.expr
        if not isinstance(expr, sympy.Symbol) or expr in self.symbols:
            return
        hint = node.hint
        if hint is None:
            env = node.shape_env
            name = "backed_var_to_val" if hasattr(env, "backed_var_to_val") else "var_to_val"
            values = getattr(env, name, {})  # torch 2.13 renamed it
            hint = values.get(expr)
        self.symbols[expr] = SymbolBinding(expr, k, dim, int(hint) if hint is not None else 64)

    def _input(self, node: torch.fx.Node, example: object) -> object:
        name = f"arg{len(self.inputs)}"
        k = len(self.inputs)
        val = node.meta.get("val")
        if isinstance(val, torch.SymInt) or (
            isinstance(val, torch.Tensor)
            and not isinstance(example, torch.SymInt)
            and not static_tensor(val)
        ):
            example = val  # the symbolic example value is what the code must be general in
        if not isinstance(example, torch.Tensor):
            if isinstance(example, torch.SymFloat):
                return rv.float_input(self, name, k)
            if isinstance(example, torch.SymBool):
                return self._bool_input(example, name, k)
            if isinstance(example, torch.SymInt):
                self._bind(example, k, None)
                self.inputs.append(BufferSpec(name, (), (), torch.int64))
                self.scalar_inputs[k] = to_size(example)
                return self.scalar_inputs[k]
            self.inputs.append(BufferSpec(name, (), (), torch.int64))
            return example
        self._check_static(example)
        self._note_device(example)
        for d, size in enumerate(example.shape):
            self._bind(size, k, d)
        spec = BufferSpec(
            name,
            tuple(to_size(s) for s in example.shape),
            tuple(to_size(s) for s in example.stride()),
            example.dtype,
        )
        self.inputs.append(spec)
        self.buffers[name] = spec
        return realized(TensorRef(name, spec.sizes, spec.strides, 0, spec.dtype))

    def _bool_input(self, example: torch.SymBool, name: str, k: int) -> sympy.Symbol:
        """Graph input ``k``, a bool known only at run time (a cond predicate a backward
        takes): a fresh int symbol the wrapper binds to ``int(arg)``, 0 or 1, as a bool
        ``item()`` is. Its expression over other symbols is not used: the caller's value is
        what eager would use."""
        symbol = sympy.Symbol(f"{name}_bool", integer=True, nonnegative=True)
        hint = example.node.hint
        self.symbols[symbol] = SymbolBinding(
            symbol, k, None, int(bool(hint)) if hint is not None else 1, boolean=True
        )
        self.inputs.append(BufferSpec(name, (), (), torch.bool))
        return symbol

    def _constant(self, value: torch.Tensor) -> TensorValue:
        self._check_static(value)
        self._note_device(value)
        name = f"const{len(self.constants)}"
        self.constants[name] = value
        spec = BufferSpec(name, tuple(value.shape), tuple(value.stride()), value.dtype)
        self.buffers[name] = spec
        return realized(TensorRef(name, spec.sizes, spec.strides, 0, spec.dtype))

    @staticmethod
    def _check_static(t: torch.Tensor) -> None:
        for s in (*t.shape, *t.stride()):
            if not isinstance(s, int | torch.SymInt):
                raise UnsupportedGraph(f"unsupported size {s!r}")
        if t.layout != torch.strided or t.is_quantized or t.is_complex():
            raise UnsupportedGraph(f"unsupported tensor kind {t.layout}/{t.dtype}")

    def map_arg(self, a: object) -> object:
        if isinstance(a, torch.fx.Node):
            return self.env[a]
        if isinstance(a, list | tuple):
            return type(a)(self.map_arg(x) for x in a)
        return a

    def _call(self, node: torch.fx.Node, table: dict[object, Lowering]) -> object:
        target = node.target
        args = [self.map_arg(a) for a in node.args]
        kwargs = {k: self.map_arg(v) for k, v in node.kwargs.items()}
        if target is operator.getitem:
            seq, i = args
            assert isinstance(seq, list | tuple) and isinstance(i, int)
            return seq[i]
        scalar = sym_scalar(target, args)
        if scalar is not None:
            return scalar
        special = rv.lower_runtime_value(self, node, target, args, kwargs)
        if special is not rv.NOT_SPECIAL:  # a cond, data-dependent sizes, aot's RNG replay
            return special
        if not isinstance(target, torch._ops.OpOverload):
            if rv.needs_python(node.meta.get("val")):
                return rv.python_scalar(self, node)
            # arithmetic on sizes (operator.mul on SymInts, sym_size, ...): the value is the
            # expression fake propagation computed, evaluated by the wrapper at run time
            sym = symbolic_value(node.meta.get("val"))
            if sym is not None:
                return sym
        if target is torch.ops.aten.copy_.default:
            return self._input_write(node, args)
        if isinstance(target, torch._ops.OpOverload):
            if target._schema.is_mutable:
                raise UnsupportedGraph(f"mutating op {target} (graphs must be functional)")
            fn = table.get(target) or table.get(target.overloadpacket)
            if fn is not None and takes(fn, len(args), tuple(kwargs)):
                result = fn(self, node, *args, **kwargs)
                if result is not NotImplemented:
                    return self._maybe_realize(node, result)
        if not isinstance(target, torch._ops.OpOverload):
            raise LoweringError(f"call to non-aten target {target}")
        if target.overloadpacket in METADATA_QUERIES:
            # sizes are static here (and checked on every call), so a query is a constant
            val = node.meta.get("val")
            if val is None:
                val = query_example(node, target)
            if is_static_scalar(val):
                return val
            sym = symbolic_value(val)
            if sym is not None:
                return sym
        return self.fallback(node, target, self._traced_layouts(node, args), kwargs)

    def _traced_layouts(self, node: torch.fx.Node, args: Sequence[object]) -> list[object]:
        """Arguments for an aten call, each in the layout the graph traced for it.

        A clone we elide (``clone`` is the identity here) can leave an argument in another
        layout than the graph's: ``group_norm`` clones a stride-0 expanded weight to
        contiguous before ``native_group_norm``, whose CPU kernel reads it as contiguous
        (garbage for channels past the first, found by the op fuzzer). Where the traced
        layout is dense and the value's strides differ in a dim of size > 1, copy it: always
        for ops whose CPU kernels require the layout the graph gave them, elsewhere only for a
        value that is not dense itself (aten takes a dense transposed view as it is: ``bmm``
        is handed one on purpose).
        """
        strict = node.target in _LAYOUT_STRICT
        out = list(args)
        for k, (arg, value) in enumerate(zip(node.args, args, strict=True)):
            meta = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
            if not isinstance(value, TensorValue) or not isinstance(meta, torch.Tensor):
                continue
            ref = value.ref
            strides = tuple(to_size(x) for x in meta.stride())
            if ref is None or len(strides) != len(ref.sizes) or not is_dense(ref.sizes, strides):
                continue
            if not strict and is_dense(ref.sizes, ref.strides):
                continue
            if any(
                not same(size, 1) and not same(have, want)
                for size, have, want in zip(ref.sizes, ref.strides, strides, strict=True)
            ):
                out[k] = self.realize(value, strides)
        return out

    def _input_write(self, node: torch.fx.Node, args: Sequence[object]) -> object:
        """``copy_(input, value)`` at the end of the graph (aot's kept input mutations).

        The value gets a buffer laid out as the input (so its kernel can store straight into
        the input's memory); which writes become such stores is the wrapper's decision.
        """
        dst_node = node.args[0]
        if not isinstance(dst_node, torch.fx.Node) or dst_node.op != "placeholder":
            raise UnsupportedGraph("copy_ into a value that is not a graph input")
        rest = node.next
        while rest.op != "output":
            if rest.target is not torch.ops.aten.copy_.default:
                raise UnsupportedGraph("copy_ into a graph input before the graph's last op")
            rest = rest.next
        if node.users:
            raise UnsupportedGraph("the result of copy_ into a graph input is used")
        dst, src = args[0], args[1]
        assert isinstance(dst, TensorValue) and dst.ref is not None
        if not isinstance(src, TensorValue):
            raise UnsupportedGraph("copy_ of a non-tensor into a graph input")
        spec = self.buffers[dst.ref.buf]
        if any(w.input == spec.name for w in self.input_writes):
            raise UnsupportedGraph(f"two copy_ into graph input {spec.name}")
        ref = src.ref
        if not (
            ref is not None
            and ref.dtype == spec.dtype
            and ref.sizes == spec.sizes
            and ref.strides == spec.strides
            and self._owns(ref)
            and self._computed_once(ref.buf)
        ):
            # not already a buffer of the input's layout made by a kernel: store it in one
            loader = broadcast_loader(src, spec.sizes)
            dtype = spec.dtype
            value = TensorValue(spec.sizes, dtype, lambda idx: cast(loader(idx), dtype))
            dense = is_dense(spec.sizes, spec.strides)
            ref = self.realize(value, spec.strides if dense else None).ref
            assert ref is not None
        self.input_writes.append(InputWrite(spec.name, ref))
        return dst

    def _computed_once(self, buf: str) -> bool:
        """True when exactly one loop node (no aten call) writes ``buf``."""
        writers = [
            n
            for n in self.nodes
            if (isinstance(n, PointwiseNode | ReductionNode) and n.buf == buf)
            or (
                isinstance(n, FallbackNode)
                and any(o is not None and o.name == buf for o in n.outputs)
            )
        ]
        return len(writers) == 1 and not isinstance(writers[0], FallbackNode)

    def _maybe_realize(self, node: torch.fx.Node, result: object) -> object:
        """Store a lazy value read by several consumers when recomputing it is not cheap."""
        if not isinstance(result, TensorValue) or result.ref is not None:
            return result
        if len(node.users) > 1 and any(u.op == "output" or _tests_equality(u) for u in node.users):
            # a graph output is stored anyway: its other readers read that store instead of
            # recomputing the value. Recomputed, it can differ from the stored one by an ulp
            # (libm's vector sinf in one loop, the scalar one in another), and a backward
            # that compares the two (amax's and max's gradient mask, eq(x, amax(x))) then
            # finds no maximum and divides by zero; so is a value tested for equality in this
            # graph (the mask computed in the forward, as aot's CPU partition saves it)
            meta = node.meta.get("val")
            if isinstance(meta, torch.Tensor) and not is_view_op(node):
                return self.realize(result, tuple(to_size(x) for x in meta.stride()))
        if self._for_cpp() and self._small_and_broadcast(node, result):
            return self.realize(result)
        if self._for_cpp() and (layout := pool_layout(node, result, self.buffers)) is not None:
            return self.realize(result, layout)  # averaged over H, W by aten (spatial.py)
        if len(node.users) > 1:
            value = result.loader(index_vars(result.ndim))
            # recomputing costs work (operations) and memory traffic (buffers read): a
            # residual stream x + a + b + ... read by each layer's norm and by the next add
            # is cheap in operations, but inlined it re-reads every earlier layer's output
            cfg = self.config
            full_reads = len(self._full_size_reads(value, result))
            if self._for_cpp():
                too_many = full_reads > cfg.inline_load_limit
            else:
                # (a per-row statistic that its readers broadcast -- a layer norm's rstd --
                # frees nothing worth a store, and in a persistent row kernel its readers
                # would then wait at a barrier)
                too_many = len(buffers_read(value)) > cfg.triton_inline_load_limit or (
                    full_reads > cfg.triton_inline_full_reads
                    and not _broadcast_by_a_reader(node, result)
                )
            if expr_cost(value) > cfg.inline_cost_limit or too_many:
                return self.realize(result)
            if (
                not self._for_cpp()
                and read_by_a_call(node)
                and not _broadcast_by_a_reader(node, result)
            ):
                # an aten call stores it anyway: the other consumers read that buffer instead
                # of recomputing it, so what it reads may die here (a loss gradient read by a
                # matmul and by a later layer norm's backward kept its inputs alive)
                return self.realize(result)
        return result

    def _for_cpp(self) -> bool:
        """True when the C++ generator gets this graph.

        The two rules below are tuned for it: its row scratch keeps an inlined row in a
        stack array, and a small value stored in the kernel before its readers needs no
        barrier. Triton's persistent kernels keep stored steps in registers instead, and a
        value stored by one step and read by another lane costs a barrier there.
        """
        codegen = self.config.codegen
        return codegen == "cpp" or (
            codegen == "auto" and (self.device is None or self.device.type == "cpu")
        )

    def _full_size_reads(self, value: VExpr, result: TensorValue) -> list[str]:
        """The buffers ``value`` reads that are not much smaller than ``result`` itself.

        Per-row statistics and per-column weights (layer norm's mean, rstd, weight, bias)
        stay in cache and cost no memory traffic to re-read; counting them stored layer
        norm's output (16 MB for 4096x1024) in front of a softmax that keeps it in a row
        scratch otherwise. A symbolic size counts as full size.
        """
        numel = result.numel
        out = []
        for name in buffers_read(value):
            size = self.buffers[name].numel if name in self.buffers else numel
            if is_static(size) and is_static(numel) and 8 * int(size) <= int(numel):
                continue
            out.append(name)
        return out

    def _small_and_broadcast(self, node: torch.fx.Node, result: TensorValue) -> bool:
        """A small computed value that a much larger consumer broadcasts: store it.

        Eval-mode batch norm's ``1 / sqrt(var + eps)`` is per channel; inlined, it is
        recomputed for every element of the activation, and in a channels-last loop
        (channel innermost) it cannot be hoisted out of the inner loop either.
        """
        limit = self.config.small_broadcast_numel
        numel = result.numel
        if not is_static(numel) or not 0 < int(numel) <= limit:
            return False
        value = result.loader(index_vars(result.ndim))
        if expr_cost(value) < 3:  # a load and an op or two: cheap to redo
            return False
        for user in node.users:
            val = user.meta.get("val")
            big = to_size(val.numel()) if isinstance(val, torch.Tensor) else 0
            if is_static(big) and int(big) >= 16 * int(numel) and broadcasts(result, val):
                return True
        return False

    def fallback(
        self,
        node: torch.fx.Node,
        target: Any,
        args: Sequence[object],
        kwargs: dict[str, object],
        out_strides: Sequence[tuple[int, ...]] | None = None,
    ) -> object:
        """Run ``target`` as an aten call from the wrapper.

        ``out_strides`` (one per tensor result) overrides the strides of the node's example
        value, for a caller that hands aten arguments in another layout than the graph's.
        """

        def to_ref(a: object) -> object:
            if isinstance(a, TensorValue):
                return self.ref_of(a)
            if isinstance(a, SymScalar):
                if id(a) in self.python_floats:  # a float item(): the wrapper's Python float
                    return self.python_floats[id(a)][1]
                raise UnsupportedGraph(f"a float computed from sizes passed to {target}")
            if isinstance(a, list | tuple):
                return type(a)(to_ref(x) for x in a)
            return a

        ref_args = tuple(to_ref(a) for a in args)
        ref_kwargs = tuple((k, to_ref(v)) for k, v in kwargs.items())
        val = node.meta.get("val")
        multi = isinstance(val, list | tuple)
        vals = list(val) if multi else [val]  # type: ignore[arg-type]
        specs: list[BufferSpec | None] = []
        results: list[object] = []
        for k, v in enumerate(vals):
            if isinstance(v, torch.Tensor):
                self._check_static(v)
                self._note_device(v)
                strides = (
                    tuple(to_size(s) for s in v.stride()) if out_strides is None else out_strides[k]
                )
                spec = self.new_buffer(tuple(v.shape), v.dtype, strides)
                specs.append(spec)
                results.append(
                    realized(TensorRef(spec.name, spec.sizes, spec.strides, 0, spec.dtype))
                )
            elif v is None:
                specs.append(None)
                results.append(None)
            else:
                raise LoweringError(f"{target} returns a non-tensor {type(v).__name__}")
        log.debug("fallback to aten for %s", target)
        self.nodes.append(FallbackNode(target, ref_args, ref_kwargs, tuple(specs), multi))
        return tuple(results) if multi else results[0]

    def _outputs(self, node: torch.fx.Node) -> list[OutputSpec]:
        flat, _ = torch.utils._pytree.tree_flatten(node.args[0])
        specs: list[OutputSpec] = []
        returned: set[str] = set()
        for out in flat:
            if not isinstance(out, torch.fx.Node):
                specs.append(OutputSpec(None, out))
                continue
            value = self.env[out]
            meta = out.meta.get("val")
            if isinstance(value, SymScalar):
                if out.target is not torch.ops.aten._local_scalar_dense.default:
                    raise UnsupportedGraph("a float computed from sizes is a graph output")
                specs.append(OutputSpec(None, rv.item_output(self, out)))
                continue
            if not isinstance(value, TensorValue):
                # a bool item() or size comparison is bound as 0 or 1: eager returns a bool
                boolean = isinstance(meta, torch.SymBool) and isinstance(value, sympy.Expr)
                specs.append(OutputSpec(None, value, boolean))
                continue
            strides = (
                tuple(to_size(s) for s in meta.stride()) if isinstance(meta, torch.Tensor) else None
            )
            # a graph input returned as is (aot's forward returns parameters it saves for the
            # backward) is that same tensor in eager: copying it cost 1.5 ms per MLP step
            fresh_in_eager = (
                isinstance(meta, torch.Tensor) and out.op != "placeholder" and not is_view_op(out)
            )
            ref = value.ref
            if ref is None or (
                fresh_in_eager
                and (
                    ref.buf.startswith(("arg", "const"))
                    or not self._owns(ref)
                    or ref.buf in returned  # eager returns two tensors, not one twice
                    # stored in another layout than eager's (a channels-last convolution)
                    or (strides is not None and not same_layout(ref.sizes, ref.strides, strides))
                )
            ):
                value = self.realize(value, strides)
            assert value.ref is not None
            if fresh_in_eager:
                returned.add(value.ref.buf)
            specs.append(OutputSpec(value.ref))
        return specs

    def _owns(self, ref: TensorRef) -> bool:
        """True when ``ref`` is exactly its whole buffer (not a view of it)."""
        spec = self.buffers[ref.buf]
        numel: Size = 1
        for s in ref.sizes:
            numel *= s
        return same(ref.offset, 0) and same(numel, spec.numel) and is_dense(ref.sizes, ref.strides)


def lower_graph(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[object],
    config: InductorConfig,
    compile_subgraph: rv.SubgraphCompiler | None = None,
) -> LoweredGraph:
    """Lower an aten-level graph (as produced by make_fx or aot) to the loop IR.

    ``compile_subgraph`` compiles a ``torch.cond``'s branches (the caller's compiler: this
    layer lowers, it does not compile); without it a graph holding a cond is refused."""
    if config.conv_fold_epilogue and config.conv_channels_last:
        folded = fold_conv_epilogues(gm)
        if folded is not gm:
            lowered = GraphLowering(folded, config, compile_subgraph).run(example_inputs)
            lowered.unguarded = _flat_runner(gm)
            return lowered
    return GraphLowering(gm, config, compile_subgraph).run(example_inputs)


def _flat_runner(gm: torch.fx.GraphModule) -> Callable[[Sequence[Any]], tuple[object, ...]]:
    """``gm`` called on a list of inputs, its outputs flattened as the wrapper returns them."""

    def run(args: Sequence[Any]) -> tuple[object, ...]:
        log.debug("a guard of the compiled code failed: running the graph as it came")
        return tuple(torch.utils._pytree.tree_leaves(gm(*args)))

    return run
