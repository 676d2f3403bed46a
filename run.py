#!/usr/bin/env python3
"""Entry point: `python run.py <action> <MODEL> [backend ...] [flags]`; see README.md or `run.py -h`."""
import sys

from NNDF.cli import main

if __name__ == "__main__":
    sys.exit(main())
