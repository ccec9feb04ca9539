"""Helpers for generating bytecode: version-correct instruction sequences for common operations.

Each helper returns ``Instr`` records (or a list of them, with ``Label`` objects where control flow
needs them) for the running CPython. The version differences a code generator would otherwise
scatter around live here: NULL placement and PRECALL/KW_NAMES/CALL_KW for calls, LOAD_METHOD
versus LOAD_ATTR's method bit, LOAD_CLOSURE versus LOAD_FAST for closure cells, MAKE_FUNCTION's
flags versus SET_FUNCTION_ATTRIBUTE, END_FOR, TO_BOOL before conditional jumps, yield.
"""

from __future__ import annotations

import dis
import inspect
import types
from collections.abc import Iterable, Mapping, Sequence

import attrs

from symbolic_vm.bytecode import opcodes
from symbolic_vm.bytecode.assemble import assemble
from symbolic_vm.bytecode.errors import AssemblyError
from symbolic_vm.bytecode.instr import NO_POSITION, Instr, Label, Position

__all__ = [
    "Signature",
    "binary_op",
    "build",
    "call",
    "call_function",
    "call_global",
    "call_method",
    "call_function_ex",
    "enter_with",
    "compare_op",
    "for_loop",
    "function_from_code",
    "jump",
    "load_attr",
    "load_closure",
    "load_const",
    "load_deref",
    "load_fast",
    "load_global",
    "load_method",
    "make_code",
    "make_function",
    "pop_jump_if",
    "prologue",
    "return_value",
    "store_attr",
    "store_deref",
    "store_fast",
    "unpack_sequence",
    "with_position",
    "yield_value",
]

_PY = opcodes.PY_VERSION
Items = list[Instr | Label]


@attrs.frozen
class Signature:
    """The argument layout and closure variables of a code object to build.

    ``argnames`` are the positional parameters (the first ``posonly`` of them positional-only),
    ``kwonly`` the keyword-only ones, ``varargs``/``varkw`` the names of ``*args``/``**kwargs``.
    ``freevars`` are filled from the function's closure in this order; ``cellvars`` are locals
    that nested functions capture (an argument may be one).
    """

    argnames: tuple[str, ...] = ()
    posonly: int = 0
    kwonly: tuple[str, ...] = ()
    varargs: str | None = None
    varkw: str | None = None
    freevars: tuple[str, ...] = ()
    cellvars: tuple[str, ...] = ()

    @property
    def varnames(self) -> tuple[str, ...]:
        """The parameters in CPython's slot order: positional, keyword-only, *args, **kwargs."""
        extra = tuple(n for n in (self.varargs, self.varkw) if n is not None)
        return self.argnames + self.kwonly + extra

    @property
    def flags(self) -> int:
        """The co_flags this signature implies for a plain (non-generator) function."""
        flags = inspect.CO_OPTIMIZED | inspect.CO_NEWLOCALS
        if self.varargs is not None:
            flags |= inspect.CO_VARARGS
        if self.varkw is not None:
            flags |= inspect.CO_VARKEYWORDS
        if self.freevars:
            flags |= inspect.CO_NESTED
        return flags

    @classmethod
    def from_code(cls, code: types.CodeType) -> Signature:
        """The signature of an existing code object (same argument layout and closure)."""
        n_pos = code.co_argcount
        n_kw = code.co_kwonlyargcount
        names = code.co_varnames
        rest = n_pos + n_kw
        varargs = varkw = None
        if code.co_flags & inspect.CO_VARARGS:
            varargs = names[rest]
            rest += 1
        if code.co_flags & inspect.CO_VARKEYWORDS:
            varkw = names[rest]
        return cls(
            argnames=names[:n_pos],
            posonly=code.co_posonlyargcount,
            kwonly=names[n_pos : n_pos + n_kw],
            varargs=varargs,
            varkw=varkw,
            freevars=code.co_freevars,
            cellvars=code.co_cellvars,
        )


