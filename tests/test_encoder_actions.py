"""Encoder models' actions (evaluators: Encoder/evaluate/) on the BERT family: predict, benchmark, accuracy, run / compare.

The CLI smoke runs go through `run.py` where the whole program matters (exit code, printed tables, --json) and
through `cli.main` in-process otherwise; the numbers are checked against outside references: sentence-
transformers' own `encode` and the published all-MiniLM-L6-v2 similarities (0.666 / 0.105 in the
sentence-transformers quickstart), each text alone against a padded batch, checkpoint.toml's goldens (made by
tools/assets/make_encoder_checkpoints.py from sentence-transformers and HF classifiers). onnxrt joins where the BERT
family binds it (BERT/onnxrt.py).
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import ROOT, cli_in_process, run_cli
from NNDF import cli
from NNDF.errors import DatasetError, UsageError
from NNDF.options import AccuracyOptions, ModelOptions, PredictOptions

BACKENDS = ("frameworks", "onnxrt") if (ROOT / "BERT" / "onnxrt.py").exists() else ("frameworks",)
PUBLISHED = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
TEXTS = ["A short one.", "John lives in Paris and works for the United Nations in a tall building.",
         "Tiny.", "The concert was boring and far too loud, and we left before the end of it.", "Okay then."]
CLASSIFIERS = ("distilbert-classifier-offline", "roberta-classifier-offline", "bert-ner-offline")


def _ok(proc):
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _error(capsys, *argv: str) -> str:
    """run.py in-process (`cli_in_process`): exit 2 and exactly one `error:` line; returns it."""
    proc = cli_in_process(capsys, *argv)
    err = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def _predict(workdir, texts, batch=1, variant=None, backends=BACKENDS):
    from NNDF.actions.predict import predict

    options = ModelOptions(working_dir=str(workdir), batch_size=batch, variant=variant)
    return predict("BERT", backends, options, PredictOptions(prompt=tuple(texts)))


# --- predict ---

def test_predict_cli_reproduces_sentence_transformers(workdir, tmp_path):
    """MiniLM through run.py: the published similarities, and sentence-transformers' encode within 1e-5."""
    from sentence_transformers import SentenceTransformer

    path = tmp_path / "predict.json"
    prompts = [a for text in PUBLISHED for a in ("--prompt", text)]
    out = _ok(run_cli("predict", "BERT", *BACKENDS, *prompts, "--batch-size", "2", "-wd", str(workdir),
                      "--json", str(path))).stdout
    assert "0.666" in out and "0.1046" in out and "mean pooling, L2-normalized" in out
    results = json.loads(path.read_text())["results"]
    assert [(r["backend"], r["prompt"]) for r in results] == [(b, t) for t in PUBLISHED for b in BACKENDS]
    assert all(set(r) == {"backend", "prompt", "embedding"} and len(r["embedding"]) == 384 for r in results)
    model = SentenceTransformer(str(workdir / "BERT" / "all-MiniLM-L6-v2" / "hf-model"), device="cpu")
    theirs = torch.tensor(model.encode(PUBLISHED))  # [3, 384]
    for backend in BACKENDS:
        ours = torch.tensor([r["embedding"] for r in results if r["backend"] == backend])
        assert (ours - theirs).abs().max() < 1e-5, backend
        sims = ours @ ours.T
        assert round(float(sims[0, 1]), 3) == 0.666 and round(float(sims[0, 2]), 3) == 0.105


@pytest.mark.parametrize("variant", [None, *CLASSIFIERS])
def test_predict_batch_equals_alone(workdir, variant):
    """Padded batches of 3 give each text's numbers alone (embeddings, logits, token logits) within 1e-5."""
    alone = _predict(workdir, TEXTS, 1, variant).to_json()["results"]
    batched = _predict(workdir, TEXTS, 3, variant).to_json()["results"]
    key = "embedding" if variant is None else "logits"
    assert set(alone[0]) == ({"backend", "prompt", "embedding"} if variant is None else
                             {"backend", "prompt", "logits", "label"})
    for a, b in zip(alone, batched):
        assert a["prompt"] == b["prompt"] and a.get("label") == b.get("label")
        assert torch.tensor(a[key]).shape == torch.tensor(b[key]).shape
        assert (torch.tensor(a[key]) - torch.tensor(b[key])).abs().max() < 1e-5, (a["backend"], a["prompt"])


