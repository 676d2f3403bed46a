#!/usr/bin/env python3
"""Entry point: `.venv/bin/python run.py <action> <MODEL> [backend ...] [flags]`; see README.md or `run.py -h`."""
import sys

if sys.version_info < (3, 11):  # before any import that needs it (tomllib, the pinned numpy and SciPy)
    print(f"error: the harness needs Python >= 3.11, and {sys.executable} is {sys.version.split()[0]}: run it with "
          "the project's venv, .venv/bin/python run.py ... (make demo creates it from a Python >= 3.11)",
          file=sys.stderr)
    sys.exit(2)

try:
    from NNDF.cli import main
except ModuleNotFoundError as exc:  # a Python without the pinned requirements (e.g. the system's)
    if exc.name and exc.name.split(".")[0] == "NNDF":
        raise
    print(f"error: {exc.name} is not installed for {sys.executable}: run the harness with the project's venv, "
          ".venv/bin/python run.py ... (make demo creates it), or source .venv/bin/activate first", file=sys.stderr)
    sys.exit(2)

if __name__ == "__main__":
    sys.exit(main())
