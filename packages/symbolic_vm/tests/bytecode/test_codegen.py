"""Code built from scratch with the codegen helpers runs like the Python it stands for."""

from __future__ import annotations

import sys
import traceback
import types
from typing import Any

import pytest

from symbolic_vm.bytecode import (
    AssemblyError,
    Instr,
    Label,
    Position,
    Signature,
    codegen,
    decode,
    function_from_code,
    make_code,
)
from symbolic_vm.bytecode.codegen import (
    binary_op,
    build,
    call_function,
    call_global,
    call_method,
    compare_op,
    for_loop,
    jump,
    load_attr,
    load_const,
    load_deref,
    load_fast,
    make_function,
    pop_jump_if,
    return_value,
    store_attr,
    store_deref,
    store_fast,
    unpack_sequence,
    with_position,
    yield_value,
)


def _fn(code: types.CodeType, globals_: dict[str, Any] | None = None, **kw: Any) -> Any:
    return function_from_code(code, {"__builtins__": __builtins__, **(globals_ or {})}, **kw)


def test_call_global_with_positional_and_keyword_arguments() -> None:
    # def f(x, y): return helper(x, scale=y) + 1
    def helper(v: int, scale: int = 1) -> int:
        return v * scale

    body = [
        *call_global("helper", [[load_fast("x")]], {"scale": [load_fast("y")]}),
        load_const(1),
        binary_op("+"),
        return_value(),
    ]
    f = _fn(make_code(body, Signature(argnames=("x", "y")), name="f"), {"helper": helper})
    assert f(3, 4) == helper(3, scale=4) + 1 == 13
    assert f(-2, 5) == -9


def test_call_method_and_call_of_a_loaded_value() -> None:
    # def f(xs, g): xs.append(5); return g(len(xs), xs[0])
    body = [
        *call_method([load_fast("xs")], "append", [[load_const(5)]]),
        Instr("POP_TOP"),
        *call_function(
            [load_fast("g")],
            [
                call_global("len", [[load_fast("xs")]]),
                [load_fast("xs"), load_const(0), Instr("BINARY_SUBSCR")],
            ],
        ),
        return_value(),
    ]
    f = _fn(make_code(body, Signature(argnames=("xs", "g"))))
    xs = [7]
    assert f(xs, lambda a, b: (a, b)) == (2, 7)
    assert xs == [7, 5]


def test_unpack_a_returned_tuple_and_rebuild_containers() -> None:
    # def f(t): a, b = split(t); return [b, a], {"a": a, "b": b}, (a,), {b}
    def split(t: tuple[int, int]) -> tuple[int, int]:
        return t[0] * 10, t[1] * 100

    body = [
        *call_global("split", [[load_fast("t")]]),
        unpack_sequence(2),
        store_fast("a"),
        store_fast("b"),
        load_fast("b"),
        load_fast("a"),
        build("list", 2),
        load_const("a"),
        load_fast("a"),
        load_const("b"),
        load_fast("b"),
        build("dict", 2),
        load_fast("a"),
        build("tuple", 1),
        load_fast("b"),
        build("set", 1),
        build("tuple", 4),
        return_value(),
    ]
    f = _fn(make_code(body, Signature(argnames=("t",))), {"split": split})
    assert f((1, 2)) == ([200, 10], {"a": 10, "b": 200}, (10,), {200})


def test_store_and_load_attributes() -> None:
    # def f(obj, v): obj.x = v; return obj.x * 2
    body = [
        load_fast("v"),
        load_fast("obj"),
        store_attr("x"),
        load_fast("obj"),
        load_attr("x"),
        load_const(2),
        binary_op("*"),
        return_value(),
    ]
    f = _fn(make_code(body, Signature(argnames=("obj", "v"))))
    obj = types.SimpleNamespace()
    assert f(obj, 21) == 42
    assert obj.x == 21


def test_closure_built_with_make_function_captures_a_cell() -> None:
    # def outer(x): c = x * 2; def inner(y): return c + y; return inner
    inner = make_code(
        [load_deref("c"), load_fast("y"), binary_op("+"), return_value()],
        Signature(argnames=("y",), freevars=("c",)),
        name="inner",
    )
    outer = make_code(
        [
            load_fast("x"),
            load_const(2),
            binary_op("*"),
            store_deref("c"),
            *make_function(inner, closure=["c"]),
            return_value(),
        ],
        Signature(argnames=("x",), cellvars=("c",)),
        name="outer",
    )
    made = _fn(outer)(3)
    assert made(4) == 10
    assert made.__code__.co_freevars == ("c",)


