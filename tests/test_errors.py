"""Bad input: one line on stderr naming the problem (and the valid choices), exit code 2, no traceback,
nothing corrupt left behind."""
import pytest

from conftest import run_cli
from NNDF import cli


def _bad(*args, expect: str, cwd=None, stdin=None):
    """Through run.py: the whole program's exit code and its one stderr line (nothing else printed)."""
    proc = run_cli(*args, stdin=stdin) if cwd is None else run_cli(*args, cwd=cwd, stdin=stdin)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert expect in lines[0], lines[0]
    return lines[0]


def _refused(capsys, *args, expect: str) -> str:
    """cli.main in process (the refusals that come before any model loads: the same one line and exit code 2 as
    through run.py, whose own process is checked by the _bad tests)."""
    capsys.readouterr()
    try:
        code = cli.main(list(args))
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert code == 2, (code, lines)
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert expect in lines[0], lines[0]
    return lines[0]


def test_unknown_family():
    line = _bad("run", "GPT3", "frameworks", expect="unknown model family 'GPT3'")
    assert "GPT2, OPT, BLOOM" in line


def test_unknown_backend(capsys):
    assert "frameworks, onnxrt, trt" in _refused(capsys, "run", "GPT2", "tensorflow",
                                                 expect="unknown backend 'tensorflow'")


def test_trt_needs_cuda(tmp_path):
    """With TensorRT and a GPU: "runs on CUDA: use --device cuda"; without: what is missing, and that it runs on
    CUDA."""
    _bad("run", "GPT2", "trt", "--device", "cpu", "-wd", str(tmp_path), expect="the trt backend runs on CUDA")


def test_unknown_flag_value():
    _bad("run", "GPT2", "frameworks", "--device", "tpu", expect="invalid choice: 'tpu'")


def test_a_missing_model_is_the_one_required_argument(capsys):
    for action in ("predict", "run"):  # BACKEND is optional (side-by-side actions take every usable one)
        line = _refused(capsys, action, expect="the following arguments are required: MODEL")
        assert line.endswith("required: MODEL"), line


def test_unknown_action():
    _bad("fly", "GPT2", expect="invalid choice: 'fly'")


@pytest.mark.parametrize("action,flag,value,expect", [("run", "--batch-size", "0", "--batch-size must be >= 1"),
                                                      ("run", "--num-beams", "-2", "--num-beams must be >= 1"),
                                                      ("run", "--iterations", "0", "--iterations must be >= 1"),
                                                      ("benchmark", "--percentile", "101",
                                                       "--percentile must be in (0, 100]")])
def test_impossible_sizes(action, flag, value, expect, capsys):
    _refused(capsys, action, "GPT2", "frameworks", flag, value, expect=expect)


def test_unknown_variant_offline_hub(tmp_path):
    line = _bad("run", "GPT2", "frameworks", "--variant", "gpt2", "-wd", str(tmp_path), expect="could not load 'gpt2'")
    assert "--torch-dir" in line and "gpt2-offline" in line


def test_wrong_architecture_for_family(tmp_path):
    from conftest import ROOT

    line = _bad("run", "OPT", "frameworks", "--torch-dir", str(ROOT / "GPT2" / "offline" / "gpt2-offline"),
                "-wd", str(tmp_path), expect="is a 'gpt2' model")
    assert line.endswith("family OPT runs opt; 'gpt2' models run as family GPT2: name GPT2 instead of OPT")


@pytest.mark.parametrize("argv,expect", [
    (("predict", "BERT", "onnxrt", "--variant", "t5-offline", "--prompt", "hi"),
     "--variant 't5-offline' is a T5 variant, not a BERT one: run.py predict T5 onnxrt --variant t5-offline; "
     "BERT's offline variants: all-MiniLM-L6-v2, roberta-classifier-offline"),
    (("chat", "T5", "--variant", "bart-offline"),
     "--variant 'bart-offline' is a BART variant, not a T5 one: run.py chat BART --variant bart-offline; "
     "T5's offline variants: t5-offline, flan-t5-offline"),
    (("chat", "GPT2", "--variant", "llama-offline"),
     "--variant 'llama-offline' is a LLAMA variant, not a GPT2 one: run.py chat LLAMA --variant llama-offline; "
     "GPT2's offline variants: gpt2-offline, gpt-neo-offline, gpt-neox-offline, gptj-offline"),
])
def test_variant_of_another_family_names_it(capsys, tmp_path, argv, expect):
    _refused(capsys, *argv, "-wd", str(tmp_path / "w"), expect=expect)
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("unreachable", [False, True])
def test_mistyped_variant_lists_the_offline_variants(capsys, tmp_path, monkeypatch, unreachable):
    """A name no family declares (a typo, or a hub id not cached) with no hub: this family's offline variants."""
    from NNDF import hub

    if unreachable:  # else HF_HUB_OFFLINE (the suite's): the libraries read the cache and fail
        monkeypatch.setattr(hub, "offline", lambda: False)
        monkeypatch.setattr(hub, "unreachable", lambda: "huggingface.co:443: Name or service not known")
    line = _refused(capsys, "generate", "GPT2", "frameworks", "--variant", "gpt2-ofline", "--prompt", "hi",
                    "-wd", str(tmp_path), expect="'gpt2-ofline'")
    assert line.endswith("use --torch-dir DIR for a local HF folder, or a GPT2 variant that needs no network: "
                         "--variant gpt2-offline, gpt-neo-offline, gpt-neox-offline, gptj-offline")
    assert ("the HuggingFace Hub is unreachable" in line) == unreachable


