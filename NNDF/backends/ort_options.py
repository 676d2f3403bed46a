"""ONNX Runtime's own flags (the onnxrt backend owns them: `NNDF.registry.BACKENDS` adds them to every action
that runs a model, and only the onnxrt backend reads them)."""
from __future__ import annotations

import argparse
from dataclasses import dataclass

from NNDF.options import OptionGroup, flag


@dataclass(frozen=True)
class ORTOptions(OptionGroup):
    title = "ONNX Runtime (onnxrt backend)"
    ort_optimize: bool = flag(True, "--ort-optimize", action=argparse.BooleanOptionalAction, help="encoder models: run ONNX Runtime's transformer graph optimizer on the export (fused attention, skip layer norm, GELU); --no-ort-optimize keeps the plain export, to compare")
