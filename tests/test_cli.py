"""Every action through the real CLI (run.py in a subprocess, or `cli.main` in process where a run.py check of the
same action and backend is here already), with its JSON checked against independent computations."""
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import ROOT, cli_in_process, run_cli
from NNDF import cli

DATA = str(ROOT / "data" / "lambada_offline.jsonl")


@pytest.fixture(scope="module")
def wd(workdir):
    """The session's working dir: the offline models and their exports are built once for the whole suite (the
    tests that must see a fresh export or a rebuild use their own folder)."""
    return str(workdir)


def _ok(proc):
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_list_shows_families_and_backend_status():
    out = _ok(run_cli("list")).stdout
    for name in ("GPT2", "OPT", "BLOOM", "gpt2-offline", "facebook/opt-125m", "bigscience/bloom-560m"):
        assert name in out
    assert "| onnxrt" in out and "| trt" in out


def test_benchmark_json_and_arithmetic(wd, tmp_path):
    path = tmp_path / "bench.json"
    _ok(run_cli("benchmark", "GPT2", "frameworks", "onnxrt", "--use-cache", "--input-seq-len", "8",
                "--output-seq-len", "6", "--iterations", "3", "--warmup", "1", "--batch-size", "2",
                "--hf-baseline", "--percentile", "75", "-wd", wd, "--json", str(path)))
    data = json.loads(path.read_text())
    assert [r["backend"] for r in data["results"]] == ["hf-generate", "frameworks", "onnxrt"]
    for r in data["results"]:
        for key in ("prefill_ms", "tpot_ms", "e2e_ms"):
            assert {"p50", "p90", "p99", "p75"} <= set(r[key]) and len(r[key]["samples"]) == 3
        e2e = np.array(r["e2e_ms"]["samples"])
        assert r["e2e_ms"]["p50"] == pytest.approx(np.median(e2e))
        assert r["tokens_per_s"] == pytest.approx(2 * 6 / (np.median(e2e) / 1e3))
        tpot = (e2e - np.array(r["prefill_ms"]["samples"])) / 5
        assert r["tpot_ms"]["samples"] == pytest.approx(list(tpot))
        assert r["peak_memory_mb"] > 0
    assert data["results"][2]["onnx_max_diff"] < 1e-3


def test_benchmark_interleaved_rows(wd, tmp_path, capsys):
    """In process: --interleave sets both rows up at once and times them in turns; the rows' arithmetic and sizes
    as without it (the frameworks row's weight bytes read while its model is loaded)."""
    path = tmp_path / "bench.json"
    out = _ok(cli_in_process(capsys, "benchmark", "GPT2", "frameworks", "onnxrt", "--use-cache", "--input-seq-len",
                             "8", "--output-seq-len", "5", "--iterations", "3", "--warmup", "1", "--interleave",
                             "-wd", wd, "--json", str(path))).stdout
    data = json.loads(path.read_text())
    assert [r["backend"] for r in data["results"]] == ["frameworks", "onnxrt"] and data["settings"]["interleave"]
    assert any(n.startswith("interleaved: every backend row set up at once") for n in data["notes"])
    for r in data["results"]:
        e2e = np.array(r["e2e_ms"]["samples"])
        assert len(e2e) == 3 and r["tokens_per_s"] == pytest.approx(5 / (np.median(e2e) / 1e3))
        assert r["memory_kind"].endswith("every row set up at once") and r["weight_bytes"] > 0
    assert data["results"][1]["model_mb"] > 0 and "interleaved" in out
    e2e = [np.array(r["e2e_ms"]["samples"]) for r in data["results"]]
    paired = np.median(e2e[0] / e2e[1])  # onnxrt's tokens/s over frameworks', round by round
    assert f"tokens/s over frameworks's, paired round by round, median [quartiles]: onnxrt {paired:.2f}x" in " ".join(
        data["notes"])


