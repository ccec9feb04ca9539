"""CPython 3.13's bytecode forms, each compiled and compared with eager and torch.compile.

Every case names the 3.13 opcodes (or operand forms) it is written to produce, and on 3.13 the
test first checks the function's code really holds them, so that a change of compiler cannot
turn a case into one that no longer exercises its handler. On 3.11/3.12 the same functions run
as ordinary compiled-vs-eager cases (their opcodes differ; the check is skipped).

Each case is captured in one graph with ``fullgraph=True`` (a handler that refused the form
would raise), gives eager's result, and makes no more graphs than torch.compile (where
torch.compile itself succeeds: torch 2.13's Dynamo fails on reading ``__defaults__`` of a function
made in the frame, "push expects VariableTracker, got tuple").
"""

from __future__ import annotations

import dis
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from object_model_harness import run_three_ways, same
from torch_reference import torch_reference

import compile_api

pytestmark = pytest.mark.usefixtures("errors_raise")

ON_313 = sys.version_info[:2] == (3, 13)

# SET_FUNCTION_ATTRIBUTE's operand: which attribute of the new function it sets.
_DEFAULTS, _KWDEFAULTS, _ANNOTATIONS, _CLOSURE = 1, 2, 4, 8
# CALL_INTRINSIC_1's operands used below (Include/internal/pycore_intrinsics.h).
_INTRINSIC_STOPITERATION_ERROR, _INTRINSIC_UNARY_POSITIVE, _INTRINSIC_LIST_TO_TUPLE = 3, 5, 6


def _instructions(code: types.CodeType) -> Iterator[dis.Instruction]:
    yield from dis.get_instructions(code)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _instructions(const)


def _forms(*fns: Callable[..., Any]) -> set[str | tuple[str, int]]:
    """The opcode names in the functions' code (nested code included), and (name, operand)
    pairs for the opcodes whose operand selects a form."""
    found: set[str | tuple[str, int]] = set()
    for fn in fns:
        for inst in _instructions(fn.__code__):
            found.add(inst.opname)
            if inst.opname in {"SET_FUNCTION_ATTRIBUTE", "CALL_INTRINSIC_1", "CONVERT_VALUE"}:
                found.add((inst.opname, inst.arg or 0))
    return found


def _check(
    fn: Callable[..., Any],
    make_args: Callable[[], tuple[Any, ...]],
    forms: set[str | tuple[str, int]],
    *,
    graphs: int = 1,
    callees: tuple[Callable[..., Any], ...] = (),
) -> None:
    """``forms`` must be in the code of ``fn`` or of the ``callees`` it inlines (on 3.13)."""
    if ON_313:
        missing = forms - _forms(fn, *callees)
        assert not missing, f"{fn.__name__} no longer compiles to {missing} on 3.13"
    runs = run_three_ways(fn, make_args)
    same(runs.ours, runs.eager)
    assert runs.our_graphs == graphs
    if not isinstance(runs.theirs, Exception):  # torch 2.13 fails on some (nested_functions)
        with torch_reference():
            same(runs.theirs, runs.eager)
            assert graphs <= runs.their_graphs
    # fullgraph: no form may fall back to Python (a break would raise here).
    compile_api.reset()
    strict = compile_api.compile(fn, backend="eager", fullgraph=True)
    same(strict(*make_args()), fn(*make_args()))


def _tensors() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.arange(6.0).reshape(2, 3), torch.linspace(-1.0, 1.0, 6).reshape(2, 3)


# --- LOAD_FAST_LOAD_FAST, STORE_FAST_STORE_FAST, STORE_FAST_LOAD_FAST -------------------------


def pair_instructions(x: torch.Tensor, y: torch.Tensor) -> Any:
    a, b = y, x
    c = a * 2; d = c + b  # noqa: E702 - one line: 3.13 fuses the store and the load
    b, a = a, b
    return a - b, c * d


def test_pair_loads_and_stores_of_locals() -> None:
    _check(
        pair_instructions,
        _tensors,
        {"LOAD_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST", "STORE_FAST_LOAD_FAST"},
    )


def pair_instructions_in_a_loop(x: torch.Tensor, n: int) -> Any:
    acc, prev = x, x
    for i in range(n):
        prev, acc = acc, acc + prev * i
    return acc, prev


def test_pair_stores_in_a_loop_body() -> None:
    _check(
        pair_instructions_in_a_loop,
        lambda: (torch.ones(3), 4),
        {"LOAD_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST"},
    )


# --- CALL_KW -----------------------------------------------------------------------------------


