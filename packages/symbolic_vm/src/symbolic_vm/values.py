"""The values the VM tracks: immutable records, each with the source it was read from (or None).

Containers that Python code can mutate (lists, dicts, cells, iterators, objects made while tracing)
hold a mutable *box*: the record stays frozen and shareable, and aliasing works as in Python
because two records holding one box are the same object.
"""

from __future__ import annotations

import math
import types
from typing import Any

import attrs

from symbolic_vm.guard_api import Source


@attrs.frozen(eq=False)
class Var:
    """Base of every tracked value. ``source`` says where in the frame it was read from."""

    source: Source | None = attrs.field(default=None, kw_only=True)


@attrs.frozen(eq=False)
class NullVar(Var):
    """The NULL that CPython pushes before a callable."""


NULL = NullVar()


@attrs.frozen(eq=False)
class TensorVar(Var):
    """A tensor in the graph: its fx node and fake example value."""

    node: Any  # torch.fx.Node
    example: Any  # FakeTensor


@attrs.frozen(eq=False)
class SymVar(Var):
    """A symbolic int/float/bool produced in the graph (dynamic shapes)."""

    node: Any
    example: Any


@attrs.frozen(eq=False)
class ConstVar(Var):
    """A Python constant: int, float, str, None, dtype, device, slice, range, torch.Size..."""

    value: Any


@attrs.frozen(eq=False)
class SliceVar(Var):
    """A slice with a symbolic bound (constant slices are ConstVars)."""

    start: Var
    stop: Var
    step: Var


@attrs.frozen(eq=False)
class TupleVar(Var):
    """A tuple of tracked values; ``fields`` names them for torch's named tuples (max().values)."""

    items: tuple[Var, ...]
    fields: tuple[str, ...] = ()
    named_type: type | None = None  # torch.return_types.* class of a named result
    is_size: bool = False  # a torch.Size with symbolic entries (rebuilt as torch.Size)


@attrs.define(eq=False)
class ListBox:
    """The contents of one Python list; ``mutated`` marks a list from the frame that changed."""

    items: list[Var]
    mutated: bool = False


@attrs.frozen(eq=False)
class ListVar(Var):
    """A list: its box is shared by every alias."""

    box: ListBox


@attrs.define(eq=False)
class DictBox:
    """The contents of one dict; keys are Python constants (str, int, ...)."""

    items: dict[Any, Var]
    mutated: bool = False


@attrs.frozen(eq=False)
class DictVar(Var):
    """A dict with constant keys."""

    box: DictBox


@attrs.frozen(eq=False)
class SequentialSliceVar(Var):
    """``seq[a:b]`` of a stock ``nn.Sequential``: eager makes a new Sequential holding the same
    submodules; here those submodules (each read through the parent's ``_modules``), called one
    after another as ``Sequential.forward`` does."""

    items: tuple[Var, ...]


@attrs.frozen(eq=False)
class DictViewVar(Var):
    """``d.keys()``/``d.values()``/``d.items()``: a live view of the dict (later writes to the
    dict show through it, as in Python)."""

    dict: DictVar
    kind: str  # "keys", "values" or "items"


@attrs.frozen(eq=False)
class DictProxyVar(Var):
    """``types.MappingProxyType(d)`` of a tracked dict: a read-only live view of it (later
    writes to the dict show through it, as in Python)."""

    dict: DictVar


@attrs.define(eq=False)
class SetBox:
    """The contents of one set: a private real ``set`` of constants, changed as the program
    changes its set, so iteration and ``pop()`` follow the same order as eager's set.

    ``original`` is, for a set from the frame, its contents when read (its replay writes the
    difference back); ``mutated`` marks such a set that changed.
    """

    items: set[Any]
    original: tuple[Any, ...] | None = None
    mutated: bool = False