def _reference_accuracy(texts, k):
    """The README's definitions, computed directly on the HF model (independent of NNDF)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = ROOT / "GPT2" / "offline" / "gpt2-offline"
    model, tok = AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)
    hits1, hits10, positions, token_nll, lm_lp, lm_ok = 0, 0, 0, [], [], []
    with torch.no_grad():
        for text in texts:
            ids = tok(text)["input_ids"]
            logp = torch.log_softmax(model(torch.tensor([ids])).logits[0], -1)
            for pos in range(len(ids) - k, len(ids)):
                order = torch.argsort(logp[pos - 1], descending=True)
                hits1 += int(order[0] == ids[pos])
                hits10 += int(ids[pos] in order[:10].tolist())
                positions += 1
            token_nll.append(-np.mean([logp[p - 1, ids[p]].item() for p in range(len(ids) - k, len(ids))]))
            context, word = text.rsplit(" ", 1)
            c, t = tok(context)["input_ids"], tok(" " + word)["input_ids"]
            lp = torch.log_softmax(model(torch.tensor([c + t])).logits[0], -1)
            rows = [lp[len(c) - 1 + i] for i in range(len(t))]
            lm_lp.append(sum(row[x].item() for row, x in zip(rows, t)))
            lm_ok.append(all(int(row.argmax()) == x for row, x in zip(rows, t)))
    return {"top1": hits1 / positions, "top10": hits10 / positions, "token_perplexity": float(np.exp(np.mean(token_nll))),
            "lm_eval_acc": float(np.mean(lm_ok)), "lm_eval_perplexity": float(np.exp(-np.mean(lm_lp)))}


def test_accuracy_matches_independent_computation(wd, tmp_path):
    path = tmp_path / "acc.json"
    _ok(run_cli("accuracy", "GPT2", "frameworks", "onnxrt", "--dataset", DATA, "--num-samples", "6",
                "--tokens-to-generate", "3", "--topN", "5", "-wd", wd, "--json", str(path)))
    data = json.loads(path.read_text())
    texts = [json.loads(line)["text"] for line in open(DATA)][:6]
    ref = _reference_accuracy(texts, 3)
    for r in data["results"]:
        for key in ("top1", "top5", "top10", "token_perplexity", "seq_perplexity", "lm_eval_acc", "lm_eval_perplexity"):
            assert key in r
        for key, value in ref.items():
            assert r[key] == pytest.approx(value, rel=1e-4, abs=1e-6), (r["backend"], key)
    assert ref["top10"] > ref["top1"] > 0.05  # a trained model: clearly better than chance (vocab ~4k)


def test_chat_prompts_match_hf_generate(wd, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = tmp_path / "chat.json"
    prompts = ["The for statement", "A class definition"]
    _ok(run_cli("chat", "GPT2", "--compare", "frameworks", "onnxrt", "--use-cache", "--max-new-tokens", "12",
                "--prompt", prompts[0], "--prompt", prompts[1], "-wd", wd, "--json", str(path)))
    data = json.loads(path.read_text())["results"]
    assert [(r["backend"], r["prompt"]) for r in data] == [(b, p) for p in prompts for b in ("frameworks", "onnxrt")]
    folder = ROOT / "GPT2" / "offline" / "gpt2-offline"
    model, tok = AutoModelForCausalLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)
    for r in data:
        ids = tok(r["prompt"], return_tensors="pt")
        ref = model.generate(**ids, max_new_tokens=12, do_sample=False, pad_token_id=tok.eos_token_id)
        new = ref[0, ids["input_ids"].shape[1]:].tolist()
        if tok.eos_token_id in new:
            new = new[: new.index(tok.eos_token_id) + 1]
        assert r["output_ids"] == new and r["text"] == tok.decode(new, skip_special_tokens=True)
        assert r["seconds"] > 0


def test_chat_interactive_reads_stdin_until_exit(wd):
    proc = _ok(run_cli("chat", "GPT2", "frameworks", "--max-new-tokens", "4", "-wd", wd,
                       stdin="The for statement\n\nexit\nnever read\n"))
    lines = [ln for ln in proc.stdout.splitlines() if re.match(r"frameworks \(\d+\.\d{4} s\): ", ln)]
    assert len(lines) == 1  # one answer (the text itself may contain newlines)


@pytest.mark.parametrize("family,variant", [("GPT2", None), ("OPT", None), ("BLOOM", None), ("T5", None),
                                            ("T5", "flan-t5-offline"), ("BART", None), ("BART", "mbart-offline")])
def test_run_checkpoint_passes_on_both_backends(family, variant, wd, tmp_path):
    """In process (`cli.main`): the program's own exit code and messages for compare are checked through run.py in
    test_onnx_export.py and test_terminal_output.py."""
    path = tmp_path / "run.json"
    argv = ["compare", family, "--compare", "frameworks", "onnxrt", "--use-cache", "--iterations", "2", "--warmup", "1",
            "-wd", wd, "--json", str(path), *(["--variant", variant] if variant else [])]
    assert cli.main(argv) == 0
    results = json.loads(path.read_text())["results"]
    assert [r["backend"] for r in results] == ["frameworks", "onnxrt"]
    for r in results:
        assert r["accuracy"] == 1.0 and r["full_s"] > 0 and r["perplexity"] > 0
        if family in ("T5", "BART"):  # encoder-decoder: the encoder's share of the prefill is reported
            assert 0 < r["encoder_s"] < r["prefill_s"]


def test_seq2seq_chat_and_benchmark(wd, tmp_path, capsys):
    """T5 chat output ids equal HF generate's (the prompt goes to the encoder); benchmark reports the encoder's
    share of each prefill sample. In process: chat and benchmark go through run.py above, on GPT2."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    path = tmp_path / "chat.json"
    prompt = "translate English to German: The house is wonderful."
    _ok(cli_in_process(capsys, "chat", "T5", "--compare", "frameworks", "onnxrt", "--use-cache", "--num-beams", "2",
                       "--max-new-tokens", "10", "--prompt", prompt, "-wd", wd, "--json", str(path)))
    folder = Path(wd) / "T5" / "t5-offline" / "hf-model"
    model, tok = AutoModelForSeq2SeqLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)
    ref = model.generate(**tok(prompt, return_tensors="pt"), max_new_tokens=10, num_beams=2, do_sample=False)
    new = ref[0, 1:].tolist()  # after the decoder start token
    new = new[: new.index(tok.eos_token_id) + 1] if tok.eos_token_id in new else new
    for r in json.loads(path.read_text())["results"]:
        assert r["output_ids"] == new and r["prompt"] == prompt
    bench = tmp_path / "bench.json"
    _ok(cli_in_process(capsys, "benchmark", "BART", "frameworks", "onnxrt", "--use-cache", "--input-seq-len", "12",
                       "--output-seq-len", "5", "--iterations", "3", "--warmup", "1", "--hf-baseline", "-wd", wd,
                       "--json", str(bench)))
    results = json.loads(bench.read_text())["results"]
    assert results[0]["backend"] == "hf-generate" and results[0]["encoder_ms"] is None
    for r in results[1:]:
        assert all(0 < e < p for e, p in zip(r["encoder_ms"]["samples"], r["prefill_ms"]["samples"]))


