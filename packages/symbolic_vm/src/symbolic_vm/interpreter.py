"""The symbolic interpreter: a value stack, locals and cells, and one handler per opcode."""

from __future__ import annotations

import dis
import linecache
import logging
import os
import sys
import types
import weakref
from collections.abc import Callable
from typing import Any

import torch

from symbolic_vm.breaks.decisions import Retrace, Stop
from symbolic_vm.breaks.region import Region
from symbolic_vm.errors import (
    TORCH_TRACING_ERRORS,
    SymbolicVMError,
    TracedException,
    Unsupported,
    drop_tracebacks,
    from_torch,
    note_location,
)
from symbolic_vm.guard_api import GlobalSource, ItemSource, LocalSource, Source
from symbolic_vm.output import Output
from symbolic_vm.values import NULL, Cell, GeneratorVar, ObjectVar, Var
from symbolic_vm.versions import SUPPORTED

log = logging.getLogger("strata.symbolic_vm")
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep

Handler = Callable[["Interpreter", dis.Instruction], None]
# How a tracked value is called (symbolic_vm.calls.call). The root Interpreter is given it and
# inlined frames inherit it, so the semantics modules call through ``vm.call`` rather than
# importing calls, which dispatches to all of them (the cycle that kept their imports inside
# functions).
CallFn = Callable[["Interpreter", Var, list[Var], dict[str, Var]], Var]

Version = tuple[int, int]
SUPPORTED_VERSIONS: tuple[Version, ...] = SUPPORTED
ALL_VERSIONS: tuple[float, ...] = (3.11, 3.12, 3.13)
MAX_INLINE_DEPTH = 64
_VERSION_MAP: dict[float, Version] = {3.11: (3, 11), 3.12: (3, 12), 3.13: (3, 13)}
RUNNING: Version = (sys.version_info[0], sys.version_info[1])

_HANDLERS: dict[Version, dict[str, Handler]] = {}

# Opcodes of a supported version that the VM deliberately leaves to a graph break, with why.
# The compiler never emits the specialised, instrumented and internal forms; the rest are
# constructs the VM does not trace (class bodies, async code, ``import *``).
UNSUPPORTED: dict[str, str] = {
    "LOAD_LOCALS": "class bodies run as Python",
    "LOAD_FROM_DICT_OR_GLOBALS": "class bodies run as Python",
    "LOAD_FROM_DICT_OR_DEREF": "class bodies run as Python",
    "LOAD_NAME": "module and class bodies run as Python",
    "STORE_NAME": "module and class bodies run as Python",
    "DELETE_NAME": "module and class bodies run as Python",
    "SETUP_ANNOTATIONS": "module and class bodies run as Python",
    "DELETE_GLOBAL": "deleting a global runs as Python",
    "DELETE_DEREF": "deleting a closure variable runs as Python",
    "IMPORT_STAR": "`from m import *` runs as Python",
    "GET_AWAITABLE": "coroutines run as Python",
    "GET_AITER": "coroutines run as Python",
    "GET_ANEXT": "coroutines run as Python",
    "END_ASYNC_FOR": "coroutines run as Python",
    "BEFORE_ASYNC_WITH": "coroutines run as Python",
    "ASYNC_GEN_WRAP": "coroutines run as Python",
    "CLEANUP_THROW": "a generator thrown into runs as Python",
    "CALL_INTRINSIC_2": "type parameters (PEP 695) and exception groups run as Python",
    "CHECK_EG_MATCH": "`except*` runs as Python",
    "PREP_RERAISE_STAR": "`except*` runs as Python",
    "INTERPRETER_EXIT": "internal to CPython",
    "ENTER_EXECUTOR": "internal to CPython (tier-2 executors)",
    "EXIT_INIT_CHECK": "internal to CPython (only in specialised calls)",
    "RESERVED": "internal to CPython",
    "PRINT_EXPR": "only the interactive prompt emits it",
}


def handler(
    *opnames: str, versions: tuple[float, ...] = ALL_VERSIONS
) -> Callable[[Handler], Handler]:
    """Register ``fn`` as the handler of ``opnames`` on the listed Python versions.

    On the running interpreter each name must be a real opcode, and no opcode is registered
    twice for one version.
    """

    def register(fn: Handler) -> Handler:
        for version in versions:
            key = _VERSION_MAP[version]
            table = _HANDLERS.setdefault(key, {})
            for opname in opnames:
                if key == RUNNING and opname not in dis.opmap:
                    raise AssertionError(f"{fn.__name__}: {opname} is no opcode on {version}")
                if opname in table:
                    raise AssertionError(f"{opname} is registered twice for {version}")
                table[opname] = fn
        return fn

    return register


