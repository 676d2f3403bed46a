#!/usr/bin/env python3
"""What the artifact content digests (NNDF/artifacts.py) cost: seconds and MB/s to read and hash files or
artifact folders, per hashlib algorithm, with the file's pages in the page cache (warm: a run right after
another) and evicted first (cold: `posix_fadvise(DONTNEED)` on these files only).

    python tools/assets/make_shapes_model.py gpt2 temp/shapes/gpt2
    python tools/assets/make_shapes_model.py gpt2-xl temp/shapes/gpt2-xl
    python tools/bench/digest_cost.py temp/shapes/gpt2/model.safetensors temp/shapes/gpt2-xl/model.safetensors

A folder argument is timed as one artifact (every file in it, as a load checks them).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from NNDF import artifacts  # noqa: E402


def _evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _read(path: Path) -> None:
    buffer = bytearray(1 << 22)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buffer):
            pass


def _time(files: list[Path], work, cold: bool) -> float:
    if cold:
        for f in files:
            _evict(f)
    else:
        for f in files:
            _read(f)  # into the page cache
    artifacts._HASHED.clear()  # the per-process memo would make a second pass free
    start = time.perf_counter()
    for f in files:
        work(f)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--algorithms", nargs="+", default=["sha256", "blake2b"])
    parser.add_argument("--repeat", type=int, default=3, help="best of N (default 3)")
    args = parser.parse_args()
    print(f"cpu: {os.cpu_count()} cores; default algorithm: {artifacts.DIGEST_ALGORITHM}")
    print("| path | MB | what | cold s | cold MB/s | warm s | warm MB/s |")
    print("|---|---|---|---|---|---|---|")
    for path in args.paths:
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        mb = sum(f.stat().st_size for f in files) / 1e6
        threads = min(os.cpu_count() or 1, 16)
        jobs = [("read only", _read)]
        for a in args.algorithms:  # as the harness does it (blocks on threads), and as one sequential stream
            jobs += [(f"{a}, 64 MiB blocks on {threads} threads", lambda f, a=a: artifacts.file_digest(f, a)),
                     (f"{a}, one stream", lambda f, a=a: artifacts.file_digest(f, a, block=1 << 62))]
        for label, work in jobs:
            cold = min(_time(files, work, True) for _ in range(args.repeat))
            warm = min(_time(files, work, False) for _ in range(args.repeat))
            print(f"| {path} | {mb:.0f} | {label} | {cold:.2f} | {mb / cold:.0f} | {warm:.2f} | {mb / warm:.0f} |",
                  flush=True)


if __name__ == "__main__":
    main()
