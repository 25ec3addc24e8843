"""Build hook for the native LTP core; all project metadata lives in pyproject.toml.

The extension ``transports.native._ltpcore`` is a plain C shared object exposing the ``ltp_`` API
(``transports/native/include/ltp.h``). It is loaded with ctypes by :mod:`transports.ltp`, never
imported as a Python module. ``pip install -e .`` builds it in place next to its sources;
``pip wheel .`` ships it inside the wheel. ``make -C transports/native`` builds the same sources
for C tests and fuzzing.
"""

from pathlib import Path

from setuptools import Extension, setup

NATIVE = "transports/native"

setup(
    ext_modules=[
        Extension(
            "transports.native._ltpcore",
            sources=sorted(str(p) for p in Path(NATIVE, "src").glob("*.c")),
            include_dirs=[f"{NATIVE}/include", f"{NATIVE}/src"],
            depends=[f"{NATIVE}/include/ltp.h", f"{NATIVE}/src/ltp_internal.h"],
            extra_compile_args=["-std=c11", "-O2", "-Wall", "-Wextra", "-pthread"],
            extra_link_args=["-pthread"],
            libraries=["m"],
        )
    ],
)
