"""Recursion with the hook installed: the same depth as unhooked, and never a crash.

Each hooked Python call runs on the C stack (CPython stops inlining calls when an
eval-frame function is installed). recursion.c credits 3.12's C recursion units back
while the stack has room, and fails a fresh frame with RecursionError when the stack
is nearly full; runaway recursion therefore ends in RecursionError on 3.11-3.13, even
with a recursion limit far above what the C stack could hold.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap

import pytest
from evalframe_testkit import installed

import evalframe


def depth_reached() -> int:
    n = 0

    def down() -> None:
        nonlocal n
        n += 1
        down()

    try:
        down()
    except RecursionError:
        pass
    return n


def skip_all(frame, size):
    return evalframe.SKIP


def test_hooked_recursion_reaches_the_depth_of_unhooked_recursion():
    plain = depth_reached()
    with installed(skip_all):
        hooked = []
        for _ in range(3):  # a loop, not a comprehension: 3.11 gives that a frame
            hooked.append(depth_reached())
    # The same count every time: nothing is left charged to the thread's counters.
    assert hooked == [plain] * 3


def test_recursion_depth_is_unchanged_inside_a_thread_with_the_hook():
    import threading

    results: list[int] = []

    def body():
        plain = depth_reached()
        with installed(skip_all):
            results.extend([plain, depth_reached()])

    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert results[0] == results[1] > 900


RUNAWAY = textwrap.dedent(
    """
    import sys, threading, evalframe

    def depth():
        n = 0
        def down():
            nonlocal n
            n += 1
            down()
        try:
            down()
        except RecursionError:
            pass
        return n

    def skip(frame, size):
        return evalframe.SKIP

    def tail(x):
        return x + 1

    failures = []

    def run():
        evalframe.set_callback(skip)
        try:
            # The first run may stop a frame earlier (its calls are not yet
            # specialised); after that the depth must not drift.
            depths = [depth() for _ in range(3)]
            assert depths[1] == depths[2], depths
            assert tail(1) == 2  # the interpreter is usable after
            print("depth", depths[2], flush=True)
        except BaseException as exc:
            failures.append(exc)
        finally:
            evalframe.set_callback(None)

    sys.setrecursionlimit(1_000_000)
    stack = int(sys.argv[1])
    if stack:
        threading.stack_size(stack)
        t = threading.Thread(target=run)
        t.start()
        t.join()
    else:
        run()
    if failures:
        raise failures[0]
    """
)


@pytest.mark.skipif(
    not (sys.platform == "linux" and platform.libc_ver()[0] == "glibc"),
    reason="the C stack guard reads the thread's stack bounds through glibc",
)
@pytest.mark.parametrize(
    "stack", [0, 256 * 1024, 1024 * 1024, 16 * 1024 * 1024], ids=["main", "256K", "1M", "16M"]
)
def test_runaway_recursion_under_a_huge_limit_is_a_recursion_error_not_a_crash(stack):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.run(
        [sys.executable, "-c", RUNAWAY, str(stack)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    words = proc.stdout.split()
    assert words[0] == "depth" and int(words[1]) > 300, proc.stdout
