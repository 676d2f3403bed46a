"""The named parts of an exported model (decoder; encoder, decoder, cache generator) and the flags that hand the
harness the user's files for them (`--<part>-onnx`, `--<part>-engine`). Light on imports: checked before anything
heavy loads."""
from __future__ import annotations

from pathlib import Path

from NNDF.errors import UsageError

PARTS = ("encoder", "decoder", "cache_generator")  # every part name a task may have, in flag order


def part_flag(part: str, kind: str = "onnx") -> str:
    return f"--{part.replace('_', '-')}-{kind}"


def given_parts(family, use_cache: bool, kind: str, source) -> dict[str, Path] | None:
    """The user's `--<part>-<kind>` files ({part: path}), or None when none were given. They must be exactly the
    parts this run has (`family.task.parts`): one line otherwise. The single place that checks these flags (run
    at `open_run`, before anything loads, and again where the files are used)."""
    parts = family.task.parts(use_cache)
    given = {p: getattr(source, f"{p}_{kind}", None) for p in PARTS}
    given = {p: value for p, value in given.items() if value}
    if not given:
        return None
    for part in given:
        if part not in parts:
            why = "needs the KV cache (drop --no-use-cache)" if part in family.task.parts(True) else \
                f"does not apply to {family.name} ({family.kind} models have: {', '.join(parts)})"
            raise UsageError(f"{part_flag(part, kind)} {why}")
    missing = [part_flag(p, kind) for p in parts if p not in given]
    if missing:
        raise UsageError(f"{', '.join(part_flag(p, kind) for p in parts)} go together for {family.name}"
                         f"{'' if use_cache else ' with --no-use-cache'}: missing {', '.join(missing)}")
    return {part: Path(given[part]) for part in parts}