def test_predict_truncates_long_texts_with_a_note(workdir):
    report = _predict(workdir, ["word " * 600, "short"], 2, "distilbert-classifier-offline", ("frameworks",))
    assert "1 of 2 texts were longer than distilbert-classifier-offline's limit of 512 tokens" in " ".join(report.notes)
    tokens = _predict(workdir, ["word " * 600], 1, "bert-ner-offline", ("frameworks",)).results[0].tokens
    assert len(tokens) == 510  # 512 with [CLS] and [SEP]


def test_a_bare_encoders_pooling_note_says_where_it_comes_from_once(workdir, capsys):
    assert cli.main(["predict", "BERT", "frameworks", "--variant", "distilbert-classifier-offline", "--task",
                     "feature-extraction", "--prompt", "hi", "-wd", str(workdir)]) == 0
    out = capsys.readouterr().out
    assert "note: embeddings: mean pooling (the default for a bare encoder: no sentence-transformers modules.json);" \
        in out and out.count("pooling") == 1


def test_predict_many_texts_prints_a_summary(workdir, tmp_path, capsys):
    data = tmp_path / "texts.jsonl"
    data.write_text("".join(json.dumps({"text": f"sentence number {i} about topic {i % 3}"}) + "\n" for i in range(8)))
    assert cli.main(["predict", "BERT", "frameworks", "--dataset", str(data), "-wd", str(workdir)]) == 0
    out = capsys.readouterr().out
    assert "most similar" in out and "| frameworks |       8 |" in out


def test_build_header_shows_only_what_an_encoder_reads(workdir, capsys):
    assert cli.main(["build", "BERT", "onnxrt", "-wd", str(workdir), "--device", "cpu"]) == 0
    header = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("build: "))
    assert header == "build: BERT all-MiniLM-L6-v2 (device=cpu, precision=fp32, batch_size=1)"  # no cache, no beams


@pytest.mark.parametrize("argv,expect", [
    (("predict", "BERT", "frameworks"), "predict needs texts: give --prompt TEXT (repeatable) or --dataset"),
    (("predict", "BERT", "frameworks", "--prompt", "fine", "--prompt", " "), "--prompt 2 is empty"),
    (("predict", "BERT", "frameworks", "--dataset", "/no/such.jsonl"), "--dataset /no/such.jsonl: no such file"),
    (("predict", "BERT", "frameworks", "--prompt", "hi", "--num-beams", "2"),
     "--num-beams does not apply to BERT (encoder models)"),
    (("predict", "BERT", "frameworks", "--prompt", "hi", "--use-cache"), "--use-cache does not apply to BERT"),
    (("benchmark", "BERT", "frameworks", "--output-seq-len", "8"), "--output-seq-len does not apply to BERT"),
    (("run", "BERT", "frameworks", "--seed", "3"), "--seed does not apply to run / compare for encoder models"),
    (("chat", "BERT", "frameworks", "--prompt", "hi"), "BERT: chat generates text; encoder models embed or "
                                                       "classify it: use predict"),
    (("predict", "GPT2", "frameworks", "--prompt", "hi"), "GPT2: predict is for encoder models"),
])
def test_refusals_are_one_line(capsys, workdir, argv, expect):
    assert expect in _error(capsys, *argv, "-wd", str(workdir))


@pytest.mark.parametrize("lines,expect", [
    (['{"text": "fine"}', '{"text": "also fine"', '{"text": "x"}'], "line 2 is not JSON"),
    (['{"text": "fine"}', "", '{"txt": "typo"}'], "line 3 has no \"text\" field"),
    (['{"text": "   "}'], "line 1 has \"text\": \"   \"; a text is a non-empty string"),
])
def test_predict_dataset_errors_name_the_line(capsys, workdir, tmp_path, lines, expect):
    data = tmp_path / "bad.jsonl"
    data.write_text("\n".join(lines) + "\n")
    assert expect in _error(capsys, "predict", "BERT", "frameworks", "--dataset", str(data), "-wd", str(workdir))


def test_chat_refusal_through_run_py(workdir):
    proc = run_cli("chat", "BERT", "frameworks", "--prompt", "hi", "-wd", str(workdir))
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "use predict" in proc.stderr


# --- benchmark ---