def test_argument_that_is_also_a_cell() -> None:
    # def outer(x): def inner(): return x; x = x + 1; return inner
    inner = make_code([load_deref("x"), return_value()], Signature(freevars=("x",)), name="inner")
    outer = make_code(
        [
            *make_function(inner, closure=["x"]),
            load_deref("x"),
            load_const(1),
            binary_op("+"),
            store_deref("x"),
            return_value(),
        ],
        Signature(argnames=("x",), cellvars=("x",)),
    )
    assert _fn(outer)(41)() == 42


def test_make_function_with_defaults_and_function_from_code_closure() -> None:
    inner = make_code(
        [load_fast("a"), load_fast("b"), build("tuple", 2), return_value()],
        Signature(argnames=("a", "b")),
    )
    outer = make_code([*make_function(inner, defaults=(7,)), return_value()])
    g = _fn(outer)()
    assert g(1) == (1, 7)
    assert g(1, 2) == (1, 2)
    adder = make_code(
        [load_deref("k"), load_fast("v"), binary_op("+"), return_value()],
        Signature(argnames=("v",), freevars=("k",)),
    )
    assert _fn(adder, closure=[100])(5) == 105
    with pytest.raises(AssemblyError):
        _fn(adder)


def test_loop_and_conditional_jumps_built_from_labels() -> None:
    # def f(n): total = 0; for i in range(n): if i % 3 == 0: continue; total += i; return total
    skip = Label("skip")
    body = [
        load_const(0),
        store_fast("total"),
        *call_global("range", [[load_fast("n")]]),
        Instr("GET_ITER"),
        *for_loop(
            [store_fast("i")],
            [
                load_fast("i"),
                load_const(3),
                binary_op("%"),
                load_const(0),
                compare_op("=="),
                *pop_jump_if(True, skip),
                load_fast("total"),
                load_fast("i"),
                binary_op("+="),
                store_fast("total"),
                skip,
                Instr("NOP"),
            ],
        ),
        load_fast("total"),
        return_value(),
    ]
    f = _fn(make_code(body, Signature(argnames=("n",))))
    for n in (0, 1, 5, 30):
        assert f(n) == sum(i for i in range(n) if i % 3 != 0)


def test_backward_conditional_jump_is_encodable_on_every_version() -> None:
    # def f(n): i = 0; while True: i += 1; if i < n: goto top; return i  (a do-while)
    top = Label("top")
    body = [
        load_const(0),
        store_fast("i"),
        top,
        load_fast("i"),
        load_const(1),
        binary_op("+="),
        store_fast("i"),
        load_fast("i"),
        load_fast("n"),
        compare_op("<"),
        *pop_jump_if(True, top),
        load_fast("i"),
        return_value(),
    ]
    f = _fn(make_code(body, Signature(argnames=("n",))))
    assert [f(n) for n in (0, 1, 4)] == [1, 1, 4]


def test_none_checks_and_unconditional_forward_jump() -> None:
    is_none, done = Label(), Label()
    body = [
        load_fast("x"),
        *pop_jump_if(None, is_none),
        load_const("value"),
        jump(done),
        is_none,
        load_const("none"),
        done,
        return_value(),
    ]
    f = _fn(make_code(body, Signature(argnames=("x",))))
    assert (f(None), f(0)) == ("none", "value")


def test_generator_built_with_yield_value() -> None:
    # def g(xs): for x in xs: yield x * x
    body = [
        load_fast("xs"),
        Instr("GET_ITER"),
        *for_loop(
            [store_fast("x")], [load_fast("x"), load_fast("x"), binary_op("*"), *yield_value()]
        ),
        load_const(None),
        return_value(),
    ]
    g = _fn(make_code(body, Signature(argnames=("xs",)), generator=True))
    assert list(g([1, 2, 3])) == [1, 4, 9]
    gen = g([5, 6])
    assert next(gen) == 25
    gen.close()


def test_signature_keeps_kwonly_varargs_and_varkw_layout() -> None:
    sig = Signature(argnames=("a", "b"), posonly=1, kwonly=("k",), varargs="args", varkw="kw")
    body = [
        load_fast("a"),
        load_fast("b"),
        load_fast("k"),
        load_fast("args"),
        load_fast("kw"),
        build("tuple", 5),
        return_value(),
    ]
    f = _fn(make_code(body, sig), kwdefaults={"k": 9})
    assert f(1, 2, 3, z=4) == (1, 2, 9, (3,), {"z": 4})

    def ref(a, /, b, *args, k, **kw):  # type: ignore[no-untyped-def]
        return (a, b, k, args, kw)

    assert Signature.from_code(ref.__code__) == sig
    with pytest.raises(TypeError):
        f(a=1, b=2, k=3)


