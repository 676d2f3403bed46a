"""The command line's errors: every bad input is one line on stderr and exit code 2 (never a traceback), checked
before long work where it can be; flags are never abbreviated and a flag an action does not read is refused;
an interactive chat survives any line. Cheap cases run in-process through `cli.main`; what needs a real
process (stdin bytes, exit codes of the whole program) runs through `run.py`."""
from __future__ import annotations

import argparse
import contextlib
import errno
import io
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import ROOT, run_cli
from NNDF import cli, registry
from NNDF.actions import ACTIONS
from dataclasses import fields

LONG = "hello world " * 300  # ~600 tokens: past every offline model's 256 positions


def _main(capsys, *argv: str) -> str:
    """cli.main in-process: exit 2 and exactly one `error:` line on stderr; returns that line."""
    code = cli.main(list(argv))
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def _bad(*args, expect: str, stdin=None) -> str:
    proc = run_cli(*args, stdin=stdin)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and expect in lines[0], proc.stderr
    return lines[0]


def _run_bytes(*args: str, stdin: bytes) -> subprocess.CompletedProcess:
    """run.py with raw bytes on stdin (conftest's run_cli is text only)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    proc = subprocess.run([sys.executable, str(ROOT / "run.py"), *args], cwd=ROOT, env=env, input=stdin,
                          capture_output=True, timeout=600)
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(errors="replace"),
                                       proc.stderr.decode(errors="replace"))


# --- flags: exact spellings, and only the ones an action reads ---

def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_no_abbreviations_anywhere(capsys):
    parser = cli.build_parser()
    assert parser.allow_abbrev is False
    assert all(p.allow_abbrev is False for p in _subparsers(parser).values())
    for argv in (["run", "GPT2", "frameworks", "--iter", "2"], ["run", "GPT2", "frameworks", "--use-cach"],
                 ["benchmark", "GPT2", "frameworks", "--input-seq", "8"]):
        with pytest.raises(SystemExit) as exit_info:
            parser.parse_args(argv)
        assert exit_info.value.code == 2
        assert "unrecognized arguments" in capsys.readouterr().err


@pytest.mark.parametrize("argv,expect", [
    (["chat", "GPT2", "frameworks", "--batch-size", "2", "--prompt", "x"],
     "--batch-size does not apply to chat (it applies to benchmark, run, compare, generate, predict, build)"),
    (["accuracy", "GPT2", "frameworks", "-b", "2"], "--batch-size does not apply to accuracy"),
    (["accuracy", "GPT2", "frameworks", "--num-beams", "1"], "--num-beams does not apply to accuracy"),
    (["accuracy", "GPT2", "frameworks", "--use-mask"], "--use-mask does not apply to accuracy"),
    (["benchmark", "GPT2", "frameworks", "--min-new-tokens", "3"], "--min-new-tokens does not apply to benchmark"),
    (["benchmark", "BLIP", "frameworks", "--image", "x.png"], "--image does not apply to benchmark"),
    (["run", "GPT2", "frameworks", "--percentile", "90"], "--percentile does not apply to run (it applies to benchmark)"),
    (["compare", "GPT2", "--compare", "frameworks", "--dynamic-batch"], "--dynamic-batch is a flag of the trt backend"),
    # flags of other actions only (their parser never takes them): named with the actions that do
    (["predict", "BERT", "onnxrt", "--iterations", "2", "--prompt", "x"],
     "error: run.py predict: --iterations does not apply to predict (it applies to benchmark, run, compare)"),
    (["chat", "T5", "onnxrt", "--hf-baseline"], "--hf-baseline does not apply to chat (it applies to benchmark)"),
    (["list", "--variant", "x"], "--variant does not apply to list (it applies to accuracy, benchmark, chat,"),
    (["predict", "BERT", "--variant", "x", "triton"], "triton: backends go right after MODEL, before the flags"),
    (["run", "GPT2", "frameworks", "--iter", "2"], "unrecognized argument --iter: did you mean --iterations"),
    (["list", "GPT2", "onnxrt"], "error: run.py list: unexpected argument 'onnxrt'"),
])
def test_flags_an_action_does_not_read_are_refused(capsys, argv, expect):
    assert expect in _main(capsys, *argv)


def test_flags_an_action_does_not_read_are_parsed_but_hidden_from_help():
    parser = cli.build_parser()
    for action in ACTIONS.values():
        assert set(action.read_groups()) <= set(action.owner_groups()), action.name
        if action.runs_models:
            text = _subparsers(parser)[action.name].format_help()
            for group in action.owner_groups():
                for f in fields(group):
                    shown = re.search(rf"^  {re.escape(group.flag_name(f.name))}[ ,\n]", text, re.M) is not None
                    assert shown == (group in action.read_groups()), (action.name, f.name)


@pytest.mark.parametrize("argv,expect", [
    (["run", "GPT2", "frameworks", "--image", "x.png"],
     "--image does not apply to GPT2 (decoder models): it belongs to image-to-text models (BLIP)"),
    (["run", "GPT2", "trt", "--seq-len", "1", "8", "16"], "--seq-len does not apply to GPT2 (decoder models): it "
                                                          "belongs to encoder models on the trt backend (BERT)"),
    (["run", "BERT", "frameworks", "--decoder-onnx", "x.onnx"], "--decoder-onnx is a flag of the onnxrt and trt "
     "backends, which this run does not use (frameworks): name onnxrt or trt, or drop the flag"),
    (["deploy", "GPT2", "onnxrt", "--ignore-generation-config"], "--ignore-generation-config does not apply to deploy"),
    (["benchmark", "BERT", "onnxrt", "--no-fused-decode"], "error: --no-fused-decode does not apply to BERT"),
    (["benchmark", "BERT", "onnxrt", "--fused-decode"], "error: --fused-decode does not apply to BERT"),
    (["run", "GPT2", "frameworks", "--no-quant-symmetric"], "--no-quant-symmetric is a flag of the onnxrt backend"),
    (["predict", "BERT", "onnxrt", "--torch-compile", "--prompt", "x"], "--torch-compile is a flag of the "
     "frameworks backend, which this run does not use (onnxrt): name frameworks or drop the flag"),
    (["benchmark", "GPT2", "onnxrt", "--static-cache", "--torch-compile"], "--torch-compile is a flag of the "
     "frameworks backend"),
    (["accuracy", "GPT2", "frameworks", "--torch-compile"], "--torch-compile does not apply to accuracy"),
    (["predict", "BERT", "onnxrt", "--ort-products", "linear", "--prompt", "x"], "--ort-products does not apply to "
     "BERT (encoder models): it belongs to generative models on the onnxrt backend"),
    (["deploy", "BERT", "onnxrt", "--streaming", "--repository", "x"], "--streaming does not apply to BERT "
     "(encoder models): it belongs to generative models"),
    (["run", "BERT", "onnxrt", "--batch-size", "1", "4", "8"], "--batch-size with three values (min opt max) is a "
     "flag of the trt backend"),
    (["run", "T5", "trt", "--batch-size", "1", "2", "3"], "--batch-size with three values (min opt max) does not "
     "apply to T5"),
])
def test_refusals_name_the_owner(capsys, argv, expect):
    assert expect in _main(capsys, *argv)


@pytest.mark.parametrize("flags,expect", [
    (("--top-k", "3"), "--top-k 3 applies when sampling, and this run decodes greedily: add --do-sample or drop"),
    (("--temperature", "0.7", "--num-beams", "2"), "--temperature 0.7 applies when sampling, and this run decodes "
     "by beam search"),
    (("--top-p", "0.5"), "--top-p 0.5 applies when sampling"),
    (("--length-penalty", "2"), "--length-penalty 2 applies to beam search, and this run decodes with one beam"),
    (("--early-stopping", "never"), "--early-stopping never applies to beam search"),
    (("--num-beams", "5000"), "--num-beams 5000 is more than gpt2-offline's 4096-token vocabulary: give at most 4096"),
])
def test_decoding_flags_the_decoding_never_reads(capsys, workdir, flags, expect):
    """HF generate warns and ignores them; refused here, naming what reads them."""
    line = _main(capsys, "chat", "GPT2", "frameworks", "--prompt", "hi", "--max-new-tokens", "2", *flags, "-wd",
                 str(workdir))
    assert expect in line, line


@pytest.mark.parametrize("flags", [("--temperature", "0"), ("--top-p", "1"), ("--length-penalty", "1"),
                                   ("--early-stopping", "false"), ("--do-sample", "--top-k", "3", "--seed", "1"),
                                   ("--num-beams", "2", "--length-penalty", "2")])
def test_decoding_flags_that_change_nothing_or_are_read_run(capsys, workdir, flags):
    code = cli.main(["chat", "GPT2", "frameworks", "--prompt", "hi", "--max-new-tokens", "2", *flags, "-wd",
                     str(workdir)])
    assert code == 0, capsys.readouterr().err


def test_help_of_a_model_shows_only_what_its_kind_reads(capsys):
    def help_of(*argv: str) -> str:
        with pytest.raises(SystemExit):
            cli.main([*argv, "--help"])
        return capsys.readouterr().out

    def flags_of(*argv: str) -> set[str]:
        return set(re.findall(r"^  (--[\w-]+)", help_of(*argv), re.M))

    gpt2, bert, blip, plain = flags_of("run", "GPT2"), flags_of("run", "BERT"), flags_of("run", "BLIP"), flags_of("run")
    assert "--use-cache" in gpt2 and not {"--image", "--task", "--seq-len", "--ort-optimize"} & gpt2
    assert {"--image", "--encoder-onnx", "--use-cache"} <= blip
    assert {"--task", "--seq-len", "--ort-optimize", "--encoder-onnx"} <= bert
    assert not {"--use-cache", "--decoder-onnx", "--num-beams", "--image"} & bert
    assert {"--use-cache", "--image", "--task", "--seq-len", "--quantize", "--triton-url"} <= plain
    # backends named: only the groups they read (and every group no backend owns)
    onnxrt, both = flags_of("predict", "BERT", "onnxrt"), flags_of("predict", "BERT", "frameworks", "trt")
    assert {"--quantize", "--ort-optimize", "--use-cuda-graph"} <= onnxrt
    assert not {"--seq-len", "--triton-url", "--torch-compile", "--ort-products"} & onnxrt
    assert {"--torch-compile", "--seq-len"} <= both and not {"--quantize", "--triton-url"} & both


def test_non_finite_numbers_are_refused(capsys):
    for argv in (["benchmark", "GPT2", "frameworks", "--duration", "inf"],
                 ["chat", "GPT2", "frameworks", "--temperature", "nan"]):
        with pytest.raises(SystemExit) as exit_info:
            cli.build_parser().parse_args(argv)
        assert exit_info.value.code == 2 and "finite number" in capsys.readouterr().err


def test_numbers_past_what_the_libraries_take(capsys, workdir):
    with pytest.raises(SystemExit) as exit_info:
        cli.build_parser().parse_args(["run", "GPT2", "frameworks", "--seed", str(10 ** 20)])
    assert exit_info.value.code == 2 and "out of range" in capsys.readouterr().err
    assert "--threads must be <= 1024" in _main(capsys, "run", "GPT2", "frameworks", "--threads", "5000")
    line = _main(capsys, "accuracy", "GPT2", "frameworks", "--topN", "100000", "--num-samples", "1", "--dataset",
                 str(ROOT / "data" / "lambada_offline.jsonl"), "-wd", str(workdir))
    assert "--topN 100000 exceeds" in line and "vocabulary" in line


# --- output paths and the working dir: refused before the run, nothing left behind ---

def test_json_folder_or_unwritable_is_refused_before_the_run(capsys, tmp_path):
    (tmp_path / "file").write_text("")
    for path, expect in ((tmp_path, "is a folder, not a file"),
                         (tmp_path / "file" / "out.json", "is a file, not a folder"),
                         (Path("/proc/nope/out.json"), "cannot create files in /proc")):
        line = _main(capsys, "run", "GPT2", "frameworks", "-wd", str(tmp_path / "w"), "--json", str(path))
        assert line.startswith(f"error: --json {path}: ") and expect in line, line
        line = _main(capsys, "list", "--json", str(path))
        assert expect in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # no working dir, no .tmp files


def test_working_dir_file_or_unwritable_is_refused(capsys, tmp_path):
    (tmp_path / "file").write_text("")
    for wd, expect in ((tmp_path / "file", "is a file, not a folder"),
                       (tmp_path / "file" / "sub", "is a file, not a folder"),
                       (Path("/proc/nope"), "cannot write /proc/nope/OPT/opt-offline")):  # only when a build must
        line = _main(capsys, "run", "OPT", "frameworks", "-wd", str(wd))
        assert line.startswith(f"error: --working-dir {wd}: ") and expect in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_plot_folder_is_refused_before_the_run(capsys, tmp_path):
    line = _main(capsys, "benchmark", "GPT2", "frameworks", "-wd", str(tmp_path / "w"), "--plot", str(tmp_path))
    assert f"--plot {tmp_path}: is a folder" in line and not (tmp_path / "w").exists()


# --- datasets ---

@pytest.mark.parametrize("line,expect", [('{"text": 5}', 'has "text": 5'), ('{"text": null}', 'has "text": null'),
                                         ("[1, 2]", 'no "text" field'), ('"just a string"', 'no "text" field'),
                                         ("{not json", "is not JSON")])
def test_dataset_lines_that_are_not_text(capsys, tmp_path, line, expect):
    data = tmp_path / "d.jsonl"
    data.write_text('{"text": "a fine first passage"}\n\n' + line + "\n")
    line = _main(capsys, "accuracy", "GPT2", "frameworks", "--dataset", str(data), "-wd", str(tmp_path / "w"))
    assert f"--dataset {data}: line 3 " in line and expect in line, line


def test_dataset_from_a_pipe_is_read_as_a_file_is(tmp_path):
    """`--dataset <(...)` (a pipe, as /dev/stdin): read, not refused as "no such file"; /dev/null has no lines."""
    import os
    import threading

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    writer = threading.Thread(target=lambda: pipe.write_text('{"text": "a dog"}\n{"text": "a cat"}\n'), daemon=True)
    writer.start()
    proc = run_cli("predict", "BERT", "frameworks", "--dataset", str(pipe), "-wd", str(tmp_path / "w"))
    writer.join(timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "| frameworks |   2 |" in proc.stdout
    _bad("predict", "BERT", "frameworks", "--dataset", "/dev/null", "-wd", str(tmp_path / "w"),
         expect="--dataset /dev/null: no lines")


def test_dataset_number_text_through_the_program(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"text": 12}\n')
    _bad("accuracy", "GPT2", "frameworks", "--dataset", str(data), "-wd", str(tmp_path / "w"), expect='line 1 has "text": 12')


def test_passage_longer_than_the_model_is_refused_before_scoring(capsys, workdir, tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"text": LONG}) + "\n")
    line = _main(capsys, "accuracy", "GPT2", "frameworks", "--dataset", str(data), "-wd", str(workdir))
    assert "passage 1 is" in line and "256 positions" in line


# --- chat lengths: refused, never truncated, checked before any backend is set up ---

@pytest.mark.parametrize("family", ["GPT2", "OPT", "BART"])
def test_chat_prompt_longer_than_the_positions(workdir, family, capsys):
    """GPT2's through run.py (the whole program: exit code, one line); the other families' in process."""
    argv = ("chat", family, "frameworks", "--prompt", "fine", "--prompt", LONG, "-wd", str(workdir))
    line = _bad(*argv, expect="prompt 2 of 2: the prompt is") if family == "GPT2" else _main(capsys, *argv)
    assert "prompt 2 of 2: the prompt is" in line and "256 positions take a prompt of at most" in line


@pytest.mark.parametrize("new", ["5000", "999999999"])  # the second's KV cache would not fit memory either
def test_chat_max_new_tokens_past_the_positions(capsys, workdir, new):
    line = _main(capsys, "chat", "GPT2", "frameworks", "--max-new-tokens", new, "--prompt", "hi", "-wd",
                 str(workdir))
    assert f"{new} new tokens" in line and "do not fit gpt2-offline's 256 positions" in line, line
    assert "give a smaller --max-new-tokens" in line


def test_interactive_chat_survives_bad_lines(workdir):
    stdin = b"The for statement\nnot \xff\xfe utf-8\n" + LONG.encode() + b"\nA class\n  QUIT \nnever read\n"
    proc = _run_bytes("chat", "GPT2", "frameworks", "--max-new-tokens", "3", "-wd", str(workdir), stdin=stdin)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.count("frameworks (") == 2  # both good lines answered, `quit` ended it before the last
    assert "error: line 2 is not UTF-8 text" in proc.stderr
    assert "error: line 3: the prompt is" in proc.stderr
    assert " s):  definition," in proc.stdout and "never read" not in proc.stdout  # "A class" answered


def test_interactive_image_chat_survives_a_bad_path(workdir):
    image = ROOT / "BLIP" / "offline" / "images" / "red-square.png"
    proc = run_cli("chat", "BLIP", "frameworks", "--max-new-tokens", "3", "-wd", str(workdir),
                   stdin=f"missing.png\n{ROOT / 'BLIP'}\n{image}\nexit\n")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "error: line 1: image missing.png: no such file" in proc.stderr
    assert "error: line 2: image" in proc.stderr and "a folder" in proc.stderr
    assert proc.stdout.count("frameworks (") == 1


def test_missing_image_flag_is_refused_before_setup(capsys, tmp_path):
    for action in ("chat", "run"):
        line = _main(capsys, action, "BLIP", "frameworks", "--image", "missing.png", "-wd", str(tmp_path / "w"))
        assert "--image missing.png: no such file" in line


# --- backends, benchmark lengths, golden outputs under other decoding ---

def test_trt_says_what_is_missing(tmp_path, capsys):
    """In process: the whole program's trt refusal is test_errors.py's test_trt_needs_cuda (through run.py)."""
    from NNDF.backends.trt.backend import TensorRTBackend

    if TensorRTBackend.availability()[0]:
        pytest.skip("TensorRT and a GPU are here")
    for device in ("cpu", "cuda"):
        line = _main(capsys, "run", "GPT2", "trt", "--device", device, "-wd", str(tmp_path))
        assert "the trt backend" in line, line
        assert "use --device" not in line
        assert "TensorRT" in line or "sees no CUDA GPU" in line


def test_benchmark_given_lengths_have_no_defaults_note(capsys, workdir):
    assert cli.main(["benchmark", "GPT2", "frameworks", "--input-seq-len", "4", "--output-seq-len", "3",
                     "--iterations", "1", "--warmup", "0", "-wd", str(workdir)]) == 0
    assert "the defaults" not in capsys.readouterr().out
    line = _main(capsys, "benchmark", "GPT2", "frameworks", "--input-seq-len", "200", "--output-seq-len", "100",
                 "-wd", str(workdir))
    assert "exceeds" in line and "the defaults" not in line


def test_benchmark_plot_of_one_new_token_is_refused(capsys, workdir, tmp_path):
    line = _main(capsys, "benchmark", "GPT2", "frameworks", "--input-seq-len", "4", "--output-seq-len", "1",
                 "--plot", str(tmp_path / "p.png"), "-wd", str(workdir))
    assert "--plot: one new token has no decode step" in line and not (tmp_path / "p.png").exists()


def test_benchmark_prompt_past_memory_without_a_position_table(capsys, workdir):
    """T5 has relative positions: no table bounds the prompt, the memory of its attention does (5 tensors of 4 heads
    x 1e12 x 4 bytes here, past any machine's): refused in one line before the run."""
    line = _main(capsys, "benchmark", "T5", "onnxrt", "--input-seq-len", "1000000", "--output-seq-len", "2",
                 "--iterations", "1", "--warmup", "0", "-wd", str(workdir))
    assert "a prompt of 1000000 tokens: one attention layer over it holds about 80000 GB (5 tensors of 1 row(s) x 4 " \
           "heads x 1000000 x 1000000" in line and "shorten --input-seq-len" in line


def test_onnx_runtime_allocation_failure_is_one_line(capsys, workdir, monkeypatch):
    """ONNX Runtime's own allocation failure (a graph that asks for 400 GB) ends the run with one line naming the
    node and the bytes, exit 2, never a traceback."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from NNDF.evaluate import benchmark

    graph = helper.make_graph([helper.make_node("ConstantOfShape", ["shape"], ["y"])], "big",
                              [helper.make_tensor_value_info("shape", TensorProto.INT64, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 17)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    shape = np.array([100_000_000_000], dtype=np.int64)  # float32: 400 GB
    monkeypatch.setattr(benchmark, "generate_prompt", lambda *args: session.run(None, {"shape": shape}))
    line = _main(capsys, "benchmark", "GPT2", "onnxrt", "--input-seq-len", "4", "--output-seq-len", "2",
                 "--iterations", "1", "--warmup", "0", "-wd", str(workdir))
    assert line.startswith("error: out of memory (ONNX Runtime could not allocate 400.0 GB for a ConstantOfShape)")


def test_run_with_beams_reports_accuracy_na_and_why(workdir, tmp_path):
    path = tmp_path / "run.json"
    assert cli.main(["run", "GPT2", "frameworks", "--use-cache", "--num-beams", "2", "--iterations", "1", "--warmup",
                     "0", "-wd", str(workdir), "--json", str(path)]) == 0
    data = json.loads(path.read_text())
    assert all(r["accuracy"] is None and r["perplexity"] > 0 for r in data["results"])
    assert any("num_beams 2 instead of 1" in n and "accuracy is n/a" in n for n in data["notes"])


# --- property: random argv never gives anything but exit 0 or 2 ---

def _random_token(rng: random.Random, flags: list[str]) -> str:
    kind = rng.randrange(9)
    if kind < 3:
        return rng.choice(flags)
    if kind == 3:
        return str(rng.choice([0, 1, -1, 2, 3, 10 ** 30, -(10 ** 30)]))
    if kind == 4:
        return rng.choice(["nan", "inf", "-inf", "1e400", "0.5", "-0.0", "1,5", "", " ", "-", "--", "-x", "--=",
                           "cpu", "cuda", "true", "never", "GPT2", "BLIP", "frameworks", "onnxrt", "trt", "%s", "%(prog)s"])
    if kind == 5:  # bytes that need not be UTF-8, as the OS hands them to Python
        return os.fsdecode(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 12))))
    if kind == 6:
        return "".join(chr(rng.randrange(0x20, 0x2FFF)) for _ in range(rng.randrange(1, 8)))
    if kind == 7:
        return rng.choice(flags) + "=" + rng.choice(["1", "x", "", "nan"])
    return "--" + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz-") for _ in range(rng.randrange(1, 10)))


def test_random_arguments_exit_0_or_2_and_never_raise():
    rng = random.Random(20240612)
    parser = cli.build_parser()
    subparsers = _subparsers(parser)
    flags = {name: [s for a in p._actions for s in a.option_strings] for name, p in subparsers.items()}
    outcomes = {0: 0, 2: 0, "parsed": 0}
    for _ in range(400):
        action = rng.choice(list(ACTIONS))
        argv = [action] + [_random_token(rng, flags[action]) for _ in range(rng.randrange(0, 7))]
        if rng.random() < 0.1:
            argv = [_random_token(rng, flags[action])] + argv
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                args = parser.parse_args(argv)
            except SystemExit as exc:
                assert exc.code in (0, 2), (argv, exc.code)
                assert exc.code == 0 or err.getvalue().startswith("error: "), (argv, err.getvalue())
                outcomes[exc.code] += 1
                continue
        outcomes["parsed"] += 1
        spec = ACTIONS[args.action]
        try:  # what dispatch does with the values before any model is touched: refusals and validation
            cli.flags.check(args, spec, registry.family("GPT2"), ("frameworks",))
            for group in spec.groups:
                group.from_namespace(args)
        except cli.HarnessError:
            pass
    assert outcomes[2] > 100 and outcomes["parsed"] > 20, outcomes


def test_random_full_runs_of_cheap_commands(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a random --json=NAME lands here
    rng = random.Random(7)
    runs = [["list"], ["list", "BLOOM", "--json", str(tmp_path / "new" / "l.json")], ["list", "--json", ""]]
    runs += [["list", _random_token(rng, ["--json"])] for _ in range(4)]
    runs += [[action, os.fsdecode(bytes(rng.randrange(128, 256) for _ in range(5))), "frameworks"]
             for action in ("run", "chat", "accuracy", "benchmark", "compare")]
    for argv in runs:
        try:
            code = cli.main(argv)
        except SystemExit as exc:  # argparse's own refusals
            code = exc.code
        err = capsys.readouterr().err
        assert code in (0, 2) and "Traceback" not in err, (argv, err)
        if code == 2:
            assert err.strip().splitlines()[-1].startswith("error: "), (argv, err)
    assert json.loads((tmp_path / "new" / "l.json").read_text())["family"] == "BLOOM"


# --- outputs never overwrite the run's inputs ---

def _unchanged(*paths: Path):
    """Context: the files' bytes (and a folder's listing) are the same after the block."""
    @contextlib.contextmanager
    def watch():
        before = {p: (p.read_bytes() if p.is_file() else sorted(x.name for x in p.iterdir())) for p in paths}
        yield
        assert before == {p: (p.read_bytes() if p.is_file() else sorted(x.name for x in p.iterdir())) for p in paths}
    return watch()


def test_output_naming_an_input_is_refused(capsys, tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"text": "a fine first passage to score"}\n')
    (tmp_path / "link.json").symlink_to(data)
    graph = tmp_path / "g.onnx"
    graph.write_bytes(b"not used")
    (tmp_path / "g.onnx.data").write_bytes(b"weights")
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    committed = ROOT / "GPT2" / "offline" / "gpt2-offline"
    wd = ["-wd", str(tmp_path / "w")]
    cases = [
        (["accuracy", "GPT2", "frameworks", "--dataset", str(data), "--json", str(data)], "the --dataset file"),
        (["generate", "GPT2", "frameworks", "--dataset", str(data), "--json", str(tmp_path / "link.json")],
         "the --dataset file"),
        (["run", "GPT2", "onnxrt", "--use-cache", "--decoder-onnx", str(graph), "--json", f"{graph}.data"],
         "the external data of the --decoder-onnx file"),
        (["run", "GPT2", "frameworks", "--torch-dir", str(folder), "--json", str(folder / "config.json")],
         "inside the --torch-dir folder"),
        (["run", "GPT2", "frameworks", "--json", str(committed / "config.json")], "inside the model's committed folder"),
        (["benchmark", "GPT2", "frameworks", "--json", str(tmp_path / "x.png"), "--plot", str(tmp_path / "x.png")],
         "is also the --plot output"),
        (["deploy", "GPT2", "onnxrt", "--repository", str(folder), "--json", str(folder / "r.json")],
         "inside the --repository folder"),
        (["serve", str(folder), "--json", str(folder / "config.json")], "inside the model repository being served"),
    ]
    with _unchanged(data, graph, folder, committed / "config.json", tmp_path):
        for argv, expect in cases:
            line = _main(capsys, *argv, *(wd if argv[0] != "serve" else []))
            assert expect in line and ("give another path" in line or "its own path" in line), line


# --- the user's files: the message names the real problem ---

def test_torch_dir_without_tokenizer_files_names_them(tmp_path, capsys):
    """In process, as the next: --torch-dir refusals through run.py are test_errors.py's."""
    folder = tmp_path / "notok"
    folder.mkdir()
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        (folder / name).write_bytes((ROOT / "GPT2" / "offline" / "gpt2-offline" / name).read_bytes())
    line = _main(capsys, "generate", "GPT2", "frameworks", "--torch-dir", str(folder), "--prompt", "hello", "-wd",
                 str(tmp_path / "w"))
    assert "has no tokenizer files" in line and "tokenizer.json" in line and "vocab.json and merges.txt" in line


