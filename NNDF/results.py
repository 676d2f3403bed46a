"""Results: frozen dataclasses that keep raw samples, print as a table and serialise to JSON.

Every action returns a `Report`: a title, rows (one result dataclass per backend, or per backend and prompt)
and the environment it ran in. `Report.print()` renders the readable table; `Report.write_json(path)` writes
the same results (atomically) with the raw samples, so numbers can be recomputed.

What reaches the terminal is made safe and readable there, never in the JSON, which keeps the exact text: control
characters (ANSI escapes, NUL, right-to-left overrides, ...) are shown escaped (`printable`), a "|" in a cell is
escaped as Markdown escapes it, every cell is one line, and the columns a result names in `WIDE` (prompts,
outputs) are shortened with "..." until the table fits the terminal's width (`COLUMNS`; into a file or a pipe
without it, nothing is shortened).
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import tempfile
import unicodedata
from dataclasses import dataclass, field, is_dataclass
from pathlib import Path

from tabulate import tabulate

from NNDF.artifacts import write_json_atomic
from NNDF.errors import UsageError
from NNDF.outputs import STDOUT


BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
UNSAFE = ("Cc", "Cs", "Zl", "Zp")  # controls, lone surrogates (arguments that were not UTF-8), line separators
ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
MIN_WIDE = 12  # a shortened column keeps at least this many characters


def printable(text: str, keep: str = "") -> str:
    """`text` safe to print on a terminal: control characters (C0, DEL, C1: ANSI escapes, NUL, carriage returns),
    bidirectional overrides, line separators and lone surrogates are shown as Python escapes (`\\x1b`, `\\u202e`,
    `\\n`), except the characters in `keep` (chat keeps "\\n\\t": its answers are printed as written)."""
    def shown(ch: str) -> str:
        if ch in keep or not (ch in BIDI_CONTROLS or unicodedata.category(ch) in UNSAFE):
            return ch
        return ESCAPES.get(ch) or (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")

    return "".join(map(shown, text))


def cell(text: str) -> str:
    """A table cell: `printable`, and a "|" in it escaped as Markdown tables escape it (else it splits the cell)."""
    return printable(text).replace("|", "\\|")


def table_width() -> int | None:
    """Characters a table line may take: COLUMNS, else the terminal's width; None when stdout is a file or a pipe
    and COLUMNS is not set (nothing to fit: every text whole, still one line)."""
    if os.environ.get("COLUMNS", "").isdigit() or sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    return None


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


def columns(rows: list[dict]) -> list[str]:
    """Every row's keys in one order: a key the rows before lack goes right after the key it follows in its own
    row (an encoder-decoder's "encoder" column stays beside "backend" when the first row, HF generate, has none)."""
    order: list[str] = []
    for row in rows:
        keys = list(row)
        for i, key in enumerate(keys):
            if key not in order:
                order.insert(order.index(keys[i - 1]) + 1 if i else 0, key)
    return order


def _render(rows: list[dict]) -> str:
    return tabulate(rows, headers="keys", tablefmt="github", floatfmt=".4g")


def _shorten(text: object, width: int) -> object:
    return text if not isinstance(text, str) or len(text) <= width else text[:width - 3] + "..."


def fit_table(rows: list[dict], wide: tuple[str, ...], width: int | None) -> str:
    """The rows as a table at most `width` characters wide where shortening the `wide` columns can make it so:
    the longest of them is cut first, until they are as long as the next; none below `MIN_WIDE` characters (or
    its header)."""
    rows = [{k: v.strip() if isinstance(v, str) else v for k, v in r.items()} for r in rows]  # as tabulate shows them
    text = _render(rows)
    if width is None:
        return text
    excess = max(map(len, text.splitlines())) - width
    limits = {k: max((len(r[k]) for r in rows if isinstance(r.get(k), str)), default=0) for k in wide}
    floor = {k: max(MIN_WIDE, len(k)) for k in limits}
    while excess > 0 and any(limits[k] > floor[k] for k in limits):  # a character at a time off the longest
        longest = max((k for k in limits if limits[k] > floor[k]), key=limits.get)
        limits[longest] -= 1
        excess -= 1
    if all(len(r[k]) <= limits[k] for r in rows for k in limits if isinstance(r.get(k), str)):
        return text
    return _render([{k: _shorten(v, limits[k]) if k in limits else v for k, v in r.items()} for r in rows])


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
    title: str | None = None  # the line above the table (None: the action, the model and the settings)
    live: bool = False  # the results were printed as they came (chat): `print` shows only the title and notes
    after_lines: bool = False  # lines were printed before the report (chat's answers, serve's status): a blank line

    @staticmethod
    def _table(items) -> str:
        if not items:
            return "(no results)"
        rows = [{k: cell(v) if isinstance(v, str) else v for k, v in r.row().items()} for r in items]
        keys = columns(rows)
        rows = [{k: r.get(k, "") for k in keys} for r in rows]
        return fit_table(rows, getattr(type(items[0]), "WIDE", ()), table_width())

    def table(self) -> str:
        return self._table(self.results)

    def heading(self) -> str:
        if self.title is not None:
            return self.title
        settings = ", ".join(f"{k}={v}" for k, v in self.settings.items())
        return f"{self.action}: {self.family} {self.variant} ({settings})"

    def print(self) -> None:
        print(("\n" if self.after_lines else "") + printable(self.heading()))
        if not self.live:
            print(self.table())
        if self.extra:
            print()
            print(self._table(self.extra))
        for note in self.notes:
            print(f"note: {printable(note)}")

    def to_json(self) -> dict:
        return {"action": self.action, "family": self.family, "variant": self.variant,
                "settings": self.settings, "environment": self.environment,
                "results": [_jsonable(r) for r in self.results], "extra": [_jsonable(r) for r in self.extra],
                "notes": self.notes}

    def write_json(self, path: str | None) -> None:
        """The report as JSON to `path` (atomically), or to stdout where `path` is "-"."""
        if path == STDOUT:
            json.dump(self.to_json(), sys.stdout, indent=2, sort_keys=True, default=str)
            print()
        elif path:
            write_json_atomic(Path(path), self.to_json())

