"""Encoder models on Triton: `deploy BERT onnxrt|trt` writes transformer-deploy's repository layout (tokenizer + model
+ ensemble, plus the python flavour), every config parses with Triton's schema and matches its model file, and the
real all-MiniLM-L6-v2 served by a real tritonserver (a session-scoped fixture, tests/triton_fixtures.py) gives the
in-process onnxrt embeddings within 1e-5 over HTTP and gRPC (text through the ensemble, ids through the model) and
sentence-transformers' published similarities; a classifier gives the same logits and labels; malformed
requests get errors and the server keeps serving; concurrent requests of different lengths are batched by
Triton's dynamic batcher (the server's statistics show fewer executions than requests) and every answer
equals the text run alone. The onnxruntime_onnx / tensorrt_plan flavours are schema- and file-checked only:
the pytriton wheel's server has no ONNX Runtime or TensorRT backend (NVIDIA's container serves them)."""
from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tests.conftest import cli_in_process, run_cli

pytest.importorskip("tritonclient")

MINILM = "all-MiniLM-L6-v2"
CLASSIFIER = "roberta-classifier-offline"
TEXTS = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium.",
         "A man is playing a guitar on a quiet street corner while people walk past."]
ATOL = 1e-5


@pytest.fixture(scope="module")
def served(triton_server):
    """(server, {variant: deployment base name}) of the session's server."""
    return triton_server, triton_server.encoders


@pytest.fixture(scope="module")
def in_process(workdir):
    """variant -> (run, onnxrt steps), the in-process reference."""
    from NNDF import registry
    from NNDF.actions.common import open_run
    from NNDF.options import ModelOptions

    made = {}

    def get(variant: str):
        if variant not in made:
            run = open_run("BERT", ModelOptions(variant=variant, working_dir=str(workdir), device="cpu"), ("onnxrt",))
            made[variant] = run, registry.backend(run.family, "onnxrt").setup(run)
        return made[variant]

    yield get
    for _, steps in made.values():
        steps.close()


def _reference(in_process, variant: str, texts: list[str]) -> np.ndarray:
    """Each text alone through the in-process onnxrt steps: [N, ...] float32."""
    run, steps = in_process(variant)
    return np.stack([steps.forward(run.family.task.encode(run, [t]).inputs)[0].numpy() for t in texts])


def _texts(texts: list[str]) -> dict:
    return {"text": np.array([[t.encode()] for t in texts], dtype=np.object_)}


def _client(server, protocol: str):
    from NNDF.backends.triton.client import Client

    return Client(server.urls[protocol], timeout=60)


# --- the repository ------------------------------------------------------------------------------------------

def test_every_config_parses_with_the_schema_and_the_layout_is_seed_002s(served):
    from NNDF.triton.config import read_config

    server, bases = served
    base = bases[MINILM]
    configs = {name: read_config(server.repository / name / "config.pbtxt")
               for name in (base, f"{base}_tokenize", f"{base}_model", f"{base}_model_python", f"{base}_python")}
    runs = {name: c.platform or c.backend for name, c in configs.items()}
    assert runs == {base: "ensemble", f"{base}_tokenize": "python", f"{base}_model": "onnxruntime_onnx",
                    f"{base}_model_python": "python", f"{base}_python": "ensemble"}
    steps = [s.model_name for s in configs[base].ensemble_scheduling.step]
    assert steps == [f"{base}_tokenize", f"{base}_model"]
    assert [s.model_name for s in configs[f"{base}_python"].ensemble_scheduling.step][1] == f"{base}_model_python"
    for name in (f"{base}_tokenize", f"{base}_model", f"{base}_model_python"):  # dynamic batching configured
        assert configs[name].max_batch_size == 8 and configs[name].HasField("dynamic_batching"), name
        assert list(configs[name].dynamic_batching.preferred_batch_size) == [4, 8]
    assert all(i.allow_ragged_batch for i in configs[f"{base}_model_python"].input)


