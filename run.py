#!/usr/bin/env python3
"""Entry point: `.venv/bin/python run.py <action> <MODEL> [backend ...] [flags]`; see README.md or `run.py -h`."""
import sys

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
