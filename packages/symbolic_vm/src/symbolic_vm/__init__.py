"""A symbolic interpreter of CPython 3.11/3.12 bytecode that captures torch ops into FX graphs."""

__all__: list[str] = []
