"""Results: frozen dataclasses that keep raw samples, print as a table and serialise to JSON.

Every action returns a `Report`: a title, rows (one result dataclass per backend, or per backend and prompt)
and the environment it ran in. `Report.print()` renders the readable table; `Report.write_json(path)` writes
the same results (atomically) with the raw samples, so numbers can be recomputed.
"""
from __future__ import annotations

import os
import platform
import sys
import tempfile
from dataclasses import dataclass, field, is_dataclass
from pathlib import Path

from tabulate import tabulate

from NNDF.artifacts import write_json_atomic
from NNDF.errors import UsageError


def say(line: str) -> None:
    """One line on stderr, whatever it contains (arguments that are not valid UTF-8 arrive as lone surrogates)."""
    print(line.encode("utf-8", "backslashreplace").decode("utf-8"), file=sys.stderr, flush=True)


def writable_problem(path: Path, folder: bool = False) -> str | None:
    """Why `path` cannot be written later (as a file, or as a folder to create files in), or None: it is not
    the other kind of thing, and its nearest existing folder accepts a new file (tried with a temporary file,
    removed at once: permissions, read-only file systems, /proc alike). Nothing is created."""
    if path.exists() and folder != path.is_dir():
        return "is a file, not a folder" if folder else "is a folder, not a file"
    parent = path if folder and path.exists() else path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return f"{parent} is a file, not a folder"
    try:
        fd, probe = tempfile.mkstemp(dir=parent, prefix=".write-check.", suffix=".tmp")
    except OSError as exc:
        return f"cannot create files in {parent} ({exc.strerror or exc.__class__.__name__})"
    os.close(fd)
    os.unlink(probe)
    return None


def check_output_path(path: str, flag: str) -> None:
    """An output file flag (--json, --plot): refused in one line before any work if it cannot be written."""
    if not path.strip():
        raise UsageError(f"{flag}: give a file path")
    try:
        problem = writable_problem(Path(path))
    except (OSError, ValueError) as exc:  # a name the OS refuses (too long, NUL byte)
        problem = f"is not a usable path ({exc.__class__.__name__})"
    if problem:
        raise UsageError(f"{flag} {path}: {problem}; give a file path in a writable folder")


def environment(device=None) -> dict:
    import torch
    import transformers

    env = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
           "cpu": platform.processor() or platform.machine(), "cpu_count": __import__("os").cpu_count()}
    try:
        import onnxruntime

        env["onnxruntime"] = onnxruntime.__version__
    except ImportError:
        pass
    if device is not None and getattr(device, "type", "") == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
        env["cuda"] = torch.version.cuda
    return env


def _jsonable(obj):
    if hasattr(obj, "to_json"):
        return obj.to_json()
    if is_dataclass(obj):
        return {k: _jsonable(getattr(obj, k)) for k in obj.__dataclass_fields__}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(x) for x in obj]
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    return obj


@dataclass
class Report:
    action: str
    family: str
    variant: str
    settings: dict
    results: list = field(default_factory=list)  # result dataclasses with a `row()` method
    environment: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    extra: list = field(default_factory=list)  # a second table (e.g. `list`'s backend status)

    @staticmethod
    def _table(items) -> str:
        rows = [r.row() for r in items]
        return tabulate(rows, headers="keys", tablefmt="github", floatfmt=".4g") if rows else "(no results)"

    def table(self) -> str:
        return self._table(self.results)

    def print(self) -> None:
        settings = ", ".join(f"{k}={v}" for k, v in self.settings.items())
        print(f"\n{self.action}: {self.family} {self.variant} ({settings})")
        print(self.table())
        if self.extra:
            print()
            print(self._table(self.extra))
        for note in self.notes:
            print(f"note: {note}")

    def to_json(self) -> dict:
        return {"action": self.action, "family": self.family, "variant": self.variant,
                "settings": self.settings, "environment": self.environment,
                "results": [_jsonable(r) for r in self.results], "extra": [_jsonable(r) for r in self.extra],
                "notes": self.notes}

    def write_json(self, path: str | None) -> None:
        if path:
            write_json_atomic(Path(path), self.to_json())

