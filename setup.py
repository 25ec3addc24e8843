"""Build hook for the native LTP core; all project metadata lives in pyproject.toml.

The extension ``transports.native._ltp_cffi`` is the C core (``transports/native/src/*.c``) plus
a cffi wrapper generated from ``transports/native/include/ltp.h``; :mod:`transports.native`
loads it. ``transports/native/build_ffi.py`` says how it is built (sources, flags, the cdef).
``pip install -e .`` builds it in place next to its sources and is the only way the library
Python loads is built; ``make -C transports/native`` compiles the same sources into the C tests
and the fuzzer.
"""

from setuptools import setup

setup(cffi_modules=["transports/native/build_ffi.py:ffibuilder"])