def with_position(items: Iterable[Instr | Label], position: Position) -> Items:
    """Give every instruction that has no source position ``position`` (e.g. the user's line)."""
    return [
        attrs.evolve(i, position=position)
        if isinstance(i, Instr) and i.position == NO_POSITION
        else i
        for i in items
    ]


# --- loads and stores ---------------------------------------------------------------------------


def load_const(value: object) -> Instr:
    """Push a constant."""
    return Instr("LOAD_CONST", value)


def load_fast(name: str) -> Instr:
    """Push a local variable."""
    return Instr("LOAD_FAST", name)


def store_fast(name: str) -> Instr:
    """Pop into a local variable."""
    return Instr("STORE_FAST", name)


def load_deref(name: str) -> Instr:
    """Push the contents of a cell or free variable."""
    return Instr("LOAD_DEREF", name)


def store_deref(name: str) -> Instr:
    """Pop into a cell or free variable."""
    return Instr("STORE_DEREF", name)


def load_closure(name: str) -> Instr:
    """Push the cell object of a cell or free variable (to build a closure tuple)."""
    # 3.13 dropped LOAD_CLOSURE from real bytecode: the cell is read from its slot by LOAD_FAST.
    return Instr("LOAD_CLOSURE" if _PY < (3, 13) else "LOAD_FAST", name)


def load_global(name: str, *, push_null: bool = False) -> Instr:
    """Push a global (or builtin); with ``push_null`` also the NULL a following call expects."""
    return Instr("LOAD_GLOBAL", name, 1 if push_null else None)


def load_attr(name: str) -> Instr:
    """Replace the top of the stack by its attribute ``name``."""
    return Instr("LOAD_ATTR", name)


def load_method(name: str) -> Instr:
    """Replace the object on top by the pair a method call expects (method and self, or NULL)."""
    if _PY == (3, 11):
        return Instr("LOAD_METHOD", name)
    return Instr("LOAD_ATTR", name, 1)


def store_attr(name: str) -> Instr:
    """``TOS.name = TOS1``: pops the object (top) and the value below it."""
    return Instr("STORE_ATTR", name)


def unpack_sequence(n: int) -> Instr:
    """Pop an iterable of exactly ``n`` items and push them, the first item on top."""
    return Instr("UNPACK_SEQUENCE", n)


_BUILDERS = {
    "tuple": "BUILD_TUPLE",
    "list": "BUILD_LIST",
    "set": "BUILD_SET",
    "dict": "BUILD_MAP",
}


def build(kind: str, n: int) -> Instr:
    """Build a ``tuple``/``list``/``set`` from the top ``n`` items, or a ``dict`` from ``n`` pairs.

    For a dict push key, value, key, value, ... in insertion order.
    """
    try:
        return Instr(_BUILDERS[kind], n)
    except KeyError:
        kinds = sorted(_BUILDERS)
        raise AssemblyError(f"build() kind must be one of {kinds}, not {kind!r}") from None


def _binary_ops() -> dict[str, int]:
    # Ask the compiler for BINARY_OP's operand numbering instead of copying a private table.
    symbols = ("+", "-", "*", "/", "//", "%", "**", "@", "<<", ">>", "&", "|", "^")
    table: dict[str, int] = {}
    for sym in symbols:
        for text, key in ((f"x = a {sym} b", sym), (f"a {sym}= b", f"{sym}=")):
            for ins in dis.get_instructions(compile(text, "<op>", "exec")):
                if ins.opname == "BINARY_OP":
                    assert ins.arg is not None
                    table[key] = ins.arg
    return table


_BINARY_OPS = _binary_ops()


def binary_op(symbol: str) -> Instr:
    """A binary operator by its symbol: ``binary_op("+")``, in-place ones as ``binary_op("+=")``."""
    try:
        return Instr("BINARY_OP", _BINARY_OPS[symbol])
    except KeyError:
        raise AssemblyError(f"unknown binary operator {symbol!r}") from None


