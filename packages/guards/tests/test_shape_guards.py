"""shape_guards turns a real ShapeEnv's facts into SHAPE predicates that agree with the
ShapeEnv's own evaluation of its guards on real inputs."""

from __future__ import annotations

import itertools

import pytest
import sympy
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

from guards import (
    GuardSet,
    LocalSource,
    Shape,
    ShapeGuardError,
    SizeSource,
    compile_guards,
    shape_guards,
)
from guards.shape import ShapeFact, render_sympy


def shown(facts: list[ShapeFact]) -> list[str]:
    """Each fact's predicate as the guards log shows it (operands as their sources)."""
    return [Shape.of(p, d, operands=o).shown() for p, d, o in facts]


def trace_dynamic(reals: dict[str, torch.Tensor], body):  # type: ignore[no-untyped-def]
    """Fake every tensor with all dims dynamic, record symbol sources, then run body."""
    shape_env = ShapeEnv()
    mode = FakeTensorMode(shape_env=shape_env)
    fakes = {
        name: mode.from_tensor(
            t,
            symbolic_context=StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * t.dim()),
        )
        for name, t in reals.items()
    }
    # Recorded before tracing: replacements made while tracing rewrite fake sizes.
    sources = {}
    for name, fake in fakes.items():
        for i, size in enumerate(fake.size()):
            if isinstance(size, torch.SymInt):
                sources[size.node.expr] = SizeSource(LocalSource(name), i)
    with mode:
        body(fakes)
    return shape_env, fakes, sources


def cat_then_branch(f):  # type: ignore[no-untyped-def]
    w = torch.cat([f["x"], f["y"]], dim=1)  # x.size(0) == y.size(0)
    if w.shape[1] > 5:
        pass
    if f["x"].shape[1] % 2 == 1:
        pass


def test_predicates_render_over_sizes_of_the_sources() -> None:
    reals = {"x": torch.randn(4, 3), "y": torch.randn(4, 5)}
    shape_env, _, sources = trace_dynamic(reals, cat_then_branch)
    preds = shown(shape_guards(shape_env, sources))
    assert "L['x'].size(0) >= 2" in preds
    assert (
        "L['y'].size(0) == L['x'].size(0)" in preds
        or "L['x'].size(0) == L['y'].size(0)" in preds
    )
    assert "L['x'].size(1) + L['y'].size(1) > 5" in preds
    assert "L['x'].size(1) % 2 == 1" in preds


def test_compiled_shape_guards_agree_with_the_shape_env_on_real_inputs() -> None:
    reals = {"x": torch.randn(4, 3), "y": torch.randn(4, 5)}
    shape_env, fakes, sources = trace_dynamic(reals, cat_then_branch)
    gs = GuardSet()
    for name, t in reals.items():
        gs.TENSOR_MATCH(LocalSource(name), t, dynamic_dims=range(t.dim()))
    for pred, desc, operands in shape_guards(shape_env, sources):
        gs.SHAPE(pred, desc, operands=operands)
    cg = compile_guards(gs, {})
    placeholders = [fakes["x"], fakes["y"]]
    checked = passed = 0
    for a, b, c, d in itertools.product([1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 4], [2, 3, 4]):
        args = {"x": torch.randn(a, b), "y": torch.randn(c, d)}
        expected = shape_env.evaluate_guards_for_args(placeholders, [args["x"], args["y"]])
        assert cg(args) == expected, (a, b, c, d, cg.failures(args))
        assert cg(args) == (cg.failures(args) == [])
        checked += 1
        passed += expected
    assert checked == 144 and 0 < passed < checked


def test_specialised_symbol_becomes_an_equality() -> None:
    reals = {"x": torch.randn(4, 3)}

    def body(f):  # type: ignore[no-untyped-def]
        if f["x"].shape[0] == 4:  # guards Eq(s, 4) and replaces s by 4
            pass

    shape_env, _, sources = trace_dynamic(reals, body)
    preds = shown(shape_guards(shape_env, sources))
    assert "L['x'].size(0) == 4" in preds


def test_symbol_without_source_is_an_error() -> None:
    reals = {"x": torch.randn(4, 3), "y": torch.randn(4, 5)}
    shape_env, _, sources = trace_dynamic(reals, cat_then_branch)
    partial = {s: src for s, src in sources.items() if src.base_source == LocalSource("x")}
    with pytest.raises(ShapeGuardError, match="no source"):
        shape_guards(shape_env, partial)


def test_render_sympy_covers_integer_ops() -> None:
    from torch.utils._sympy.functions import FloorDiv, ModularIndexing

    a, b = sympy.symbols("a b", integer=True, positive=True)
    names = {a: "A", b: "B"}
    expr = sympy.And(
        sympy.Le(FloorDiv(a, 2) + b**2, 30),
        sympy.Ne(ModularIndexing(a, 1, 4), 3),
        sympy.Or(sympy.Gt(sympy.Max(a, b), 2), sympy.Not(sympy.Eq(sympy.Min(a, b), 1))),
    )
    text = render_sympy(expr, names.__getitem__)
    for A, B in itertools.product(range(1, 7), range(1, 7)):
        got = eval(text, {"A": A, "B": B})
        assert got == bool(expr.subs({a: A, b: B})), (A, B, text)
    with pytest.raises(ShapeGuardError):
        render_sympy(sympy.sin(a), names.__getitem__)