def test_run_prints_samples_without_cache(wd, capsys):
    """In process: run through run.py is test_stale_and_corrupt_exports_are_rebuilt's."""
    out = _ok(cli_in_process(capsys, "run", "OPT", "onnxrt", "--no-use-cache", "--iterations", "1", "--warmup", "0",
                             "-wd", wd)).stdout
    assert "| onnxrt" in out and "1 " in out


def _session_export(family: str, workdir) -> Path:
    """The family's decoder export (KV cache) in the session working dir, made there once for the whole suite.
    A copy is current in another working dir only for a committed model folder (GPT2's): a materialized offline
    model's path and file times are in the fingerprint."""
    from CausalLM.onnxrt import DecoderOnnx
    from NNDF import registry
    from NNDF.context import make_context
    from NNDF.options import ModelOptions

    run = make_context(registry.family(family), ModelOptions(working_dir=str(workdir), device="cpu", use_cache=True))
    return DecoderOnnx(registry.backend(run.family, "onnxrt").onnx.spec, run.family.task).path(run)[0]


def test_cleanup_removes_artifacts(tmp_path, workdir, capsys):
    wd = tmp_path / "w"
    export = _session_export("GPT2", workdir).parent  # current in any working dir (the committed model folder)
    shutil.copytree(export, wd / "GPT2" / "gpt2-offline" / export.name)
    _ok(cli_in_process(capsys, "run", "GPT2", "onnxrt", "--use-cache", "--iterations", "1", "--warmup", "0", "-wd",
                       str(wd), "--cleanup"))
    assert not (wd / "GPT2" / "gpt2-offline").exists()


