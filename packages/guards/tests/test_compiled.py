"""compile_guards: one generated function, never raising, ordered, with text and words."""

from __future__ import annotations

import ast
import types

import pytest
import torch

from guards import (
    AttrSource,
    CompiledGuards,
    GlobalSource,
    GuardError,
    GuardSet,
    ItemSource,
    LocalSource,
    compile_guards,
)


def module_guards(gs: GuardSet, self_: object, x: torch.Tensor) -> None:
    gs.CONSTANT_MATCH(AttrSource(LocalSource("self"), "training"), True)
    gs.TENSOR_MATCH(AttrSource(AttrSource(LocalSource("self"), "lin"), "weight"), x)
    gs.TENSOR_MATCH(LocalSource("x"), x)
    gs.ID_MATCH(LocalSource("self"), self_)
    gs.GLOBAL_STATE()
    gs.SHAPE("L['x'].size(0) == L['self'].lin.weight.size(0)", "x and weight agree")


@pytest.fixture
def model() -> tuple[types.SimpleNamespace, torch.Tensor]:
    x = torch.randn(3)
    self_ = types.SimpleNamespace(training=True, lin=types.SimpleNamespace(weight=x))
    return self_, x


def test_generated_code_is_one_flat_function(model) -> None:
    self_, x = model
    gs = GuardSet()
    module_guards(gs, self_, x)
    cg = compile_guards(gs, {})
    tree = ast.parse(cg.source_code)
    assert len(tree.body) == 1 and isinstance(tree.body[0], ast.FunctionDef)
    fn = tree.body[0]
    nested = [
        n for n in ast.walk(fn) if n is not fn and isinstance(n, ast.FunctionDef | ast.Lambda)
    ]
    assert nested == []
    assert [a.arg for a in fn.args.args] == ["L"]
    assert fn.args.kwonlyargs == []  # constants are globals of the function's own namespace
    check = cg.check
    assert isinstance(check, types.FunctionType)
    assert check.__globals__["G"] == {} and check.__kwdefaults__ is None
    # constants are not looked up through globals or attributes at call time
    assert "torch." not in cg.source_code
    assert cg({"self": self_, "x": x})


def test_each_source_is_read_once(model) -> None:
    self_, x = model
    gs = GuardSet()
    module_guards(gs, self_, x)
    code = compile_guards(gs, {}).source_code
    reads = [line.strip() for line in code.splitlines() if line.strip().startswith("v")]
    assert [r.split(" = ")[1] for r in reads] == [
        "L['self']",
        "v0.training",
        "L['x']",
        "v0.lin",
        "v3.weight",
    ]


def test_check_order_puts_cheap_kinds_first_then_tensors(model) -> None:
    self_, x = model
    gs = GuardSet()
    module_guards(gs, self_, x)
    kinds = [(g.kind, g.source.name() if g.source else None) for g in gs.guards]
    assert kinds == [
        ("ID_MATCH", "L['self']"),
        ("CONSTANT_MATCH", "L['self'].training"),
        ("TENSOR_MATCH", "L['x']"),
        ("TENSOR_MATCH", "L['self'].lin.weight"),
        ("DISPATCH_TLS", None),
        ("GLOBAL_STATE", None),
        ("SHAPE", None),
    ]


def test_exceptions_while_checking_mean_failed_not_raised(compile_set, verdict) -> None:
    class Boom:
        @property
        def training(self) -> bool:
            raise RuntimeError("property exploded")

    cg = compile_set(
        lambda gs: gs.CONSTANT_MATCH(AttrSource(LocalSource("self"), "training"), True)
    )
    ok, why = verdict(cg, {"self": Boom()})
    assert not ok
    assert why == [
        "CONSTANT_MATCH L['self'].training: reading it raised RuntimeError: property exploded"
    ]
    ok, why = verdict(cg, {})
    assert not ok and "KeyError" in why[0]
    ok, why = verdict(cg, {"self": object()})
    assert not ok and "AttributeError" in why[0]


def test_item_guard_on_a_shorter_list_fails_instead_of_raising(compile_set, verdict) -> None:
    def build(gs: GuardSet) -> None:
        gs.LENGTH(LocalSource("xs"), [1, 2])
        gs.CONSTANT_MATCH(ItemSource(LocalSource("xs"), 1), 2)

    cg = compile_set(build)
    assert verdict(cg, {"xs": [1, 2]})[0]
    ok, why = verdict(cg, {"xs": [1]})
    assert not ok
    assert why[0] == "len(L['xs']) == 2 expected, got 1"
    assert "IndexError" in why[1]


