"""Progress reporting: bars and status lines on a terminal, silence otherwise (pipes, CI, tests)."""
from __future__ import annotations

import sys
import time
from contextlib import contextmanager

from tqdm import tqdm


FORCE = False  # --info: report progress even when stderr is not a terminal


def interactive() -> bool:
    return FORCE or sys.stderr.isatty()


def bar(iterable=None, desc: str = "", total: int | None = None, unit: str = "it"):
    """A tqdm bar on stderr when it is a terminal; a plain pass-through otherwise."""
    return tqdm(iterable, desc=desc, total=total, unit=unit, disable=not interactive(), leave=False, file=sys.stderr)


@contextmanager
def status(message: str):
    """`message ...` then `done in Xs` on a terminal (long single steps such as an export)."""
    start = time.perf_counter()
    if interactive():
        print(f"{message} ...", file=sys.stderr, flush=True)
    yield
    if interactive():
        print(f"{message}: done in {time.perf_counter() - start:.1f}s", file=sys.stderr, flush=True)