def test_onnx_files_match_their_configs(served):
    """Names, types and dims of each served ONNX file against its config, read independently of the code that
    wrote it (onnx's own graph description)."""
    import onnx

    from NNDF.triton.config import data_type_name, read_config

    server, bases = served
    onnx_types = {onnx.TensorProto.INT64: "TYPE_INT64", onnx.TensorProto.FLOAT: "TYPE_FP32"}
    for name in (f"{bases[MINILM]}_model", f"{bases[MINILM]}_model_python"):
        config = read_config(server.repository / name / "config.pbtxt")
        graph = onnx.load(str(server.repository / name / "1" / "model.onnx"), load_external_data=False).graph
        for configured, declared in ((config.input, graph.input), (config.output, graph.output)):
            want = {v.name: (onnx_types[v.type.tensor_type.elem_type],
                             [d.dim_value or -1 for d in v.type.tensor_type.shape.dim][1:]) for v in declared}
            assert {c.name: (data_type_name(c), list(c.dims)) for c in configured} == want, name
    config = read_config(server.repository / f"{bases[MINILM]}_model" / "config.pbtxt")
    assert [o.name for o in config.output] == ["embeddings"] and list(config.output[0].dims) == [384]


def test_the_onnxruntime_model_loads_and_answers_in_its_configs_terms(served):
    """What Triton's ONNX Runtime backend would do with N_model (not in the wheel): load the file with ONNX
    Runtime, feed a batch in the config's input types and dims, get the config's output type and dims."""
    import onnxruntime as ort

    from NNDF.triton.config import data_type_name, read_config

    server, bases = served
    folder = server.repository / f"{bases[MINILM]}_model"
    config = read_config(folder / "config.pbtxt")
    session = ort.InferenceSession(str(folder / "1" / config.default_model_filename),
                                   providers=["CPUExecutionProvider"])
    numpy_types = {"TYPE_INT64": np.int64, "TYPE_FP32": np.float32}
    batch, tokens = config.max_batch_size, 7
    feeds = {i.name: np.ones([batch] + [tokens if d == -1 else d for d in i.dims], numpy_types[data_type_name(i)])
             for i in config.input}
    [out] = session.run([o.name for o in config.output], feeds)
    assert out.dtype == numpy_types[data_type_name(config.output[0])]
    assert list(out.shape) == [batch] + list(config.output[0].dims)


def test_a_config_that_does_not_match_its_file_is_found(served):
    from Encoder.triton.configs import config_problems
    from NNDF.integrity import onnx_signature
    from NNDF.triton.config import read_config

    server, bases = served
    folder = server.repository / f"{bases[MINILM]}_model"
    config = read_config(folder / "config.pbtxt")
    signature = onnx_signature(folder / "1" / "model.onnx")
    assert config_problems(config, signature) == []
    config.output[0].dims[0] = 768
    config.input[0].name = "ids"
    problems = config_problems(config, signature)
    assert any("embeddings has dims [768]" in p and "384]" in p for p in problems), problems
    assert any("'ids'" in p and "'input_ids'" in p for p in problems), problems


def test_the_wheels_server_leaves_out_what_it_cannot_load(served):
    server, bases = served
    base = bases[MINILM]
    assert "onnxruntime_onnx" in server.skipped[f"{base}_model"]
    assert f"{base}_model" in server.skipped[base]  # the ensemble over it
    assert {f"{base}_tokenize", f"{base}_model_python", f"{base}_python"} <= set(server.served)


# --- served answers ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_minilm_served_equals_in_process_and_sentence_transformers(served, in_process, protocol):
    server, bases = served
    base = bases[MINILM]
    texts = [*TEXTS, "words " * 400]  # the last is truncated to the model's 256 tokens, served as in process
    reference = _reference(in_process, MINILM, texts)  # [5, 384]
    run, _ = in_process(MINILM)
    with _client(server, protocol) as client:
        by_text = client.infer(f"{base}_python", _texts(texts), ("embeddings",))["embeddings"]
        ids = {k: v.numpy() for k, v in run.family.task.encode(run, texts).inputs.items()}  # one padded batch
        by_ids = client.infer(f"{base}_model_python", ids, ("embeddings",))["embeddings"]
    for got in (by_text, by_ids):
        assert got.shape == (5, 384) and got.dtype == np.float32
        assert np.abs(got - reference).max() <= ATOL
    sims = by_text @ by_text.T  # the model card's numbers: paraphrases 0.666, unrelated 0.105
    assert abs(sims[0, 1] - 0.666) < 0.01 and abs(sims[0, 2] - 0.105) < 0.01


