"""symbolic_vm.emit: the transformed code's statements assembled into instructions behave as
CPython's compiled function of the same statements (results, writes, names resolved alike).

The statements are written here as text and parsed, for readable cases; the transformed code
builds the same trees with emit's constructors (test_built_statements_print_as_they_run)."""

from __future__ import annotations

import ast
import types
from typing import Any

import pytest

from symbolic_vm import emit
from symbolic_vm.bytecode import Signature, assemble
from symbolic_vm.bytecode.codegen import prologue

GLOBAL_LIST = [10, 20, 30]


class Box:
    def __init__(self) -> None:
        self.items: list[object] = [1, 2]
        self.table: dict[str, object] = {"k": -3}

    def pair(self, x: object, *, y: object = None) -> tuple[object, object]:
        return x, y


def spread(*args: object) -> tuple[object, ...]:
    return args


def collect(*args: object, **kwargs: object) -> tuple[tuple[object, ...], dict[str, object]]:
    return args, kwargs


def template(a: Any, b: Any) -> None:
    """Only its argument layout is used."""


def emit_statements(lines: list[str], *, params: Any, derefs: Any) -> Any:
    return emit.emit_body(ast.parse("\n".join(lines)).body, params=params, derefs=derefs)


def both(lines: list[str]) -> tuple[types.FunctionType, types.FunctionType]:
    """The function compiled by CPython from ``lines`` and the one assembled by emit."""
    source = "def f(a, b):\n" + "".join(f"    {line}\n" for line in lines)
    namespace: dict[str, Any] = dict(globals())
    exec(compile(source, "<test>", "exec"), namespace)
    code = template.__code__
    body = emit_statements(lines, params=code.co_varnames[:2], derefs=())
    built = assemble(
        [*prologue(Signature.from_code(code)), *body], template=code, co_consts=(), co_names=(),
        co_varnames=code.co_varnames[:2],
    )
    return namespace["f"], types.FunctionType(built, dict(globals()))


CASES = {
    "reads": ["return (a.items[0], a.table['k'], b[-1], GLOBAL_LIST[1])"],
    "displays": ["t = {'x': [a.items, (b[0],)], 2: {1, 2}}", "return t"],
    "negative constants": ["return (-1, -2.5, -0.0, 3)"],
    "keyword method call": ["return a.pair(b[0], y=b[1])"],
    "starred spread": ["p = (b[1], b[2])", "return spread(a.items[0], *p)"],
    "starred alone": ["return spread(*b)"],
    "whole slice store": ["a.items[:] = [b[0], b[1]]", "return a.items"],
    "setattr and clear/update": [
        "setattr(a, 'extra', b[0])", "a.table.clear()", "a.table.update({'z': b[1]})",
        "return (a.extra, a.table)",
    ],
    "subscript store": ["a.table['n'] = b[2]", "return a.table"],
    # f(*a, **kw) and starred displays: the forms a resumed region's code may need
    "starred call with keywords": ["p = (b[0],)", "return a.pair(*p, y=b[1])"],
    "double-star call": ["kw = {'y': b[0]}", "return a.pair(b[1], **kw)"],
    "double-star call alone": ["return collect(**a.table)"],
    "star, keywords and double stars in order": [
        "return collect(b[0], *b, w=1, **a.table, m=b[2], **{'j': b[1]}, z=3)",
    ],
    "starred tuple display": ["return (*b, a.items[0])"],
    "starred list display": ["return [b[0], *a.items, *b, 7]"],
    "starred set display": ["return {*b, 9, *a.items}"],
    "double-star dict display": [
        "return {'p': 1, **a.table, 'q': b[0], 'r': b[1], **{'s': 2}, 't': 3}",
    ],
    "double-star dict display alone": ["return {**a.table}"],
}


@pytest.mark.parametrize("lines", CASES.values(), ids=list(CASES))
def test_assembled_statements_behave_as_compiled_ones(lines: list[str]) -> None:
    compiled, assembled = both(lines)
    left, right = Box(), Box()
    assert compiled(left, [4, 5, 6]) == assembled(right, [4, 5, 6])
    assert vars(left) == vars(right)


def test_negative_zero_keeps_its_sign() -> None:
    _, assembled = both(["return -0.0"])
    assert str(assembled(None, None)) == "-0.0"


def test_cell_and_free_variables_are_derefs_and_nonlocal_writes_reach_the_cell() -> None:
    def outer() -> tuple[Any, Any]:
        seen = 0

        def inner(a: Any, b: Any) -> Any:
            nonlocal seen
            return seen

        return inner, lambda: seen

    inner, read = outer()
    code = inner.__code__
    lines = ["nonlocal seen", "seen = spread(a, b)", "return seen"]
    body = emit_statements(lines, params=code.co_varnames[:2], derefs=code.co_freevars)
    built = assemble(
        [*prologue(Signature.from_code(code)), *body], template=code, co_consts=(), co_names=(),
        co_varnames=code.co_varnames[:2],
    )
    assert built.co_freevars == ("seen",)
    fn = types.FunctionType(built, {"spread": spread}, "inner", None, inner.__closure__)
    assert fn(2, 3) == (2, 3)
    assert read() == (2, 3)  # the write went to the shared cell


def test_a_repeated_keyword_through_double_star_raises_as_compiled() -> None:
    compiled, assembled = both(["return collect(k=b[0], **a.table)"])
    box = Box()
    box.table["k"] = 1
    for fn in (compiled, assembled):
        with pytest.raises(TypeError, match="multiple values for keyword argument 'k'"):
            fn(box, [4])


def test_statements_outside_the_subset_are_refused() -> None:
    with pytest.raises(AssertionError):
        emit_statements(["for x in a: pass"], params=("a",), derefs=())


def test_built_statements_print_as_they_run() -> None:
    """Trees made with emit's constructors run as CPython runs their printout."""
    body = [
        emit.assign(emit.name("t"), emit.build("tuple", [
            emit.item(emit.attr(emit.name("a"), "items"), emit.const(0)), emit.const(-0.0),
        ])),
        emit.assign(emit.item(emit.attr(emit.name("a"), "items"), emit.whole_slice()),
                    emit.build("list", [emit.item(emit.name("b"), emit.const(2))])),
        emit.expr_statement(emit.call(emit.attr(emit.attr(emit.name("a"), "table"), "update"),
                                      [emit.dict_display([(emit.const("z"), emit.name("t"))])])),
        emit.returns(emit.call(emit.name("spread"), [emit.starred(emit.name("t"))],
                               )),
    ]
    lines = [emit.printout(statement) for statement in body]
    assert lines[0] == "t = (a.items[0], -0.0)"
    compiled, _ = both(lines)
    code = template.__code__
    built = assemble(
        [*prologue(Signature.from_code(code)),
         *emit.emit_body(body, params=code.co_varnames[:2], derefs=())],
        template=code, co_consts=(), co_names=(), co_varnames=code.co_varnames[:2],
    )
    assembled = types.FunctionType(built, dict(globals()))
    left, right = Box(), Box()
    assert compiled(left, [4, 5, 6]) == assembled(right, [4, 5, 6])
    assert vars(left) == vars(right)
