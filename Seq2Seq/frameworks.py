"""The `frameworks` backend for encoder-decoder models: HF PyTorch behind `Seq2SeqTorchSteps`."""
from __future__ import annotations

from NNDF.backends.frameworks import FrameworksBackend
from NNDF.context import RunContext


class Seq2SeqFrameworksBackend(FrameworksBackend):
    def setup(self, run: RunContext):
        from Seq2Seq.torch_steps import Seq2SeqTorchSteps

        return Seq2SeqTorchSteps(self.model(run), run.options.use_cache)

    def model(self, run: RunContext):
        """The module in the encoder-decoder shape the steps run (image-to-text wraps the HF model)."""
        return run.torch_model()
