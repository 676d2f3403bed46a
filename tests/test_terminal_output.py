"""What reaches the terminal: control characters in prompts and outputs are escaped (the JSON keeps the exact
text), every prompt and output is one table line shortened to the terminal's width, rows are titled `backend`,
`list` says what it lists and stops quietly when its reader does, `chat` prints each answer once, progress bars
over a dataset show under --info without a terminal, and quantized embeddings are compared by cosine."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from conftest import ROOT
from NNDF import cli, progress
from NNDF.results import Report, columns, fit_table, printable

HOSTILE = "red \x1b[31mALERT\x1b[0m, \u202eevil\u202c, nul \x00, two\nlines"
ESCAPED = "red \\x1b[31mALERT\\x1b[0m, \\u202eevil\\u202c, nul \\x00, two\\nlines"
RAW = ("\x1b", "\u202e", "\x00")


def _cli(*args: str, columns: int = 100, stdin: str | None = None) -> subprocess.CompletedProcess:
    """`python run.py ...` with a terminal width of `columns` (stdout is a pipe, as for a user's `| less`)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1", COLUMNS=str(columns))
    return subprocess.run([sys.executable, str(ROOT / "run.py"), *args], cwd=ROOT, env=env, input=stdin,
                          capture_output=True, text=True, timeout=600)


def _table(stdout: str, first: str) -> list[str]:
    """The lines of the table whose header starts with `first` (header, rule, rows)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|") and line.split("|")[1].strip() == first)
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[start:end]


def test_printable_escapes_controls_and_keeps_text():
    assert printable(HOSTILE) == ESCAPED
    assert printable("Grüße, 日本語, emoji 👩‍💻, tab\tend", keep="\t") == "Grüße, 日本語, emoji 👩‍💻, tab\tend"
    assert printable("a\r\x7f\x9b\u2028\udcff") == "a\\r\\x7f\\x9b\\u2028\\udcff"
    assert printable("answer\nline two\x07", keep="\n\t") == "answer\nline two\\x07"


def test_fit_table_shortens_the_wide_columns_to_the_width():
    rows = [{"backend": "frameworks", "prompt": "p" * 70, "text": "t" * 300, "seconds": 0.25}]
    lines = fit_table(rows, ("prompt", "text"), 90).splitlines()
    assert max(map(len, lines)) == 90 and lines[2].count("...") == 2
    assert "p" * 20 in lines[2] and "t" * 20 in lines[2]  # both keep a share, the longest is cut first
    narrow = fit_table(rows, ("prompt", "text"), 10).splitlines()  # cannot fit: no column below 12 characters
    assert "p" * 9 + "..." in narrow[2] and "t" * 9 + "..." in narrow[2]
    assert fit_table(rows[:1], ("prompt", "text"), 1000).count("...") == 0


class _Row:
    """A result that is only its row."""

    def __init__(self, row: dict):
        self.row = lambda: row


def test_columns_keep_each_key_beside_the_one_it_follows():
    """A key the first rows lack goes where its own row has it, not at the end (HF generate has no encoder time)."""
    rows = [{"backend": "hf", "prefill": 1, "tokens/s": 2}, {"backend": "ours", "encoder": 0.5, "prefill": 1,
                                                             "tokens/s": 2}]
    assert columns(rows) == ["backend", "encoder", "prefill", "tokens/s"]
    assert columns([{"b": 1}, {"a": 1, "b": 2}, {"b": 3, "c": 4}]) == ["a", "b", "c"]
    table = Report("benchmark", "BART", "x", {}, [_Row(r) for r in rows]).table().splitlines()
    assert table[0].split("|")[2].strip() == "encoder" and table[2].split("|")[2].strip() == ""


def test_generate_escapes_on_the_terminal_and_keeps_the_json_exact(tmp_path, workdir):
    data = tmp_path / "hostile.jsonl"
    data.write_text(json.dumps({"text": HOSTILE}) + "\n" + json.dumps({"text": "plain " * 40}) + "\n")
    out = tmp_path / "r.json"
    proc = _cli("generate", "GPT2", "frameworks", "--dataset", str(data), "--max-new-tokens", "20", "-wd",
                str(workdir), "--json", str(out), columns=90)
    assert proc.returncode == 0, proc.stderr
    assert not any(raw in proc.stdout for raw in RAW)
    table = _table(proc.stdout, "#")
    assert table[0].split("|")[2].strip() == "backend" and len(table) == 2 + 2  # one line per prompt
    assert all(len(line) <= 90 for line in table)
    assert ESCAPED[:20] in table[2] and table[3].count("...") >= 1  # the long prompt is shortened
    results = json.loads(out.read_text())["results"]
    assert results[0]["prompt"] == HOSTILE and results[1]["prompt"] == "plain " * 40  # the exact text


def test_compare_rows_are_backends_and_one_line_per_sample(workdir, monkeypatch, capsys):
    proc = _cli("compare", "GPT2", "--compare", "frameworks", "--iterations", "1", "--warmup", "0", "-wd",
                str(workdir), columns=110)
    assert proc.returncode == 0, proc.stderr
    assert _table(proc.stdout, "backend")[2].startswith("| frameworks ")
    monkeypatch.setenv("COLUMNS", "110")  # run in process (cli.main), its stdout captured: a pipe of 110 columns
    capsys.readouterr()
    assert cli.main(["run", "GPT2", "frameworks", "--iterations", "1", "--warmup", "0", "-wd", str(workdir)]) == 0
    table = _table(capsys.readouterr().out, "backend")
    assert len(table) == 2 + 3 and all(len(line) <= 110 for line in table)  # 3 samples with newlines in them
    assert "\\n" in "".join(table[2:])


def test_list_has_a_header_and_stops_quietly_in_a_pipe():
    proc = _cli("list")
    assert proc.returncode == 0 and proc.stdout.splitlines()[0] == (  # the first line, no blank line before it
        "list: every family's variants (--variant), then the backends and whether they work on this machine")
    assert _table(proc.stdout, "backend")[0].startswith("| backend    | usable here ")
    # a reader that stops after two lines (as `run.py list | head -2`), through a pipe too small (4 KiB) to take
    # the whole listing at once, so the listing is still writing when its reader goes, however busy the machine
    import fcntl

    env = dict(os.environ, HF_HUB_OFFLINE="1")
    read, write = os.pipe()
    fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, 4096)
    piped = subprocess.Popen([sys.executable, "run.py", "list"], cwd=ROOT, env=env, stdout=write,
                             stderr=subprocess.PIPE, text=True)
    os.close(write)
    with os.fdopen(read) as reader:
        first = [reader.readline() for _ in range(2)]
    _, stderr = piped.communicate(timeout=120)
    assert len(proc.stdout.encode()) > 4096 + 8192  # more than the pipe holds and the reader's first read takes
    assert stderr == "" and piped.returncode == 141
    assert first[0].startswith("list: every family's variants")


def test_chat_prints_each_answer_once(workdir, tmp_path):
    out = tmp_path / "chat.json"
    proc = _cli("chat", "GPT2", "frameworks", "--prompt", "Hello \x1b[2J there", "--max-new-tokens", "6", "-wd",
                str(workdir), "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())["results"][0]
    assert result["prompt"] == "Hello \x1b[2J there"
    assert proc.stdout.count(f"s): {result['text']}\n") == 1  # the answer as written (lines kept), last
    assert re.search(r"^frameworks \(\d+\.\d{4} s\): ", proc.stdout, re.M)  # the seconds before it
    assert proc.stdout.count("frameworks") == 1 and "| backend" not in proc.stdout  # and nowhere else


def test_progress_bars_over_a_dataset_under_info(tmp_path, workdir, capsys, monkeypatch):
    data = tmp_path / "texts.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in ("One", "Two", "Three")))
    generate = ("generate", "GPT2", "frameworks", "--dataset", str(data), "--max-new-tokens", "3", "-wd", str(workdir))
    shown = _cli(*generate, "--info")
    assert shown.returncode == 0 and "frameworks generate:   0%|" in shown.stderr and "| 0/3 [" in shown.stderr
    assert "prompt/s]" in shown.stderr  # a bar over the prompts (tqdm draws the last step only if time allows)
    monkeypatch.setattr(progress, "FORCE", False)  # as in a new process (--info sets it for its process)
    capsys.readouterr()
    assert cli.main(list(generate)) == 0  # in process: stderr captured (no terminal), no --info: no bar
    assert "frameworks generate" not in capsys.readouterr().err
    predict = _cli("predict", "BERT", "frameworks", "--dataset", str(data), "-wd", str(workdir), "--info")
    assert predict.returncode == 0 and "frameworks predict:   0%|" in predict.stderr and "| 0/3 [" in predict.stderr


def test_quantized_embeddings_report_cosine(workdir):
    proc = _cli("predict", "BERT", "onnxrt", "--quantize", "none", "int8", "--prompt", "A calm sea.", "-wd",
                str(workdir), columns=200)
    assert proc.returncode == 0, proc.stderr
    note = next(line for line in proc.stdout.splitlines() if line.startswith("note: onnxrt-int8: int8 graphs"))
    assert "embeddings' cosine similarity: mean 0.99" in note and "top-1" not in note
    folder = workdir / "BERT" / "all-MiniLM-L6-v2" / "encoder-feature-extraction-fp32-ortopt-int8"
    record = json.loads((folder / "validation.json").read_text())
    assert record["top1_agreement_vs_float"] is None and record["mean_cosine_vs_float"] > 0.99
