"""Encoder backends on the CPU (fp32) against outside references: all-MiniLM-L6-v2 embeddings equal
sentence-transformers' own `encode` on the same folder (frameworks, onnxrt with ONNX Runtime's optimizer, and
onnxrt on the plain export), classifier and token-classifier logits equal HF's Auto*For*Classification, a padded
batch equals each text alone, the fused graph's operators and numbers, the user's --encoder-onnx, refusals,
and the TensorRT profile computation and step bookkeeping (ONNX Runtime standing in for the engine: TensorRT
engines are built on the GPU machine by tools/bench/encoder_check.sh; TensorRT execution is not verified here).

Runs share one working dir: each model is exported once (plain, then optimized) for the whole session."""
from __future__ import annotations

import pytest
import torch

from NNDF.backends.onnxrt.options import ORTOptions
from NNDF.backends.trt.options import TRTOptions
from NNDF.errors import ArtifactError, UsageError
from NNDF.options import ModelOptions

MINILM = "all-MiniLM-L6-v2"
TEXTS = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium.",
         "A man is playing a guitar on a quiet street corner while people walk past."]
BACKENDS = ["frameworks", "onnxrt-optimized", "onnxrt-plain"]
ATOL = 1e-5


@pytest.fixture(scope="session")
def encoder(workdir):
    """(variant, backend[, model options]) -> (run, steps), opened once per session."""
    from NNDF import registry
    from NNDF.actions.common import open_run

    cache = {}

    def get(variant: str, backend: str, **options):
        key = (variant, backend, tuple(sorted(options.items())))
        if key not in cache:
            name, _, kind = backend.partition("-")
            run = open_run("BERT", ModelOptions(variant=variant, working_dir=str(workdir), device="cpu", **options),
                           (name,), ORTOptions(ort_optimize=kind != "plain"))
            cache[key] = run, registry.backend(run.family, name).setup(run)
        return cache[key]

    yield get
    for _, steps in cache.values():
        steps.close()


def _encode(run, texts):
    return run.family.task.encode(run, list(texts)).inputs


# --- sentence embeddings: sentence-transformers is the reference --------------------------------------------

@pytest.fixture(scope="session")
def st_embeddings(encoder):
    from sentence_transformers import SentenceTransformer

    run, _ = encoder(MINILM, "frameworks")
    model = SentenceTransformer(str(run.source.location), device="cpu")
    return torch.from_numpy(model.encode(TEXTS, convert_to_numpy=True))  # [4, 384]


@pytest.mark.parametrize("backend", BACKENDS)
def test_minilm_embeddings_equal_sentence_transformers(encoder, st_embeddings, backend):
    run, steps = encoder(MINILM, backend)
    ours = steps.forward(_encode(run, TEXTS))  # [4, 384], one padded batch
    assert ours.shape == st_embeddings.shape
    assert (ours - st_embeddings).abs().max() <= ATOL
    sims = ours @ ours.T  # normalized: cosine similarities
    # the model card's numbers: paraphrases 0.666, unrelated 0.105
    assert abs(float(sims[0, 1]) - 0.666) < 0.01 and abs(float(sims[0, 2]) - 0.105) < 0.01
    assert sims[0, 1] > sims[0, 2] and sims[0, 1] > sims[1, 2]


@pytest.mark.parametrize("variant,backend", [(MINILM, "frameworks"), (MINILM, "onnxrt-optimized"),
                                             (MINILM, "onnxrt-plain"), ("roberta-classifier-offline", "onnxrt"),
                                             ("bert-ner-offline", "onnxrt")])
def test_padded_batch_equals_each_text_alone(encoder, variant, backend):
    run, steps = encoder(variant, backend)
    inputs = _encode(run, TEXTS)
    batch = steps.forward(inputs).clone()
    for i, text in enumerate(TEXTS):
        alone = steps.forward(_encode(run, [text]))[0]  # [H] / [C] / [T_i, C]
        got = batch[i, : alone.shape[0]] if alone.dim() == 2 else batch[i]
        assert (got - alone).abs().max() <= ATOL, (i, text)


def test_optimizer_fuses_and_keeps_the_numbers(encoder):
    """ONNX Runtime's transformer optimizer fused attention and GELU in MiniLM's export (and the skip layer norms
    on CUDA only: on the CPU they stay Add + LayerNormalization, `Encoder.export.CPU_UNFUSED`), and the fused graph
    (CPU execution provider) gives the plain graph's numbers."""
    run, fused_steps = encoder(MINILM, "onnxrt-optimized")
    from NNDF import registry

    backend = registry.backend(run.family, "onnxrt")
    backend.setup(run).close()  # current artifacts: reads what the optimizer recorded
    fused = backend.onnx.fused_operators
    assert fused["Attention"] == 6 and fused["BiasGelu"] == 6, fused
    if run.device.type == "cpu":
        assert "SkipLayerNormalization" not in fused and fused["LayerNormalization"] == 13, fused
    else:
        assert fused["SkipLayerNormalization"] == 12, fused
    assert backend.export_max_diff() <= ATOL
    plain_run, plain_steps = encoder(MINILM, "onnxrt-plain")
    inputs = _encode(run, TEXTS)
    assert (fused_steps.forward(inputs) - plain_steps.forward(inputs)).abs().max() <= ATOL


