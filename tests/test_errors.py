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
    assert line.endswith("family OPT runs opt")


def test_model_type_no_family_models(tmp_path):
    """A model type close to a family's but not modelled by any: the refusal says what the family lacks for it."""
    from transformers import MixtralConfig

    folder = tmp_path / "mixtral"
    MixtralConfig(num_hidden_layers=1, hidden_size=32, intermediate_size=64, num_attention_heads=2,
                  num_key_value_heads=1, num_local_experts=2).save_pretrained(folder)
    line = _bad("run", "LLAMA", "frameworks", "--torch-dir", str(folder), "-wd", str(tmp_path),
                expect="is a 'mixtral' model; family LLAMA runs llama, mistral, qwen2, qwen3, phi3, gemma, gemma2, gemma3_text")
    assert line.endswith("'mixtral' needs mixture-of-experts layers, which this family does not model")


def test_missing_torch_dir(tmp_path):
    _bad("run", "GPT2", "frameworks", "--torch-dir", str(tmp_path / "nope"), expect="is not a HuggingFace model folder")


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