@attrs.frozen(eq=False)
class SetVar(Var):
    """A ``set`` of constants (ints, strings, ...): made in the frame or passed in. ``cls``:
    for an instance of a plain ``set`` subclass made in the trace (one that defines nothing of
    its own: ``slot_calls.plain_set_subclass``), its class; its operations are set's."""

    box: SetBox
    cls: type = attrs.field(default=set, kw_only=True)


def is_set_element(value: object) -> bool:
    """True for constants whose repr reads back as themselves (a set of them is guarded by
    one repr comparison)."""
    if isinstance(value, tuple):
        return all(is_set_element(v) for v in value)
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, (bool, int, str, bytes))


def is_guarded_constant(value: object) -> bool:
    """A constant CONSTANT_MATCH pins by eager's semantics (nan, -0.0, complex included):
    exactly None, bool, int, float, complex, str, bytes and tuples of them."""
    if type(value) is tuple:
        return all(is_guarded_constant(v) for v in value)
    return value is None or type(value) in (bool, int, float, complex, str, bytes)


def holds_nan(value: object) -> bool:
    """A float nan, a complex with a nan part, or a tuple holding one: a value whose
    membership in a set or equality inside a container depends on its identity (``x is y``
    is tried before ``==``, and nan != nan)."""
    if type(value) is tuple:
        return any(holds_nan(v) for v in value)
    if type(value) is complex:
        return math.isnan(value.real) or math.isnan(value.imag)
    return type(value) is float and math.isnan(value)


def is_guarded_set_element(value: object) -> bool:
    """True for the elements of a set from the frame that a SetVar may hold: constants pinned
    by value, and functions (Python or builtin) pinned by identity, which is how a set tells
    them apart (their hash and == are identity's, or a builtin's bound ``__self__``)."""
    return is_guarded_constant(value) or type(value) in (
        types.FunctionType, types.BuiltinFunctionType
    )


@attrs.define(eq=False)
class IterBox:
    """An iterator over known items and its position."""

    items: list[Var]
    index: int = 0
    # Made from an immutable sequence (a tuple, range, str): the items left are exactly what
    # the real iterator would still yield, whatever the program does later, so a graph break
    # may pass them on as a tuple (symbolic_vm.breaks.policy.plan_crossing).
    exact: bool = False
    # Found empty once: exhausted for good. Until then one over a list at its end is not done
    # (CPython's list iterator yields what is appended before its next call).
    done: bool = False

    # A snapshot of containers (zip/enumerate/map/filter/reversed over a list, a dict or its
    # view, a set): each source with its contents when the iterator was made, and whether
    # item k came from its position k (else any change counts). See stale().
    sources: list[tuple[Any, list[Any], bool]] = attrs.field(factory=list)
    over: Var | None = None  # the list whose items it shares (a list iterator), if any

    def finish(self) -> None:
        """Exhausted for good, even if the container it iterates grows later."""
        self.items, self.index, self.done = [], 0, True

    def watch(self, var: Var, aligned: bool = True) -> IterBox:
        """Remember ``var``'s contents if it is a list, dict, dict view or set."""
        box = var.dict.box if isinstance(var, DictViewVar) else getattr(var, "box", None)
        if isinstance(box, (ListBox, DictBox, SetBox)):
            self.sources.append((box, _contents(box), aligned and not isinstance(box, SetBox)))
        return self

    def stale(self) -> bool:
        """Whether a source changed since so that CPython's iterator, which reads its
        container as it goes, would yield something else than the items taken then (a write
        to a list position already passed does not count; a dict's keys must be as they
        were, its values from the position on)."""
        for box, seen, aligned in self.sources:
            now = _contents(box)
            start = self.index if aligned else 0
            if len(now) != len(seen) or not all(
                _same(a, b) for a, b in zip(now[start:], seen[start:], strict=True)
            ) or (isinstance(box, DictBox) and not all(
                _same(a[0], b[0]) for a, b in zip(now, seen, strict=True)
            )):
                return True
        return False


STALE_ITERATOR = ("a list, dict or set changed while an iterator over it was alive (the VM's "
                  "iterator holds the items of the moment it was made)")