def test_stale_and_corrupt_exports_are_rebuilt(tmp_path, workdir):
    wd = tmp_path / "w"
    export = _session_export("GPT2", workdir).parent  # current in any working dir (the committed model folder)
    folder = wd / "GPT2" / "gpt2-offline" / export.name
    shutil.copytree(export, folder)
    args = ("run", "GPT2", "onnxrt", "--use-cache", "--iterations", "1", "--warmup", "0", "-wd", str(wd))
    onnx = folder / "model.onnx"
    onnx.write_bytes(onnx.read_bytes()[:1000])  # truncated, fingerprint still "current"
    proc = _ok(run_cli(*args))
    assert "re-exporting" in proc.stderr and onnx.stat().st_size > 1000
    record = json.loads((folder / "fingerprint.json").read_text())
    record["versions"]["torch"] = "0.0"  # as if exported by another torch
    (folder / "fingerprint.json").write_text(json.dumps(record))
    before = onnx.stat().st_mtime_ns
    assert cli.main(list(args)) == 0  # in process: the rebuild through run.py is checked above
    assert onnx.stat().st_mtime_ns != before
    assert json.loads((folder / "fingerprint.json").read_text())["versions"]["torch"] != "0.0"


def test_list_json(tmp_path, capsys):
    """In process: list through run.py is test_list_shows_families_and_backend_status's."""
    path = tmp_path / "list.json"
    _ok(cli_in_process(capsys, "list", "BLOOM", "--json", str(path)))
    data = json.loads(path.read_text())
    assert {r["variant"] for r in data["results"]} >= {"bloom-offline", "bigscience/bloomz-7b1"}
    assert [b["backend"] for b in data["extra"]] == ["frameworks", "onnxrt", "trt", "triton"]


def test_benchmark_plot(wd, tmp_path, capsys):
    """In process: benchmark through run.py is test_benchmark_json_and_arithmetic's."""
    png, path = tmp_path / "plot.png", tmp_path / "b.json"
    _ok(cli_in_process(capsys, "benchmark", "OPT", "frameworks", "onnxrt", "--use-cache", "--input-seq-len", "4",
                       "--output-seq-len", "9", "--iterations", "1", "--warmup", "0", "--plot", str(png), "-wd", wd,
                       "--json", str(path)))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for r in json.loads(path.read_text())["results"]:
        assert len(r["per_token_ms"]) == 8 and min(r["per_token_ms"]) > 0


def test_build_prepares_the_graphs_and_reports_seconds_and_sizes(tmp_path):
    wd, path = tmp_path / "w", tmp_path / "build.json"
    args = ("build", "GPT2", "onnxrt", "--use-cache", "--quantize", "none", "int8", "-wd", str(wd))
    out = _ok(run_cli(*args, "--json", str(path))).stdout
    assert "| onnxrt-int8 |" in out
    assert "build: GPT2 gpt2-offline (device=cpu, precision=fp32, batch_size=1, use_cache=True, static_cache=False, " \
           "num_beams=1)" in out
    rows = json.loads(path.read_text())["results"]
    assert [r["backend"] for r in rows] == ["onnxrt", "onnxrt-int8"]
    assert all(r["built_now"] == "yes" and r["build_seconds"] > 0 and r["size_mb"] > 0 for r in rows)
    assert [r["built now"] for r in _rows(out)] == ["yes", "yes"]
    graph = wd / "GPT2" / "gpt2-offline" / "decoder-fp32-kv" / "model.onnx"
    before = graph.stat().st_mtime_ns
    out = _ok(run_cli(*args, "--json", str(path))).stdout  # current artifacts are found, not rebuilt
    assert graph.stat().st_mtime_ns == before
    again = json.loads(path.read_text())["results"]
    assert [(r["built_now"], r["build_seconds"], r["size_mb"]) for r in again] == [
        ("reused", None, r["size_mb"]) for r in rows]  # the seconds to find them current are no build time
    assert [(r["built now"], r["build s"]) for r in _rows(out)] == [("reused", ""), ("reused", "")]


