"""Generators and coroutines: resumed frames run untouched; the functions themselves
run untouched unless the callback returns an Entry for them."""

from __future__ import annotations

import asyncio
import types

import pytest
from evalframe_testkit import Recorder, entry_for, installed


def counter(n):
    i = 0
    while i < n:
        yield i
        i += 1


def counter_squared(n):
    pad = list(range(50))  # a bigger frame than counter's
    for i in range(n):
        yield i * i + pad[0]


async def plus_one(x):
    await asyncio.sleep(0)
    return x + 1


async def plus_two(x):
    await asyncio.sleep(0)
    return x + 2


def test_generator_function_is_offered_once_and_resumed_frames_never():
    rec = Recorder({counter.__code__: lambda frame, size: None})
    with installed(rec):
        assert list(counter(5)) == [0, 1, 2, 3, 4]
        assert sum(counter(10)) == 45
    assert rec.count("counter") == 2  # one per generator made, none per resume


def test_generator_function_with_an_entry_makes_the_entrys_generator(slow_path):
    rec = Recorder({counter.__code__: entry_for(counter_squared.__code__)})
    with installed(rec):
        gen = counter(4)
        assert isinstance(gen, types.GeneratorType)
        assert gen.__name__ == "counter"
        assert list(gen) == [0, 1, 4, 9]
        assert list(counter(3)) == [0, 1, 4]
    assert rec.count("counter") == 1


def test_throw_into_a_hooked_generator_runs_its_handlers():
    def guarded():
        try:
            yield 1
        except KeyError:
            yield "caught"

    rec = Recorder({guarded.__code__: lambda frame, size: None})
    with installed(rec):
        gen = guarded()
        assert next(gen) == 1
        assert gen.throw(KeyError("k")) == "caught"
        with pytest.raises(ValueError):
            gen.throw(ValueError("v"))
    assert rec.count("guarded") == 1


def test_coroutine_function_runs_untouched_without_an_entry():
    rec = Recorder({plus_one.__code__: lambda frame, size: None})
    with installed(rec):
        assert asyncio.run(plus_one(1)) == 2
    assert rec.count("plus_one") == 1


def test_coroutine_function_with_an_entry_runs_the_entrys_coroutine(slow_path):
    rec = Recorder({plus_one.__code__: entry_for(plus_two.__code__)})
    with installed(rec):
        assert asyncio.run(plus_one(1)) == 3
        assert asyncio.run(plus_one(5)) == 7
    assert rec.count("plus_one") == 1