def test_shape_predicate_is_checked_and_explained(compile_set, verdict) -> None:
    cg = compile_set(lambda gs: gs.SHAPE("L['x'].size(0) > 2", "s0 > 2"))
    assert verdict(cg, {"x": torch.randn(3)})[0]
    assert verdict(cg, {"x": torch.randn(2)}) == (
        False,
        ["shape guard failed: s0 > 2 (L['x'].size(0) > 2)"],
    )


def test_a_predicate_that_is_not_about_sizes_is_named_so_in_the_log_and_the_reason(
    compile_set, verdict
) -> None:
    cg = compile_set(lambda gs: gs.SHAPE("not L['hooks']", "no hooks", label="PREDICATE"))
    assert verdict(cg, {"hooks": {}})[0]
    assert verdict(cg, {"hooks": {1: 2}}) == (
        False, ["predicate guard failed: no hooks (not L['hooks'])"]
    )
    guard_set = GuardSet()
    guard_set.SHAPE("not L['hooks']", "no hooks", label="PREDICATE")
    assert [g.text() for g in guard_set.guards] == ["PREDICATE: not L['hooks']  # no hooks"]


def test_bad_shape_predicate_is_rejected_when_added() -> None:
    with pytest.raises(GuardError):
        GuardSet().SHAPE("L['x'].size(0) >", "broken")


def test_global_state_changes_fail_with_their_names(compile_set, verdict) -> None:
    cg = compile_set(lambda gs: gs.GLOBAL_STATE())
    assert verdict(cg, {}) == (True, [])
    with torch.no_grad():
        assert verdict(cg, {}) == (
            False,
            ["global state grad_enabled: expected True, actual False"],
        )
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        ok, why = verdict(cg, {})
    finally:
        torch.set_default_dtype(old)
    assert why == ["global state default_dtype: expected torch.float32, actual torch.float64"]
    torch.use_deterministic_algorithms(True)
    try:
        ok, why = verdict(cg, {})
    finally:
        torch.use_deterministic_algorithms(False)
    assert why == ["global state deterministic_algorithms: expected False, actual True"]
    with torch.autocast("cpu"):
        ok, why = verdict(cg, {})
    assert why == ["global state any_autocast: expected False, actual True"]
    assert verdict(cg, {}) == (True, [])


def test_global_state_captured_under_autocast_checks_its_dtype(compile_set, verdict) -> None:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cg = compile_set(lambda gs: gs.GLOBAL_STATE())
        assert verdict(cg, {})[0]
    with torch.autocast("cpu", dtype=torch.float16):
        ok, why = verdict(cg, {})
    assert not ok and why[0].startswith("global state autocast[cpu]")


def test_text_lists_one_guard_per_line_in_check_order(model) -> None:
    self_, x = model
    gs = GuardSet()
    module_guards(gs, self_, x)
    cg = compile_guards(gs, {})
    lines = cg.text.splitlines()
    assert len(lines) == len(cg.guards) == 7
    assert lines[0] == f"ID_MATCH: L['self'] id={id(self_)} type=types.SimpleNamespace"
    assert lines[1] == "CONSTANT_MATCH: L['self'].training == True type=bool"
    assert lines[5].startswith("GLOBAL_STATE: grad_enabled=True")
    assert lines[6] == "SHAPE: L['x'].size(0) == L['self'].lin.weight.size(0)  # x and weight agree"


def test_add_base_guards_pins_the_types_of_intermediate_objects(verdict) -> None:
    x = torch.randn(2)
    self_ = types.SimpleNamespace(lin=types.SimpleNamespace(weight=x))
    other = types.SimpleNamespace(lin={"weight": x})
    gs = GuardSet()
    gs.TENSOR_MATCH(AttrSource(AttrSource(LocalSource("self"), "lin"), "weight"), x)
    gs.add_base_guards({"self": self_}, {})
    kinds = [(g.kind, g.source.name()) for g in gs.guards if g.source is not None]
    assert kinds == [
        ("TYPE_MATCH", "L['self']"),
        ("TYPE_MATCH", "L['self'].lin"),
        ("TENSOR_MATCH", "L['self'].lin.weight"),
    ]
    cg = compile_guards(gs, {})
    assert verdict(cg, {"self": self_})[0]
    ok, why = verdict(cg, {"self": other})
    assert not ok and why[0].startswith("type(L['self'].lin) is types.SimpleNamespace expected")


def test_compiled_guards_is_the_callable_entry_guard(model) -> None:
    self_, x = model
    gs = GuardSet()
    module_guards(gs, self_, x)
    cg = compile_guards(gs, {})
    assert isinstance(cg, CompiledGuards)
    assert cg.check({"self": self_, "x": x}) is True
    assert cg({"self": self_, "x": torch.randn(4)}) is False


