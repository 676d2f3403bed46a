"""The encoder-decoder kind on PyTorch: the HF model behind `Seq2SeqTorchSteps`."""
from __future__ import annotations

from NNDF.backends.torch.backend import FrameworksBackend, TorchAdapter
from NNDF.context import RunContext


class Seq2SeqTorch(TorchAdapter):
    def steps(self, backend: FrameworksBackend, run: RunContext):
        from Seq2Seq.torch_steps import Seq2SeqTorchSteps

        return Seq2SeqTorchSteps(self.model(run), run.options.use_cache)

    def model(self, run: RunContext):
        """The module in the encoder-decoder shape the steps run (image-to-text wraps the HF model)."""
        return run.torch_model()
