"""`onnxrt --fused-decode`: the family's fused decode graph (`CausalLM.fused_graph`: ONNX Runtime's
GroupQueryAttention, SkipLayerNormalization, FastGelu) as a derived artifact, and the steps that drive it.

`FusedDecodeOnnx` is a `GraphArtifact` like the quantized graphs: built by the builder the family declares for the
run's model type (`BackendFacts.fused` of its `<family>/onnxrt.py`: a `fused_graph.FusedBuilder`) straight from the
checkpoint's safetensors files (memory-mapped, one tensor at a time, each weight written to the graph's data file
as it is made; the model's structure from its config on the meta device), or from the loaded PyTorch model where
the model has no such files; fingerprinted (config, weights, precision, builder version, onnx and onnxruntime
versions), validated against PyTorch at build time (`validation.json`) and cached as
`decoder-<precision>-fused/model.onnx` (+ `model.onnx.data`). Validation runs the graph first, closes it, then
loads the PyTorch model: the two never share the device's memory, and a current artifact loads no PyTorch model.
The standard export stays what `trt` builds from.

`OrtFusedSteps` keeps one `KVSlot` per (rows, max_length) in a `SlotPool`: full-length key/value buffers bound as
both past and present (the attention op writes each step's keys and values in place), and the one-token step's
ids, positions, per-row lengths (`seqlens_k`, int32 on the device) and logits at fixed addresses, so ONNX Runtime's
CUDA graph captures that step once per slot and replays it. `total_sequence_length` is a host scalar (the CUDA
kernel takes it on the CPU) that a captured graph freezes: one-token steps always pass the buffer length, which
tells the step from a prompt pass and bounds the columns the kernel may attend to (cuDNN's attention on CUDA reads
no further); the per-row lengths come from `seqlens_k` (each row's mask sum - 1, written on the device every
step). The op reads no attention mask, so
every row's tokens start at column 0 of its buffers: a padded batch's prompt pass runs row by row over each row's
own tokens (into that row's buffers), and later steps write each row at its own length, so a padded batch gives
each row's batch-1 tokens. On the CPU a greedy generation's steps choose their own tokens (`greedy_forward`: the
EOS mask and argmax on numpy views of the slot's logits, the token and the advanced positions and lengths written
into the bound inputs), so that between two runs the host does a few numpy operations instead of the loop's torch
work, which for a small model cost as much as a third of a step.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from CausalLM.graph_io import HOST_INPUTS, LOGITS_START
from NNDF.artifacts import digest, weights_identity
from NNDF.backends.onnxrt import custom_ops
from NNDF.backends.onnxrt.artifact import GraphArtifact, user_files
from NNDF.backends.onnxrt.export import LogitsCheck
from NNDF.backends.onnxrt.steps import OrtGraph
from NNDF.context import RunContext
from NNDF.errors import UsageError
from NNDF.slots import KVSlot, SlotPool, reordered, step_inputs

# validation's buffer length: a generation-sized buffer, so one-token steps pass the kernel the total length it
# sizes split-K decoding by in real runs (a 7-column buffer would take a different path), while 7 are written
VALIDATION_CACHE = 256


def device_refusal(precision: str, device: str, what: str = "onnxrt --fused-decode") -> str | None:
    """Why graphs built on GroupQueryAttention (`what` runs them) cannot run at this precision on this device
    (None: they can)."""
    if device == "cuda" and precision == "fp32":
        return (f"{what} on cuda needs --fp16: ONNX Runtime's GroupQueryAttention CUDA kernel is registered for "
                "float16 and bfloat16 only (its CPU kernel runs fp32)")
    return None


def check_builds(run: RunContext, builder, what: str = "onnxrt --fused-decode") -> None:
    """UsageError naming why `builder` has no graph for this run's model, precision or device."""
    why = builder.refusal(run.source.config) or device_refusal(run.options.precision, run.device.type, what)
    if why:
        raise UsageError(why)