def test_model_type_no_family_models(tmp_path):
    """A model type close to a family's but not modelled by any: the refusal says what the family lacks for it."""
    from transformers import MixtralConfig

    folder = tmp_path / "mixtral"
    MixtralConfig(num_hidden_layers=1, hidden_size=32, intermediate_size=64, num_attention_heads=2,
                  num_key_value_heads=1, num_local_experts=2).save_pretrained(folder)
    line = _bad("run", "LLAMA", "frameworks", "--torch-dir", str(folder), "-wd", str(tmp_path),
                expect="is a 'mixtral' model; family LLAMA runs llama, mistral, qwen2, qwen3, phi3, gemma, gemma2, gemma3_text")
    assert line.endswith("'mixtral' needs mixture-of-experts layers, which this family does not model")


def test_missing_torch_dir(tmp_path, capsys):
    _bad("run", "GPT2", "frameworks", "--torch-dir", str(tmp_path / "nope"), expect="nope' does not exist")
    (tmp_path / "config.json").write_text("{}")
    _refused(capsys, "run", "GPT2", "frameworks", "--torch-dir", str(tmp_path / "config.json"),
             expect="config.json' is a file, not a folder")
    (tmp_path / "empty").mkdir()
    _refused(capsys, "run", "GPT2", "frameworks", "--torch-dir", str(tmp_path / "empty"),
             expect="empty' is not a HuggingFace model folder (no config.json)")


def _gpt2_copy(folder, names=None):
    """The committed gpt2-offline folder copied to `folder` (only `names`, when given)."""
    from conftest import ROOT

    folder.mkdir()
    for path in (ROOT / "GPT2" / "offline" / "gpt2-offline").iterdir():
        if names is None or path.name in names:
            (folder / path.name).write_bytes(path.read_bytes())
    return folder


def test_failed_torch_dir_run_leaves_no_folder(capsys, tmp_path):
    """--torch-dir with no weights, or weights cut short: one line, and no empty artifact folder left behind (one
    holding earlier artifacts stays)."""
    no_weights = _gpt2_copy(tmp_path / "cfgonly", {"config.json", "tokenizer.json", "tokenizer_config.json"})
    cut = _gpt2_copy(tmp_path / "cut")
    (cut / "model.safetensors").write_bytes((cut / "model.safetensors").read_bytes()[:1000])
    work = tmp_path / "w"
    run = ("generate", "GPT2", "onnxrt", "--prompt", "hi", "--max-new-tokens", "1", "-wd", str(work))
    _refused(capsys, *run, "--torch-dir", str(no_weights), expect="no file named model.safetensors")
    assert not work.exists()
    (work / "GPT2" / "gpt2-offline" / "decoder").mkdir(parents=True)
    _refused(capsys, *run, "--torch-dir", str(cut), expect="cut/model.safetensors is damaged (truncated")
    assert [p.name for p in (work / "GPT2").iterdir()] == ["gpt2-offline"]