def _same(a: Any, b: Any) -> bool:
    """The same item: the same Var, the same constant, a dict entry of both."""
    if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b) == 2:
        return _same(a[0], b[0]) and a[1] is b[1]
    return a is b or (not isinstance(a, Var) and type(a) is type(b) and a == b)


def _contents(box: ListBox | DictBox | SetBox) -> list[Any]:
    if isinstance(box, DictBox):
        return list(box.items.items())
    return list(box.items)


@attrs.frozen(eq=False)
class IteratorVar(Var):
    """An iterator (from iter(), enumerate(), zip(), dict views...) over known values."""

    box: IterBox


@attrs.define(eq=False)
class GeneratorBox:
    """A suspended generator: the interpreter of its frame, resumed by each ``next()``."""

    frame: Any  # symbolic_vm.interpreter.Interpreter (Any: values.py must not import it)
    started: bool = False  # resumed at least once (send() of a value needs a paused yield)
    done: bool = False
    result: Var | None = None  # what its frame returned (the value of ``yield from`` on it)


@attrs.frozen(eq=False)
class GeneratorVar(Var):
    """A generator made while tracing (a generator function's call or a generator expression).

    It runs lazily, as in Python: each ``next()`` interprets its frame up to the next yield, so
    its graph ops and effects interleave with the consumer's in program order.
    """

    box: GeneratorBox


@attrs.frozen(eq=False)
class GeneratorContextVar(Var):
    """A ``@contextlib.contextmanager`` function's manager: ``__enter__`` resumes ``gen`` to
    its yield, ``__exit__`` resumes it to its end."""

    gen: GeneratorVar


@attrs.define(eq=False)
class Cell:
    """A closure cell made while tracing (MAKE_CELL) or a frame's own cell variable."""

    value: Var | None = None
    external: bool = False  # a real cell from outside the trace
    root_name: str | None = None  # set for the compiled frame's own free variables


@attrs.frozen(eq=False)
class CellVar(Var):
    """A cell object on the stack (LOAD_CLOSURE) on its way into a closure tuple."""

    cell: Cell


@attrs.frozen(eq=False)
class FunctionVar(Var):
    """A real Python function: calling it inlines its bytecode."""

    fn: types.FunctionType


@attrs.frozen(eq=False)
class NestedFunctionVar(Var):
    """A function made by MAKE_FUNCTION while tracing (lambdas, inner defs, comprehensions)."""

    code: types.CodeType
    f_globals: dict[str, Any]
    defaults: tuple[Var, ...]
    kwdefaults: dict[str, Var]
    closure: tuple[Cell, ...]
    # Its ``__dict__`` and the special attributes stored on it (``functools.wraps`` sets
    # ``__name__``, ``__doc__``, ...; object_attrs reads them), shared by every alias.
    fn_dict: DictBox = attrs.field(factory=lambda: DictBox({}), kw_only=True)
    specials: dict[str, Var] = attrs.field(factory=dict, kw_only=True)
    annotations: Var | None = attrs.field(default=None, kw_only=True)  # MAKE_FUNCTION's 0x04


@attrs.frozen(eq=False)
class PartialVar(Var):
    """functools.partial(func, *args, **kwargs)."""

    func: Var
    args: tuple[Var, ...]
    kwargs: dict[str, Var]


@attrs.frozen(eq=False)
class BoundMethodVar(Var):
    """``obj.method`` for a Python-level method: calling it calls ``func(obj, ...)``."""

    self_var: Var
    func: Var


@attrs.frozen(eq=False)
class MethodVar(Var):
    """A method of a tracked value implemented by the VM (tensor methods, list.append, ...)."""

    self_var: Var
    name: str


@attrs.frozen(eq=False)
class ModuleVar(Var):
    """A torch.nn.Module instance from the frame (its parameters become graph inputs), or one
    made inside the function (``created``: stateless, rebuilt by copy when it escapes)."""

    module: Any
    created: bool = attrs.field(default=False, kw_only=True)