def test_benchmark_cli_json(workdir, tmp_path, capsys):
    """In process: benchmark through run.py is test_cli.py's, and BERT through run.py is predict's above."""
    path = tmp_path / "bench.json"
    out = _ok(cli_in_process(capsys, "benchmark", "BERT", *BACKENDS, "--hf-baseline", "--input-seq-len", "16",
                             "--batch-size", "2", "--iterations", "3", "--warmup", "1", "-wd", str(workdir), "--json",
                             str(path))).stdout
    assert "sequences/s" in out and "p95" in out
    report = json.loads(path.read_text())
    assert [r["backend"] for r in report["results"]] == ["hf-eager", *BACKENDS]
    assert {"device", "precision", "batch_size", "input_seq_len", "iterations"} <= set(report["settings"])
    assert report["settings"]["input_seq_len"] == 16 and "torch" in report["environment"]
    for r in report["results"]:
        lat = r["latency_ms"]
        assert set(lat) == {"mean", "sd", "min", "max", "p50", "p90", "p95", "p99"}
        assert 0 < lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p95"] <= lat["p99"] <= lat["max"]
        assert len(r["samples_ms"]) == 3 and r["sequences_per_s"] == pytest.approx(2e3 / lat["mean"])
        assert r["peak_memory_mb"] > 0


def test_benchmark_percentiles_ascending(workdir, tmp_path, capsys):
    """--percentile 75 goes between p50 and p90, in the table and in the JSON."""
    path = tmp_path / "bench.json"
    out = _ok(cli_in_process(capsys, "benchmark", "BERT", "frameworks", "--percentile", "75", "--input-seq-len", "8",
                             "--iterations", "2", "--warmup", "0", "-wd", str(workdir), "--json", str(path))).stdout
    header = [c.strip() for c in next(ln for ln in out.splitlines() if ln.startswith("| backend")).split("|")]
    assert header[header.index("p50"):header.index("p99") + 1] == ["p50", "p75", "p90", "p95", "p99"]
    (r,) = json.loads(path.read_text())["results"]
    assert {"p50", "p75", "p90", "p95", "p99"} <= set(r["latency_ms"])
    assert r["latency_ms"]["p75"] == pytest.approx(np.percentile(r["samples_ms"], 75))


def test_benchmark_interleaved_rows(workdir, tmp_path, capsys):
    path = tmp_path / "bench.json"
    _ok(cli_in_process(capsys, "benchmark", "BERT", *BACKENDS, "--input-seq-len", "16", "--iterations", "3",
                       "--warmup", "1", "--interleave", "-wd", str(workdir), "--json", str(path)))
    report = json.loads(path.read_text())
    assert [r["backend"] for r in report["results"]] == list(BACKENDS) and report["settings"]["interleave"]
    assert any(n.startswith("interleaved: every backend row set up at once") for n in report["notes"])
    for r in report["results"]:
        assert len(r["samples_ms"]) == 3 and r["sequences_per_s"] == pytest.approx(1e3 / r["latency_ms"]["mean"])
        assert r["memory_kind"].endswith("every row set up at once") and r["peak_memory_mb"] > 0
    if len(BACKENDS) == 2:
        first, second = (np.array(r["samples_ms"]) for r in report["results"])
        assert f"sequences/s over {BACKENDS[0]}'s, paired round by round, median [quartiles]: {BACKENDS[1]} " \
               f"{np.median(first / second):.2f}x" in " ".join(report["notes"])


def test_benchmark_length_past_the_limit_is_one_line(capsys, workdir):
    err = _error(capsys, "benchmark", "BERT", "frameworks", "--input-seq-len", "300", "-wd", str(workdir))
    assert "--input-seq-len 300 exceeds all-MiniLM-L6-v2's limit of 256 tokens" in err


# --- accuracy ---

def test_accuracy_default_dataset_and_agreement(workdir, tmp_path, capsys):
    path = tmp_path / "acc.json"
    assert cli.main(["accuracy", "BERT", *BACKENDS, "-m", "distilbert-classifier-offline", "-wd", str(workdir),
                     "--num-samples", "6", "--json", str(path)]) == 0
    assert "data/encoder_offline.jsonl" in capsys.readouterr().out
    results = json.loads(path.read_text())["results"]
    for r in results:
        assert set(r) == {"backend", "accuracy", "agreement", "max_abs_diff", "num_samples", "predicted"}
        assert r["agreement"] == 1.0 and r["num_samples"] == 6 and 0 <= r["accuracy"] <= 1
    from NNDF.actions.accuracy import accuracy

    report = accuracy("BERT", BACKENDS, ModelOptions(working_dir=str(workdir)), AccuracyOptions(num_samples=4))
    assert all(r.min_cosine > 0.99999 for r in report.results)  # MiniLM embeddings: cosine to frameworks fp32