def test_unknown_model_type_is_one_whole_line(capsys, tmp_path, monkeypatch):
    """A config.json of a model type transformers does not know, in a folder or in the HF cache: which type, and
    what the family runs."""
    import json

    folder = _gpt2_copy(tmp_path / "unknown")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(dict(config, model_type="gpt5")))
    line = _refused(capsys, "generate", "GPT2", "frameworks", "--torch-dir", str(folder), "--prompt", "hi",
                    "-wd", str(tmp_path / "w"), expect="unknown' is a 'gpt5' model; family GPT2 runs gpt2, gpt_neo")
    assert line.endswith("does not know it either")
    commit = "0123456789abcdef0123456789abcdef01234567"
    cached = tmp_path / "hf" / "hub" / "models--someone--gpt5"
    (cached / "refs").mkdir(parents=True)
    (cached / "refs" / "main").write_text(commit)
    (cached / "snapshots").mkdir()
    folder.rename(cached / "snapshots" / commit)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    line = _bad("generate", "GPT2", "frameworks", "--variant", "someone/gpt5", "--prompt", "hi", "-wd",
                str(tmp_path / "w"), expect="'someone/gpt5' is a 'gpt5' model; family GPT2 runs gpt2, gpt_neo")
    assert line.endswith("does not know it either") and not (tmp_path / "w").exists()


def test_family_type_this_transformers_lacks_says_upgrade():
    """One of the family's own model types that the installed transformers does not know yet: upgrade it."""
    from dataclasses import replace

    from NNDF import registry
    from NNDF.models import _type_refusal

    family = replace(registry.family("GPT2"), model_types=("gpt2", "gpt5"))
    refusal = _type_refusal(family, "/models/next", "gpt5")
    assert "'/models/next' is a 'gpt5' model, which transformers " in str(refusal)
    assert str(refusal).endswith("does not know: upgrade it (pip install --upgrade transformers)")
    assert _type_refusal(family, "/models/next", "gpt2") is None


def test_long_library_messages_are_cut_between_sentences():
    from NNDF.models import _first_line

    first = "The checkpoint has model type `gpt5` but Transformers does not recognize this architecture."
    text = f"{first} This could be because of an issue with the checkpoint, or because your version is out of date."
    assert _first_line(ValueError(f"{text}\nMore"), limit=120) == first
    assert _first_line(ValueError("word " * 100), limit=50) == "word " * 9 + "word ..."


def test_unreadable_dataset(tmp_path, capsys):
    _bad("accuracy", "GPT2", "frameworks", "--dataset", str(tmp_path / "missing.jsonl"), "-wd", str(tmp_path),
         expect="missing.jsonl: no such file")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"txt": 1}\n')
    _refused(capsys, "accuracy", "GPT2", "frameworks", "--dataset", str(bad), "-wd", str(tmp_path),
             expect='"text" field')


def test_hub_dataset_unreachable(tmp_path):
    _bad("accuracy", "GPT2", "frameworks", "--dataset", "lambada", "--num-samples", "1", "-wd", str(tmp_path),
         expect="cannot load dataset 'lambada'")


def test_corrupt_user_onnx(tmp_path):
    bad = tmp_path / "decoder.onnx"
    bad.write_bytes(b"not an onnx file")
    _bad("run", "GPT2", "onnxrt", "--decoder-onnx", str(bad), "-wd", str(tmp_path / "w"), expect="cannot load")
    assert bad.read_bytes() == b"not an onnx file"  # the user's file is never replaced


def test_fp16_on_cpu_is_refused(tmp_path, capsys):
    _refused(capsys, "run", "GPT2", "frameworks", "--fp16", "--device", "cpu", "-wd", str(tmp_path),
             expect="--fp16 needs --device cuda")


def test_cuda_without_gpu_is_refused(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    _refused(capsys, "run", "GPT2", "frameworks", "--device", "cuda", "-wd", str(tmp_path),
             expect="sees no CUDA GPU")


def test_empty_prompt(tmp_path):
    _bad("chat", "GPT2", "frameworks", "--prompt", "", "-wd", str(tmp_path), expect="empty --prompt")


def test_accuracy_with_beams(tmp_path, capsys):
    _refused(capsys, "accuracy", "GPT2", "frameworks", "--num-beams", "2", "-wd", str(tmp_path),
             expect="--num-beams does not apply to accuracy")


def test_beam_sampling_refused(tmp_path, capsys):
    _refused(capsys, "chat", "GPT2", "frameworks", "--prompt", "x", "--do-sample", "--num-beams", "2", "-wd",
             str(tmp_path), expect="beam sampling) is not supported")


def test_verbose_shows_the_cause_behind_the_one_line(tmp_path):
    """A library error behind a one-line error (here ONNX Runtime rejecting a file) is chained: --verbose prints
    its traceback before the line, without --verbose only the line is printed."""
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not an onnx model")
    args = ("run", "GPT2", "onnxrt", "--decoder-onnx", str(bad), "-wd", str(tmp_path))
    _bad(*args, expect="ONNX Runtime cannot load")
    proc = run_cli(*args, "--verbose")
    assert proc.returncode == 2
    assert "Traceback" in proc.stderr and "InferenceSession" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("error: ONNX Runtime cannot load")