@pytest.mark.parametrize("backend", ["frameworks", "onnxrt"])
def test_a_tokenizer_larger_than_the_embedding_is_refused_before_any_forward(backend, tmp_path, capsys):
    """Another model's tokenizer (4096 tokens) beside a model of 512 embedding rows: one line naming both sizes,
    not an index error inside the first forward (onnxrt: before anything is exported)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    folder = tmp_path / "small-vocab"
    config = AutoConfig.for_model("llama", vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                  num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    for path in (ROOT / "LLAMA" / "offline" / "llama-offline").glob("tokenizer*"):
        (folder / path.name).write_bytes(path.read_bytes())
    capsys.readouterr()  # save_pretrained's progress bar
    wd = tmp_path / "w"
    line = _main(capsys, "generate", "LLAMA", backend, "--torch-dir", str(folder), "--prompt", "hello", "-wd", str(wd))
    assert f"{folder}: the tokenizer has 4096 tokens and the model's embedding 512 rows, so ids 512-4095 cannot " \
           "run" in line
    assert not any(wd.rglob("*.onnx"))


def test_a_damaged_generation_config_is_refused_not_replaced_by_defaults(tmp_path, capsys):
    """Its EOS ids and sampling defaults would silently become config.json's: named as damaged, as config.json is;
    a folder without the file still derives the settings from config.json."""
    folder = tmp_path / "badgen"
    folder.mkdir()
    for path in (ROOT / "GPT2" / "offline" / "gpt2-offline").iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    (folder / "generation_config.json").write_text("{ not json")
    args = ("generate", "GPT2", "frameworks", "--torch-dir", str(folder), "--prompt", "hello", "--max-new-tokens", "2",
            "-wd", str(tmp_path / "w"))
    line = _main(capsys, *args)
    assert f"cannot read the generation settings: {folder / 'generation_config.json'} is damaged (not valid JSON" \
        in line
    (folder / "generation_config.json").unlink()
    assert cli.main(list(args)) == 0


def test_config_vocabulary_that_disagrees_with_the_weights(tmp_path, capsys):
    folder = tmp_path / "badvocab"
    folder.mkdir()
    for path in (ROOT / "GPT2" / "offline" / "gpt2-offline").iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    config = json.loads((folder / "config.json").read_text())
    weights_vocab, config["vocab_size"] = config["vocab_size"], config["vocab_size"] + 100
    (folder / "config.json").write_text(json.dumps(config))
    line = _main(capsys, "run", "GPT2", "frameworks", "--torch-dir", str(folder), "-wd", str(tmp_path / "w"))
    assert f"config.json says vocab_size {weights_vocab + 100}, its weights embed {weights_vocab} tokens" in line


def test_misleading_paths_get_the_real_problem(capsys, tmp_path):
    (tmp_path / "empty.onnx").write_bytes(b"")
    (tmp_path / "folder.onnx").mkdir()
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "notes.txt").write_text("x")
    wd = ["-wd", str(tmp_path / "w")]
    run = ["run", "GPT2", "onnxrt", "--use-cache", "--iterations", "1", "--warmup", "0", *wd]
    assert "folder.onnx is a folder, not an ONNX graph file" in _main(
        capsys, *run, "--decoder-onnx", str(tmp_path / "folder.onnx"))
    assert "empty.onnx is empty (0 bytes), not an ONNX graph" in _main(
        capsys, *run, "--decoder-onnx", str(tmp_path / "empty.onnx"))
    assert f"--dataset {tmp_path}: is a folder, not a file" in _main(
        capsys, "accuracy", "GPT2", "frameworks", "--dataset", str(tmp_path), *wd)
    line = _main(capsys, "serve", str(tmp_path / "repo"))
    assert "is not a Triton model repository (it holds notes.txt" in line and "deploy" in line
    assert "empty" not in line


def test_protobuf_that_is_no_graph(capsys, workdir, tmp_path):
    """Bytes protobuf reads as an empty model (no inputs, no outputs) are not an ONNX graph."""
    (tmp_path / "blank.onnx").write_bytes(b"\x08\x07")  # field 1 (ir_version) = 7, nothing else
    line = _main(capsys, "run", "GPT2", "onnxrt", "--use-cache", "--decoder-onnx", str(tmp_path / "blank.onnx"),
                 "-wd", str(workdir), "--iterations", "1", "--warmup", "0")
    assert "is not an ONNX graph (it has no inputs or outputs)" in line


# --- --plot: the format the extension names, with the umask's mode ---

def test_plot_format_from_the_extension(capsys, workdir, tmp_path):
    previous = os.umask(0o022)
    try:
        for suffix, magic in ((".svg", b"<?xml"), (".pdf", b"%PDF"), (".PNG", b"\x89PNG")):
            path = tmp_path / f"latency{suffix}"
            assert cli.main(["benchmark", "GPT2", "frameworks", "--input-seq-len", "4", "--output-seq-len", "3",
                             "--iterations", "1", "--warmup", "0", "-wd", str(workdir), "--plot", str(path)]) == 0
            assert path.read_bytes().startswith(magic) and path.stat().st_mode & 0o777 == 0o644
    finally:
        os.umask(previous)
    capsys.readouterr()
    for name, expect in (("x.jpg", "its extension .jpg names no format written here"), ("x", "it has no extension")):
        line = _main(capsys, "benchmark", "GPT2", "frameworks", "-wd", str(workdir), "--plot", str(tmp_path / name))
        assert expect in line and ".png, .svg, .pdf" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latency.PNG", "latency.pdf", "latency.svg"]


# --- a full disk, and working dirs that cannot be one ---

def _disk_fills_up(path, *args, **kwargs):
    """A writer that gets half-way and then meets a full disk (the OS's own error)."""
    Path(path).write_bytes(b"\0" * 4096)
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


def _leftovers(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.name.startswith("."))


@pytest.mark.parametrize("writer", ["save_onnx", "exporter"])
def test_full_disk_during_export(capsys, monkeypatch, tmp_path, writer):
    """The graph's writer, or the exporter itself (whose errors come wrapped in the harness's own), meets a full
    disk: one line with the size needed, nothing half-written left."""
    from NNDF.backends.onnxrt import export

    if writer == "save_onnx":
        monkeypatch.setattr(export, "save_onnx", lambda proto, path, large: _disk_fills_up(path))
    else:
        def exporter(*args, **kwargs):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        monkeypatch.setattr(export.torch.onnx, "export", exporter)
    wd = tmp_path / "w"
    line = _main(capsys, "run", "GPT2", "onnxrt", "--use-cache", "-wd", str(wd))
    assert re.fullmatch(rf"error: no space left in {re.escape(str(wd))}, about 0\.0\d+ GB needed; .*", line), line
    assert _leftovers(wd) == [] and not any(p.suffix == ".onnx" for p in wd.rglob("*"))


def test_full_disk_during_deploy(capsys, monkeypatch, workdir, tmp_path):
    from NNDF.triton import repository

    monkeypatch.setattr(repository.shutil, "copy2", lambda source, target: _disk_fills_up(target))
    repo = tmp_path / "models"
    line = _main(capsys, "deploy", "GPT2", "onnxrt", "--use-cache", "--repository", str(repo), "-wd", str(workdir))
    assert line.startswith(f"error: no space left in {repo}, about ") and " GB needed" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models"] and not any(repo.iterdir())


def test_working_dir_links_that_lead_nowhere(capsys, tmp_path):
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    for wd, expect in ((tmp_path / "dangling", f"is a symbolic link to {tmp_path / 'nowhere'}, which does not exist"),
                       (tmp_path / "loop", "is a symbolic link loop"),
                       (tmp_path / "loop" / "sub", f"{tmp_path / 'loop'} is a symbolic link loop")):
        line = _main(capsys, "run", "OPT", "frameworks", "-wd", str(wd))
        assert line.startswith(f"error: --working-dir {wd}: ") and expect in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling", "loop"]


def _as_another_user(tmp: Path) -> list[str]:
    """The command prefix that runs a process as an unprivileged user (root ignores file modes), or []."""
    if os.geteuid() != 0:
        return []
    if not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv: file modes cannot be tested")
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def test_read_only_working_dir_serves_current_artifacts(tmp_path):
    """A shared cache: every artifact the run needs is current, so nothing is written; a run that must build
    something is refused in one line, and the folder is unchanged."""
    base = Path(tempfile.mkdtemp(dir="/tmp"))  # pytest's tmp_path is private to this user
    try:
        wd, home = base / "cache", base / "home"
        home.mkdir()
        assert cli.main(["run", "OPT", "onnxrt", "--use-cache", "--iterations", "1", "--warmup", "0",
                         "-wd", str(wd)]) == 0  # in process: the runs that matter here are run.py's, below
        for path in [base, *base.rglob("*")]:
            path.chmod(0o777 if path == home else (0o555 if path.is_dir() else 0o444))
        listing = sorted(str(p) for p in wd.rglob("*"))
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "HF_HUB_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1",
               "MPLCONFIGDIR": str(home)}
        command = [*_as_another_user(base), sys.executable, str(ROOT / "run.py"), "run", "OPT", "onnxrt",
                   "--use-cache", "--iterations", "1", "--warmup", "0", "-wd", str(wd)]
        ok = subprocess.run(command, cwd=home, env=env, capture_output=True, text=True, timeout=600)
        assert ok.returncode == 0 and not ok.stderr.strip(), ok.stderr
        refused = subprocess.run([a if a != "--use-cache" else "--no-use-cache" for a in command],  # another export
                                 cwd=home, env=env, capture_output=True, text=True, timeout=600)
        lines = refused.stderr.strip().splitlines()
        assert refused.returncode == 2 and len(lines) == 1, refused.stderr
        assert f"error: --working-dir {wd}: cannot write" in lines[0] and "must be built there" in lines[0]
        assert sorted(str(p) for p in wd.rglob("*")) == listing
    finally:
        for path in [base, *base.rglob("*")]:
            path.chmod(0o700)
        shutil.rmtree(base)


