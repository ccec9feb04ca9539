"""Builds evalframe's C extension; metadata lives in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "evalframe._evalframe",
            sources=["src/evalframe/_evalframe.c"],
            extra_compile_args=["-O2", "-std=c11"],
        )
    ]
)
