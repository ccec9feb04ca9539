"""Count the code objects the round-trip tests reassemble here (the README's figures).

Run from the repository root:
    PYTHONPATH=packages/symbolic_vm/src:packages/symbolic_vm/tests/bytecode python \
        packages/symbolic_vm/tests/bytecode/corpus_counts.py
"""

from __future__ import annotations

import sys

from bytecode_testing import (
    compile_file,
    has_dead_code,
    stdlib_files,
    syntax_heavy_test_files,
    walk_code,
)

from symbolic_vm.bytecode import assemble, decode


def count(paths: list[str]) -> tuple[int, int, int, int]:
    """(files, code objects, identical after reassembly, differing only by a smaller stack size
    where the compiler left dead code)."""
    files = total = same = dead = 0
    for path in paths:
        top = compile_file(path)
        if top is None:
            continue
        files += 1
        for code in walk_code(top):
            total += 1
            items = decode(code)
            new = assemble(items, template=code)
            if new == code and new.co_stacksize == code.co_stacksize:
                same += 1
            elif new.replace(co_stacksize=code.co_stacksize) == code and has_dead_code(items):
                dead += 1
    return files, total, same, dead


def main() -> None:
    version = ".".join(map(str, sys.version_info[:3]))
    for label, paths in (
        ("stdlib", stdlib_files()),
        ("CPython syntax-heavy tests", syntax_heavy_test_files()),
    ):
        files, total, same, dead = count(paths)
        print(
            f"{version} {label}: {files} files, {total} code objects, {same} byte-identical, "
            f"{dead} identical but for a smaller co_stacksize (dead code), "
            f"{total - same - dead} other differences"
        )


if __name__ == "__main__":
    main()