KILLED_BUILD = """
import sys, time
from pathlib import Path
from NNDF.artifacts import ArtifactStore
with ArtifactStore(Path(sys.argv[1]), "F", "v").build("graph", {}) as tmp:
    (tmp / "half.onnx").write_bytes(b"0" * 1000)
    print(tmp, flush=True)
    time.sleep(600)
"""


def test_staging_of_a_killed_build_is_removed_by_the_next(tmp_path, monkeypatch):
    from NNDF import artifacts

    monkeypatch.setattr(artifacts, "_STAGING_GRACE_S", 0)
    proc = subprocess.Popen([sys.executable, "-c", KILLED_BUILD, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                            text=True)
    staging = Path(proc.stdout.readline().strip())
    store = artifacts.ArtifactStore(tmp_path, "F", "v")
    with store.build("graph", {"n": 1}):  # the process is alive: its staging folder stays
        assert staging.is_dir()
    proc.kill()  # SIGKILL: no cleanup of its own
    proc.wait()
    assert staging.is_dir()
    with store.build("graph", {"n": 2}) as tmp:
        (tmp / "model.onnx").write_text("x")
    assert not staging.exists() and sorted(p.name for p in store.root.iterdir()) == ["graph"]


def test_torch_dir_artifacts_by_resolved_path(tmp_path):
    from NNDF.models import local_label

    for parent in ("a", "b"):
        (tmp_path / parent / "model").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "a" / "model")
    a, b, link = (local_label(str(p), None) for p in (tmp_path / "a" / "model", tmp_path / "b" / "model",
                                                      tmp_path / "link"))
    assert a != b and a == link and a.startswith("local:model-")
    assert local_label(str(tmp_path / "a" / "model"), "mine") == "local:mine"  # --variant labels the folder