# --- classifiers: HF's Auto*For*Classification is the reference --------------------------------------------

def _hf_logits(run, auto_class: str, inputs: dict) -> torch.Tensor:
    """HF's own model on the same (right-padded) inputs: those its forward names."""
    import inspect

    import transformers

    model = getattr(transformers, auto_class).from_pretrained(str(run.source.location)).eval()
    named = inspect.signature(model.forward).parameters
    with torch.inference_mode():
        return model(**{name: t for name, t in inputs.items() if name in named}).logits


@pytest.mark.parametrize("variant,names", [("distilbert-classifier-offline", ("input_ids", "attention_mask")),
                                           (MINILM, ("input_ids", "attention_mask", "token_type_ids"))])
def test_inputs_are_those_the_model_takes(encoder, variant, names):
    """DistilBERT shares BERT's WordPiece tokenizer, which makes token_type_ids; its forward names none, so they
    are neither made, exported nor fed."""
    run, steps = encoder(variant, "onnxrt-plain")
    assert "token_type_ids" in run.tokenizer.model_input_names
    assert run.family.task.input_names(run) == names and tuple(_encode(run, TEXTS[:1])) == names
    assert tuple(steps.graph.inputs) == names


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("variant", ["roberta-classifier-offline", "distilbert-classifier-offline"])
def test_classifier_logits_equal_hf(encoder, variant, backend):
    run, steps = encoder(variant, backend)
    inputs = _encode(run, TEXTS)
    ours = steps.forward(inputs)  # [4, C]
    ref = _hf_logits(run, "AutoModelForSequenceClassification", inputs)
    assert ours.shape == ref.shape and (ours - ref).abs().max() <= ATOL


@pytest.mark.parametrize("backend", BACKENDS)
def test_token_classifier_logits_equal_hf(encoder, backend):
    run, steps = encoder("bert-ner-offline", backend)
    inputs = _encode(run, TEXTS)
    ours = steps.forward(inputs)  # [4, T, 5]
    ref = _hf_logits(run, "AutoModelForTokenClassification", inputs)
    real = inputs["attention_mask"].bool()  # padded positions are don't-care
    assert ours.shape == ref.shape and (ours[real] - ref[real]).abs().max() <= ATOL


# --- user files and refusals ------------------------------------------------------------------------------

def test_user_encoder_onnx_file_is_used_and_checked(encoder, workdir):
    run, _ = encoder(MINILM, "onnxrt-plain")
    from NNDF import registry

    plain = registry.backend(run.family, "trt").onnx.paths(run)[0]["encoder"]  # the plain export's file
    user_run, user_steps = encoder(MINILM, "onnxrt-optimized", encoder_onnx=str(plain))
    ours = user_steps.forward(_encode(user_run, TEXTS))
    ref = encoder(MINILM, "frameworks")[1].forward(_encode(run, TEXTS))
    assert (ours - ref).abs().max() <= ATOL
    roberta, _ = encoder("roberta-classifier-offline", "onnxrt")
    foreign = registry.backend(roberta.family, "trt").onnx.paths(roberta)[0]["encoder"]
    with pytest.raises(ArtifactError) as info:
        encoder(MINILM, "onnxrt-optimized", encoder_onnx=str(foreign))
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"--encoder-onnx {foreign} is not an encoder graph for "
                                                      "--task feature-extraction") and "no embeddings output" in message


def test_checkpoint_without_the_head_is_refused_in_one_line(encoder):
    with pytest.raises(UsageError) as info:
        encoder(MINILM, "onnxrt", task="text-classification")
    message = str(info.value)
    assert "\n" not in message and message.startswith("--task text-classification: all-MiniLM-L6-v2 has no "
                                                      "SequenceClassification head")


# --- TensorRT: profiles, names, step bookkeeping (no TensorRT needed) --------------------------------------

