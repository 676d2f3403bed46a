"""The `onnxrt` backend: a run's ONNX artifact on ONNX Runtime. Kind-neutral: the kind's adapter here is its
artifact class (an `onnx_artifact.OnnxArtifact`: which graphs it exports, how they are validated and run, e.g.
`CausalLM.onnxrt.DecoderOnnx`); everything else is shared.

With `--quantize` (ORTOptions) the backend gives one variant per quantization (`variants`): `onnxrt` runs the
float artifact, `onnxrt-int8` / `onnxrt-int4` the same graphs quantized (`NNDF.backends.onnxrt.quantized`), each its
own row of the action's table.

A cached export that no longer loads (truncated, edited) is re-exported with a warning; a fresh export or
the user's `--*-onnx` files that fail are reported, never replaced.
"""
from __future__ import annotations

import logging
from pathlib import Path

from NNDF.backends.base import Backend
from NNDF.backends.onnxrt.artifact import GraphArtifact, graph_bytes, tensor_bytes
from NNDF.backends.onnxrt.options import ORTOptions
from NNDF.context import RunContext
from NNDF.errors import ArtifactError, UsageError

log = logging.getLogger(__name__)


class OnnxRuntimeBackend(Backend):
    name = "onnxrt"

    def __init__(self, task, spec=None, adapter=None, fused=None, quantization=None, fused_support=None):
        super().__init__(task, spec, adapter, fused, fused_support)
        self.quantization = quantization  # None: the float graphs; else a `NNDF.backends.onnxrt.quantize.Quantization`
        self.onnx: GraphArtifact = adapter(self.spec, task)  # the kind's artifact: which graphs a run exports and runs
        self.paths: dict | None = None  # the graphs the last `setup` runs
        if quantization is not None:
            from NNDF.backends.onnxrt.quantized import QuantizedOnnx

            self.onnx = QuantizedOnnx(self.onnx, quantization)
        self.plain = self.onnx  # the export (or its quantization); --fused-decode runs use a fused graph instead
        self.choice: str | None = None  # which decoder graph a static-cache run took, and why (`use_fused`)

    @property
    def label(self) -> str:
        return self.name if self.quantization is None else f"{self.name}-{self.quantization.label}"

    def variant_flags(self) -> tuple[str, ...]:
        """The command-line flags that select this variant (none for the float graphs), for commands printed to
        the user (deploy's query command: the in-process row then runs what the served model runs)."""
        return () if self.quantization is None else self.quantization.flags()

    def variants(self, run: RunContext) -> list[Backend]:
        """One backend per `--quantize` value, in the order given (the float graphs: this one); a quantization
        this run's precision or device cannot take is refused here, before any backend is set up."""
        quantizations = run.options_of(ORTOptions).quantizations()
        if getattr(run.options, "fused_decode", False) and any(quantizations) and not self._quantized_fused(run):
            raise UsageError(f"--fused-decode with --quantize: the fused graph is quantized only for decoder-only "
                             f"models on the CPU (this run: a {self.task.kind} model on {run.device.type}); leave "
                             f"--quantize out (or --fused-decode)")
        for q in quantizations:
            refusal = q and q.refusal(run.options.precision, run.device.type)
            if refusal:
                raise UsageError(refusal)
        return [self if q is None else self.quantized(q) for q in quantizations]

    def quantized(self, quantization) -> "OnnxRuntimeBackend":
        """This backend over the same kind's graphs quantized (`--quantize`)."""
        return type(self)(self.task, self.spec, self.adapter_class, self.fused, quantization, self.fused_support)

    def export_max_diff(self) -> float | None:
        return self.onnx.max_diff

    def torch_threads(self, run: RunContext) -> int | None:
        """On the CPU torch gets one thread while ONNX Runtime runs the model (`--threads` sizes ONNX Runtime's
        pool): between two ONNX Runtime calls torch only picks a token ([batch, vocab] vectors), and a torch pool
        of more threads contends with ONNX Runtime's for the cores. Measured on 2 cores: 2.6-4 ms per token outside
        the graph with one torch thread, 75-150 ms with two while the machine was busy; with `--threads 2` (which
        gave torch two threads too) the two EOS masks of a benchmark's `min_new_tokens` took 15 ms per token
        (docs/PERFORMANCE.md)."""
        return 1 if run.device.type == "cpu" else None

    def model_bytes(self) -> int | None:
        return None if self.paths is None else graph_bytes(self.paths)

    def step_bytes(self) -> int | None:
        if self.paths is None:
            return None
        parts = self.task.step_parts
        return tensor_bytes({p: path for p, path in self.paths.items() if parts is None or p in parts})

    def export_notes(self) -> tuple[str, ...]:
        notes = () if self.onnx is self.plain and self.quantization is None else self.onnx.notes()
        return ((f"decoder graph: {self.choice}",) if self.choice else ()) + notes

    @classmethod
    def availability(cls, options: dict | None = None) -> tuple[bool, str]:
        try:
            import onnxruntime as ort
        except ImportError:
            return False, "onnxruntime is not installed (pip install onnxruntime or onnxruntime-gpu)"
        return True, f"onnxruntime {ort.__version__}, providers: {', '.join(ort.get_available_providers())}"

    def served_graphs(self, run: RunContext) -> tuple[dict[str, Path], bool]:
        """The graphs a model served for this row runs ({part: path}, made now where no current artifact exists)
        and whether they are built from the weights (`use_fused`: what a static-cache run takes in process), not
        the export; `self.choice` then says which and why."""
        self.check_options(run)
        self.use_fused(run)
        return self.onnx.paths(run)[0], self.onnx is not self.plain

    def served_steps(self, run: RunContext, paths: dict[str, Path], built: bool):
        """Steps over a served model's copies of `served_graphs`' graphs: the export's as the run's user files open
        them (`setup`), or the built graphs' own steps (the run then names no user files)."""
        if not built:
            return self.setup(run)
        return self.plain.fused(self.fused[run.source.config.model_type], run).steps(run, paths)

    def build(self, run: RunContext) -> list:
        self.use_fused(run)
        self.paths, fresh = self.onnx.paths(run)  # `model_bytes` then gives their size
        self.made = "your files" if self.onnx.user_paths(run) else "yes" if fresh else "reused"
        return []

    def use_fused(self, run: RunContext) -> None:
        """Which decoder graph a static-cache run takes (`self.onnx`; `self.choice` says which and why, in the
        action's notes). --fused-decode: the family's fused decode graph (its builder for the model type, made into
        an artifact by the kind's: `OnnxArtifact.fused`), or UsageError when the family, model, precision or device
        has none (`variants` refuses --quantize with it where no quantized fused graph runs). --no-fused-decode: the
        export. Neither: the fused graph
        wherever it builds and runs here without a refusal, else the export, the note saying why. A kind without a
        static-cache export (`OnnxArtifact.static_export` False) refuses, in one line, what has no built graph.
        Quantized rows of a decoder-only model on the CPU take the fused graph quantized (`fused_quantized`)."""
        self.onnx, self.choice = self.plain, None
        asked, options = getattr(run.options, "fused_decode", None), run.options
        products = run.options_of(ORTOptions).ort_products
        if not options.static_cache:
            if products:
                raise UsageError("--ort-products applies to the graphs onnxrt builds from the weights, which only "
                                 "--static-cache runs take; add --static-cache (or leave --ort-products out)")
            return
        why = self._no_fused_graph(run, asked)
        if why is None:
            model_type = run.source.config.model_type
            self.check_fused_decode(model_type)
            try:
                how = "--fused-decode" if asked else "default"
                if self.quantization is not None:
                    if products == "linear":
                        raise UsageError("--ort-products linear: the quantized graphs are ONNX Runtime's MatMulNBits "
                                         "and quantized MatMul; leave --ort-products out with --quantize")
                    self.onnx = self.fused_quantized(self.fused[model_type], run)
                    self.choice = f"the fused decode graph built from the weights, {self.quantization.name} ({how})"
                    return
                self.onnx = self.plain.fused(self.fused[model_type], run)
                op = {"linear": "the Linear op", "matmul": "ONNX Runtime's MatMul"}[self.onnx.products(run)]
                self.choice = f"the fused decode graph built from the weights ({how}; products: {op})"
                return
            except UsageError as exc:
                if asked:
                    raise
                why = str(exc)
        if not self.plain.static_export:
            raise UsageError(f"--static-cache on onnxrt runs the {self.task.kind} decoder graph built from the "
                             f"weights, and this run has none ({why}); drop --static-cache")
        if products:
            raise UsageError(f"--ort-products applies to the graphs onnxrt builds from the weights, and this run "
                             f"takes the torch.onnx static-cache export ({why}); leave --ort-products out")
        self.choice = f"the torch.onnx static-cache export ({why})"

    def _no_fused_graph(self, run: RunContext, asked: bool | None) -> str | None:
        """Why a static-cache run takes no fused graph without trying one (None: try it)."""
        if asked is False:
            return "--no-fused-decode"
        if asked is None and self.quantization is not None and not self._quantized_fused(run):
            return "quantized graphs"
        model_type = run.source.config.model_type
        if asked is None and model_type not in self.fused:
            return f"no fused graph for {model_type}"
        if asked is None and getattr(run.options, "decoder_onnx", None):
            return "--decoder-onnx given"
        return None

    def _quantized_fused(self, run: RunContext) -> bool:
        """Whether a quantized static-cache run takes the fused graph quantized: decoder-only models on the CPU,
        where it was measured faster than the quantized torch.onnx export (GPT-2 124M shapes, 2 cores: int8 +13%,
        int4 +27% tokens/s; ~110 nodes a step against ~550; docs/PERFORMANCE.md). Not measured on CUDA."""
        return run.device.type == "cpu" and self.task.kind == "decoder"

    def fused_quantized(self, builder, run: RunContext):
        """The fused decode graph `builder` makes, its weights quantized as this row's (`QuantizedOnnx` over it)."""
        from NNDF.backends.onnxrt.quantized import QuantizedOnnx

        return QuantizedOnnx(self.plain.base.fused(builder, run), self.quantization)

    def check_options(self, run: RunContext) -> None:
        """Refuse flags this kind cannot honour on ONNX Runtime (its artifact's `check_options`)."""
        self.plain.check_options(run)

    def setup(self, run: RunContext):
        self.check_options(run)
        self.use_fused(run)
        self.paths, fresh = self.onnx.paths(run)
        try:
            return self.onnx.steps(run, self.paths)
        except ArtifactError as exc:
            if fresh or self.onnx.user_paths(run):
                raise
            log.warning("cached ONNX for %s is unusable (%s); re-exporting", run.source.variant, exc)
            self.paths = self.onnx.paths(run, force=True)[0]
            return self.onnx.steps(run, self.paths)