def test_torch_dir_with_variant_is_the_cache_label(tmp_path, capsys):
    folder = ROOT / "GPT2" / "offline" / "gpt2-offline"
    path = tmp_path / "r.json"
    assert cli.main(["generate", "GPT2", "frameworks", "--torch-dir", str(folder), "--variant", "my-copy", "--prompt",
                     "x", "--max-new-tokens", "1", "-wd", str(tmp_path / "w"), "--json", str(path)]) == 0
    assert "GPT2 local:my-copy " in capsys.readouterr().out


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _hub_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    return dict(env, HF_ENDPOINT=f"http://127.0.0.1:{_closed_port()}", HF_HOME=str(tmp_path / "hf"))


def test_unreachable_hub_is_one_quick_line(tmp_path):
    start = time.monotonic()
    proc = subprocess.run([sys.executable, str(ROOT / "run.py"), "run", "GPT2", "frameworks", "--variant",
                           "someone/not-cached", "-wd", str(tmp_path / "w")], cwd=ROOT, env=_hub_env(tmp_path),
                          capture_output=True, text=True, timeout=120)
    assert time.monotonic() - start < 20
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "the HuggingFace Hub is unreachable (127.0.0.1:" in lines[0] and "not in the local HF cache" in lines[0]


def test_unreachable_hub_uses_the_cache_and_says_so_once(tmp_path):
    commit = "0123456789abcdef0123456789abcdef01234567"
    cached = tmp_path / "hf" / "hub" / "models--someone--tiny-gpt2"
    (cached / "snapshots" / commit).mkdir(parents=True)
    (cached / "refs").mkdir()
    (cached / "refs" / "main").write_text(commit)
    for path in (ROOT / "GPT2" / "offline" / "gpt2-offline").iterdir():
        (cached / "snapshots" / commit / path.name).write_bytes(path.read_bytes())
    proc = subprocess.run([sys.executable, str(ROOT / "run.py"), "generate", "GPT2", "frameworks", "--variant",
                           "someone/tiny-gpt2", "--prompt", "x", "--max-new-tokens", "1", "-wd", str(tmp_path / "w")],
                          cwd=ROOT, env=_hub_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "warning: the HuggingFace Hub is unreachable (127.0.0.1:" + proc.stderr.split("127.0.0.1:")[1].split(")")[0]
        + "): someone/tiny-gpt2 comes from the local HF cache"]


def test_library_log_lines_are_printed_once(capsys):
    """transformers and huggingface_hub bring their own stderr handlers: a line goes through ours only."""
    import logging

    for verbose in (False, True):
        cli._quiet_libraries(verbose)
        logging.getLogger("huggingface_hub.file_download").error("the hub said no")
        logging.getLogger("transformers.modeling_utils").error("transformers said no")
        assert capsys.readouterr().err.splitlines() == ["error: the hub said no", "error: transformers said no"]
    cli._quiet_libraries(False)
