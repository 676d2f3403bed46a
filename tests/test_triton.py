"""Generative models on Triton: `deploy MODEL onnxrt` writes a python-backend model whose config parses with
Triton's own schema and matches its files; the session's real tritonserver (tests/triton_fixtures.py) serves
GPT2, T5 and BLIP, and the served tokens equal the in-process onnxrt tokens over HTTP and gRPC (through the
`triton` client backend, which sends token ids, and through text requests the server tokenizes), with greedy,
beam and sampled decoding, and streamed token by token (benchmark times the stream); compare and accuracy
score the served model (teacher forcing through logits requests) as in process; a client leaving
mid-stream does not wedge the server; malformed requests get errors and the model keeps serving; a bounded load of
concurrent clients gets every answer right with and without dynamic batching; `serve` starts, says its
endpoints and stops on Ctrl-C, and refuses a busy port in one line; deploy's refusals leave nothing behind."""
from __future__ import annotations

import ast
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, run_cli

pytest.importorskip("tritonclient")

IMAGES = ("BLIP/offline/images/red-square.png", "BLIP/offline/images/blue-circle.jpg")
PROMPTS = {"GPT2": ("Hello, my dog is", "The capital of France is a city that"),
           "T5": ("translate English to German: The house is wonderful.", "summarize: a short text")}


def _chat(family: str, backends: tuple[str, ...], url: str, workdir, tmp_path, *flags: str) -> list[dict]:
    from NNDF import cli

    out = tmp_path / f"chat-{family}-{len(list(tmp_path.iterdir()))}.json"
    items = [a for i in IMAGES for a in ("--image", str(ROOT / i))] if family == "BLIP" else \
        [a for p in PROMPTS[family] for a in ("--prompt", p)]
    assert cli.main(["chat", family, *backends, *items, "--use-cache", "--max-new-tokens", "6", "-wd", str(workdir),
                     "--triton-url", url, "--json", str(out), *flags]) == 0
    return json.loads(out.read_text())["results"]


def _by_backend(results: list[dict]) -> dict[str, list[list[int]]]:
    table: dict[str, list] = {}
    for r in results:
        table.setdefault(r["backend"], []).append(r["output_ids"])
    return table


def _client(server, protocol: str = "http"):
    from NNDF.backends.triton.client import Client

    return Client(server.urls[protocol], timeout=120)


# --- the repository ------------------------------------------------------------------------------------------

def test_every_config_parses_and_every_file_matches_it(triton_server):
    """Every config.pbtxt parses strictly with Triton's schema; a generative model's encoder inputs match its
    encoder graph (names, types, dims read with onnx), its files are where serving.json says, its stub imports
    the project's class."""
    import onnx

    from NNDF.triton.config import data_type_name, read_config

    onnx_types = {onnx.TensorProto.INT64: "TYPE_INT64", onnx.TensorProto.FLOAT: "TYPE_FP32"}
    names = sorted(p.name for p in triton_server.repository.iterdir() if (p / "config.pbtxt").is_file())
    assert set(triton_server.generative.values()) | {triton_server.single} <= set(names)
    for name in names:
        config = read_config(triton_server.repository / name / "config.pbtxt")
        assert config.name == name
    for name in (*triton_server.generative.values(), triton_server.single):
        version = triton_server.repository / name / "1"
        config = read_config(triton_server.repository / name / "config.pbtxt")
        record = json.loads((version / "serving.json").read_text())
        assert config.backend == "python" and [o.name for o in config.output] == ["text", "output_ids", "logits"]
        assert all(i.optional for i in config.input)
        for part, rel in record["parts"].items():
            graph = onnx.load(str(version / rel), load_external_data=False).graph  # loads: a whole graph
            if part != "encoder":
                continue
            inputs = {i.name: i for i in config.input}
            for value in graph.input:
                configured = inputs[f"encoder_{value.name}"]
                dims = [d.dim_value or -1 for d in value.type.tensor_type.shape.dim][1:]
                assert (data_type_name(configured), list(configured.dims)) == \
                    (onnx_types[value.type.tensor_type.elem_type], dims), (name, value.name)
        stub = (version / "model.py").read_text()
        ast.parse(stub)
        assert "NNDF.triton.generative:GenerativeModel" in stub
        assert not list(version.glob("hf/*.safetensors"))  # the graphs carry the weights
    assert triton_server.skipped.keys() <= {n for n in names if n not in triton_server.generative.values()}