def fused_artifact(base: GraphArtifact, run: RunContext, builder) -> "FusedDecodeOnnx":
    """The fused graph `builder` makes for this run in place of `base` (the model type was checked:
    `Backend.check_fused_decode`), or UsageError naming why this model, precision or device has none."""
    check_builds(run, builder)
    return FusedDecodeOnnx(base.spec, base.task, builder)


class BuiltGraphs(GraphArtifact):
    """Graphs a family's builder makes from the weights (this kind's decoder graph; `Seq2Seq.ort_fused`'s
    encoder-decoder graphs): fingerprinted by the config, the weights' identity, the precision, device and builder
    version, and the onnx / onnxruntime versions; built from the checkpoint's safetensors files where the run has
    them (`source_model` None), else from the loaded PyTorch model; validated against PyTorch at build time."""

    what = "graph"  # in the status line and the refusal of the user's graph files
    yours = "--no-fused-decode"  # the flag that runs the user's graph files instead

    def __init__(self, spec, task, builder):
        super().__init__(spec, task)
        self.builder = builder
        self.record: dict | None = None

    def artifact_name(self, run: RunContext) -> str:
        return f"{self.prefix}-{run.options.precision}-fused"

    def fingerprint(self, run: RunContext) -> dict:
        import onnx
        import onnxruntime

        fused = {"precision": run.options.precision, "device": run.device.type,
                 "builder": f"{self.builder.build.__module__}@{self.builder.version}", "products": self.products(run)}
        if self.products(run) == "linear":
            fused["ops"] = custom_ops.sources_digest(self.ops_target(run))
            fused["norms_in_products"] = self.folds_norms()
            fused["own_attention"] = self.owns_attention()
        return {"config": digest(run.source.config.to_dict()),
                "weights": weights_identity(run.source.local_dir, run.source.location),
                "fused": {**fused, **self.fingerprint_extra()},
                "versions": {"onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__}}

    def folds_norms(self) -> bool:
        """Whether the graphs, where their products are the Linear op, run their norms inside the products."""
        from CausalLM import fused_graph

        return fused_graph.folds_norms(self.builder.norms_in_products)

    def owns_attention(self) -> bool:
        """Whether the graphs, where their products are the Linear op, run their attention as this project's op."""
        from CausalLM import fused_graph

        return fused_graph.owns_attention(self.builder.own_attention)

    def fingerprint_extra(self) -> dict:
        """What else the graphs depend on (none here)."""
        return {}

    @staticmethod
    def products(run: RunContext) -> str:
        """"linear" (the graphs' products are this project's Linear op, whose library is built into the artifact
        folder: `add_ops`) or "matmul" (ONNX Runtime's MatMul): --ort-products, by default linear on CUDA."""
        from NNDF.backends.onnxrt.options import ORTOptions

        products = run.options_of(ORTOptions).products(run.device.type)
        if products == "linear" and run.device.type == "cuda" and (run.device.index or 0) != 0:
            # the op's library launches on its own CUDA runtime's device, the first visible one
            raise UsageError(f"the onnxrt graphs' Linear op runs on the first visible GPU, not {run.device}: select "
                             f"the GPU with CUDA_VISIBLE_DEVICES (and --device cuda), or pass --ort-products matmul")
        return products

    @staticmethod
    def ops_target(run: RunContext) -> tuple[int, int] | None:
        """What the ops library is compiled for: the run's GPU's compute capability (None: the CPU build)."""
        return torch.cuda.get_device_capability(run.device) if run.device.type == "cuda" else None

    def add_ops(self, run: RunContext, out_dir: Path) -> bool:
        """Compile the ops library into the artifact folder where the graphs use it; whether they do."""
        if self.products(run) != "linear":
            return False
        custom_ops.build(out_dir, self.ops_target(run))
        return True

    def user_paths(self, run: RunContext) -> dict[str, Path] | None:
        if user_files(run, "onnx", run.options):
            raise UsageError(f"--static-cache on onnxrt builds the {self.what} from the model's weights; leave the "
                             f"--*-onnx files out (or use {self.yours}, to run yours)")
        return None

    def building(self, run: RunContext) -> str:
        return f"building {run.source.variant}'s {self.what} for ONNX Runtime"

    def read_validation(self, record: dict) -> None:
        self.record, self.max_diff = record, record["max_abs_diff_vs_pytorch"]

    def source_model(self, run: RunContext):
        """None where the checkpoint's safetensors files are at hand (the graphs are built from them); else the
        run's PyTorch model."""
        from CausalLM.fused_graph import checkpoint_files

        return None if checkpoint_files(run.source.local_dir) else run.torch_model()

    def build_bytes(self, run: RunContext, model) -> int:
        from CausalLM.fused_graph import checkpoint_files

        if model is not None:
            return super().build_bytes(run, model)
        from CausalLM.graph_weights import SafetensorsFile

        files = [SafetensorsFile(path) for path in checkpoint_files(run.source.local_dir)]
        return sum(f.numel(k) for f in files for k in f.keys()) * (2 if run.options.fp16 else 4)

    @staticmethod
    def weights(run: RunContext, model, arch, dtype):
        """The checkpoint's tensors for the builder: from `model` when given, else from the safetensors files."""
        from CausalLM import fused_graph

        if model is not None:
            return fused_graph.StateDict.of_model(model, run.family.name, dtype)
        return fused_graph.StateDict.of_files(arch, fused_graph.checkpoint_files(run.source.local_dir),
                                              run.family.name, dtype)


class FusedDecodeOnnx(BuiltGraphs):
    """The family's fused decode graph, built from the weights."""

    prefix = "decoder"
    what = "fused decode graph"

    def parts(self, use_cache: bool) -> tuple[str, ...]:
        return ("decoder",)

    def file_name(self, part: str) -> str:
        return "model.onnx"

    def steps(self, run: RunContext, paths: dict[str, Path], cuda_graph: bool | None = None) -> "OrtFusedSteps":
        graph = run.options.use_cuda_graph if cuda_graph is None else cuda_graph
        return OrtFusedSteps(paths["decoder"], run.device, run.options.threads, graph)

    def build_into(self, model, run: RunContext, out_dir: Path) -> dict:
        """Build the graph (from the checkpoint's files when `model` is None, else from `model`), then validate it
        (`validate_fused`) and drop the PyTorch model it loaded for that."""
        import time

        from CausalLM import fused_graph

        start = time.perf_counter()
        arch, dtype = run.architecture(), np.float16 if run.options.fp16 else np.float32
        weights = self.weights(run, model, arch, dtype)
        g = fused_graph.GraphBuilder(dtype, out_dir / "model.onnx.data", linear=self.add_ops(run, out_dir),
                                     norms_in_products=self.folds_norms(), own_attention=self.owns_attention())
        try:
            proto = self.builder.build(arch, weights, g)
        finally:
            g.close()
        del weights, arch
        fused_graph.save(proto, out_dir / "model.onnx")
        seconds, peak = time.perf_counter() - start, _peak_rss_bytes()
        diff = validate_fused(run, lambda: self.steps(run, {"decoder": out_dir / "model.onnx"}, cuda_graph=False),
                              self.spec)
        run.release_torch_model()  # the graph runs without it (and would share the device's memory with it)
        return {"max_abs_diff_vs_pytorch": diff, "nodes": fused_graph.op_counts(proto),
                "built_from": "checkpoint files" if model is None else "PyTorch model",
                "build_seconds": round(seconds, 2), "process_peak_rss_bytes_after_build": peak}

    def notes(self) -> tuple[str, ...]:
        nodes = (self.record or {}).get("nodes", {})
        return (f"fused decode graph: {sum(nodes.values())} nodes ({', '.join(f'{op} {n}' for op, n in nodes.items())})",)


def _peak_rss_bytes() -> int | None:
    """The process's largest resident memory so far (Linux and macOS count it in different units; None elsewhere)."""
    try:
        import resource
        import sys
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def validate_fused(run: RunContext, make_steps, spec) -> float:
    """The fused graph's logits against PyTorch's: a prompt pass over 2 rows of 5 tokens, the second left-padded
    by 2, and two one-token steps (whose logits depend on every cached key and value) in a `VALIDATION_CACHE`-long
    buffer, compared at the real tokens. The graph (`make_steps()`) runs first and is closed before the PyTorch
    model is loaded. The max abs difference, or ArtifactError listing every mismatch (`LogitsCheck`)."""
    from CausalLM.torch_steps import TorchSteps

    ids = torch.randint(0, run.source.config.vocab_size, (2, 7), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, :2] = 0
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    steps = make_steps()
    try:
        got = _passes(steps, ids, mask, positions, VALIDATION_CACHE)
    finally:
        steps.close()
    del steps  # the session's device memory goes back before the PyTorch model arrives
    reference = _passes(TorchSteps(run.torch_model(), use_cache=True), ids, mask, positions, 7)
    check = LogitsCheck(spec, run.options.fp16)
    for (label, cols), ref, out in zip(_PASSES, reference, got):
        check.add(label, ref, out, real=mask[:, cols].bool()[..., None].expand_as(ref))
    return check.worst()


_PASSES = (("prompt pass", slice(0, 5)), ("cached step", slice(5, 6)), ("cached step", slice(6, 7)))


def _passes(steps, ids, mask, positions, length: int) -> list[torch.Tensor]:
    """The logits (on the CPU) of `_PASSES` run through `steps` on one cache `length` columns long."""
    device = steps.device
    cache, logits = steps.new_cache(ids.shape[0], length), []
    for _, cols in _PASSES:
        out, cache = steps.forward(ids[:, cols].to(device), mask[:, :cols.stop].to(device),
                                   positions[:, cols].to(device), cache)
        logits.append(out.float().cpu().clone())  # a step's logits buffer is reused by the next
    return logits


class OrtFusedSteps:
    """The decoder step contract over a fused decode graph (always a static, in-place cache)."""

    name = "onnxrt"
    use_cache = True

    def __init__(self, path: Path, device: torch.device, threads: int = 0, cuda_graph: bool = False):
        self.device, self.cuda_graph = device, cuda_graph
        self.graph = OrtGraph(path, device, threads, cuda_graph, HOST_INPUTS)
        self.past_names = [n for n in self.graph.inputs if n.startswith("past.")]
        self.present_names = [n for n in self.graph.output_names if n.startswith("present.")]
        self._slots: SlotPool[KVSlot] = SlotPool()

    def new_cache(self, batch: int, max_length: int) -> KVSlot:
        return self._slot(batch, max_length)

    def _slot(self, rows: int, max_length: int) -> KVSlot:
        return self._slots.get((rows, max_length), lambda number: self._new_slot(rows, max_length, number))

    def _new_slot(self, rows: int, max_length: int, graph_id: int) -> KVSlot:
        """Past buffers [rows, heads, max_length, head_dim] (bound as present too), and the one-token step's inputs
        and logits at fixed addresses (no mask: the op reads per-row lengths); its CUDA graph is `graph_id`."""
        device, graph = self.device, self.graph
        past = []
        for name in self.past_names:
            _, heads, _, head_dim = graph.inputs[name].shape
            past.append(torch.zeros(rows, heads, max_length, head_dim, dtype=graph.dtype(name), device=device))
        inputs = step_inputs(rows, max_length, device, mask=False)
        inputs["seqlens_k"] = torch.zeros(rows, dtype=torch.int32, device=device)  # total length - 1 per row
        # host memory, frozen by a captured graph
        inputs["total_sequence_length"] = torch.tensor(max_length, dtype=torch.int32)
        inputs[LOGITS_START] = torch.zeros(1, dtype=torch.int64)  # a step's one position
        vocab = graph.outputs["logits"].shape[-1]
        logits = torch.empty(rows, 1, vocab, dtype=graph.dtype("logits"), device=device)
        return KVSlot(rows, max_length, past, inputs, logits, graph_id)

    def reorder_cache(self, cache: KVSlot, index: torch.Tensor, within_inputs: bool = False) -> KVSlot:
        return reordered(cache, index, self._slot)

    def forward(self, input_ids, attention_mask, position_ids, cache: KVSlot, last_only=False):
        width, seq = attention_mask.shape[1], input_ids.shape[1]
        if seq > 1 or width == 1:
            return self._prompt(input_ids, attention_mask, position_ids, cache, last_only), cache
        torch.sub(attention_mask.sum(1), 1, out=cache.inputs["seqlens_k"])  # each row's length - 1, on the device
        cache.ids.copy_(input_ids)
        cache.positions.copy_(position_ids)
        self._run_step(cache)
        return cache.logits, cache

    def _run_step(self, cache: KVSlot) -> None:
        """The slot's one-token step on its bound buffers (bound on first use)."""
        if cache.binding is None:
            feeds = {**cache.inputs, **dict(zip(self.past_names, cache.past))}
            outputs = {"logits": cache.logits, **dict(zip(self.present_names, cache.past))}
            cache.binding = self.graph.bind(feeds, outputs)
        options = self.graph.run_options(cache.graph_id) if self.cuda_graph else None
        self.graph.run_bound(cache.binding, options)

    def greedy_in_step(self, cache) -> bool:
        """Whether `greedy_forward` serves a generation on this cache: a slot on the CPU, where a small model's step
        is short beside the loop's torch work around it (docs/PERFORMANCE.md, "The greedy token chosen beside the
        step")."""
        return self.device.type == "cpu" and isinstance(cache, KVSlot)

    def greedy_forward(self, cache: KVSlot, input_ids, position_ids, length: int, eos_ids: tuple[int, ...],
                       forbid: bool, vocab: int):
        """The next greedy token [rows] and the cache (`NNDF.steps.GreedySteps`): the step runs on the slot's own
        last choice (or `input_ids` [rows, 1] where the loop changed it), then on numpy views of the slot's
        buffers the EOS ids go to -inf where `forbid` (the loop's min-length processors), the argmax is the token
        (the loop's `pick_tokens`), written into the slot's ids, and positions and per-row lengths advance by one.
        `position_ids` [rows, 1] come with the generation's first step: each row's next position, which is also its
        length - 1 (the rows' tokens start at column 0 of their buffers); `length` is not needed here."""
        if cache.views is None:
            cache.views = (cache.ids.numpy(), cache.positions.numpy(), cache.inputs["seqlens_k"].numpy(),
                           cache.logits.numpy()[:, -1, :])
        ids, positions, lengths, logits = cache.views
        if position_ids is not None:
            positions[:] = position_ids.numpy()
            lengths[:] = positions[:, 0]
        if input_ids is not None:
            ids[:] = input_ids.numpy()
        self._run_step(cache)
        scores = logits[:, :vocab]
        if forbid:  # in place: the logits buffer is this step's own, read by nothing else on this path
            scores[:, [i for i in eos_ids if 0 <= i < vocab]] = -np.inf
        tokens = scores.argmax(-1)
        ids[:, 0] = tokens
        positions += 1
        lengths += 1
        return torch.from_numpy(tokens), cache

    def _prompt(self, input_ids, attention_mask, position_ids, slot: KVSlot, last_only: bool) -> torch.Tensor:
        """The prompt pass: columns 0..n-1 of each row's buffers written with its n tokens, uncaptured; logits
        [B, S, V] at the input's columns (zeros at padding), or with `last_only` [B, 1, V] at the last column (every
        row's last token: rows are left-padded), the only position whose head the graph then computes (unpadded: in
        the slot's own logits buffer, valid until its next step). Rows of different lengths run one by one, each
        over its own tokens (the op reads per-row lengths, no mask)."""
        seq = input_ids.shape[1]
        if attention_mask.shape[1] != seq:
            raise UsageError("onnxrt --fused-decode runs a prompt pass only on an empty cache (its attention op "
                             "takes a later multi-token pass for one row only); leave --fused-decode out")
        if bool(attention_mask.all()):
            return self._rows(input_ids, position_ids, slot, slice(None), last_only)
        logits = None
        for row, real in enumerate(attention_mask.bool().cpu()):
            cols = real.nonzero().flatten().to(input_ids.device)
            out = self._rows(input_ids[row:row + 1, cols], position_ids[row:row + 1, cols], slot,
                             slice(row, row + 1), last_only)
            if logits is None:
                logits = out.new_zeros(input_ids.shape[0], 1 if last_only else seq, out.shape[-1])
            logits[row, slice(None) if last_only else cols] = out[0]
        return logits

    def _rows(self, input_ids, position_ids, slot: KVSlot, rows: slice, last_only: bool) -> torch.Tensor:
        """One prompt pass of unpadded rows `rows` of the slot (their buffers: contiguous views): logits of every
        position, or of the last only. A pass over every row runs on the slot's prompt binding (`_prompt_binding`),
        into which only the tokens, their positions and the logits are bound anew."""
        seq = input_ids.shape[1]
        seqlens = slot.inputs["seqlens_k"][rows]
        seqlens.fill_(seq - 1)
        start = -1 if last_only else 0
        if rows != slice(None):
            past = [buffer[rows] for buffer in slot.past]
            feeds = {"input_ids": input_ids.contiguous(), "position_ids": position_ids.contiguous(),
                     "seqlens_k": seqlens, "total_sequence_length": torch.tensor(seq, dtype=torch.int32),
                     LOGITS_START: torch.tensor([start]), **dict(zip(self.past_names, past))}
            return self.graph.run(feeds, {"logits_seq": 1 if last_only else seq},
                                  outputs=dict(zip(self.present_names, past)))[0]
        binding, scalars = self._prompt_binding(slot)
        scalars["total_sequence_length"].fill_(seq)
        scalars[LOGITS_START].fill_(start)
        # the last position's logits go to the slot's own buffer (valid until the next step, as a step's)
        logits = slot.logits if last_only else torch.empty(slot.rows, seq, slot.logits.shape[-1],
                                                           dtype=slot.logits.dtype, device=self.device)
        self.graph.bind({"input_ids": input_ids.contiguous(), "position_ids": position_ids.contiguous()},
                        {"logits": logits}, binding)
        self.graph.run_bound(binding, self.graph.run_options(-1) if self.cuda_graph else None)
        return logits

    def _prompt_binding(self, slot: KVSlot):
        """The slot's binding for prompt passes over every row, made once: its caches (as past and present), its
        per-row lengths and two host scalars of its own, the pass's length and where its head starts (written
        before each pass), each bound for good; and those two scalars by name. Binding the caches anew for each
        prompt was a tenth of a small model's prompt pass on the CPU, and every binding costs most at a
        generation's start, on caches an idle machine left cold."""
        if slot.prompt_binding is None:
            scalars = {"total_sequence_length": torch.zeros((), dtype=torch.int32),
                       LOGITS_START: torch.zeros(1, dtype=torch.int64)}
            feeds = {"seqlens_k": slot.inputs["seqlens_k"], **scalars, **dict(zip(self.past_names, slot.past))}
            slot.prompt_binding = self.graph.bind(feeds, dict(zip(self.present_names, slot.past))), scalars
        return slot.prompt_binding

    def close(self) -> None:
        self.graph.close()
        self._slots.close()