def test_trt_profile_defaults_and_seed_flags():
    from Encoder.trt import encoder_profile, encoder_shapes
    from NNDF.backends.trt.profiles import Range

    shapes = encoder_shapes(ModelOptions(batch_size=4), TRTOptions(), limit=256)
    assert (shapes.batch, shapes.seq) == (Range(4, 4, 4), Range(1, 128, 256))  # opt: the benchmark's default
    assert encoder_shapes(ModelOptions(), TRTOptions(), limit=512, length=16).seq == Range(1, 16, 512)
    assert encoder_shapes(ModelOptions(), TRTOptions(), limit=64).seq == Range(1, 64, 64)
    seed = encoder_shapes(ModelOptions(batch_size=8), TRTOptions(batch_profile=(1, 8, 32), seq_len=(8, 16, 128)), 256)
    assert (seed.batch, seed.seq) == (Range(1, 8, 32), Range(8, 16, 128))
    dynamic = encoder_shapes(ModelOptions(batch_size=2), TRTOptions(dynamic_batch=True, max_dynamic_batch=16), 512)
    assert dynamic.batch == Range(1, 2, 16)
    profile = encoder_profile(seed, ["input_ids", "attention_mask", "token_type_ids"])
    assert profile.shapes == {name: ((1, 8), (8, 16), (32, 128))
                              for name in ("input_ids", "attention_mask", "token_type_ids")}


@pytest.mark.parametrize("options,trt,match", [
    (ModelOptions(batch_size=2), TRTOptions(seq_len=(1, 64, 1024)), "the model takes at most 512 tokens"),
    (ModelOptions(batch_size=9), TRTOptions(batch_profile=(1, 4, 8)), "--batch-size 9 is outside the batch profile"),
    (ModelOptions(batch_size=4), TRTOptions(batch_profile=(1, 4, 8), dynamic_batch=True), "give one"),
    (ModelOptions(batch_size=9), TRTOptions(dynamic_batch=True, max_dynamic_batch=8), "--max-dynamic-batch"),
])
def test_trt_profile_refusals(options, trt, match):
    from Encoder.trt import encoder_shapes

    with pytest.raises(UsageError, match=match):
        encoder_shapes(options, trt, limit=512)


def test_trt_engine_names():
    from Encoder.trt import encoder_engine_name, encoder_shapes

    opts, trt = ModelOptions(batch_size=4, fp16=True), TRTOptions(batch_profile=(1, 4, 8), seq_len=(1, 16, 128),
                                                                   engine_postfix="H100")
    name = encoder_engine_name("BERT", "sentence-transformers/all-MiniLM-L6-v2", "feature-extraction", opts, trt,
                               encoder_shapes(opts, trt, 256))
    assert name == ("engine-BERT-sentence-transformers--all-MiniLM-L6-v2-feature-extraction-fp16-batch1-4-8-"
                    "seq1-16-128-H100")
    plain = encoder_engine_name("BERT", MINILM, "text-classification", ModelOptions(), TRTOptions(),
                                encoder_shapes(ModelOptions(), TRTOptions(), 256))
    assert plain == "engine-BERT-all-MiniLM-L6-v2-text-classification-fp32-batch1-seq1-128-256"


@pytest.mark.parametrize("cuda_graph", [False, True])
def test_trt_steps_bookkeeping_gives_frameworks_embeddings(encoder, cuda_graph):
    """TrtEncoderSteps with ONNX Runtime executing each bound call on the plain export (the graph engines are
    built from): binding shapes, per-call output buffers, profile choice, per-shape slots, the profile check."""
    from test_trt import OrtIO

    from Encoder.trt import encoder_shapes
    from Encoder.trt_steps import TrtEncoderSteps
    from NNDF import registry

    run, reference = encoder(MINILM, "frameworks")
    path = registry.backend(run.family, "trt").onnx.paths(run)[0]["encoder"]
    io = OrtIO(path)
    shapes = encoder_shapes(ModelOptions(batch_size=4), TRTOptions(batch_profile=(1, 4, 4), seq_len=(1, 16, 32)), 256)
    steps = TrtEncoderSteps(io, "cpu", shapes, "embeddings", cuda_graph=cuda_graph)
    shapes_run = []
    for texts in (TEXTS, TEXTS[:1], TEXTS):
        inputs = _encode(run, texts)
        shapes_run.append(tuple(inputs["input_ids"].shape))
        assert (steps.forward(inputs) - reference.forward(inputs)).abs().max() <= ATOL
    assert io.profiles == [0]  # one profile, selected once
    assert io.graph_keys == (shapes_run if cuda_graph else [None] * 3)  # a graph per input shape
    if cuda_graph:
        assert len(steps.slots) == 2
    with pytest.raises(UsageError, match=r"outside the engine's profile \(batch 1..4, sequence 1..32 tokens\)"):
        steps.forward(_encode(run, ["word " * 40]))
    steps.close()
    assert len(steps.slots) == 0


