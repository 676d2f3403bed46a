"""The encoder-decoder kind on PyTorch: the HF model behind `Seq2SeqTorchSteps`, or with `--static-cache` the
family's fused decoder step over fixed buffers (`Seq2SeqStaticSteps`; compiled with --torch-compile, replayed
from a CUDA graph with --use-cuda-graph). A static cache here is always the family's step: HF's own encoder-decoder
static cache keeps host-side state per layer (which cross-attention caches are filled) that a replayed step
cannot update."""
from __future__ import annotations

from NNDF.backends.torch.backend import FrameworksBackend, TorchAdapter
from NNDF.context import RunContext
from NNDF.errors import UsageError


class Seq2SeqTorch(TorchAdapter):
    def steps(self, backend: FrameworksBackend, run: RunContext):
        from Seq2Seq.torch_steps import Seq2SeqStaticSteps, Seq2SeqTorchSteps

        options = run.options
        options.check_graph_needs_static(backend.name)
        if not options.static_cache:
            return Seq2SeqTorchSteps(self.model(run), options.use_cache)
        if options.fused_decode is False:
            raise UsageError("--no-fused-decode: an encoder-decoder's static cache on frameworks is the family's "
                             "fused step; drop --no-fused-decode (or --static-cache)")
        model = run.torch_model()
        kind = model.config.model_type
        if kind not in backend.fused_decode_types():
            have = ", ".join(backend.fused_decode_types()) or "none"
            raise UsageError(f"--static-cache: frameworks has no static-cache decoder step for model type {kind!r} "
                             f"(model types with one: {have}); drop --static-cache")
        return Seq2SeqStaticSteps(self.model(run), backend.fused_step(run, model, required=True),
                                  options.use_cuda_graph)

    def model(self, run: RunContext):
        """The module in the encoder-decoder shape the steps run (image-to-text wraps the HF model)."""
        return run.torch_model()