def test_json_dash_writes_the_json_to_stdout_and_the_report_to_stderr(wd, tmp_path, capsys):
    """`--json -` (the convention for stdout): stdout is only the JSON, for a pipe into jq; the tables, notes and
    chat's answers go to stderr; no file named "-" is written."""
    proc = cli_in_process(capsys, "chat", "GPT2", "frameworks", "--prompt", "The for statement", "--max-new-tokens",
                          "3", "--json", "-", "-wd", wd)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["action"] == "chat" and len(report["results"]) == 1
    assert "frameworks (" in proc.stderr and "chat: GPT2 gpt2-offline" in proc.stderr
    listed = run_cli("list", "--json", "-", cwd=tmp_path)
    assert listed.returncode == 0 and json.loads(listed.stdout)["action"] == "list"
    assert "| GPT2 " in listed.stderr and "| GPT2 " not in listed.stdout  # the table
    assert not (tmp_path / "-").exists()


def _rows(stdout: str) -> list[dict[str, str]]:
    """The printed table's rows as {column: cell}."""
    lines = [ln for ln in stdout.splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(header, (c.strip() for c in ln.strip("|").split("|")))) for ln in lines[2:]]


def test_benchmark_of_one_new_token_has_no_decode_figures(wd, tmp_path, capsys):
    """One new token: no decode step, so TPOT and the bandwidth are n/a (null in the JSON), never a made-up number."""
    path = tmp_path / "bench.json"
    out = _ok(cli_in_process(capsys, "benchmark", "GPT2", "onnxrt", "--use-cache", "--input-seq-len", "4",
                             "--output-seq-len", "1", "--iterations", "2", "--warmup", "1", "-wd", wd,
                             "--json", str(path))).stdout
    (row,) = _rows(out)
    assert row["TPOT p50 ms"] == row["TPOT p99 ms"] == row["weights GB/s"] == "n/a"
    (r,) = json.loads(path.read_text())["results"]
    assert r["tpot_ms"] is None and r["per_token_ms"] == [] and r["weight_bytes"] > 0
    assert r["tokens_per_s"] == pytest.approx(1 / (r["e2e_ms"]["p50"] / 1e3))


def test_encoder_decoder_benchmark_columns_in_one_order(wd, tmp_path, capsys):
    """BART with HF generate first (no encoder figure) and BLIP: the encoder column right after the backend, the
    TPOT percentiles ascending with --percentile's among them; one new token leaves TPOT n/a here too."""
    headers = []
    for family in ("BART", "BLIP"):
        path = tmp_path / f"{family}.json"
        out = _ok(cli_in_process(capsys, "benchmark", family, "frameworks", "--use-cache", "--input-seq-len", "4",
                                 "--output-seq-len", "1", "--iterations", "1", "--warmup", "0", "--hf-baseline",
                                 "--percentile", "95", "-wd", wd, "--json", str(path))).stdout
        rows = _rows(out)
        headers.append(list(rows[0]))
        assert rows[0]["backend"] == "hf-generate" and rows[0]["encoder p50 ms"] == ""
        assert float(rows[1]["encoder p50 ms"]) > 0 and rows[1]["TPOT p95 ms"] == "n/a"
        assert all(r["tpot_ms"] is None for r in json.loads(path.read_text())["results"])
    assert headers[0] == headers[1]
    assert headers[0][:7] == ["backend", "encoder p50 ms", "prefill p50 ms", "TPOT p50 ms", "TPOT p90 ms",
                              "TPOT p95 ms", "TPOT p99 ms"]


