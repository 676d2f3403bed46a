"""Local JSONL datasets (one JSON object per line), read the same way by every action that takes `--dataset`:
`accuracy` (LAMBADA-style passages; encoder models' labelled texts) and `predict`. Every problem is one line that
names the file and the line."""
from __future__ import annotations

import json
from pathlib import Path

from NNDF.errors import DatasetError


def read_jsonl(dataset: str, limit: int | None = None) -> list[tuple[int, dict]]:
    """(line number, object) of the non-blank lines of a JSONL file, the first `limit` of them."""
    path = Path(dataset)
    if path.is_dir() or not path.exists():  # a pipe is read as a file is (`--dataset <(...)`, /dev/stdin)
        what = "is a folder, not a file" if path.is_dir() else "no such file"
        raise DatasetError(f"--dataset {dataset}: {what} (give a JSONL file, one object with \"text\" per line)")
    try:
        lines = [(n, ln) for n, ln in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if ln.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"--dataset {dataset}: cannot read it ({exc.__class__.__name__}: {exc})") from exc
    rows = []
    for number, line in lines[:limit]:
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise DatasetError(f"--dataset {dataset}: line {number} is not JSON ({exc})") from exc
        if not isinstance(row, dict):
            raise DatasetError(f"--dataset {dataset}: line {number} has no \"text\" field (it is not a JSON object)")
        rows.append((number, row))
    if not rows:
        raise DatasetError(f"--dataset {dataset}: no lines")
    return rows


def short_note(dataset: str, asked: int, got: int) -> str | None:
    """The report's note when `--num-samples` asks for more samples than the dataset has (None: it has enough)."""
    if got >= asked:
        return None
    return f"--num-samples {asked}: {dataset} has only {got} samples; all {got} are used"


def text_of(dataset: str, number: int, row: dict) -> str:
    """The non-empty "text" of line `number`."""
    text = row.get("text")
    if not isinstance(text, str) or not text.strip():
        got = "has no \"text\" field" if "text" not in row else f"has \"text\": {json.dumps(text)[:40]}"
        raise DatasetError(f"--dataset {dataset}: line {number} {got}; a text is a non-empty string")
    return text
