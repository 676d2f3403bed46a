"""The files a command writes (`--json`, `--plot`), checked before the run against what the run reads.

An output may not be, or lie inside, an input of the same run: the `--dataset` or `--image` files, the user's
graphs and engines (`--decoder-onnx`, ... and their `.data` beside them), the model folder (`--torch-dir`, or the
offline variant's committed folder), a Triton model repository (`deploy --repository`, `serve DIR`), or another
output. Paths are compared after resolving symbolic links (and as the same file, for hard links), so no spelling
of the path gets around the check. Each refusal is one line that names both flags; nothing is written.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

from NNDF.errors import UsageError
from NNDF.parts import PARTS, part_flag

OUTPUTS = {"json": "--json", "plot": "--plot"}  # namespace attribute -> flag
STDOUT = "-"  # `--json -`: the JSON on stdout, and the report's tables and notes on stderr
FILES = {"dataset": "--dataset", "image": "--image",
         **{f"{part}_{kind}": part_flag(part, kind) for part in PARTS for kind in ("onnx", "engine")}}
FOLDERS = {"torch_dir": "--torch-dir", "repository": "--repository"}


def _values(args, attribute: str) -> list[str]:
    value = getattr(args, attribute, None)
    if not value:
        return []
    return [v for v in (value if isinstance(value, (list, tuple)) else [value]) if isinstance(v, str) and v.strip()]


def inputs(args, model_folder: Path | None = None) -> Iterator[tuple[str, Path, bool]]:
    """(what, path, is a folder) for every input the parsed command names; `model_folder`: the offline variant's
    committed folder when the run reads one."""
    for attribute, flag in FILES.items():
        for value in _values(args, attribute):
            yield f"the {flag} file this run reads", Path(value), False
            if attribute.endswith("_onnx"):
                yield f"the external data of the {flag} file", Path(value + ".data"), False
    for attribute, flag in FOLDERS.items():
        for value in _values(args, attribute):
            yield f"inside the {flag} folder this run uses", Path(value), True
    if getattr(args, "action", None) == "serve" and _values(args, "model"):
        yield "inside the model repository being served", Path(args.model), True
    if model_folder is not None:
        yield "inside the model's committed folder", model_folder, True


def _collides(output: Path, path: Path, folder: bool) -> bool:
    """`output` is the file `path`, or lies inside the folder `path` (an input that does not exist: no)."""
    try:
        if not folder and not path.exists():  # e.g. --dataset naming an HF dataset, not a file
            return False
        target, source = output.resolve(), path.resolve()
        if folder:
            return target == source or target.is_relative_to(source)
        return target == source or (output.exists() and os.path.samefile(output, path))
    except (OSError, RuntimeError, ValueError):  # a symlink loop, a name the OS refuses: checked elsewhere
        return False


def _resolved(path: Path) -> Path | None:
    try:
        return path.resolve()
    except (OSError, RuntimeError, ValueError):
        return None


def check_outputs(args, model_folder: Path | None = None) -> None:
    """UsageError when an output flag names an input of the run or another output (see the module docstring)."""
    outputs = [(flag, Path(value)) for attribute, flag in OUTPUTS.items() for value in _values(args, attribute)
               if value != STDOUT]
    for n, (flag, output) in enumerate(outputs):
        for what, path, folder in inputs(args, model_folder):
            if _collides(output, path, folder):
                raise UsageError(f"{flag} {output}: is {what} ({path}); writing it would destroy an input: "
                                 "give another path")
        for other, path in outputs[n + 1:]:
            if _resolved(output) is not None and _resolved(output) == _resolved(path):
                raise UsageError(f"{flag} {output}: is also the {other} output; give each output its own path")