def compare_op(symbol: str) -> Instr:
    """A rich comparison (``<``, ``<=``, ``==``, ``!=``, ``>``, ``>=``)."""
    return Instr("COMPARE_OP", symbol)


def return_value() -> Instr:
    """Return the top of the stack."""
    return Instr("RETURN_VALUE")


# --- control flow --------------------------------------------------------------------------------


def jump(target: Label) -> Instr:
    """Unconditional jump; the assembler picks JUMP_FORWARD or JUMP_BACKWARD."""
    return Instr("JUMP", target)


_CONDITIONS = {True: "TRUE", False: "FALSE", None: "NONE"}


def pop_jump_if(condition: bool | None, target: Label, *, negate: bool = False) -> list[Instr]:
    """Pop the top and jump if it is truthy (``True``), falsy (``False``) or None (``None``).

    ``negate`` with ``None`` means "is not None". On 3.13 a TO_BOOL comes first for truth tests,
    as that version's conditional jumps only accept exact bools.
    """
    if condition is None:
        name = "POP_JUMP_IF_NOT_NONE" if negate else "POP_JUMP_IF_NONE"
        return [Instr(name, target)]
    out: list[Instr] = []
    if _PY >= (3, 13):
        out.append(Instr("TO_BOOL"))
    out.append(Instr(f"POP_JUMP_IF_{_CONDITIONS[condition != negate]}", target))
    return out


def for_loop(store: Sequence[Instr | Label], body: Sequence[Instr | Label]) -> Items:
    """Iterate the iterator on top of the stack: each item is stored by ``store``, then ``body``.

    The iterator is gone when the loop ends; ``body`` must leave the stack as it found it.
    """
    top, end = Label("for"), Label("end_for")
    out: Items = [top, Instr("FOR_ITER", end), *store, *body, jump(top), end]
    if _PY >= (3, 12):
        out.append(Instr("END_FOR"))
    if _PY >= (3, 13):
        out.append(Instr("POP_TOP"))
    return out


def yield_value() -> list[Instr]:
    """Yield the top of the stack; leaves the stack as before the value was pushed.

    For a code object built with ``make_code(..., generator=True)``.
    """
    if _PY == (3, 11):
        yield_ = Instr("YIELD_VALUE")
    else:
        # The oparg counts enclosing exception handlers; 0 only costs gen.close() its fast path.
        yield_ = Instr("YIELD_VALUE", 0)
    return [yield_, Instr("RESUME", 1), Instr("POP_TOP")]


# --- calls ---------------------------------------------------------------------------------------


def call(nargs: int, kw_names: Sequence[str] = ()) -> list[Instr]:
    """Call with the callable slots and ``nargs`` arguments already pushed.

    ``kw_names`` names the last ``len(kw_names)`` arguments (they count in ``nargs``).
    """
    if len(kw_names) > nargs:
        raise AssemblyError(f"call(): {len(kw_names)} keyword names for {nargs} arguments")
    names = tuple(kw_names)
    out: list[Instr] = []
    if _PY >= (3, 13):
        if names:
            return [Instr("LOAD_CONST", names), Instr("CALL_KW", nargs)]
        return [Instr("CALL", nargs)]
    if names:
        out.append(Instr("KW_NAMES", names))
    if _PY == (3, 11):
        out.append(Instr("PRECALL", nargs))
    out.append(Instr("CALL", nargs))
    return out


def _args(
    args: Sequence[Sequence[Instr | Label]], kwargs: Mapping[str, Sequence[Instr | Label]]
) -> tuple[Items, int, tuple[str, ...]]:
    pushed: Items = []
    for a in args:
        pushed.extend(a)
    for v in kwargs.values():
        pushed.extend(v)
    return pushed, len(args) + len(kwargs), tuple(kwargs)


