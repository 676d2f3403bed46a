"""Artifacts under the working directory: names, fingerprints, atomic writes, cleanup.

Layout: `<working-dir>/<FAMILY>/<variant>/<part>-<options>/` holds one artifact (e.g. `model.onnx` plus
external data) and `fingerprint.json`. An artifact is reused only if its recorded fingerprint equals the one
computed now (model config, weights identity, export options, library versions); otherwise it is rebuilt.
Artifacts are built in a temporary sibling folder and renamed into place, so an interrupted build never
leaves a partial artifact where a later run would find it.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

FINGERPRINT = "fingerprint.json"


def safe_name(text: str) -> str:
    """A path component from a user string: HF ids like 'EleutherAI/gpt-neo-125m' -> 'EleutherAI--gpt-neo-125m'."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", text.replace("/", "--")).strip(".-")
    return name or "unnamed"


def digest(obj) -> str:
    """Stable short hash of a JSON-serialisable object."""
    blob = json.dumps(obj, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def file_digest(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def write_json_atomic(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True, default=str)
    os.replace(tmp, path)


class ArtifactStore:
    """Artifacts of one model variant: `root = <working-dir>/<FAMILY>/<variant>`."""

    def __init__(self, working_dir: Path, family: str, variant: str):
        self.root = Path(working_dir) / safe_name(family) / safe_name(variant)

    def path(self, name: str) -> Path:
        return self.root / safe_name(name)

    def is_current(self, name: str, fingerprint: dict) -> bool:
        """True if artifact `name` exists and was built with exactly this fingerprint."""
        record = self.path(name) / FINGERPRINT
        try:
            return json.loads(record.read_text()) == json.loads(json.dumps(fingerprint, default=str))
        except (OSError, ValueError):
            return False

    @contextmanager
    def build(self, name: str, fingerprint: dict) -> Iterator[Path]:
        """Yield a temporary folder to build into; on success it replaces artifact `name` atomically."""
        final = self.path(name)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.building-"))
        try:
            yield tmp
            write_json_atomic(tmp / FINGERPRINT, fingerprint)
            if final.exists():  # move the stale one aside first: the rename below must not merge folders
                stale = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.stale-"))
                os.replace(final, stale / "old")
                shutil.rmtree(stale, ignore_errors=True)
            os.replace(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def cleanup(self) -> list[Path]:
        """Remove every artifact of this variant; returns what was removed."""
        if not self.root.exists():
            return []
        removed = sorted(self.root.iterdir())
        shutil.rmtree(self.root)
        return removed


def weights_identity(model_dir: Path | None, model_id: str) -> dict:
    """What identifies the weights: file names, sizes and modification times of a local folder (cheap and
    changes whenever the files are rewritten), or the hub id and resolved commit for a hub model."""
    if model_dir is None:
        return {"hub_id": model_id}
    files = sorted(p for p in Path(model_dir).iterdir() if p.suffix in {".safetensors", ".bin", ".json"})
    return {p.name: [p.stat().st_size, p.stat().st_mtime_ns] for p in files}