def test_globals_dict_is_used_live_not_copied(compile_set, verdict) -> None:
    g: dict[str, object] = {}
    cg = compile_set(lambda gs: gs.TYPE_MATCH(GlobalSource("late"), 1), g)
    assert not verdict(cg, {})[0]
    g["late"] = 5
    assert verdict(cg, {})[0]


def test_guard_set_update_merges_duplicates() -> None:
    a, b = GuardSet(), GuardSet()
    a.CONSTANT_MATCH(LocalSource("n"), 1)
    b.CONSTANT_MATCH(LocalSource("n"), 1)
    b.TYPE_MATCH(LocalSource("m"), 2)
    a.update(b)
    assert len(a) == 2


def test_shape_predicate_may_not_name_generated_locals() -> None:
    with pytest.raises(GuardError, match="v0"):
        GuardSet().SHAPE("v0 is not None", "sneaky")
    GuardSet().SHAPE("max(L['x'].size(0), 2) == 2", "builtins are fine")


def test_failures_reads_non_literal_keys_like_the_check(compile_set, verdict) -> None:
    import enum

    class Key(enum.Enum):
        A = 1

    src = ItemSource(AttrSource(LocalSource("self"), "table"), Key.A)
    cg = compile_set(lambda gs: gs.CONSTANT_MATCH(src, 5))
    holder = types.SimpleNamespace(table={Key.A: 5})
    assert verdict(cg, {"self": holder}) == (True, [])
    holder.table[Key.A] = 6
    ok, why = verdict(cg, {"self": holder})
    assert not ok and why[0].endswith("expected, got 6")
    assert src.resolve({"self": holder}, {}) == 6


def test_global_state_sees_torch_function_and_dispatch_modes(compile_set, verdict) -> None:
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    class FnMode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            return func(*args, **(kwargs or {}))

    class DispMode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            return func(*args, **(kwargs or {}))

    cg = compile_set(lambda gs: gs.GLOBAL_STATE())
    with FnMode():
        assert verdict(cg, {}) == (
            False,
            ["global state torch_function_modes: expected 0, actual 1"],
        )
    with DispMode():
        assert verdict(cg, {}) == (
            False,
            ["global state torch_dispatch_modes: expected 0, actual 1"],
        )
    assert verdict(cg, {}) == (True, [])


def test_guards_on_a_base_come_before_guards_read_through_it() -> None:
    # A tensor guard on L['t'] (expensive class) and a constant read through it (cheap
    # class): the base's guard still comes first, so the read never meets a non-tensor.
    gs = GuardSet()
    t = torch.randn(3)
    gs.CONSTANT_MATCH(AttrSource(LocalSource("t"), "is_leaf"), True)
    gs.TENSOR_MATCH(LocalSource("t"), t)
    gs.CONSTANT_MATCH(LocalSource("n"), 1)
    order = [(g.kind, g.source.name() if g.source else None) for g in gs.guards]
    assert order == [
        ("CONSTANT_MATCH", "L['n']"),
        ("TENSOR_MATCH", "L['t']"),
        ("CONSTANT_MATCH", "L['t'].is_leaf"),
        ("DISPATCH_TLS", None),
    ]


def test_check_is_a_plain_function_carrying_failures(model) -> None:
    self_, x = model
    gs = GuardSet()
    module_guards(gs, self_, x)
    cg = compile_guards(gs, {})
    assert isinstance(cg.check, types.FunctionType)
    good = {"self": self_, "x": x}
    bad = {"self": self_, "x": torch.randn(9, 9)}
    assert cg.check(good) is True and cg(good) is True
    assert cg.check(bad) is False and cg(bad) is False
    assert cg.check.failures(bad) == cg.failures(bad) != []  # type: ignore[attr-defined]
    assert cg.check.compiled_guards is cg  # type: ignore[attr-defined]


def test_autocast_read_is_folded_into_the_tls_exclude_compare(compile_set, verdict) -> None:
    x = torch.randn(3)

    def build(gs: GuardSet) -> None:
        gs.TENSOR_MATCH(LocalSource("x"), x)
        gs.GLOBAL_STATE()

    with_tls = compile_set(build)
    alone = compile_set(lambda gs: gs.GLOBAL_STATE())
    assert "any_autocast" not in with_tls.source_code
    assert "any_autocast" in alone.source_code
    for device in ("cpu", "cuda"):
        # Autocast on any device flips a bit of the exclude set: both checks fail.
        torch.set_autocast_enabled(device, True)
        try:
            assert not verdict(with_tls, {"x": x})[0]
            assert not verdict(alone, {})[0]
        finally:
            torch.set_autocast_enabled(device, False)
    assert verdict(with_tls, {"x": x}) == (True, [])