def scaled(t: torch.Tensor, *, scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
    return t * scale + shift


class Scaler:
    def __init__(self, factor: float) -> None:
        self.factor = factor

    def apply(self, t: torch.Tensor, power: int = 1, bias: float = 0.0) -> torch.Tensor:
        return t**power * self.factor + bias


def keyword_calls(x: torch.Tensor, y: torch.Tensor) -> Any:
    s = torch.sum(x, dim=1, keepdim=True)  # a torch function
    m = y.mean(dim=0, keepdim=False)  # a tensor method
    u = scaled(x, shift=1.0, scale=2.0)  # a user function, keywords out of order
    v = Scaler(0.5).apply(y, bias=3.0)  # a bound method of an object made here
    w = scaled(scaled(x, scale=3.0), shift=-1.0)  # nested keyword calls
    opts = dict(scale=4.0, shift=2.0)  # a builtin
    z = scaled(y, **opts)  # CALL_FUNCTION_EX with a mapping
    return s, m, u, v, w, z


def test_keyword_calls_to_torch_methods_user_functions_and_builtins() -> None:
    _check(keyword_calls, _tensors, {"CALL_KW", "CALL_FUNCTION_EX"})


# --- MAKE_FUNCTION + SET_FUNCTION_ATTRIBUTE -----------------------------------------------------


def nested_functions(x: torch.Tensor, n: int) -> Any:
    def with_defaults(t: torch.Tensor, k: int = n + 1) -> torch.Tensor:  # defaults, annotations
        return t * k

    def keyword_only(t: torch.Tensor, *, k: int = 2 * n) -> torch.Tensor:  # kwdefaults
        return t + k

    def closes_over(t: torch.Tensor) -> torch.Tensor:  # a closure over x and n
        return t * x + n

    def everything(t: torch.Tensor, a: int = 1, *, b: int = n) -> torch.Tensor:
        return closes_over(t) * a + b + x

    add = lambda t, k=n: t + k  # noqa: E731 - a lambda's defaults
    return (
        with_defaults(x),
        keyword_only(x, k=5),
        closes_over(x + 1),
        everything(x, 3),
        add(x),
        with_defaults.__defaults__,
        keyword_only.__kwdefaults__,
        sorted(everything.__annotations__),
    )


def test_nested_functions_with_defaults_keyword_defaults_annotations_and_closures() -> None:
    _check(
        nested_functions,
        lambda: (torch.ones(3), 2),
        {
            ("SET_FUNCTION_ATTRIBUTE", _DEFAULTS),
            ("SET_FUNCTION_ATTRIBUTE", _KWDEFAULTS),
            ("SET_FUNCTION_ATTRIBUTE", _ANNOTATIONS),
            ("SET_FUNCTION_ATTRIBUTE", _CLOSURE),
        },
    )


# Annotations evaluated when the function is made (this file's ``from __future__ import
# annotations`` turns them into strings, so the case is compiled without it).
_EVALUATED_ANNOTATIONS = '''
def evaluated_annotations(x, n):
    def inner(t: torch.Tensor, k: int = n) -> torch.Tensor:
        return t * k + x
    return inner(x), inner.__annotations__["t"] is torch.Tensor, inner.__annotations__["k"]
'''


def test_nested_function_with_evaluated_annotations() -> None:
    namespace: dict[str, Any] = {"torch": torch}
    exec(compile(_EVALUATED_ANNOTATIONS, __file__, "exec"), namespace)  # noqa: S102
    _check(
        namespace["evaluated_annotations"],
        lambda: (torch.ones(3), 3),
        {("SET_FUNCTION_ATTRIBUTE", _ANNOTATIONS), ("SET_FUNCTION_ATTRIBUTE", _CLOSURE)},
    )


# --- CONVERT_VALUE, FORMAT_SIMPLE, FORMAT_WITH_SPEC --------------------------------------------


def formatted_strings(x: torch.Tensor, n: int, name: str) -> Any:
    width = n + 3
    text = (
        f"{name!r}|{name!s}|{name!a}|{n}|{n:>5}|{n / 3:.3f}|{n:{width}d}|{x.shape[0]:02d}"
        f"|{x.dtype}|{x.shape}"
    )
    table = {f"k{n}": x * 2, f"k{n + 1}": x * 3}
    return text, table[f"k{n}"], len(text)


def test_f_strings_with_conversions_and_format_specs() -> None:
    _check(
        formatted_strings,
        lambda: (torch.ones(4), 7, "caf\u00e9"),
        {
            ("CONVERT_VALUE", 1),  # !s
            ("CONVERT_VALUE", 2),  # !r
            ("CONVERT_VALUE", 3),  # !a
            "FORMAT_SIMPLE",
            "FORMAT_WITH_SPEC",
        },
    )


# --- TO_BOOL and the truth of Python values -----------------------------------------------------


class Bag:
    def __init__(self, items: list[int]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)


class Flag:
    def __init__(self, on: bool) -> None:
        self.on = on

    def __bool__(self) -> bool:
        return self.on


def truth_tests(x: torch.Tensor, lst: list[int], d: dict[str, int], s: str, n: int) -> Any:
    out = x
    if lst:
        out = out + len(lst)
    if not d:
        out = out * 2
    if s and n:
        out = out - 1
    first = lst and lst[0]  # COPY + TO_BOOL: the value itself when false
    other = n or 10
    if Bag(lst):  # __len__
        out = out + 3
    if not Flag(False):  # __bool__
        out = out * 5
    return out, first, other, bool(s), not lst


def test_truth_of_lists_dicts_strings_ints_and_user_objects() -> None:
    _check(
        truth_tests,
        lambda: (torch.ones(2), [4, 5], {}, "s", 0),
        {"TO_BOOL", "UNARY_NOT"},
    )


# --- CALL_INTRINSIC_1 ---------------------------------------------------------------------------


def intrinsics(x: torch.Tensor, lst: list[float], n: int) -> Any:
    joined = (*lst, *lst)  # LIST_TO_TUPLE
    total = sum(v * 2 for v in lst)  # a generator expression: STOPITERATION_ERROR
    return +x, +n, joined, total, x * total


def test_intrinsic_unary_positive_list_to_tuple_and_generator_expressions() -> None:
    _check(
        intrinsics,
        lambda: (torch.ones(2), [1.0, 2.5], 3),
        {
            ("CALL_INTRINSIC_1", _INTRINSIC_UNARY_POSITIVE),
            ("CALL_INTRINSIC_1", _INTRINSIC_LIST_TO_TUPLE),
            ("CALL_INTRINSIC_1", _INTRINSIC_STOPITERATION_ERROR),
        },
    )


# --- locals: LOAD_FAST_CHECK, LOAD_FAST_AND_CLEAR, inlined comprehensions -----------------------


def maybe_deleted_and_comprehensions(x: torch.Tensor, n: int) -> Any:
    v = x + 1
    if n > 100:
        del v
    y = v * 2  # v may be unbound here: LOAD_FAST_CHECK
    squares = [v * v for v in range(n)]  # an inlined comprehension saves and restores v
    table = {k: x * k for k in range(n)}
    return y, v, squares, table[n - 1]


def test_a_maybe_deleted_local_and_inlined_comprehensions_shadowing_it() -> None:
    _check(
        maybe_deleted_and_comprehensions,
        lambda: (torch.ones(2), 3),
        {"LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR"},
    )


# --- LOAD_GLOBAL/LOAD_ATTR with NULL, LOAD_SUPER_ATTR, RETURN_CONST, jumps on None -------------


class Base:
    def scale(self, t: torch.Tensor) -> torch.Tensor:
        return t * 2


class Child(Base):
    def scale(self, t: torch.Tensor) -> torch.Tensor:
        return super().scale(t) + 1


def lookup_forms(x: torch.Tensor, opt: float | None) -> Any:
    y = torch.relu(x)  # LOAD_GLOBAL + LOAD_ATTR (method form)
    z = Child().scale(y)  # LOAD_SUPER_ATTR inside the inlined method
    if opt is None:
        return None
    if opt is not None:
        z = z + opt
    return y, z


def test_global_attribute_and_super_lookups_and_jumps_on_none() -> None:
    _check(
        lookup_forms,
        lambda: (torch.linspace(-1, 1, 4), 2.0),
        {"LOAD_SUPER_ATTR", "RETURN_CONST", "POP_JUMP_IF_NOT_NONE", "POP_JUMP_IF_NONE"},
        callees=(Child.scale,),
    )


# --- slices -------------------------------------------------------------------------------------


def slices(x: torch.Tensor, lst: list[int]) -> Any:
    lst[1:3] = [7, 8, 9]  # STORE_SLICE
    head = lst[:2]  # BINARY_SLICE
    return x[1:3] * 2, head, lst


def test_slice_reads_and_writes_of_tensors_and_lists() -> None:
    _check(slices, lambda: (torch.arange(5.0), [1, 2, 3, 4]), {"BINARY_SLICE", "STORE_SLICE"})


# --- the exception table: try/except/else/finally, `except ... as`, nested handlers, with -------


def handlers(x: torch.Tensor, d: dict[str, int], keys: list[str]) -> Any:
    total = x
    for key in keys:
        try:
            total = total + d[key]
        except KeyError as error:  # the name is cleared at the handler's end
            total = total - len(error.args)
            continue
        else:
            total = total * 2
        finally:
            total = total + 0.5
    try:
        try:
            int("not a number")
        except ValueError:
            raise LookupError("inner") from None
    except (LookupError, TypeError) as outer:
        message = str(outer)
    return total, message


def test_exception_table_forms_in_a_loop_and_nested_handlers() -> None:
    _check(
        handlers,
        lambda: (torch.ones(2), {"a": 1, "b": 2}, ["a", "zz", "b"]),
        {"PUSH_EXC_INFO", "CHECK_EXC_MATCH", "POP_EXCEPT", "RERAISE"},
    )


def return_in_try(x: torch.Tensor, log: list[str]) -> Any:
    try:
        return x * 3
    finally:
        log.append("finally")  # 3.13 copies the finally body onto the return path


def test_return_inside_try_runs_the_finally_block() -> None:
    log: list[str] = []
    _check(return_in_try, lambda: (torch.ones(2), []), {"PUSH_EXC_INFO"})
    compile_api.reset()
    compiled = compile_api.compile(return_in_try, backend="eager", fullgraph=True)
    compiled(torch.ones(2), log)
    assert log == ["finally"]