def test_render_sympy_covers_float_conversions_of_symbolic_ints() -> None:
    # What `n == 3.0` or `n / 2` on a SymInt leaves in ShapeEnv's guards.
    from torch.utils._sympy.functions import FloatTrueDiv, IntTrueDiv, ToFloat, TruncToInt

    a = sympy.Symbol("a", integer=True)
    names = {a: "A"}
    cases = [
        (sympy.Eq(ToFloat(a), sympy.Float(3.0)), lambda n: float(n) == 3.0),
        (sympy.Lt(IntTrueDiv(a, 2), sympy.Float(1.25)), lambda n: n / 2 < 1.25),
        (sympy.Ge(FloatTrueDiv(ToFloat(a), sympy.Float(0.5)), 4), lambda n: n / 0.5 >= 4),
        (sympy.Eq(TruncToInt(FloatTrueDiv(ToFloat(a), 2.0)), 1), lambda n: int(n / 2.0) == 1),
    ]
    for expr, expected in cases:
        text = render_sympy(expr, names.__getitem__)
        for n in range(-5, 9):
            assert eval(text, {"A": n}) == expected(n), (text, n)


def test_render_sympy_covers_round_floor_and_ceil_of_a_float_of_a_size() -> None:
    # `x[: round(n * 0.4)]` and an interpolation's `floor(n * 1.5)` under dynamic shapes leave
    # these in ShapeEnv's guards (the frame ran eagerly: "cannot render RoundToInt")
    import math

    from torch.utils._sympy.functions import CeilToInt, FloorToInt, RoundToInt, ToFloat

    a = sympy.Symbol("a", integer=True)
    names = {a: "A"}
    half, three_halves, tenths = (sympy.Float(v) * ToFloat(a) for v in (0.5, 1.5, 0.3))
    cases = [
        (sympy.Le(RoundToInt(half), a), lambda n: round(n * 0.5) <= n),
        (sympy.Eq(RoundToInt(half), 2), lambda n: round(n * 0.5) == 2),
        (sympy.Eq(FloorToInt(three_halves), 4), lambda n: math.floor(n * 1.5) == 4),
        (sympy.Eq(CeilToInt(tenths), 2), lambda n: math.ceil(n * 0.3) == 2),
    ]
    for expr, expected in cases:
        text = render_sympy(expr, names.__getitem__)
        for n in range(-7, 12):
            # as Python computes it, and as torch's sympy functions evaluate it
            assert eval(text, {"A": n}) == expected(n), (text, n)
            assert eval(text, {"A": n}) == bool(expr.xreplace({a: sympy.Integer(n)})), (text, n)


def test_render_sympy_covers_bitwise_ops_of_symbolic_ints() -> None:
    # What `n & 1`, `n | 4`, `n ^ m` on SymInts leave in ShapeEnv's guards.
    from torch.utils._sympy.functions import (
        BitwiseFn_bitwise_and,
        BitwiseFn_bitwise_or,
        BitwiseFn_bitwise_xor,
    )

    a, b = sympy.symbols("a b", integer=True)
    names = {a: "A", b: "B"}
    cases = [
        (sympy.Eq(BitwiseFn_bitwise_and(a, 1), 1), lambda n, m: n & 1 == 1),
        (sympy.Gt(BitwiseFn_bitwise_or(a, 4) + b, 6), lambda n, m: (n | 4) + m > 6),
        (sympy.Ne(BitwiseFn_bitwise_xor(a, b), 0), lambda n, m: n ^ m != 0),
    ]
    for expr, expected in cases:
        text = render_sympy(expr, names.__getitem__)
        for n, m in itertools.product(range(-4, 9), range(-2, 6)):
            assert eval(text, {"A": n, "B": m}) == expected(n, m), (text, n, m)


def test_a_branch_on_a_bitwise_and_of_a_size_is_guarded() -> None:
    reals = {"x": torch.randn(5, 3)}

    def body(f):  # type: ignore[no-untyped-def]
        if f["x"].shape[0] & 1:
            pass

    shape_env, _, sources = trace_dynamic(reals, body)
    gs = GuardSet()
    gs.TENSOR_MATCH(LocalSource("x"), reals["x"], dynamic_dims=(0, 1))
    for pred, desc, operands in shape_guards(shape_env, sources):
        gs.SHAPE(pred, desc, operands=operands)
    cg = compile_guards(gs, {})
    assert [n for n in range(2, 10) if cg({"x": torch.randn(n, 3)})] == [3, 5, 7, 9]
