"""A seeded random mix of everything at once: frame sizes from tiny to bigger than a
stack chunk, entries swapped between them, guards that pass or fail, callbacks that
raise or answer SKIP / SKIP_RECURSIVE, exceptions from the entry code, both retargeting
paths, recursion through without_hook, cache clears."""

from __future__ import annotations

import random

import pytest
from evalframe_testkit import installed

import evalframe
from evalframe import _evalframe

PADDINGS = (0, 5, 50, 400, 2500)  # extra locals: 2500 do not fit in a 16 KiB chunk


def build(prefix, namespace):
    for j, k in enumerate(PADDINGS):
        pad = "".join(f"    q{i} = n\n" for i in range(k))
        exec(
            f"def {prefix}{j}(n, *a, k=1, **kw):\n{pad}"
            "    if n <= 0:\n"
            "        if kw.get('boom'):\n"
            "            raise ValueError('boom')\n"
            "        return k\n"
            "    return k + CALL(n - 1, *a, k=k, **kw)\n",
            namespace,
        )


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_random_mix_of_entries_sizes_errors_and_paths_gives_eager_results(seed):
    rng = random.Random(seed)
    namespace: dict[str, object] = {}
    build("f", namespace)
    build("g", namespace)
    originals = [namespace[f"f{j}"] for j in range(len(PADDINGS))]
    targets = [namespace[f"g{j}"].__code__ for j in range(len(PADDINGS))]
    original_codes = {fn.__code__ for fn in originals}

    def callback(frame, size):
        if frame.f_code not in original_codes:
            return None
        r = rng.random()
        if r < 0.1:
            raise KeyError("from the callback")
        if r < 0.13:
            return evalframe.SKIP_RECURSIVE
        if r < 0.16:
            return evalframe.SKIP
        if r < 0.3 or size > 3:
            return None
        return evalframe.Entry(lambda f_locals: rng.random() < 0.7, rng.choice(targets))

    with installed(callback):
        for _ in range(200):
            chosen = rng.choice(originals)
            namespace["CALL"] = evalframe.without_hook(chosen) if rng.random() < 0.2 else chosen
            _evalframe._set_force_slow_path(rng.random() < 0.5)
            n = rng.randrange(60)
            boom = rng.random() < 0.1
            try:
                result = namespace["CALL"](n, 1, 2, k=1, boom=boom)
            except KeyError:
                continue
            except ValueError:
                assert boom
                continue
            assert not boom and result == n + 1
            assert _evalframe.get_callback() is callback
            if rng.random() < 0.05:
                evalframe.clear_cache()
        _evalframe._set_force_slow_path(False)