def call_function(
    func: Sequence[Instr | Label],
    args: Sequence[Sequence[Instr | Label]] = (),
    kwargs: Mapping[str, Sequence[Instr | Label]] | None = None,
) -> Items:
    """Call the value pushed by ``func`` with arguments, each pushed by its own instructions.

    Pushes the NULL calls need where this version wants it (before the callable on 3.11/3.12,
    after it on 3.13); leaves the result on the stack.
    """
    pushed, n, names = _args(args, kwargs or {})
    if len(func) == 1 and isinstance(func[0], Instr) and func[0].opname == "LOAD_GLOBAL":
        callee: Items = [attrs.evolve(func[0], flags=1)]
    elif _PY >= (3, 13):
        callee = [*func, Instr("PUSH_NULL")]
    else:
        callee = [Instr("PUSH_NULL"), *func]
    return [*callee, *pushed, *call(n, names)]


def call_global(
    name: str,
    args: Sequence[Sequence[Instr | Label]] = (),
    kwargs: Mapping[str, Sequence[Instr | Label]] | None = None,
) -> Items:
    """Call the global ``name`` (e.g. ``__compiled_fn_0`` or a resume function)."""
    return call_function([load_global(name)], args, kwargs)


def call_method(
    obj: Sequence[Instr | Label],
    name: str,
    args: Sequence[Sequence[Instr | Label]] = (),
    kwargs: Mapping[str, Sequence[Instr | Label]] | None = None,
) -> Items:
    """``obj.name(*args, **kwargs)`` with the method-call fast path; leaves the result."""
    pushed, n, names = _args(args, kwargs or {})
    return [*obj, load_method(name), *pushed, *call(n, names)]


def call_function_ex(
    func: Sequence[Instr | Label],
    args: Sequence[Instr | Label],
    kwargs: Sequence[Instr | Label] | None = None,
) -> Items:
    """``func(*args, **kwargs)``: ``args`` pushes a tuple, ``kwargs`` (optional) a dict."""
    if _PY >= (3, 13):
        callee: Items = [*func, Instr("PUSH_NULL")]
    else:
        callee = [Instr("PUSH_NULL"), *func]
    extra: Items = list(kwargs) if kwargs is not None else []
    return [*callee, *args, *extra, Instr("CALL_FUNCTION_EX", 1 if kwargs is not None else 0)]


def enter_with(manager: Sequence[Instr | Label], *, store: Instr | None = None) -> Items:
    """Enter the context manager pushed by ``manager``, leaving its bound ``__exit__`` pushed.

    That is the stack a ``with`` body runs on: jumping from here into the body of a ``with``
    block of decoded code (whose instructions keep their exception handlers) resumes inside it,
    and the original exit and cleanup code then runs. ``store`` keeps ``__enter__``'s result
    (``with m as x``); without it the result is dropped.
    """
    return [*manager, Instr("BEFORE_WITH"), store if store is not None else Instr("POP_TOP")]


# --- functions and code objects ------------------------------------------------------------------

_MAKE_FUNCTION_DEFAULTS = 0x01
_MAKE_FUNCTION_KWDEFAULTS = 0x02
_MAKE_FUNCTION_CLOSURE = 0x08