def test_positions_appear_in_tracebacks() -> None:
    body = with_position(
        [load_const(1), load_const(0), binary_op("/"), return_value()],
        Position(lineno=42, end_lineno=42, col_offset=4, end_col_offset=9),
    )
    f = _fn(make_code(body, filename="user.py", firstlineno=40))
    with pytest.raises(ZeroDivisionError) as info:
        f()
    last = traceback.extract_tb(info.value.__traceback__)[-1]
    assert (last.filename, last.lineno) == ("user.py", 42)


def test_call_helpers_emit_this_versions_call_sequence() -> None:
    names = [i.opname for i in call_global("f", [[load_const(1)]], {"k": [load_const(2)]})]
    if sys.version_info < (3, 12):
        assert names == ["LOAD_GLOBAL", "LOAD_CONST", "LOAD_CONST", "KW_NAMES", "PRECALL", "CALL"]
    elif sys.version_info < (3, 13):
        assert names == ["LOAD_GLOBAL", "LOAD_CONST", "LOAD_CONST", "KW_NAMES", "CALL"]
    else:
        assert names == ["LOAD_GLOBAL", "LOAD_CONST", "LOAD_CONST", "LOAD_CONST", "CALL_KW"]


def test_helpers_match_what_the_compiler_emits_for_a_call() -> None:
    # The same call written in Python: compare the decoded instructions (no positions).
    def ref(x):  # type: ignore[no-untyped-def]
        return helper(x, k=x)  # type: ignore[name-defined]  # noqa: F821

    ours = [*call_global("helper", [[load_fast("x")]], {"k": [load_fast("x")]}), return_value()]
    theirs = [i for i in decode(ref.__code__) if isinstance(i, Instr)]
    theirs = [i for i in theirs if i.opname not in ("RESUME",)]
    strip = lambda seq: [(i.opname, i.arg, i.flags) for i in seq]  # noqa: E731
    if sys.version_info >= (3, 13):
        # 3.13's compiler fuses the two loads into LOAD_FAST_LOAD_FAST.
        theirs_s = strip(theirs)
        assert theirs_s[0] == ("LOAD_GLOBAL", "helper", 1)
        assert theirs_s[-2:] == strip(ours[-2:])
    else:
        assert strip(theirs) == strip(ours)


def test_binary_op_table_covers_in_place_operators() -> None:
    f = _fn(
        make_code(
            [load_fast("a"), load_fast("b"), codegen.binary_op("**="), return_value()],
            Signature(argnames=("a", "b")),
        )
    )
    assert f(2, 10) == 1024
    with pytest.raises(AssemblyError):
        codegen.binary_op("<>")


def test_call_function_ex_with_star_args_and_star_star_kwargs() -> None:
    # def f(t, d): return g(*t, **d); and h(t): return g(*t)
    def g(*args: int, **kw: int) -> tuple[tuple[int, ...], dict[str, int]]:
        return args, kw

    both = [
        *codegen.call_function_ex([load_fast("g")], [load_fast("t")], [load_fast("d")]),
        return_value(),
    ]
    f = _fn(make_code(both, Signature(argnames=("g", "t", "d"))))
    assert f(g, (1, 2), {"k": 3}) == g(*(1, 2), **{"k": 3})
    only_args = [*codegen.call_function_ex([load_fast("g")], [load_fast("t")]), return_value()]
    h = _fn(make_code(only_args, Signature(argnames=("g", "t"))))
    assert h(g, [4, 5]) == ((4, 5), {})


def test_make_function_with_keyword_only_defaults() -> None:
    inner = make_code(
        [load_fast("a"), load_fast("k"), build("tuple", 2), return_value()],
        Signature(argnames=("a",), kwonly=("k",)),
    )
    outer = make_code(
        [*make_function(inner, defaults=(1,), kwdefaults={"k": "kw"}), return_value()]
    )
    made = _fn(outer)()
    assert made() == (1, "kw")
    assert made(2, k=3) == (2, 3)
    assert made.__kwdefaults__ == {"k": "kw"}