def test_classifier_served_gives_the_same_logits_and_labels(served, in_process):
    server, bases = served
    reference = _reference(in_process, CLASSIFIER, TEXTS)  # [4, 3]
    with _client(server, "grpc") as client:
        logits = client.infer(f"{bases[CLASSIFIER]}_python", _texts(TEXTS), ("logits",))["logits"]
    assert logits.shape == (4, 3) and np.abs(logits - reference).max() <= ATOL
    assert (logits.argmax(1) == reference.argmax(1)).all()


def test_predict_with_the_triton_backend_matches_onnxrt(served, workdir, tmp_path):
    """The CLI's client path: `predict BERT onnxrt triton`, one JSON, served and in-process side by side."""
    server, _ = served
    out = tmp_path / "predict.json"
    result = run_cli("predict", "BERT", "onnxrt", "triton", "--triton-url", server.urls["grpc"], "-wd", str(workdir),
                     "--batch-size", "2", *[a for t in TEXTS[:3] for a in ("--prompt", t)], "--json", str(out),
                     timeout=300)
    assert result.returncode == 0, result.stderr
    rows = json.loads(out.read_text())["results"]
    by_backend = {b: np.array([r["embedding"] for r in rows if r["backend"] == b]) for b in ("onnxrt", "triton")}
    assert by_backend["triton"].shape == (3, 384)
    assert np.abs(by_backend["triton"] - by_backend["onnxrt"]).max() <= ATOL


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_triton_backend_refuses_a_model_that_takes_text(served, workdir, protocol):
    from NNDF import registry
    from NNDF.actions.common import open_run
    from NNDF.errors import UsageError
    from NNDF.options import ModelOptions
    from NNDF.backends.triton.options import TritonOptions

    server, bases = served
    ensemble = f"{bases[MINILM]}_python"
    opts = TritonOptions(triton_url=server.urls[protocol], triton_model=ensemble)
    run = open_run("BERT", ModelOptions(working_dir=str(workdir)), ("triton",), opts)
    with pytest.raises(UsageError, match=f"--triton-model {ensemble} takes text and returns embeddings; the "
                                         "triton backend sends input_ids, attention_mask, token_type_ids"):
        registry.backend(run.family, "triton").setup(run)


# --- faults and load -----------------------------------------------------------------------------------------

def _ids(run, texts):
    return {k: v.numpy() for k, v in run.family.task.encode(run, texts).inputs.items()}


def test_malformed_requests_get_errors_and_the_server_keeps_serving(served, in_process):
    from NNDF.errors import InferenceError

    server, bases = served
    base = bases[MINILM]
    run, _ = in_process(MINILM)
    good = _ids(run, TEXTS[:1])
    bad = {
        "empty text": (f"{base}_python", _texts([" "]), "text 1 is empty"),
        "not UTF-8": (f"{base}_python", {"text": np.array([[b"\xff\xfe"]], dtype=np.object_)}, "not UTF-8"),
        "missing input": (f"{base}_model_python", {"input_ids": good["input_ids"]},
                          r"missing required input\(s\) \['attention_mask','token_type_ids'\]"),
        "wrong type": (f"{base}_model_python", {**good, "input_ids": good["input_ids"].astype(np.float32)},
                       "data-type is 'FP32', but model .* expects 'INT64'"),
        "id outside the vocabulary": (f"{base}_model_python", {**good, "input_ids": good["input_ids"] + 40000},
                                      "vocabulary"),
        "shapes differ": (f"{base}_model_python", {**good, "attention_mask": good["attention_mask"][:, :-1]},
                          "differ in shape"),
        "batch too large": (f"{base}_python", _texts(["a"] * 9), "batch-size must be <= 8"),
        "a mask keeping no token": (f"{base}_model_python", {**good, "attention_mask": 0 * good["attention_mask"]},
                                    "right padded"),
    }
    with _client(server, "http") as client:
        for what, (model, arrays, message) in bad.items():
            with pytest.raises(InferenceError, match=r"\[400\].*" + message):  # the client's error: one line
                client.infer(model, arrays, ("embeddings",))
        after = client.infer(f"{base}_python", _texts(TEXTS[:1]), ("embeddings",))["embeddings"]
    assert np.abs(after - _reference(in_process, MINILM, TEXTS[:1])).max() <= ATOL