def make_function(
    code: types.CodeType,
    *,
    closure: Sequence[str] = (),
    defaults: tuple[object, ...] = (),
    kwdefaults: Mapping[str, object] | None = None,
) -> list[Instr]:
    """Push a new function made from ``code``.

    ``closure`` names the cell or free variables of the *current* code object to capture, in the
    order of ``code.co_freevars``; ``defaults`` are constant positional defaults and
    ``kwdefaults`` constant keyword-only defaults.
    """
    if tuple(closure) != code.co_freevars:
        raise AssemblyError(
            f"make_function({code.co_name}): closure {tuple(closure)} must match its free "
            f"variables {code.co_freevars}"
        )
    out: list[Instr] = []
    flags = 0
    if defaults:
        out.append(load_const(tuple(defaults)))
        flags |= _MAKE_FUNCTION_DEFAULTS
    if kwdefaults:
        for key, value in kwdefaults.items():
            out.extend([load_const(key), load_const(value)])
        out.append(build("dict", len(kwdefaults)))
        flags |= _MAKE_FUNCTION_KWDEFAULTS
    if closure:
        out.extend(load_closure(n) for n in closure)
        out.append(build("tuple", len(closure)))
        flags |= _MAKE_FUNCTION_CLOSURE
    out.append(load_const(code))
    if _PY < (3, 13):
        out.append(Instr("MAKE_FUNCTION", flags))
        return out
    out.append(Instr("MAKE_FUNCTION"))
    # Attributes are pushed lowest flag first, so they are set highest flag first.
    for bit in (_MAKE_FUNCTION_CLOSURE, _MAKE_FUNCTION_KWDEFAULTS, _MAKE_FUNCTION_DEFAULTS):
        if flags & bit:
            out.append(Instr("SET_FUNCTION_ATTRIBUTE", bit))
    return out


def prologue(signature: Signature, *, generator: bool = False) -> list[Instr]:
    """The instructions a code object starts with: copy free vars, make cells, start, RESUME.

    ``make_code`` adds them unless told not to.
    """
    out: list[Instr] = []
    if signature.freevars:
        out.append(Instr("COPY_FREE_VARS", len(signature.freevars)))
    out.extend(Instr("MAKE_CELL", n) for n in signature.cellvars)
    if generator:
        out.extend([Instr("RETURN_GENERATOR"), Instr("POP_TOP")])
    out.append(Instr("RESUME", 0))
    return out


def _template() -> types.CodeType:
    def template() -> None:
        return None

    return template.__code__


_TEMPLATE = _template()


def make_code(
    body: Iterable[Instr | Label],
    signature: Signature = Signature(),  # frozen: sharing the default is safe
    *,
    name: str = "<generated>",
    qualname: str | None = None,
    filename: str = "<strata>",
    firstlineno: int = 1,
    generator: bool = False,
    add_prologue: bool = True,
) -> types.CodeType:
    """Assemble ``body`` into a function code object with the given signature.

    The prologue (see :func:`prologue`) is prepended unless ``add_prologue`` is false. The constant
    table starts with None, so the function has no docstring.
    """
    items: Items = list(prologue(signature, generator=generator)) if add_prologue else []
    items.extend(body)
    flags = signature.flags | (inspect.CO_GENERATOR if generator else 0)
    return assemble(
        items,
        template=_TEMPLATE,
        co_argcount=len(signature.argnames),
        co_posonlyargcount=signature.posonly,
        co_kwonlyargcount=len(signature.kwonly),
        co_flags=flags,
        co_name=name,
        co_qualname=qualname if qualname is not None else name,
        co_filename=filename,
        co_firstlineno=firstlineno,
        co_varnames=signature.varnames,
        co_cellvars=signature.cellvars,
        co_freevars=signature.freevars,
        co_consts=(None,),
        co_names=(),
    )


def function_from_code(
    code: types.CodeType,
    globals_: dict[str, object],
    *,
    closure: Sequence[object] = (),
    defaults: tuple[object, ...] | None = None,
    kwdefaults: dict[str, object] | None = None,
) -> types.FunctionType:
    """A Python function running ``code`` with ``globals_``; ``closure`` gives the free
    variables' values (wrapped in fresh cells), in ``code.co_freevars`` order."""
    if len(closure) != len(code.co_freevars):
        raise AssemblyError(
            f"{code.co_name} has free variables {code.co_freevars}: "
            f"{len(closure)} closure values given"
        )
    cells = tuple(types.CellType(v) for v in closure) if closure else None
    fn = types.FunctionType(code, globals_, code.co_name, defaults, cells)
    fn.__kwdefaults__ = kwdefaults
    fn.__qualname__ = code.co_qualname
    return fn