class _FakeCudaGraphSession:
    """Stands in for `OrtGraph` in CUDA-graph mode (which needs a GPU): records bindings and bound runs; a run
    writes each row's token sum into the bound output."""

    def __init__(self, path, device, threads, cuda_graph):
        assert cuda_graph
        self.inputs, self.outputs = dict.fromkeys(("input_ids", "attention_mask")), {"out": 0}
        self.output_names = ["out"]
        self.bindings, self.runs = [], []

    def output_shape(self, name, feeds):
        return (feeds["input_ids"].shape[0], 3)

    def dtype(self, name):
        return torch.float32

    def bind(self, feeds, outputs):
        self.bindings.append((feeds, outputs))
        return len(self.bindings)

    @staticmethod
    def run_options(graph_id):
        return ("gpu_graph_id", graph_id)

    def run_bound(self, binding, options):
        feeds, outputs = self.bindings[binding - 1]
        outputs["out"].copy_(feeds["input_ids"].sum(1, keepdim=True).float().expand(-1, 3))
        self.runs.append((binding, options))

    def close(self):
        pass


def test_ort_cuda_graph_slots_per_input_shape(monkeypatch):
    """With --use-cuda-graph, each input shape gets one slot (graph ids 1, 2, ... in order), bound once and
    replayed with its graph id; inputs are copied into the slot's buffers; close releases every slot."""
    import Encoder.ort_steps as ort_steps

    monkeypatch.setattr(ort_steps, "OrtGraph", _FakeCudaGraphSession)
    steps = ort_steps.OrtEncoderSteps("encoder.onnx", "cpu", "out", cuda_graph=True)
    batches = [torch.tensor([[1, 2], [3, 4]]), torch.tensor([[5, 6]]), torch.tensor([[7, 8], [9, 10]])]
    for ids in batches:
        got = steps.forward({"input_ids": ids, "attention_mask": torch.ones_like(ids)})
        assert got.tolist() == [[float(s)] * 3 for s in ids.sum(1).tolist()]
    graph = steps.graph
    assert len(steps.slots) == 2 and len(graph.bindings) == 2  # bound once per shape
    assert graph.runs == [(1, ("gpu_graph_id", 1)), (2, ("gpu_graph_id", 2)), (1, ("gpu_graph_id", 1))]
    assert graph.bindings[0][0]["input_ids"].tolist() == [[7, 8], [9, 10]]  # the slot's own buffer, refilled
    steps.close()
    assert len(steps.slots) == 0


@pytest.mark.parametrize("unfused, fused_ops", [("SkipLayerNormFusion", set()), ("", {"SkipLayerNormalization"})])
def test_cpu_sessions_leave_skip_layer_norm_unfused(unfused, fused_ops, tmp_path, monkeypatch):
    """ONNX Runtime's own SkipLayerNormFusion stays out of our CPU sessions (`CPU_SESSION["unfused"]`, its CPU kernel
    being the slower): the graph ONNX Runtime optimized keeps Add + LayerNormalization; with the setting emptied it
    fuses them (what the setting prevents)."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    import torch
    from onnx import helper, numpy_helper

    from NNDF.backends.onnxrt import steps

    width = 16
    floats = [helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, [2, 3, width]) for name in ("x", "skip")]
    weights = [numpy_helper.from_array(np.full(width, value, np.float32), name)
               for name, value in (("gain", 1.5), ("shift", 0.1), ("bias", 0.2))]
    # a layer's residual add as exported: (x + bias) + skip, then the norm
    nodes = [helper.make_node("Add", ["x", "bias"], ["biased"]), helper.make_node("Add", ["biased", "skip"], ["sum"]),
             helper.make_node("LayerNormalization", ["sum", "gain", "shift"], ["y"], axis=-1, epsilon=1e-5)]
    graph = helper.make_graph(nodes, "skip-ln", floats, [helper.make_tensor_value_info(
        "y", onnx.TensorProto.FLOAT, [2, 3, width])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path, written = tmp_path / "skip-ln.onnx", tmp_path / "as-run.onnx"
    onnx.save(model, str(path))

    class Options(ort.SessionOptions):  # the graph as ONNX Runtime optimized it, written out
        def __init__(self):
            super().__init__()
            self.optimized_model_filepath = str(written)

    monkeypatch.setattr(ort, "SessionOptions", Options)
    monkeypatch.setitem(steps.CPU_SESSION, "unfused", unfused)
    session = steps.make_session(path, torch.device("cpu"), threads=1)
    x, skip = (np.random.default_rng(i).standard_normal((2, 3, width)).astype(np.float32) for i in range(2))
    got = session.run(None, {"x": x, "skip": skip})[0]
    expected = torch.nn.functional.layer_norm(torch.from_numpy(x + skip + 0.2), (width,),
                                              torch.full((width,), 1.5), torch.full((width,), 0.1), 1e-5)
    assert np.allclose(got, expected.numpy(), atol=1e-5)
    ops = {node.op_type for node in onnx.load(str(written)).graph.node}
    assert ops & {"SkipLayerNormalization"} == fused_ops, ops
