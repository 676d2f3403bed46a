"""Option rules across groups: the KV cache is on by default (`--no-use-cache` turns it off, `--use-cache` is still
accepted), `--temperature 0` is ignored without sampling and refused with it, `--min-new-tokens` above
`--max-new-tokens` is refused, and `--threads` above the machine's cores warns. Refusals are one line, exit 2."""
from __future__ import annotations

import json
import os

import pytest

from conftest import run_cli
from NNDF import cli
from NNDF.errors import UsageError
from NNDF.options import ModelOptions, SamplingOptions

GEN = ("generate", "GPT2", "frameworks", "--prompt", "The for statement is used to", "--max-new-tokens", "6")


def _refused(proc, message: str) -> None:
    assert proc.returncode == 2 and proc.stderr.strip() == f"error: {message}" and proc.stdout == ""


def _refused_in_process(capsys, argv, message: str) -> None:
    """cli.main in process, the same checks as _refused (exit code 2, exactly the one line, nothing on stdout)."""
    capsys.readouterr()
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    assert code == 2 and err.strip() == f"error: {message}" and out == ""


def _generated(tmp_path, workdir, *flags: str) -> dict:
    """generate in process (`cli.main`; the whole program's exit codes and lines: test_threads_above_the_cores_warn
    and the refusals here)."""
    out = tmp_path / f"g{len(list(tmp_path.iterdir()))}.json"
    assert cli.main([*GEN, "-wd", str(workdir), "--json", str(out), *flags]) == 0
    return json.loads(out.read_text())


def test_kv_cache_is_the_default(tmp_path, workdir, capsys):
    assert ModelOptions().use_cache and ModelOptions().cache_layout == "kv"
    default = _generated(tmp_path, workdir)
    given = _generated(tmp_path, workdir, "--use-cache")  # still accepted
    off = _generated(tmp_path, workdir, "--no-use-cache")
    assert (default["settings"]["use_cache"], given["settings"]["use_cache"], off["settings"]["use_cache"]) == \
        (True, True, False)
    ids = [r["results"][0]["output_ids"] for r in (default, given, off)]
    assert ids[0] == ids[1] == ids[2]  # the cache changes the work, not the text
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["generate", "GPT2", "--help"])
    assert exit_info.value.code == 0 and "  --use-cache, --no-use-cache, -kv," in capsys.readouterr().out


def test_no_kv_cache_refusals(tmp_path, capsys):
    _refused(run_cli(*GEN, "--no-use-cache", "--static-cache", "-wd", str(tmp_path)),
             "--static-cache is a kind of KV cache: it contradicts --no-use-cache")
    _refused_in_process(capsys, ("predict", "BERT", "frameworks", "--prompt", "hi", "--no-use-cache", "-wd",
                                 str(tmp_path)),
             "--no-use-cache does not apply to BERT (encoder models): it belongs to generative models "
             f"({', '.join(_generative_families())})")


def _generative_families() -> list[str]:
    from NNDF import registry
    from NNDF.tasks import GenerativeTask

    return [name for name, fam in registry.families().items() if isinstance(fam.task, GenerativeTask)]


def test_temperature_zero_is_greedy_without_sampling(tmp_path, workdir):
    greedy = _generated(tmp_path, workdir)["results"][0]["output_ids"]
    assert _generated(tmp_path, workdir, "--temperature", "0")["results"][0]["output_ids"] == greedy
    assert SamplingOptions(temperature=0).temperature == 0


@pytest.mark.parametrize("flags,message", [
    (("--temperature", "0", "--do-sample"), "--temperature 0 with --do-sample: sampling divides the scores by the "
     "temperature, so it must be > 0 (for greedy decoding leave --do-sample out)"),
    (("--temperature", "-1"), "--temperature must be > 0 (0 only without sampling), got -1.0"),
    (("--min-new-tokens", "9"), "--min-new-tokens 9 is above --max-new-tokens 6: give at most 6"),
])
def test_generate_refusals(flags, message, tmp_path, capsys):
    """In process (cli.main); the same refusals' whole-program exit code and line through run.py:
    test_no_kv_cache_refusals, test_a_dataset_line_below_min_new_tokens_is_refused, test_chat_refuses_min_above_max."""
    _refused_in_process(capsys, (*GEN, *flags, "-wd", str(tmp_path)), message)


def test_a_dataset_line_below_min_new_tokens_is_refused(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"text": "One"}\n{"text": "Two", "max_new_tokens": 2}\n')
    _refused(run_cli("generate", "GPT2", "frameworks", "--dataset", str(data), "--min-new-tokens", "3", "-wd",
                     str(tmp_path)), f"--dataset {data}: line 2 has \"max_new_tokens\": 2, below --min-new-tokens 3")


def test_chat_refuses_min_above_max(tmp_path):
    _refused(run_cli("chat", "GPT2", "frameworks", "--prompt", "hi", "--max-new-tokens", "2", "--min-new-tokens", "3",
                     "-wd", str(tmp_path)), "--min-new-tokens 3 is above --max-new-tokens 2: give at most 2")


def test_temperature_zero_with_the_models_own_sampling(workdir):
    """do_sample from the model's generation config (not a flag): refused where the loop is configured."""
    from NNDF import registry
    from NNDF.context import make_context
    from NNDF.decoding import resolve

    run = make_context(registry.family("GPT2"), ModelOptions(working_dir=str(workdir), device="cpu"))
    run.source.generation.do_sample = True  # as a checkpoint's generation_config.json may say (this run's copy)
    with pytest.raises(UsageError, match=r"^--temperature 0 with the model's generation config's do_sample=True: "
                                         r"sampling divides the scores by the temperature; give --temperature > 0, "
                                         r"or --no-do-sample$"):
        resolve(run, SamplingOptions(temperature=0))


def test_threads_above_the_cores_warn(tmp_path, workdir, capsys):
    cores = len(os.sched_getaffinity(0))
    out = tmp_path / "t.json"
    proc = run_cli(*GEN, "--threads", str(cores + 1), "-wd", str(workdir), "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == (f"warning: --threads {cores + 1} is more than the {cores} CPU cores this process "
                                   f"can use: the threads share cores, which is slower than --threads {cores}")
    capsys.readouterr()
    assert cli.main([*GEN, "--threads", str(cores), "-wd", str(workdir)]) == 0  # in process: no warning line
    assert "warning" not in capsys.readouterr().err