def test_concurrent_requests_are_batched_and_padding_changes_nothing(served, in_process):
    """16 clients x 2 requests of texts of different lengths through the python ensemble: every answer equals
    its text alone, and the model executed fewer batches than it answered requests (dynamic batching formed
    padded batches of several requests)."""
    server, bases = served
    model = f"{bases[MINILM]}_model_python"
    texts = [TEXTS[i % 4] + " and more" * (i % 5) for i in range(32)]
    reference = _reference(in_process, MINILM, texts)
    with _client(server, "http") as stats_client:
        before = _counts(stats_client, model)

        def ask(i):
            with _client(server, "http") as client:
                return client.infer(f"{bases[MINILM]}_python", _texts([texts[i]]), ("embeddings",))["embeddings"][0]

        with ThreadPoolExecutor(16) as pool:
            answers = np.stack(list(pool.map(ask, range(len(texts)))))
        after = _settled_counts(stats_client, model, before[0] + len(texts))
    assert np.abs(answers - reference).max() <= ATOL
    inferences, executions = after[0] - before[0], after[1] - before[1]
    assert inferences == len(texts) and executions < inferences, (inferences, executions)


def _settled_counts(client, model: str, inferences: int, seconds: float = 10.0) -> tuple[int, int]:
    """`_counts` once the composing model has recorded `inferences` (Triton answers an ensemble's request before
    the composing model's statistics are updated: read at once, the last requests may be missing)."""
    deadline = time.monotonic() + seconds
    counts = _counts(client, model)
    while counts[0] < inferences and time.monotonic() < deadline:
        time.sleep(0.05)
        counts = _counts(client, model)
    return counts


def _counts(client, model: str) -> tuple[int, int]:
    """(inference_count, execution_count) of a model from the server's statistics."""
    stats = client.client.get_inference_statistics(model)
    entry = stats["model_stats"][0]
    return int(entry["inference_count"]), int(entry["execution_count"])


# --- the python model's batching, without a server ------------------------------------------------------------

def test_padded_requests_per_token_logits_are_cut_back(in_process):
    """Token classification: requests of different lengths padded into one forward, each request's logits cut
    back to its own tokens, equal to the request alone."""
    from Encoder.triton.serving import EncoderRunner

    run, steps = in_process("bert-ner-offline")
    runner = EncoderRunner(steps.path, "logits", run.tokenizer.pad_token_id, run.source.dims.vocab)
    requests = [_ids(run, [t]) for t in TEXTS]
    together = runner(requests)
    for request, got in zip(requests, together):
        alone = runner([request])[0]
        assert got.shape == alone.shape == (1, request["input_ids"].shape[1], 5)
        assert np.abs(got - alone).max() <= ATOL
    runner.close()


# --- deploy: TensorRT's flavour and refusals -------------------------------------------------------------------

def test_trt_deploy_writes_the_plan_config_and_says_how_to_build_the_engine(workdir, tmp_path):
    from NNDF.actions.deploy import deploy
    from NNDF.backends.trt.options import TRTOptions
    from NNDF.options import ModelOptions
    from NNDF.triton.config import read_config
    from NNDF.triton.options import DeployOptions

    repository = tmp_path / "repo"
    report = deploy("BERT", ("trt",), ModelOptions(variant=CLASSIFIER, working_dir=str(workdir)),
                    DeployOptions(repository=str(repository), max_batch_size=4), TRTOptions(seq_len=(1, 64, 128)))
    name = f"bert-{CLASSIFIER}-trt"
    config = read_config(repository / f"{name}_model" / "config.pbtxt")
    assert config.platform == "tensorrt_plan" and config.max_batch_size == 4
    assert [i.name for i in config.input] == ["input_ids", "attention_mask"]
    assert config.instance_group[0].kind == config.instance_group[0].KIND_GPU
    readme = (repository / f"{name}_model" / "README.md").read_text()
    assert not (repository / f"{name}_model" / "1").exists()  # no engine here: no plan, said so
    assert ("--minShapes=input_ids:1x1,attention_mask:1x1 --optShapes=input_ids:4x64,attention_mask:4x64 "
            "--maxShapes=input_ids:4x128,attention_mask:4x128") in readme
    assert any("model.plan is missing" in n for n in report.notes)
    assert (repository / f"{name}_model_python" / "1" / "model.onnx").is_file()  # the plain export, runnable