def test_read_config_is_strict_and_names_the_file(tmp_path):
    from NNDF.errors import ArtifactError
    from NNDF.triton.config import read_config

    for text in ('name: "m"\nbogus_field: 1\n', 'name: "m"\ninput { data_type: TYPE_NOPE }\n'):
        path = tmp_path / "config.pbtxt"
        path.write_text(text)
        with pytest.raises(ArtifactError, match=str(path)):
            read_config(path)


# --- served tokens equal in-process tokens ---------------------------------------------------------------------

@pytest.mark.parametrize("family", ["GPT2", "T5", "BLIP"])
def test_served_tokens_equal_in_process_over_http_and_grpc(family, triton_server, workdir, tmp_path):
    """chat with onnxrt and triton side by side (two prompts: two concurrent requests, batched by the server),
    over HTTP, then triton alone over gRPC; then text requests the server tokenizes itself."""
    http = _by_backend(_chat(family, ("onnxrt", "triton"), triton_server.urls["http"], workdir, tmp_path))
    assert http["triton"] == http["onnxrt"] and len(http["onnxrt"]) == 2
    grpc = _by_backend(_chat(family, ("triton",), triton_server.urls["grpc"], workdir, tmp_path))
    assert grpc["triton"] == http["onnxrt"]
    model = triton_server.generative[family]
    for protocol in ("http", "grpc"):
        with _client(triton_server, protocol) as client:
            for n, expected in enumerate(http["onnxrt"]):
                arrays = {"max_new_tokens": np.array([[6]], dtype=np.int32)}
                if family == "BLIP":  # chat's caption: the image alone (an empty text prompt)
                    arrays["text"] = np.array([[b""]], dtype=np.object_)
                    arrays["image"] = np.array([[(ROOT / IMAGES[n]).read_bytes()]], dtype=np.object_)
                else:
                    arrays["text"] = np.array([[PROMPTS[family][n].encode()]], dtype=np.object_)
                out = client.infer(model, arrays, ("output_ids", "text"))
                assert out["output_ids"].reshape(-1).tolist() == expected, (protocol, n)
                assert out["text"].shape == (1, 1)


def test_beam_search_and_sampling_served_equal_in_process(triton_server, workdir, tmp_path):
    for flags in (("--num-beams", "3"), ("--do-sample", "--seed", "7", "--top-k", "20", "--temperature", "0.8")):
        got = _by_backend(_chat("GPT2", ("onnxrt", "triton"), triton_server.urls["http"], workdir, tmp_path, *flags))
        assert got["triton"] == got["onnxrt"], flags


