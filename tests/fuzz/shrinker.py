"""Shrinks a failing program: delete statements and simplify expressions while it still fails.

Works on the program's AST. A candidate is kept when it fails with the same signature (kind
of difference, and the exception type when one was raised) and its eager run raises no
NameError (a deleted definition would otherwise "explain" the failure).
"""

from __future__ import annotations

import ast
import copy
import time
from collections.abc import Callable, Iterator

__all__ = ["shrink"]

_STMT_FIELDS = ("body", "orelse", "finalbody")


def _stmt_lists(tree: ast.AST) -> Iterator[tuple[ast.AST, str, list[ast.stmt]]]:
    for node in ast.walk(tree):
        for name in _STMT_FIELDS:
            value = getattr(node, name, None)
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                yield node, name, value
        if isinstance(node, ast.Try):
            for handler in node.handlers:
                yield handler, "body", handler.body


def _candidates(tree: ast.Module) -> Iterator[ast.Module]:
    """Smaller variants of ``tree``, biggest cuts first."""
    n_lists = sum(1 for _ in _stmt_lists(tree))
    # 1. delete one statement (a compound one goes with its whole body)
    for li in range(n_lists):
        length = len(list(_stmt_lists(tree))[li][2])
        for si in range(length):
            new = copy.deepcopy(tree)
            _, _, stmts = list(_stmt_lists(new))[li]
            del stmts[si]
            if not stmts:
                stmts.append(ast.Pass())
            yield new
    # 2. replace a compound statement by its body
    for li in range(n_lists):
        length = len(list(_stmt_lists(tree))[li][2])
        for si in range(length):
            stmt = list(_stmt_lists(tree))[li][2][si]
            if isinstance(stmt, (ast.If, ast.For, ast.While, ast.With, ast.Try)):
                new = copy.deepcopy(tree)
                _, _, stmts = list(_stmt_lists(new))[li]
                old = stmts[si]
                body = list(old.body)
                if isinstance(old, ast.For):
                    target = old.target
                    body.insert(0, ast.Assign(targets=[target], value=ast.Constant(0)))
                stmts[si : si + 1] = body
                yield new
    # 3. simplify one expression: a binary op by an operand, a call by its first argument
    exprs = [n for n in ast.walk(tree) if isinstance(n, (ast.BinOp, ast.Call, ast.UnaryOp))]
    for ei in range(len(exprs)):
        for pick in range(2):
            new = copy.deepcopy(tree)
            node = [n for n in ast.walk(new) if isinstance(n, (ast.BinOp, ast.Call, ast.UnaryOp))][
                ei
            ]
            if isinstance(node, ast.BinOp):
                repl: ast.expr = node.left if pick == 0 else node.right
            elif isinstance(node, ast.UnaryOp):
                if pick:
                    continue
                repl = node.operand
            else:
                args = (
                    node.args
                    if pick == 0
                    else ([node.func.value] if isinstance(node.func, ast.Attribute) else [])
                )
                if not args:
                    continue
                repl = args[0]
            if _replace(new, node, repl):
                yield new


def _replace(tree: ast.AST, target: ast.AST, repl: ast.AST) -> bool:
    for node in ast.walk(tree):
        for name, value in ast.iter_fields(node):
            if value is target:
                setattr(node, name, repl)
                return True
            if isinstance(value, list):
                for i, item in enumerate(value):
                    if item is target:
                        value[i] = repl
                        return True
    return False


def shrink(
    source: str,
    still_fails: Callable[[str], bool],
    max_attempts: int = 400,
    max_seconds: float = 120.0,
) -> str:
    """The smallest variant of ``source`` found for which ``still_fails`` holds."""
    tree = ast.parse(source)
    start = time.monotonic()
    attempts = 0
    progress = True
    while progress:
        progress = False
        for cand in _candidates(tree):
            if attempts >= max_attempts or time.monotonic() - start > max_seconds:
                return ast.unparse(tree) + "\n"
            try:
                text = ast.unparse(ast.fix_missing_locations(cand)) + "\n"
                compile(text, "<shrink>", "exec")
            except (SyntaxError, ValueError):
                continue
            attempts += 1
            if still_fails(text):
                tree = cand
                progress = True
                break
    return ast.unparse(tree) + "\n"