def test_run_of_one_new_token_has_no_decoder_seconds(wd, tmp_path, capsys, monkeypatch):
    """A generation of one token has no decoder step after the first: its seconds are n/a (null in the JSON)."""
    from NNDF.evaluate import checkpoint

    samples = checkpoint.load_checkpoint
    monkeypatch.setattr(checkpoint, "load_checkpoint", lambda run: (1, samples(run)[1][:1]))
    path = tmp_path / "run.json"
    out = _ok(cli_in_process(capsys, "compare", "T5", "--compare", "frameworks", "--use-cache", "--iterations", "1",
                             "--warmup", "0", "-wd", wd, "--json", str(path))).stdout
    (row,) = _rows(out)
    assert row["decoder (sec)"] == "n/a" and float(row["full (sec)"]) > 0
    (r,) = json.loads(path.read_text())["results"]
    assert r["decoder_s"] is None and r["samples"][0]["decoder_s"] is None and len(r["samples"][0]["tokens"]) == 1


@pytest.mark.parametrize("family,encoder", [("BART", "model.encoder."), ("BLIP", "vision_model.")])
def test_encoder_decoder_weight_bytes_agree_across_rows(family, encoder, wd, tmp_path, capsys):
    """The bytes a decoder step reads: the decoder's parameters with the embedding it shares with the encoder (the
    tied head), less the cross-attention keys and values a KV cache computes once per input; onnxrt's are the
    tensors of its decoder graph (the same weights: its cache generator graph holds the cross-attention ones)."""
    import onnx
    import transformers
    from onnx import numpy_helper

    from NNDF import registry
    from NNDF.backends.onnxrt.artifact import tensor_bytes

    path = tmp_path / "bench.json"
    _ok(cli_in_process(capsys, "benchmark", family, "frameworks", "onnxrt", "--use-cache", "--hf-baseline",
                       "--input-seq-len", "8", "--output-seq-len", "4", "--iterations", "1", "--warmup", "0", "-wd", wd,
                       "--json", str(path)))
    rows = {r["backend"]: r["weight_bytes"] for r in json.loads(path.read_text())["results"]}
    facts = registry.family(family)
    store = Path(wd) / family / facts.default_variant
    model = getattr(transformers, facts.task.auto_class).from_pretrained(store / "hf-model")
    cross = facts.cross_kv
    storages = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        module = name.rsplit(".", 1)[0]
        if not name.startswith(encoder) and not module.endswith(cross):
            storages[p.data_ptr()] = p.numel() * p.element_size()
    assert rows["frameworks"] == rows["hf-generate"] == sum(storages.values())
    assert abs(rows["onnxrt"] / rows["frameworks"] - 1) < 0.01, rows  # the export folds a few equal vectors into one
    graph = next(store.glob("*-fp32-kv")) / "decoder.onnx"
    arrays = sum(numpy_helper.to_array(t).nbytes for t in onnx.load(str(graph)).graph.initializer)
    assert rows["onnxrt"] == arrays < graph.stat().st_size  # the file adds the graph's text
    external = tmp_path / "external.onnx"
    onnx.save(onnx.load(str(graph)), str(external), save_as_external_data=True, size_threshold=0)
    assert tensor_bytes({"decoder": external}) == arrays


def test_accuracy_says_when_the_dataset_has_fewer_samples(wd, tmp_path, capsys):
    """--num-samples past the file's passages: all of them are scored and a note says how many there were."""
    data, path = tmp_path / "three.jsonl", tmp_path / "acc.json"
    data.write_text("".join(json.dumps({"text": line}) + "\n" for line in Path(DATA).read_text().splitlines()[:3]))
    for asked, note in (("50", f"--num-samples 50: {data} has only 3 samples; all 3 are used"), ("3", None)):
        out = _ok(cli_in_process(capsys, "accuracy", "T5", "frameworks", "--dataset", str(data), "--num-samples",
                                 asked, "-wd", wd, "--json", str(path))).stdout
        report = json.loads(path.read_text())
        assert report["settings"]["num_samples"] == 3 and report["results"][0]["num_samples"] == 3
        assert (f"note: {note}" in out and note in report["notes"]) if note else "--num-samples" not in out
