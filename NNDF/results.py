"""Results: frozen dataclasses that keep raw samples, print as a table and serialise to JSON.

Every action returns a `Report`: a title, rows (one result dataclass per backend, or per backend and prompt)
and the environment it ran in. `Report.print()` renders the readable table; `Report.write_json(path)` writes
the same results (atomically) with the raw samples, so numbers can be recomputed.
"""
from __future__ import annotations

import platform
from dataclasses import dataclass, field, is_dataclass
from pathlib import Path

from tabulate import tabulate

from NNDF.artifacts import write_json_atomic


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

