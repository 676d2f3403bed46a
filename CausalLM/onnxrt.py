"""The decoder-only kind on ONNX Runtime: the decoder graph (CausalLM/export.py) as a stored artifact, run by
`OrtSteps`; with `--fused-decode`, the family's fused decode graph (`CausalLM.ort_fused`) in its place."""
from __future__ import annotations

from pathlib import Path

from CausalLM.export import export_decoder, validate
from NNDF.backends.onnxrt.artifact import GraphArtifact, OnnxArtifact
from CausalLM.ort_steps import OrtSteps
from NNDF.context import RunContext
from NNDF.errors import ArtifactError
from NNDF.options import ModelOptions


class DecoderOnnx(OnnxArtifact):
    """The decoder-only graph (`CausalLM.export.export_decoder`), stored as `decoder-*/model.onnx`."""

    prefix = "decoder"

    def file_name(self, part: str) -> str:
        return "model.onnx"

    def export(self, model, out_dir: Path, options: ModelOptions) -> dict[str, Path]:
        return {"decoder": export_decoder(model, out_dir, options.use_cache, self.spec, options.static_cache)}

    def steps(self, run: RunContext, paths: dict[str, Path], cuda_graph: bool | None = None) -> OrtSteps:
        """OrtSteps over the decoder (CUDA graphs as the run asks, unless `cuda_graph` says otherwise)."""
        options = run.options
        cuda_graph = options.use_cuda_graph and options.static_cache if cuda_graph is None else cuda_graph
        steps = OrtSteps(paths["decoder"], run.device, options.use_cache, options.threads, cuda_graph)
        if steps.static != options.static_cache:
            steps.close()
            want = "a static-cache" if options.static_cache else "a growing-cache"
            raise ArtifactError(f"{paths['decoder']} is not {want} decoder graph (--static-cache must match how "
                                "it was exported)")
        return steps

    def check(self, model, run: RunContext, paths: dict[str, Path]) -> float:
        return validate(model, lambda: self.steps(run, paths, cuda_graph=False), run.options.use_cache, self.spec,
                        run.options.fp16)

    def fused(self, builder, run: RunContext) -> GraphArtifact:
        from CausalLM.ort_fused import fused_artifact

        return fused_artifact(self, run, builder)

    def path(self, run: RunContext, force: bool = False) -> tuple[Path, bool]:
        paths, fresh = self.paths(run, force)
        return paths["decoder"], fresh
