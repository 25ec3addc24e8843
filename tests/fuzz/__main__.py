"""``python -m tests.fuzz TARGET [libFuzzer flags] CORPUS_DIR...``: the Python fuzz target
``tests/fuzz/TARGET.py`` under atheris, coverage-guided over the code it drives (``transports``,
instrumented as it is imported here, so nothing may import it first)."""

import importlib
import sys
from pathlib import Path

import atheris


def main() -> None:
    name = sys.argv[1]
    with atheris.instrument_imports(include=["transports", f"tests.fuzz.{name}"]):
        target = importlib.import_module(f"tests.fuzz.{name}")
    # libFuzzer's merge re-runs the target through argv[0] with sh: the launcher and the name
    launcher = Path(__file__).with_name("run")
    atheris.Setup([f"{launcher} {name}", *sys.argv[2:]], target.run)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
