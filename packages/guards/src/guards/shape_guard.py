"""SHAPE (and PREDICATE) guards: a Python boolean expression over named operand sources,
parsed when added, pasted into the check with each operand read as every source is."""

from __future__ import annotations

import ast
import builtins
from collections.abc import Mapping
from typing import Any, ClassVar

import attrs

from guards.errors import GuardError
from guards.guard import CodeContext, Guard
from guards.source import Source

Operands = tuple[tuple[str, Source], ...]


@attrs.frozen
class Shape(Guard):
    """A Python boolean expression that must hold: a relation between sizes (SHAPE) or another
    condition (PREDICATE).

    The expression names its *operands*: each a Source, read by the check as it reads every
    source (once, bases first, constants with no literal bound), e.g. ``a is b`` with
    ``a=L['d'][Color.A]``, ``b=L['d'][Color.B]``. Nothing about a source travels as text, so
    any attribute name or dict key a Source can hold works. The expression may also name
    builtins, and ``L``/``G`` (the frame's locals and globals) for conditions on no source.
    """

    kind: ClassVar[str] = "SHAPE"
    rank: ClassVar[int] = 8
    predicate: str
    description: str = attrs.field(eq=False)
    code: Any = attrs.field(eq=False, repr=False)
    # what the log calls it: SHAPE for relations between sizes, PREDICATE for other conditions
    # (no global module hooks, an attribute still missing, ...)
    label: str = attrs.field(default="SHAPE", eq=False)
    operands: Operands = ()

    @classmethod
    def of(
        cls,
        predicate: str,
        description: str,
        label: str = "SHAPE",
        operands: Mapping[str, Source] | None = None,
    ) -> Shape:
        """Parse ``predicate`` now, so a bad expression fails when it is added."""
        named = dict(operands or {})
        try:
            tree = ast.parse(predicate, mode="eval")
        except SyntaxError as exc:
            raise GuardError(f"SHAPE predicate is not a Python expression: {predicate!r}") from exc
        reserved = sorted(
            n for n in named if not n.isidentifier() or n in {"L", "G"} or hasattr(builtins, n)
        )
        if reserved:
            raise GuardError(f"SHAPE operand names must be fresh identifiers, not {reserved}")
        # The predicate is pasted into the generated function, whose locals and bound
        # constants it must not see: only operands, L, G and builtins may be named.
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        stray = sorted(names - {"L", "G"} - named.keys() - set(dir(builtins)))
        if stray:
            raise GuardError(
                f"SHAPE predicate may name only its operands, L, G and builtins, not {stray}"
            )
        code = compile(tree, "<shape guard>", "eval")
        return cls(None, predicate, description, code, label, tuple(sorted(named.items())))

    def merge_key(self) -> tuple[object, ...]:
        return (self.kind, self.predicate, self.operands)

    def shown(self) -> str:
        """The predicate with each operand shown as its source's expression (for people)."""
        if not self.operands:
            return self.predicate
        return _substitute(self.predicate, {k: s.name() for k, s in self.operands})

    def text(self) -> str:
        return f"{self.label}: {self.shown()}  # {self.description}"

    def emit(self, var: str, ctx: CodeContext) -> list[str]:
        test = self.predicate
        if self.operands:
            test = _substitute(test, {k: ctx.load(s) for k, s in self.operands})
        return [f"if not ({test}): return False"]

    def explain(
        self, value: object, f_locals: dict[str, object], f_globals: dict[str, Any]
    ) -> str | None:
        scope: dict[str, object] = {"L": f_locals, "G": f_globals}
        scope.update((k, s.resolve(f_locals, f_globals)) for k, s in self.operands)
        if eval(self.code, scope):
            return None
        return f"{self.label.lower()} guard failed: {self.description} ({self.shown()})"


class _Rename(ast.NodeTransformer):
    """Replaces operand names (free names of the predicate) by other names."""

    def __init__(self, names: Mapping[str, str]) -> None:
        self.names = names

    def visit_Name(self, node: ast.Name) -> ast.expr:
        new = self.names.get(node.id)
        return node if new is None else ast.copy_location(ast.Name(new, ast.Load()), node)


def _substitute(predicate: str, names: Mapping[str, str]) -> str:
    """``predicate`` with each name in ``names`` replaced by its text (a local of the check,
    or a source's expression for the log), as a syntax tree: never inside a string."""
    return ast.unparse(_Rename(names).visit(ast.parse(predicate, mode="eval")))