@attrs.frozen(eq=False)
class ObjectVar(Var):
    """Any other real Python object: builtins, torch functions, classes, user instances, modules."""

    value: Any


@attrs.frozen(eq=False)
class WeakRefVar(ObjectVar):
    """A callback-free ``weakref.ref(obj)`` made in the trace: ``value`` is the real reference,
    ``target`` the var of ``obj``. Calling it answers ``target`` itself, so reads through it
    keep ``obj``'s source and guards."""

    target: Var


@attrs.frozen(eq=False)
class ClassNamespaceVar(ObjectVar):
    """``cls.__dict__`` of a class from the frame: ``value`` is the mappingproxy read, ``owner``
    the class. Each read makes a fresh proxy, so it is never guarded by identity: reads through
    it guard the class's entries they used (``stdlib/mappingproxy.py``)."""

    owner: type


@attrs.define(eq=False)
class ObjectBox:
    """Attributes of an object made while tracing, or written on a sourced object."""

    cls: type
    attrs: dict[str, Var]
    cls_source: Source | None = None  # where the class was read (guards its method lookups)
    # The dict an instance of a dict/OrderedDict subclass is (ModelOutput): its items, apart
    # from its attributes. None for other classes.
    items: DictBox | None = None
    # The tuple/set/frozenset an instance of a user subclass of one is (a TupleVar, SetVar or
    # frozenset ObjectVar): what the base class's C methods and operators act on. None for
    # other classes (see builtin_value).
    base: Var | None = None


@attrs.frozen(eq=False)
class NewObjectVar(Var):
    """An instance of a user class created while tracing (``__init__`` inlined)."""

    box: ObjectBox


def builtin_value(var: Var) -> Var:
    """The tuple or set an instance of a user tuple/set subclass made in the trace is
    (``ObjectBox.base``: what set's and tuple's own C code reads), else ``var`` itself."""
    if isinstance(var, NewObjectVar) and var.box.base is not None:
        return var.box.base
    return var


@attrs.frozen(eq=False)
class GradModeVar(Var):
    """``torch.no_grad()`` / ``torch.enable_grad()`` / ``torch.set_grad_enabled(b)`` as a context.

    ``applied``: set_grad_enabled switched the mode when called; ``enabled`` is then the mode to
    restore on exit.
    """

    enabled: bool
    applied: bool = False


@attrs.frozen(eq=False)
class DeletedAttrVar(Var):
    """In ``Output.attr_overlay``: the trace deleted this attribute of an object from the frame
    (``del obj.name``); reads then find the class's attribute or raise AttributeError."""


@attrs.frozen(eq=False)
class GradModeFunctionVar(Var):
    """A function decorated in the frame with a grad-mode object (``@torch.no_grad()``):
    calling it calls ``fn`` with grad mode ``enabled`` and restores the caller's mode after,
    as the decorator's wrapper does."""

    enabled: bool
    fn: Var


@attrs.frozen(eq=False)
class AutocastVar(Var):
    """``torch.autocast(device_type, dtype, enabled, cache_enabled)`` as a context manager."""

    args: tuple[Any, ...]


@attrs.frozen(eq=False)
class AutocastExitVar(Var):
    """The ``__exit__`` of an entered autocast: its enter node in the graph."""

    enter_node: Any


@attrs.frozen(eq=False)
class ContextExitVar(Var):
    """The ``__exit__`` BEFORE_WITH pushed: calling it restores grad mode ``restore``.

    ``manager`` is the grad mode the block entered (True/False), or None when the block was a
    ``torch.set_grad_enabled(...)`` that had already switched (no manager to re-enter).
    """

    restore: bool
    manager: bool | None = None


@attrs.frozen(eq=False)
class SuperVar(Var):
    """``super()`` in a method: lookups start after ``cls`` in the MRO of ``obj``'s class."""

    cls: type
    obj: Var


def is_const(var: Var) -> bool:
    """True for a ConstVar."""
    return isinstance(var, ConstVar)