def test_the_client_backend_says_when_no_server_answers(workdir, capsys):
    from NNDF import cli
    from NNDF.triton.server import free_ports

    url = f"http://127.0.0.1:{free_ports(1)[0]}"
    assert cli.main(["chat", "GPT2", "triton", "--prompt", "Hi", "--triton-url", url, "-wd", str(workdir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no Triton server answers" in err[0] and url.split("//")[1] in err[0]


def test_the_client_backend_refuses_what_a_model_cannot_do_in_one_line(triton_server, workdir, capsys):
    from NNDF import cli

    bench = ["benchmark", "GPT2", "triton", "--use-cache", "--input-seq-len", "4", "--output-seq-len", "4",
             "--iterations", "1", "--warmup", "0", "-wd", str(workdir)]
    cases = [  # (arguments, part of the one line)
        ([*bench, "--triton-url", triton_server.urls["http"]], "--streaming"),  # not streaming: no token times
        ([*bench, "--triton-url", triton_server.urls["grpc"], "--triton-model", triton_server.stream,
          "--num-beams", "2"], "beam search streams no tokens"),
        ([*bench, "--triton-url", triton_server.urls["http"], "--triton-model", triton_server.stream],
         "gRPC streams only"),
        (["chat", "GPT2", "triton", "--prompt", "Hi", "--triton-url", triton_server.urls["http"], "--triton-model",
          "nope", "-wd", str(workdir)], "no ready model 'nope'"),
    ]
    for args, message in cases:
        assert cli.main(args) == 2, args
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], (args, err)


# --- streaming (decoupled) -------------------------------------------------------------------------------------

def test_streamed_tokens_equal_in_process_and_benchmark_times_them(triton_server, workdir, tmp_path):
    from NNDF import cli

    got = _by_backend(_chat("GPT2", ("onnxrt", "triton"), triton_server.urls["grpc"], workdir, tmp_path,
                            "--triton-model", triton_server.stream))
    assert got["triton"] == got["onnxrt"]
    out = tmp_path / "bench.json"
    assert cli.main(["benchmark", "GPT2", "onnxrt", "triton", "--use-cache", "--input-seq-len", "8",
                     "--output-seq-len", "6", "--batch-size", "2", "--iterations", "2", "--warmup", "1", "-wd",
                     str(workdir), "--triton-url", triton_server.urls["grpc"], "--triton-model", triton_server.stream,
                     "--json", str(out)]) == 0
    rows = {r["backend"]: r for r in json.loads(out.read_text())["results"]}
    served = rows["triton"]
    assert 0 < served["prefill_ms"]["p50"] < served["e2e_ms"]["p50"]  # the first streamed token came first


def test_run_compare_and_accuracy_score_the_served_model_like_in_process(triton_server, workdir, tmp_path):
    """compare (streamed: timed) and accuracy (teacher forcing: one logits request per passage) give the served
    model the in-process model's accuracy and perplexity."""
    from NNDF import cli

    out = tmp_path / "compare.json"
    assert cli.main(["compare", "GPT2", "--compare", "onnxrt", "triton", "--use-cache", "--iterations", "1",
                     "--warmup", "0", "-wd", str(workdir), "--triton-url", triton_server.urls["grpc"],
                     "--triton-model", triton_server.stream, "--json", str(out)]) == 0
    rows = {r["backend"]: r for r in json.loads(out.read_text())["results"]}
    assert rows["triton"]["accuracy"] == rows["onnxrt"]["accuracy"] is not None
    assert rows["triton"]["perplexity"] == pytest.approx(rows["onnxrt"]["perplexity"], rel=1e-5)
    out = tmp_path / "accuracy.json"
    assert cli.main(["accuracy", "T5", "onnxrt", "triton", "--use-cache", "--num-samples", "2", "--dataset",
                     str(ROOT / "data" / "lambada_offline.jsonl"), "-wd", str(workdir), "--triton-url",
                     triton_server.urls["http"], "--json", str(out)]) == 0
    onnxrt, served = json.loads(out.read_text())["results"]
    assert served["topN"] == onnxrt["topN"]
    for key in ("token_perplexity", "seq_perplexity", "lm_eval_perplexity"):
        assert served[key] == pytest.approx(onnxrt[key], rel=1e-5), key


def test_a_client_leaving_mid_stream_does_not_wedge_the_server(triton_server):
    """A client process is killed after its first streamed token of a long generation; the model then answers
    new streamed and unary requests (bounded in time)."""
    from NNDF.backends.triton.client import Client

    script = f"""
import os, sys, numpy as np
sys.path.insert(0, {str(ROOT)!r})
from NNDF.backends.triton.client import Client
arrays = {{"text": np.array([[b"Once upon a time"]], dtype=np.object_),
          "max_new_tokens": np.array([[200]], dtype=np.int32)}}
def first(_):
    print("token", flush=True)
    os._exit(0)
Client({triton_server.urls["grpc"]!r}, timeout=60).stream({triton_server.stream!r}, arrays, ("output_ids", "text"), first)
"""
    leaving = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert leaving.stdout.startswith("token"), leaving.stderr
    arrays = {"text": np.array([[PROMPTS["GPT2"][0].encode()]], np.object_), "max_new_tokens": np.array([[6]], np.int32)}
    start = time.monotonic()
    with Client(triton_server.urls["grpc"], timeout=60) as client:
        tokens = []
        final = client.stream(triton_server.stream, arrays, ("output_ids", "text"),
                              lambda got: tokens.append(int(got["output_ids"].reshape(-1)[0])))
        assert final["output_ids"].reshape(-1).tolist() == tokens and len(tokens) == 6
        assert client.model_ready(triton_server.stream)
        assert client.infer(triton_server.generative["GPT2"], arrays, ("output_ids",))["output_ids"].size == 6
    assert time.monotonic() - start < 60


# --- faults ----------------------------------------------------------------------------------------------------

BAD = [  # (what, inputs, part of the error)
    ("no prompt", {"max_new_tokens": np.array([[4]], np.int32)}, "give exactly one of the inputs text"),
    ("wrong type", {"text": np.array([[1]], np.int64)}, "expects 'BYTES'"),
    ("empty text", {"text": np.array([[b"   "]], np.object_)}, "text is empty"),
    ("zero tokens", {"text": np.array([[b"Hi"]], np.object_), "max_new_tokens": np.array([[0]], np.int32)},
     "max_new_tokens must be >= 1"),
    ("huge", {"text": np.array([[b"Hi"]], np.object_), "max_new_tokens": np.array([[10 ** 9]], np.int32)},
     "over this model's limit"),
    ("beyond positions", {"text": np.array([[b"Hi"]], np.object_), "max_new_tokens": np.array([[500]], np.int32)},
     "do not fit the model's 256 positions"),
    ("ids out of range", {"input_ids": np.array([[10 ** 7]], np.int64)}, "input_ids"),
    ("bad early stopping", {"text": np.array([[b"Hi"]], np.object_), "early_stopping": np.array([[b"maybe"]],
                                                                                                np.object_)},
     "early_stopping"),
    ("two prompts in one request", {"text": np.array([[b"Hi"], [b"Ho"]], np.object_)}, "one prompt per request"),
    ("scoring without positions", {"score_ids": np.array([[1, 2]], np.int64)}, "score_positions"),
    ("not UTF-8", {"text": np.array([[b"Hi \xff\xfe"]], np.object_)}, "text is not UTF-8 (invalid start byte at byte 3)"),
    ("too many beams", {"text": np.array([[b"Hi"]], np.object_), "num_beams": np.array([[9]], np.int32)},
     "num_beams 9 is over this model's limit of 8 beams"),
]
CLIENT_ERROR = {"http": "[400]", "grpc": "[StatusCode.INVALID_ARGUMENT]"}  # how each protocol says 4xx


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_malformed_requests_get_errors_and_the_model_keeps_serving(triton_server, protocol):
    from NNDF.errors import InferenceError

    model = triton_server.generative["GPT2"]
    good = {"text": np.array([[PROMPTS["GPT2"][0].encode()]], np.object_), "max_new_tokens": np.array([[6]], np.int32)}
    with _client(triton_server, protocol) as client:
        expected = client.infer(model, good, ("output_ids",))["output_ids"].tolist()
        for what, arrays, message in BAD:
            with pytest.raises(InferenceError) as caught:
                client.infer(model, arrays, ("output_ids",))
            assert message in str(caught.value) and "\n" not in str(caught.value), what
            assert CLIENT_ERROR[protocol] in str(caught.value), (what, str(caught.value))  # the client's mistake
            assert client.infer(model, good, ("output_ids",))["output_ids"].tolist() == expected, what
        assert client.model_ready(model)


def test_request_limits_set_at_deploy_refuse_at_once_and_the_model_keeps_serving(triton_server):
    """The one-at-a-time model was deployed with --num-beams-limit 4 --cache-limit-mib 1 --max-new-tokens-limit
    64 (serving.json records them): requests beyond each get a 400-class error at once, and a request within
    them is still answered."""
    from NNDF.errors import InferenceError

    model = triton_server.single
    record = json.loads((triton_server.repository / model / "1" / "serving.json").read_text())
    assert (record["num_beams_limit"], record["cache_limit_mib"], record["max_new_tokens_limit"]) == (4, 1, 64)

    def ask(beams: int, new: int) -> dict:
        return {"text": np.array([[b"Hi"]], np.object_), "num_beams": np.array([[beams]], np.int32),
                "max_new_tokens": np.array([[new]], np.int32)}

    cases = [(ask(100_000, 8), "num_beams 100000 is over this model's limit of 4 beams"),
             (ask(5, 8), "num_beams 5 is over this model's limit of 4 beams"),
             (ask(1, 65), "max_new_tokens 65 is over this model's limit of 64"),
             (ask(4, 60), "MiB KV cache, over this model's limit of 1 MiB (deploy --cache-limit-mib)")]
    with _client(triton_server) as client:
        for arrays, message in cases:
            start = time.monotonic()
            with pytest.raises(InferenceError, match=r"\[400\]") as caught:
                client.infer(model, arrays, ("output_ids",))
            assert message in str(caught.value), str(caught.value)
            assert time.monotonic() - start < 10  # refused before any generation
        assert client.infer(model, ask(2, 8), ("output_ids",))["output_ids"].size >= 1


def test_batched_requests_are_cut_where_their_kv_cache_would_pass_the_limit():
    """The served model's batching under --cache-limit-mib (no server: the grouping alone): rows x beams x the
    longest length stays under the limit."""
    from types import SimpleNamespace

    from NNDF.generation import GenerationConfig, cache_bytes
    from NNDF.model_config import ModelDims
    from NNDF.triton.generative import GenerativeModel, Job

    dims = ModelDims(layers=4, heads=4, hidden=192, vocab=4096, positions=256, head_dim=48)
    assert cache_bytes(dims, 1, 1, 1, 4) == 4 * 2 * 4 * 48 * 4  # layers x (key, value) x heads x head_dim x fp32
    model = object.__new__(GenerativeModel)  # only what the grouping reads
    model.run = SimpleNamespace(source=SimpleNamespace(dims=dims), options=SimpleNamespace(fp16=False))
    model.cache_limit = cache_bytes(dims, 3, 2, 10, 4)  # three rows of two beams x 10 positions
    config = GenerationConfig(max_new_tokens=5, num_beams=2)
    jobs = [Job(i, None, config, False, length=10) for i in range(7)]
    assert [[j.index for j in batch] for batch in model.within_cache_limit(jobs)] == [[0, 1, 2], [3, 4, 5], [6]]
    longer = [Job(0, None, config, False, length=10), Job(1, None, config, False, length=16)]
    assert len(model.within_cache_limit(longer)) == 2  # padded to 16 positions, two rows pass the limit


def test_a_triton_row_of_another_family_or_model_type_is_refused_before_any_request(triton_server, workdir,
                                                                                  capsys):
    """Every deployed config says what it serves; the triton backend compares it with the run's model."""
    from NNDF import cli
    from NNDF.triton.config import read_config

    config = read_config(triton_server.repository / triton_server.generative["T5"] / "config.pbtxt")
    assert {k: v.string_value for k, v in config.parameters.items()} == {"family": "T5", "model_type": "t5"}
    cases = [(["chat", "T5", "triton", "--prompt", "Hi"], triton_server.generative["GPT2"],
              "serves family GPT2 model_type gpt2, not family T5 model_type t5"),
             (["predict", "BERT", "triton", "--prompt", "Hi"], triton_server.generative["GPT2"],
              "serves family GPT2 model_type gpt2, not family BERT model_type bert")]
    for args, model, message in cases:
        assert cli.main([*args, "--triton-url", triton_server.urls["http"], "--triton-model", model, "-wd",
                         str(workdir)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err


def test_the_in_process_cache_guard_refuses_before_allocating(workdir, capsys):
    """--num-beams far beyond memory: one line with the estimated KV cache, exit 2, before any generation."""
    from NNDF import cli

    start = time.monotonic()
    assert cli.main(["chat", "GPT2", "onnxrt", "--prompt", "Hi", "--num-beams", "100000000", "-wd",
                     str(workdir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the KV cache alone needs about" in err[0] and "GB" in err[0], err
    assert "lower --num-beams" in err[0] and time.monotonic() - start < 60


# --- load ------------------------------------------------------------------------------------------------------

def test_concurrent_load_answers_equal_in_process_with_and_without_batching(triton_server, workdir):
    """A bounded tools/bench/triton_load.py: 4 clients x 3 requests of different lengths, no timing asserted."""
    from NNDF import registry
    from NNDF.options import ModelOptions
    from NNDF.triton.load import load, prompts_from, reference

    prompts = prompts_from(ROOT / "data" / "lambada_offline.jsonl", 12)
    family = registry.family("GPT2")
    expected, in_process = reference(family, registry.backend(family, "onnxrt"),
                                     ModelOptions(use_cache=True, working_dir=str(workdir)), prompts, 6)
    assert in_process.requests == 12
    for model in (triton_server.generative["GPT2"], triton_server.single):
        result = load(triton_server.urls["http"], model, prompts, expected, clients=4, max_new_tokens=6)
        assert (result.requests, result.errors, result.mismatches) == (12, 0, 0), model


# --- serve and deploy ------------------------------------------------------------------------------------------

def test_stop_takes_down_what_the_server_leaves_in_its_process_group(tmp_path):
    """A stand-in server that exits on SIGINT and leaves a child behind in its process group (as tritonserver can
    leave a python model's stub): `stop` gives the exit code and the child is gone too."""
    from NNDF.triton.server import TritonServer

    server = TritonServer(tmp_path)
    server.process = subprocess.Popen(["sh", "-c", "trap 'exit 3' INT; sleep 600 & echo $!; wait"],
                                      stdout=subprocess.PIPE, text=True, start_new_session=True,
                                      preexec_fn=_sigint_default)
    child = int(server.process.stdout.readline())
    assert server.stop(timeout=10) == 3

    def gone() -> bool:
        try:
            state = Path(f"/proc/{child}/stat").read_text().split(") ")[1][0]
        except FileNotFoundError:
            return True
        return state == "Z"  # killed, not yet reaped by init
    deadline = time.monotonic() + 5
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(), f"process {child} of the server's group is still running"


def test_a_model_stub_imports_what_the_servers_pythonpath_holds(tmp_path, monkeypatch):
    """The python backend's embedded interpreter ignores PYTHONPATH (`python -E` here): a package that the
    serving process finds only through PYTHONPATH (onnxruntime-gpu beside an image's CPU build, say) still
    reaches the deployed model.py stub, through the paths `serve` hands it."""
    from NNDF.triton.repository import write_stub
    from NNDF.triton.server import PATH_VARIABLE, stub_paths

    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "nndf_probe_module.py").write_text("class Probe:\n    where = __file__\n")
    monkeypatch.setenv("PYTHONPATH", str(extra))
    paths = stub_paths()
    assert paths.index(str(extra)) == 1, paths  # after the stub's numpy, before site-packages
    stub = write_stub(tmp_path, "nndf_probe_module:Probe")
    probe = ("import importlib.util, sys; spec = importlib.util.spec_from_file_location('model', sys.argv[1]); "
             "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); print(m.TritonPythonModel.where)")
    env = {"PATH": "/usr/bin:/bin", PATH_VARIABLE: os.pathsep.join(paths)}
    done = subprocess.run([sys.executable, "-E", "-c", probe, str(stub)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(extra / "nndf_probe_module.py")


def test_serve_on_a_busy_port_fails_in_one_line(triton_server):
    busy = triton_server.ports.http  # the session's server holds it
    result = run_cli("serve", str(triton_server.repository), "--http-port", str(busy), timeout=120)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and f"--http-port {busy}" in lines[0] and "busy" in lines[0]


def test_serve_refuses_a_folder_that_is_not_a_repository(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    result = run_cli("serve", str(tmp_path), timeout=120)
    assert result.returncode == 2 and "not a Triton model repository" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def _sigint_default():
    """SIGINT's default handling in the child: a suite started in the background (`cmd &` in a script) passes
    SIGINT on ignored, and Python then leaves it ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("stop,inherited,said", [
    (signal.SIGINT, _sigint_default, "stopped on Ctrl-C"),  # as in a terminal, where Ctrl-C reaches serve
    (signal.SIGINT, None, "stopped on Ctrl-C"),  # a script's background job: SIGINT handed on ignored
    (signal.SIGTERM, None, "stopped on SIGTERM"),  # a service manager's stop
])
def test_serve_starts_prints_its_endpoints_and_stops_on_a_signal(triton_server, tmp_path, stop, inherited, said):
    import os
    import shutil

    from NNDF.triton.server import free_ports

    repository = tmp_path / "repository"
    shutil.copytree(triton_server.repository / triton_server.single, repository / triton_server.single)
    http, grpc, metrics = free_ports(3)
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    process = subprocess.Popen([sys.executable, str(ROOT / "run.py"), "serve", str(repository), "--http-port",
                                str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)], cwd=ROOT,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=inherited or (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)))
    try:
        line = process.stdout.readline()  # the first line says it serves (after every model is ready)
        assert f"HTTP http://127.0.0.1:{http}" in line and f"gRPC grpc://127.0.0.1:{grpc}" in line, line
        log = Path(line.split("; log ")[1].split(";")[0])  # kept after the server stops
        assert log.is_file()
        from NNDF.backends.triton.client import Client

        with Client(f"http://127.0.0.1:{http}", timeout=60) as client:
            assert client.model_ready(triton_server.single)
        process.send_signal(stop)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert said in out and triton_server.single in out
    assert "model_lifecycle" in log.read_text()  # the server's whole log
    log.unlink()
    with pytest.raises(ConnectionRefusedError):  # the server is gone
        socket.create_connection(("127.0.0.1", http), timeout=5).close()


def _alive(process) -> bool:
    """Running, and not a zombie (an orphan's exit status waits for whoever adopted it)."""
    import psutil

    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the server ends with its parent on Linux only")
def test_a_serve_killed_outright_takes_its_server_with_it(triton_server, tmp_path):
    """SIGKILL gives `serve` no time to stop the server: the server (and what it started) ends by itself."""
    import shutil

    import psutil

    from NNDF.triton.server import free_ports

    repository = tmp_path / "repository"
    shutil.copytree(triton_server.repository / triton_server.single, repository / triton_server.single)
    http, grpc, metrics = free_ports(3)
    process = subprocess.Popen([sys.executable, str(ROOT / "run.py"), "serve", str(repository), "--http-port",
                                str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)], cwd=ROOT,
                               env=dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1", TMPDIR=str(tmp_path)),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # its scratch stays here
    started = []
    try:
        line = process.stdout.readline()  # after every model is ready
        assert f"HTTP http://127.0.0.1:{http}" in line, line + process.stderr.read()
        log = Path(line.split("; log ")[1].split(";")[0])
        started = psutil.Process(process.pid).children(recursive=True)
        assert any(p.name() == "tritonserver" for p in started)
        process.kill()
        process.wait(timeout=10)
        deadline = time.monotonic() + 30
        while (alive := [p for p in started if _alive(p)]) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not alive, [(p.pid, p.name()) for p in alive]
        log.unlink()
    finally:
        if process.poll() is None:  # nothing left behind if the test failed
            process.kill()
        for p in started:
            if p.is_running():
                p.kill()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", http), timeout=5).close()


def test_serve_names_a_failing_models_own_error_and_keeps_the_log(triton_server, tmp_path):
    """A model whose model.py has a SyntaxError: serve fails in seconds with the model's status row (the
    exception and its line) and the kept log's path, no traceback of ours; --verbose streams the log."""
    import shutil

    from NNDF.triton.server import free_ports

    repository = tmp_path / "broken"
    shutil.copytree(triton_server.repository / triton_server.single, repository / triton_server.single)
    stub = repository / triton_server.single / "1" / "model.py"
    line = len(stub.read_text().splitlines()) + 1
    stub.write_text(stub.read_text() + "def broken(:\n")
    for verbose in ((), ("--verbose",)):
        ports = [a for flag, port in zip(("--http-port", "--grpc-port", "--metrics-port"), free_ports(3))
                 for a in (flag, str(port))]
        result = run_cli("serve", str(repository), *ports, "--ready-timeout", "60", *verbose, timeout=120)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        error = result.stderr[result.stderr.index("error: "):].splitlines()
        assert f"{triton_server.single}: UNAVAILABLE: Internal: SyntaxError: invalid syntax (model.py, line {line})" \
            in error, error
        log = Path(error[-1].split("the whole server log: ")[1].split(" (")[0])
        assert "SyntaxError" in log.read_text()
        assert ("model_lifecycle.cc" in result.stderr) == bool(verbose)  # the streamed log
        log.unlink()


def test_a_model_that_cannot_load_its_tokenizer_fails_to_load_not_at_each_request(triton_server, tmp_path):
    """The served model loads its tokenizer when the server loads it: a broken tokenizer file is the model's load
    error that `serve` names, not an error answered to every request of a model reported ready."""
    import shutil

    from NNDF.triton.server import free_ports

    repository = tmp_path / "no-tokenizer"
    shutil.copytree(triton_server.repository / triton_server.single, repository / triton_server.single)
    (repository / triton_server.single / "1" / "hf" / "tokenizer.json").write_text("{ not json")
    ports = [a for flag, port in zip(("--http-port", "--grpc-port", "--metrics-port"), free_ports(3))
             for a in (flag, str(port))]
    result = run_cli("serve", str(repository), *ports, "--ready-timeout", "90", timeout=150)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    error = result.stderr[result.stderr.index("error: "):]
    assert f"{triton_server.single}: UNAVAILABLE" in error and "tokenizer" in error.lower(), error
    Path(error.splitlines()[-1].split("the whole server log: ")[1].split(" (")[0]).unlink()


def test_deploy_prints_quoted_commands_for_a_path_with_a_space(triton_server, workdir, tmp_path):
    import shlex

    repository = tmp_path / "my répo"
    result = run_cli("deploy", "GPT2", "onnxrt", "--use-cache", "--repository", str(repository), "-wd", str(workdir))
    assert result.returncode == 0, result.stderr
    assert f"python run.py serve {shlex.quote(str(repository))};" in result.stdout
    assert f"python run.py serve {shlex.quote(str(repository))} --http-port" in (repository / "README.md").read_text()


def test_deploy_refusals_leave_nothing_behind(triton_server, workdir, tmp_path, capsys):
    from NNDF import cli

    def refused(*args: str) -> str:
        assert cli.main(["deploy", "GPT2", *args, "-wd", str(workdir)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
        return err[0]

    assert "TensorRT" in refused("trt", "--repository", str(tmp_path / "r"))
    assert "--repository DIR" in refused("onnxrt")
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    (stranger / "keep.txt").write_text("mine")
    assert "not a Triton model repository" in refused("onnxrt", "--use-cache", "--repository", str(stranger))
    assert sorted(p.name for p in stranger.iterdir()) == ["keep.txt"]
    before = sorted(p.name for p in triton_server.repository.iterdir())
    assert "--force" in refused("onnxrt", "--use-cache", "--repository", str(triton_server.repository))
    assert sorted(p.name for p in triton_server.repository.iterdir()) == before
    assert not list(triton_server.repository.parent.glob(".*staging"))
    assert "--max-batch-size" in refused("onnxrt", "--repository", str(tmp_path / "r"), "--max-batch-size", "0")
    assert "give one --quantize value (got onnxrt-int8, onnxrt-int4)" in refused(
        "onnxrt", "--repository", str(tmp_path / "r"), "--quantize", "int8", "int4")
    assert "does not apply --ort-products: the served model runs the onnxrt backend's exported graphs" in refused(
        "onnxrt", "--repository", str(tmp_path / "r"), "--ort-products", "matmul")
    assert not (tmp_path / "r").exists()


def test_deploy_static_cache_serves_what_the_row_takes(workdir, tmp_path, capsys):
    """With --static-cache deploy copies the graphs the in-process row runs (the built ones by default: the Triton
    tests serve those), and `--no-fused-decode` the torch.onnx static export, as for that row; the server's steps
    are set up from the record as `GenerativeModel` sets them up. Encoders refuse the flag in one line."""
    import json
    import shlex

    from NNDF import cli, registry
    from NNDF.options import ModelOptions
    from NNDF.triton.generative import load_record, open_served_run

    repository = tmp_path / "r"
    assert cli.main(["deploy", "LLAMA", "onnxrt", "--static-cache", "--no-fused-decode", "--repository",
                     str(repository), "-wd", str(workdir)]) == 0
    out = capsys.readouterr().out
    assert "triton --static-cache --no-fused-decode --triton-model llama-offline-onnxrt" in out
    # the query as printed finds the same artifacts: it carries the run's --working-dir
    query = shlex.split(out.split("query it: ")[1].splitlines()[0])[2:]
    options = ModelOptions.from_namespace(cli.build_parser(query).parse_args(query))
    assert (options.working_dir, options.static_cache, options.fused_decode) == (str(workdir), True, False)
    assert "served graphs: the torch.onnx static-cache export (--no-fused-decode)" in out
    version = repository / "llama-offline-onnxrt" / "1"
    record = load_record(version)
    assert record["graphs"] == "export" and record["options"]["fused_decode"] is False
    run = open_served_run(version, record, tmp_path / "wd")
    steps = registry.backend(run.family, "onnxrt").served_steps(
        run, {part: version / rel for part, rel in record["parts"].items()}, False)
    try:
        assert type(steps).__name__ != "OrtFusedSteps" and "cache_position" in steps.graph.inputs
    finally:
        steps.close()
    assert json.loads((version / "serving.json").read_text())["options"]["static_cache"] is True
    assert cli.main(["deploy", "BERT", "onnxrt", "--no-fused-decode", "--repository", str(repository),
                     "-wd", str(workdir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error: --no-fused-decode does not apply to BERT (encoder models)" in err[0], err
