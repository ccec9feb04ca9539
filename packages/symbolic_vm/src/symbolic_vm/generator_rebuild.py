"""Generators made while tracing that leave the compiled frame (returned, stored, under zip).

One that never started is rebuilt by calling its generator function again with the arguments
the trace bound: making a generator runs none of its body, so the caller gets eager's own
object, lazy, of eager's type, with eager's ``send``/``throw``/``close`` and ``finally``
timing. One paused at a yield has a frame the output code cannot rebuild (running its rest
early would read its inputs at the wrong time): the frame runs eagerly.
"""

from __future__ import annotations

import ast
import inspect
import types
from collections.abc import Callable
from typing import Any

from symbolic_vm import emit
from symbolic_vm.errors import Unsupported
from symbolic_vm.values import DictVar, GeneratorBox, TupleVar, Var

__all__ = ["call_with_keywords", "rebuild_generator"]


def call_with_keywords(fn: Any, args: tuple[object, ...], kwargs: dict[str, object]) -> Any:
    """``fn(*args, **kwargs)``: the transformed code spells no ``**`` argument itself."""
    return fn(*args, **kwargs)


def rebuild_generator(
    box: GeneratorBox,
    expr: Callable[[Var], ast.expr],
    constant: Callable[[object], ast.expr],
    keywords_helper: Callable[[], ast.expr],
) -> ast.expr:
    """An expression making the generator of ``box`` anew (``expr``/``constant``: the
    rebuilder's, for its arguments; ``keywords_helper``: names :func:`call_with_keywords`)."""
    if box.started or box.done or box.maker is None:
        # (done and never started: closed, which a fresh call would not be)
        raise Unsupported(
            "returning or storing a generator that already ran part of its body or was "
            "closed (or was made by a function the output code cannot name) out of a "
            "compiled function"
        )
    code: types.CodeType = box.frame.code
    names, npos, nkw = code.co_varnames, code.co_argcount, code.co_kwonlyargcount
    bound = box.arguments
    args = [expr(bound[n]) for n in names[:npos]]
    keywords: list[tuple[ast.expr, ast.expr]] = [
        (emit.const(n), expr(bound[n])) for n in names[npos : npos + nkw]
    ]
    extra = npos + nkw
    if code.co_flags & inspect.CO_VARARGS:
        rest = bound[names[extra]]
        if not isinstance(rest, TupleVar):
            raise Unsupported("returning a generator whose *args the VM does not track")
        args.extend(expr(v) for v in rest.items)  # spliced: no ``*`` is spelled
        extra += 1
    if code.co_flags & inspect.CO_VARKEYWORDS:
        more = bound[names[extra]]
        if not isinstance(more, DictVar):
            raise Unsupported("returning a generator whose **kwargs the VM does not track")
        # Keyword-only parameters and ``**`` ones never share a name: one dict holds both.
        keywords.extend((constant(k), expr(v)) for k, v in more.box.items.items())
    maker = expr(box.maker)
    if not keywords:
        return emit.call(maker, args)
    # Through a helper: the transformed code spells no ``**`` argument, and a ``**`` key need
    # not be an identifier.
    return emit.call(keywords_helper(), [
        maker, emit.build("tuple", args), emit.dict_display(keywords),
    ])
