"""Builds evalframe's C extension; metadata lives in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "evalframe._evalframe",
            sources=[
                "src/evalframe/_evalframe.c",
                "src/evalframe/frames.c",
                "src/evalframe/without_hook.c",
                "src/evalframe/recursion.c",
            ],
            depends=["src/evalframe/_evalframe.h"],
            # The hook reads CPython's internal frame layout (internal/pycore_frame.h,
            # found under the interpreter's own include directory).
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wno-missing-field-initializers"],
        )
    ]
)