def handlers_for(version: Version) -> dict[str, Handler]:
    """The opcode table of one Python version."""
    return _HANDLERS.get(version, {})


class YieldSignal(Exception):
    """Raised by YIELD_VALUE to suspend a generator's interpreter with a value."""

    def __init__(self, value: Var) -> None:
        super().__init__("yield")
        self.value = value


class ReturnSignal(Exception):
    """Raised by RETURN_VALUE to end the interpreter loop with a value."""

    def __init__(self, value: Var) -> None:
        super().__init__("return")
        self.value = value


# Instructions the residual code of a graph break can run for real (see symbolic_vm.breaks.resume).
BREAKABLE = frozenset({
    "CALL", "PRECALL", "KW_NAMES", "CALL_FUNCTION_EX", "UNARY_NEGATIVE", "UNARY_NOT",
    "UNARY_INVERT", "GET_ITER", "BINARY_OP", "BINARY_SUBSCR", "COMPARE_OP", "CONTAINS_OP",
    "IS_OP", "STORE_ATTR", "STORE_SUBSCR", "CALL_KW", "TO_BOOL",
    "POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE", "POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE",
    "POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_FORWARD_IF_NONE",
    "POP_JUMP_FORWARD_IF_NOT_NONE", "POP_JUMP_BACKWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_FALSE",
    "POP_JUMP_BACKWARD_IF_NONE", "POP_JUMP_BACKWARD_IF_NOT_NONE",
})


