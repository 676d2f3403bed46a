"""The `frameworks` backend for encoder-decoder models: HF PyTorch behind `Seq2SeqTorchSteps`."""
from __future__ import annotations

from NNDF.backends.frameworks import FrameworksBackend
from NNDF.context import RunContext
from Seq2Seq.torch_steps import Seq2SeqTorchSteps


class Seq2SeqFrameworksBackend(FrameworksBackend):
    def setup(self, run: RunContext) -> Seq2SeqTorchSteps:
        return Seq2SeqTorchSteps(run.torch_model(), run.options.use_cache)
