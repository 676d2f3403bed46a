"""The `triton` client backend's own flags (`NNDF.registry.BACKENDS` adds them to every action that runs
backends): which server, which served model, how long to wait."""
from __future__ import annotations

from dataclasses import dataclass

from NNDF.errors import UsageError
from NNDF.options import OptionGroup, flag


@dataclass(frozen=True)
class TritonOptions(OptionGroup):
    title = "triton backend (a model served by Triton Inference Server)"
    owner = "the triton backend"
    backends = ("triton",)
    triton_url: str = flag("http://127.0.0.1:8000", "--triton-url", help="the server: http://HOST:PORT or grpc://HOST:PORT")
    triton_model: str | None = flag(None, "--triton-model", help="the served model's name (default: the name deploy gives: <family>-<variant>-onnxrt)")
    triton_timeout: float = flag(600.0, "--triton-timeout", help="seconds one request may take")

    def check(self):
        if self.triton_timeout <= 0:
            raise UsageError(f"--triton-timeout must be > 0, got {self.triton_timeout}")