class Interpreter:
    """Runs one code object symbolically: the root frame, or an inlined call."""

    def __init__(
        self,
        out: Output,
        code: types.CodeType,
        f_globals: dict[str, Any],
        f_builtins: dict[str, Any],
        *,
        local_vars: dict[str, Var],
        closure: tuple[Cell, ...] = (),
        frame_locals: dict[str, Any] | None = None,
        depth: int = 0,
        parent: Interpreter | None = None,
        call: CallFn | None = None,
    ) -> None:
        if depth > MAX_INLINE_DEPTH:
            raise Unsupported("inlining depth limit reached (recursion?)")
        caller = call if call is not None else (parent._caller if parent is not None else None)
        if caller is None:
            raise TypeError("the root Interpreter needs call= (symbolic_vm.calls.call)")
        self._caller: CallFn = caller
        self.out = out
        self.code = code
        self.f_globals = f_globals
        self.f_builtins = f_builtins
        self.locals: dict[str, Var] = dict(local_vars)
        self.cells: dict[str, Cell] = {}
        self.closure = closure
        self.frame_locals = frame_locals  # root frame only: real values, wrapped on first use
        self.depth = depth
        self.parent = parent
        self.is_root = frame_locals is not None
        self.stack: list[Var] = []
        self.kw_names: tuple[str, ...] = ()
        self.returned = False  # a generator's frame ran to its end
        self.instructions = list(dis.get_instructions(code))
        self.index_of = {inst.offset: i for i, inst in enumerate(self.instructions)}
        self.ip = 0
        self.lineno = code.co_firstlineno
        self.table = handlers_for(sys.version_info[:2])
        # Graph breaks: only in the root frame, only when the caller allows them.
        self.may_break = False
        self.steps = 0  # root instructions started (identifies one dynamic instruction)
        self.stop_at: tuple[int, Unsupported] | None = None  # (step, why) from a Retrace
        self.stop_region: tuple[Region, Unsupported] | None = None  # from a RunRegion
        # ((line, caller's line), text) of the newest graph nodes' stack trace
        self._stack_trace: tuple[tuple[int, int], str] | None = None
        self.handling: Any = None  # the exception an except block handles (an ObjectVar)
        # root frame only: every generator made in the trace (closed at its return)
        self.made_generators: list[GeneratorVar] = []
        # a generator's frame only: the exception its next resumption raises (gen.throw())
        self.thrown: TracedException | None = None

    def call(self, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
        """``fn(*args, **kwargs)`` on tracked values, in this frame."""
        return self._caller(self, fn, args, kwargs)

    # -- running ----------------------------------------------------------------------------

    def run(self) -> Var:
        """Interpret until the code returns; the returned value (an inlined call, a generator)."""
        result = self._run()
        assert not isinstance(result, Stop | Retrace), "only the root frame stops"
        return result

    def run_frame(self) -> Var | Stop | Retrace:
        """Interpret the root frame: its returned value, or where and why the trace stopped
        (a Stop before an instruction that failed cleanly or starts the region to run as
        bytecode; a Retrace when a failed instruction had changed the trace). A graph break
        goes on in symbolic_vm.breaks.policy.handle_stop, which capture() hands the Stop to."""
        return self._run()

    def _run(self) -> Var | Stop | Retrace:
        while True:
            inst = self.instructions[self.ip]
            self.ip += 1
            if inst.positions is not None and inst.positions.lineno is not None:
                self.lineno = inst.positions.lineno
            fn = self.table.get(inst.opname)
            self.steps += 1
            if self.stop_at is not None and self.stop_at[0] == self.steps:
                return Stop(inst.offset, list(self.stack), dict(self.locals), self.stop_at[1])
            if self.stop_region is not None and self.stop_region[0].start == inst.offset:
                # The region's start is outside every loop: the first arrival is its entry.
                region, why = self.stop_region
                return Stop(inst.offset, list(self.stack), dict(self.locals), why, region=region)
            snapshot = self._snapshot(inst)
            nodes = self.out.builder.graph.nodes
            before = len(nodes)
            try:
                if fn is None:
                    raise Unsupported(f"bytecode {inst.opname} is not supported by the VM")
                try:
                    if self.thrown is not None:
                        # gen.throw(): raised where the generator paused, as CPython does
                        thrown, self.thrown = self.thrown, None
                        raise thrown
                    fn(self, inst)
                except TracedException as raised:
                    if self._catch(inst.offset, raised):
                        continue
                    if self.parent is not None:
                        raise
                    raise raised.escaping() from None
                except TORCH_TRACING_ERRORS as err:
                    raise from_torch(err) from err
            except ReturnSignal as done:
                self.returned = True
                return done.value
            except YieldSignal as suspended:
                return suspended.value  # a generator: run() again resumes after the yield
            except Unsupported as exc:
                located = exc.located(self.code.co_filename, self.lineno)
                if snapshot is not None or self.may_break:
                    # Kept in a Stop/Retrace: its traceback would hold this frame, which holds
                    # it (a cycle keeping the user's frame and locals alive until a gc).
                    drop_tracebacks(located)
                if snapshot is not None and snapshot[2] == self.out.change_marks():
                    return Stop(inst.offset, snapshot[0], snapshot[1], located)
                if snapshot is not None or self.may_break:
                    # Traced again to stop right before it; an instruction a plain break
                    # cannot run alone then has its statement run as bytecode (a region).
                    return Retrace(self.steps, located)
                raise located from exc.__cause__
            except SymbolicVMError:
                raise
            except Exception as err:
                # A bug of ours: compile_api reports it at the user's line, never as eager
                # under fullgraph=True.
                note_location(err, self.code.co_filename, self.lineno)
                raise
            finally:
                if len(nodes) != before:
                    self._stamp_new_nodes(len(nodes) - before)

    def _stamp_new_nodes(self, count: int) -> None:
        """Give the newest nodes the user's call chain as ``meta["stack_trace"]``.

        In the form of a Python traceback (torch.fx prints it as ``# File: f.py:14 in forward,
        code: ...`` above the node; logs and dumps show it). Nodes of an inlined call are stamped
        by its own interpreter first, so the walk stops at the first stamped node.
        """
        # The callers' lines do not change while this frame runs: one text per line of it.
        key = (self.lineno, self.parent.lineno if self.parent is not None else 0)
        cached = self._stack_trace
        trace = cached[1] if cached is not None and cached[0] == key else None
        for node in reversed(self.out.builder.graph.nodes):
            if count <= 0 or "stack_trace" in node.meta:
                break
            count -= 1
            if node.op == "placeholder":
                continue
            if trace is None:
                chain = []
                inner: Interpreter = self
                # torch's own frames (an inlined nn.Linear.forward) end at the user's call.
                while inner.parent is not None and inner.code.co_filename.startswith(_TORCH_DIR):
                    inner = inner.parent
                frame: Interpreter | None = inner
                while frame is not None:
                    code = frame.code
                    line = linecache.getline(code.co_filename, frame.lineno).strip()
                    chain.append(
                        f'  File "{code.co_filename}", line {frame.lineno}, in {code.co_name}\n'
                        f"    {line}\n"
                    )
                    frame = frame.parent
                trace = "".join(reversed(chain))
                self._stack_trace = (key, trace)
            node.meta["stack_trace"] = trace

    def root_frame(self) -> Interpreter:
        """The compiled frame's interpreter (this one, or the outermost caller)."""
        frame = self
        while frame.parent is not None:
            frame = frame.parent
        return frame

    def handler_target(self, offset: int) -> int | None:
        """The offset of the exception handler covering ``offset`` (None: none does)."""
        entry = next((e for e in _exception_table(self.code) if e.start <= offset < e.end), None)
        return None if entry is None else int(entry.target)

    def catch_at(self, offset: int, raised: TracedException) -> bool:
        """``raised`` at ``offset`` (e.g. GeneratorExit at a paused yield): see _catch."""
        return self._catch(offset, raised)

    def _catch(self, offset: int, raised: TracedException) -> bool:
        """Continue at the exception handler covering ``offset``, as CPython unwinds to it:
        the stack cut to the handler's depth, [lasti,] the exception pushed. False: none."""
        entry = next((e for e in _exception_table(self.code) if e.start <= offset < e.end), None)
        if entry is None:
            return False
        del self.stack[entry.depth :]
        if entry.lasti:
            self.push(self.out.wrap(offset, None))
        self.push(raised.value)
        self.jump_to(entry.target)
        return True

    def _snapshot(
        self, inst: dis.Instruction
    ) -> tuple[list[Var], dict[str, Var], tuple[int, ...]] | None:
        """The state to restore if ``inst`` fails cleanly and the graph can break before it."""
        if not self.may_break or inst.opname not in BREAKABLE:
            return None
        return list(self.stack), dict(self.locals), self.out.change_marks()

    def jump_to(self, offset: int) -> None:
        """Continue at the instruction at ``offset``."""
        self.ip = self.index_of[offset]

    def next_instruction(self) -> dis.Instruction:
        """The instruction that runs next."""
        return self.instructions[self.ip]

    # -- stack ------------------------------------------------------------------------------

    def push(self, var: Var) -> None:
        self.stack.append(var)

    def pop(self) -> Var:
        return self.stack.pop()

    def popn(self, n: int) -> list[Var]:
        """The top ``n`` values, deepest first."""
        if n == 0:
            return []
        values = self.stack[-n:]
        del self.stack[-n:]
        return values

    def peek(self, depth: int = 1) -> Var:
        return self.stack[-depth]

    # -- variables --------------------------------------------------------------------------

    def load_local(self, name: str) -> Var:
        """A local's value; the root frame's arguments are wrapped the first time they are read."""
        var = self.locals.get(name)
        if var is not None:
            return var
        if self.frame_locals is not None and name in self.frame_locals:
            var = self.out.wrap(self.frame_locals[name], LocalSource(name))
            self.locals[name] = var
            return var
        raise Unsupported(f"local variable {name!r} referenced before assignment")

    def load_global(self, name: str) -> Var:
        """A global of the running code (its own module's globals when inlined), else a
        builtin."""
        out = self.out
        if self.f_globals is out.f_globals and name in out.global_overlay:
            return out.global_overlay[name]
        if name in self.f_globals:
            source: Source
            if self.f_globals is out.f_globals:
                source = GlobalSource(name)
            else:
                # Another module's globals: reach them through a helper global holding that dict.
                holder = out.install(self.f_globals, "globals")
                source = ItemSource(GlobalSource(holder), name)
            return out.wrap(self.f_globals[name], source)
        if name in self.f_builtins:
            return ObjectVar(self.f_builtins[name])
        raise Unsupported(f"NameError: name {name!r} is not defined")

    def has_local(self, name: str) -> bool:
        """True when ``name`` is bound in this frame."""
        return name in self.locals or (
            self.frame_locals is not None and name in self.frame_locals
        )

    def store_local(self, name: str, var: Var) -> None:
        self.locals[name] = var

    def delete_local(self, name: str) -> None:
        self.locals.pop(name, None)
        if self.frame_locals is not None:
            self.frame_locals = {k: v for k, v in self.frame_locals.items() if k != name}

    def cell(self, name: str) -> Cell:
        """The cell of a cell or free variable."""
        found = self.cells.get(name)
        if found is not None:
            return found
        if name in self.code.co_freevars and self.frame_locals is not None:
            # The root frame's free variables: their contents are in f_locals, read-only for us.
            if name in self.frame_locals:
                var = self.out.wrap(self.frame_locals[name], LocalSource(name))
                found = Cell(var, external=True, root_name=name)
            else:
                found = Cell(None, external=True, root_name=name)
            self.cells[name] = found
            return found
        raise Unsupported(f"cell variable {name!r} is unknown to the VM")

    def take_kw_names(self) -> tuple[str, ...]:
        names, self.kw_names = self.kw_names, ()
        return names


# Weak keys: a traced code object is released with its function (a functools.cache kept every
# code object ever traced alive for the whole process).
_EXCEPTION_TABLES: weakref.WeakKeyDictionary[types.CodeType, tuple[Any, ...]] = (
    weakref.WeakKeyDictionary()
)


def _exception_table(code: types.CodeType) -> tuple[Any, ...]:
    entries = _EXCEPTION_TABLES.get(code)
    if entries is None:
        # Bytecode.exception_entries (3.11+) is missing from typeshed.
        entries = tuple(getattr(dis.Bytecode(code), "exception_entries"))  # noqa: B009
        _EXCEPTION_TABLES[code] = entries
    return entries


def null() -> Var:
    """The NULL marker."""
    return NULL