def test_deploy_refusals_leave_the_repository_as_it_was(workdir, tmp_path, capsys):
    """In process: deploy through run.py is test_triton.py's."""
    from NNDF.actions.deploy import deploy
    from NNDF.errors import UsageError
    from NNDF.options import ModelOptions
    from NNDF.triton.options import DeployOptions

    options = ModelOptions(variant=CLASSIFIER, working_dir=str(workdir))
    repository = tmp_path / "repo"
    with pytest.raises(UsageError, match="frameworks is not deployed"):
        deploy("BERT", ("frameworks",), options, DeployOptions(repository=str(repository)))
    deploy("BERT", ("onnxrt",), options, DeployOptions(repository=str(repository), max_batch_size=1))
    before = sorted(p.relative_to(repository) for p in repository.rglob("*"))
    with pytest.raises(UsageError, match="already has a model .* add --force"):
        deploy("BERT", ("onnxrt",), options, DeployOptions(repository=str(repository)))
    assert sorted(p.relative_to(repository) for p in repository.rglob("*")) == before
    assert not list(tmp_path.glob(".*staging"))
    stranger = tmp_path / "notes"
    stranger.mkdir()
    (stranger / "todo.txt").write_text("x")
    result = cli_in_process(capsys, "deploy", "BERT", "onnxrt", "-m", CLASSIFIER, "-wd", str(workdir), "--repository",
                            str(stranger))
    assert result.returncode == 2 and "is not a Triton model repository" in result.stderr
    assert "Traceback" not in result.stderr


def test_deploy_takes_one_quantized_graph(workdir, tmp_path):
    """`--quantize int8` deploys the int8 graph the onnxrt-int8 row runs (byte for byte), under its label's name;
    two values are refused (one graph per deployment)."""
    from NNDF.actions.deploy import deploy
    from NNDF import registry
    from NNDF.actions.common import open_run
    from NNDF.backends.onnxrt.options import ORTOptions
    from NNDF.errors import UsageError
    from NNDF.options import ModelOptions
    from NNDF.triton.options import DeployOptions

    options = ModelOptions(variant=MINILM, working_dir=str(workdir))
    repository = tmp_path / "repo"
    with pytest.raises(UsageError, match="give one --quantize value .*onnxrt, onnxrt-int8"):
        deploy("BERT", ("onnxrt",), options, DeployOptions(repository=str(repository)),
               ORTOptions(quantize=("none", "int8")))
    int8 = ORTOptions(quantize=("int8",))
    report = deploy("BERT", ("onnxrt",), options, DeployOptions(repository=str(repository)), int8)
    # the query command runs the same int8 graph in process beside the served one
    # ... and finds it where deploy did: the query carries the run's model and --working-dir
    query = (f"onnxrt triton --quantize int8 --triton-model bert-{MINILM.lower()}-onnxrt-int8_model_python "
             f"--variant {MINILM} --working-dir {workdir}")
    assert any(f"{query} --prompt TEXT" in note for note in report.notes), report.notes
    readme = repository / f"bert-{MINILM.lower()}-onnxrt-int8" / "README.md"
    assert f'{query} --prompt "first text"' in readme.read_text()
    run = open_run("BERT", options, ("onnxrt",), int8)
    [variant] = registry.backend(run.family, "onnxrt").variants(run)
    graph = variant.onnx.paths(run)[0]["encoder"]
    for model in ("model", "model_python"):
        served = repository / f"bert-{MINILM.lower()}-onnxrt-int8_{model}" / "1" / "model.onnx"
        assert served.read_bytes() == graph.read_bytes()
