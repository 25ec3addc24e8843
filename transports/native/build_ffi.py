"""cffi build script of the native LTP core: the one way the library Python loads is built.

``setup.py`` names it in ``cffi_modules``, so ``pip install -e .`` (which ``./setup.sh`` runs)
compiles every ``src/*.c`` together with a cffi wrapper into the extension module
``transports.native._ltp_cffi`` (API mode; :mod:`transports.native` loads it).

The cdef is generated from ``include/ltp.h`` at build time, never written by hand: the header's
``#include`` lines are dropped (cffi knows the ``<stdint.h>`` types), the C preprocessor removes
comments and the C++ guards, and every object-like ``LTP_`` macro becomes ``#define NAME ...`` so
the compiler supplies its value. Structures are declared whole, so the generated wrapper checks
each field's offset and type against the real header when it compiles: a layout Python relies on
cannot drift from C's.

    .venv/bin/python transports/native/build_ffi.py     # prints the generated cdef
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

from cffi import FFI

NATIVE = Path(__file__).resolve().parent
HEADER = NATIVE / "include" / "ltp.h"
# The C tests (Makefile) compile the same sources with the same standard and optimisation.
CFLAGS = ["-std=c11", "-O2", "-Wall", "-Wextra", "-pthread"]


def _preprocessor() -> list[str]:
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return [*shlex.split(cc), "-E", "-P", "-x", "c", "-"]


def cdef_text(header: Path = HEADER) -> str:
    """The declarations of ``header`` in the form cffi's ``cdef`` parses."""
    text = header.read_text()
    body = "\n".join(line for line in text.splitlines()
                     if not line.lstrip().startswith("#include"))
    try:
        expanded = subprocess.run(_preprocessor(), input=body, capture_output=True, text=True,
                                  check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise SystemExit(f"build_ffi: the C preprocessor failed on {header} ({exc}); install a C "
                         "compiler (Debian: build-essential) or set $CC.") from exc
    macros = re.findall(r"^#define[ \t]+(LTP_[A-Z0-9_]+)[ \t]+\S", text, flags=re.M)
    return expanded + "\n" + "".join(f"#define {name} ...\n" for name in macros)


def _relative(path: Path) -> str:
    # setuptools wants source paths relative to the folder setup.py runs in.
    return os.path.relpath(path, Path.cwd())


ffibuilder = FFI()
ffibuilder.cdef(cdef_text())
ffibuilder.set_source(
    # Not _ltpcore: that name was a plain shared object loaded with ctypes, and a stale
    # _ltpcore.cpython-*.so in a checkout would shadow an extension of the same name.
    "transports.native._ltp_cffi",
    '#include "ltp.h"\n',
    sources=[_relative(p) for p in sorted((NATIVE / "src").glob("*.c"))],
    include_dirs=[_relative(NATIVE / "include"), _relative(NATIVE / "src")],
    depends=[_relative(p) for p in [HEADER, *sorted((NATIVE / "src").glob("*.h"))]],
    extra_compile_args=CFLAGS,
    extra_link_args=["-pthread"],
    libraries=["m", "crypto"],
)

if __name__ == "__main__":
    sys.stdout.write(cdef_text())