def test_autocast_read_is_kept_when_tls_was_read_in_another_state(compile_set) -> None:
    x = torch.randn(3)
    gs = GuardSet()
    with torch.autocast("cpu"):
        gs.GLOBAL_STATE()
    gs.TENSOR_MATCH(LocalSource("x"), x)
    assert "any_autocast" in compile_guards(gs, {}).source_code


class _Hooks:
    def __init__(self) -> None:
        self.inner = types.SimpleNamespace(hooks={}, n=3)


def test_predicate_operands_are_read_once_with_the_other_sources(compile_set, verdict) -> None:
    obj = _Hooks()
    inner = AttrSource(LocalSource("o"), "inner")

    def build(gs: GuardSet) -> None:
        gs.TYPE_MATCH(inner, obj.inner)
        gs.SHAPE("not m.hooks and m.n > 2", "no hooks, n > 2", operands={"m": inner})
        gs.SHAPE("'forward' not in m.__dict__", "no instance forward", operands={"m": inner})
        gs.SHAPE("L['p'].q == 1", "a predicate over L stays as written")

    cg = compile_set(build)
    code = cg.source_code
    assert code.count("v1 = v0.inner") == 1  # read once, by TYPE_MATCH, reused below
    assert "not v1.hooks and v1.n > 2" in code
    assert "'forward' not in v1.__dict__" in code
    assert "L['p'].q == 1" in code
    p = types.SimpleNamespace(q=1)
    assert verdict(cg, {"o": obj, "p": p}) == (True, [])
    obj.inner.hooks["h"] = 1
    assert verdict(cg, {"o": obj, "p": p})[1] == [
        "shape guard failed: no hooks, n > 2 (not L['o'].inner.hooks and L['o'].inner.n > 2)"
    ]
    obj.inner = types.SimpleNamespace(hooks={}, n=3, forward=None)  # a new object at the path
    assert not verdict(cg, {"o": obj, "p": p})[0]
    assert not verdict(cg, {"o": types.SimpleNamespace(), "p": p})[0]


def test_predicate_operands_with_keys_and_names_no_expression_can_spell(
    compile_set, verdict
) -> None:
    import enum

    class Key(enum.Enum):
        A = 1
        B = 2

    table = ItemSource(LocalSource("d"), Key.A)
    other = ItemSource(LocalSource("d"), Key.B)
    odd = AttrSource(LocalSource("o"), "a weird-name")
    shared = object()

    def build(gs: GuardSet) -> None:
        gs.SHAPE("a is b", "d[A] is d[B]", label="PREDICATE", operands={"a": table, "b": other})
        gs.SHAPE("not hasattr(x, 'foo')", "no foo", label="PREDICATE", operands={"x": odd})

    cg = compile_set(build)
    holder = types.SimpleNamespace(**{"a weird-name": types.SimpleNamespace()})
    assert verdict(cg, {"d": {Key.A: shared, Key.B: shared}, "o": holder}) == (True, [])
    ok, why = verdict(cg, {"d": {Key.A: shared, Key.B: object()}, "o": holder})
    assert not ok and why == [
        "predicate guard failed: d[A] is d[B] (L['d'][<Key.A: 1>] is L['d'][<Key.B: 2>])"
    ]
    getattr(holder, "a weird-name").foo = 1
    assert not verdict(cg, {"d": {Key.A: shared, Key.B: shared}, "o": holder})[0]


def test_predicate_operand_names_must_be_fresh() -> None:
    with pytest.raises(GuardError, match="len"):
        GuardSet().SHAPE("len > 1", "shadowing a builtin", operands={"len": LocalSource("x")})
    with pytest.raises(GuardError, match="y"):
        GuardSet().SHAPE("x is y", "y is no operand", operands={"x": LocalSource("x")})


def test_explaining_failures_keeps_no_frame_value_alive(model) -> None:
    # failures() runs on every recompile with the frame's locals: a reference cycle there kept
    # them (a suspended generator, the user's tensors) alive until the next garbage collection,
    # so a generator's finally ran late (found by the fuzzer's py_objects family).
    import gc
    import weakref

    self_, x = model
    gs = GuardSet()
    module_guards(gs, self_, x)
    gs.CONSTANT_MATCH(ItemSource(LocalSource("lst"), 0), 1.0)
    cg = compile_guards(gs, {})

    class Held:
        pass

    held = Held()
    alive = weakref.ref(held)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        assert cg.failures({"self": self_, "x": torch.randn(9, 9), "lst": [2.0], "h": held})
        del held
        assert alive() is None
    finally:
        if was_enabled:
            gc.enable()