def test_accuracy_cosine_gaps_are_never_negative(workdir, tmp_path, capsys):
    """The reference against itself is exactly 0 apart; no row's 1 - cosine goes below 0 by rounding."""
    from Encoder.evaluate.common import cosine

    vectors = torch.randn(200, 384, generator=torch.Generator().manual_seed(0))
    assert all(cosine(v, v) == 1.0 for v in vectors)  # float64 gives 1 + 2.2e-16 for most of these
    assert all(cosine(v, v + 1e-9) <= 1.0 for v in vectors)
    path = tmp_path / "acc.json"
    out = _ok(cli_in_process(capsys, "accuracy", "BERT", *BACKENDS, "--num-samples", "10", "-wd", str(workdir),
                             "--json", str(path))).stdout
    rows = {ln.split("|")[1].strip(): [c.strip() for c in ln.split("|")[2:4]] for ln in out.splitlines()
            if ln.startswith("| ") and not ln.startswith("| backend")}
    assert rows["frameworks"] == ["0", "0"]
    for r in json.loads(path.read_text())["results"]:
        assert r["mean_cosine"] <= 1.0 and r["min_cosine"] <= r["mean_cosine"] and max(r["cosines"]) <= 1.0
        assert r["backend"] != "frameworks" or r["cosines"] == [1.0] * 10


def test_accuracy_labels_by_name_any_case_or_index_and_unknown_refused(workdir, tmp_path):
    from NNDF.actions.accuracy import accuracy

    data = tmp_path / "labels.jsonl"
    rows = [{"text": "great", "label": "POSITIVE"}, {"text": "awful", "label": "negative"}, {"text": "ok", "label": 1}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    options = ModelOptions(working_dir=str(workdir), variant="distilbert-classifier-offline")
    report = accuracy("BERT", ("frameworks",), options, AccuracyOptions(dataset=str(data)))
    assert report.results[0].num_samples == 3
    data.write_text(data.read_text() + json.dumps({"text": "meh", "label": "neutral"}) + "\n")
    with pytest.raises(DatasetError, match="line 4: unknown label 'neutral'; the model's labels: NEGATIVE, POSITIVE"):
        accuracy("BERT", ("frameworks",), options, AccuracyOptions(dataset=str(data)))


@pytest.mark.skipif(len(BACKENDS) == 1, reason="BERT has no onnxrt binding yet")
def test_accuracy_computes_the_reference_when_frameworks_is_not_named(workdir):
    from NNDF.actions.accuracy import accuracy

    report = accuracy("BERT", ("onnxrt",), ModelOptions(working_dir=str(workdir)), AccuracyOptions(num_samples=3))
    assert "computed in this run as the reference" in " ".join(report.notes)
    assert report.results[0].min_cosine > 0.99999


# --- run / compare ---

def test_run_and_compare_pass_on_the_goldens(workdir, tmp_path, capsys):
    path = tmp_path / "run.json"
    assert cli.main(["run", "BERT", *BACKENDS, "-wd", str(workdir), "--iterations", "2", "--warmup", "1",
                     "--json", str(path)]) == 0
    samples = json.loads(path.read_text())["results"]
    assert len(samples) == 4 * len(BACKENDS) and all(s["passed"] and s["cosine"] > 0.99999 for s in samples)
    for variant in CLASSIFIERS:
        assert cli.main(["compare", "BERT", "--compare", *BACKENDS, "-m", variant, "-wd", str(workdir),
                         "--iterations", "1", "--warmup", "0", "--json", str(path)]) == 0
        summary = json.loads(path.read_text())["results"]
        assert [s["backend"] for s in summary] == list(BACKENDS)
        assert all(s["passed"] == s["checked"] == 4 and s["accuracy"] == 1.0 for s in summary), variant
    assert "| pass " in capsys.readouterr().out


def test_run_with_a_task_the_goldens_do_not_cover_is_n_a(workdir, capsys):
    assert cli.main(["compare", "BERT", "--compare", "frameworks", "-m", "distilbert-classifier-offline",
                     "--task", "feature-extraction", "-wd", str(workdir), "--iterations", "1", "--warmup", "0"]) == 0
    assert "checks are n/a" in capsys.readouterr().out


def test_library_refusals():
    from Encoder.evaluate.predict import load_texts

    with pytest.raises(UsageError, match="--prompt 1 is empty"):
        load_texts(PredictOptions(prompt=("",)))


def test_accuracy_says_when_the_dataset_has_fewer_samples(workdir, capsys):
    out = _ok(cli_in_process(capsys, "accuracy", "BERT", "frameworks", "--num-samples", "100", "-wd",
                             str(workdir))).stdout
    assert "note: --num-samples 100: data/encoder_offline.jsonl has only 40 samples; all 40 are used" in out
