"""Image-to-text (BLIP): captions equal HF `generate` token for token (greedy and beam, with and without KV cache,
with and without a text prompt, a batch of images), TensorRT bookkeeping with ONNX Runtime standing in for the
engines, and the image-specific errors."""
import os
from pathlib import Path

import pytest

from NNDF import registry
from NNDF.actions.common import encode, generate_prompt
from NNDF.context import make_context
from NNDF.generation import GenerationConfig
from NNDF.options import ModelOptions
from Seq2Seq.trt_steps import Seq2SeqTrtSteps
from Vision2Seq.task import ImagePrompt

from conftest import ROOT, cli_in_process, run_cli
from NNDF import cli
from test_trt import OrtIO

IMAGES = [str(ROOT / "BLIP" / "offline" / "images" / name) for name in ("red-square.png", "blue-circle.jpg")]
CASES = [[ImagePrompt(IMAGES[0])], [ImagePrompt(IMAGES[1], "a picture of")], [ImagePrompt(i) for i in IMAGES]]
NEW = 10
DEVICE = os.environ.get("HARNESS_TEST_DEVICE", "cpu")  # tools/bench/seq2seq_check.sh blip runs the parity on CUDA


def _run(workdir, use_cache, device="cpu"):
    return make_context(registry.family("BLIP"), ModelOptions(working_dir=str(workdir), use_cache=use_cache,
                                                              device=device))


def _hf(run, prompt, beams, use_cache):
    eos, pad = run.family.task.special_ids(run)
    inputs = {k: v.to(run.device) for k, v in run.family.task.hf_generate_inputs(run, prompt).items()}
    out = run.torch_model().generate(**inputs, max_new_tokens=NEW,
                                     num_beams=beams, do_sample=False, use_cache=use_cache)
    rows = []
    for r in range(prompt.batch):
        new = out[r, prompt.input_ids.shape[1]:].tolist()
        rows.append(new[: new.index(eos) + 1] if eos in new else new)
    return rows


@pytest.fixture(scope="module")
def hf_reference():
    """HF generate's captions per (device, KV cache, case, beams), computed once and compared by every test here
    that runs the same case (each backend's caption parity, the TensorRT bookkeeping on ONNX Runtime)."""
    rows = {}

    def get(run, case, prompt, beams, use_cache):
        key = (run.device.type, use_cache, case, beams)
        if key not in rows:
            rows[key] = _hf(run, prompt, beams, use_cache)
        return rows[key]

    return get


def _ours(run, steps, prompt, beams):
    eos, pad = run.family.task.special_ids(run)
    out = generate_prompt(steps, prompt, GenerationConfig(max_new_tokens=NEW, num_beams=beams, eos_token_id=eos,
                                                          pad_token_id=pad))
    return [out.new_tokens(r, eos) for r in range(prompt.batch)]


@pytest.mark.parametrize("use_cache", [True, False], ids=["kv", "nokv"])
@pytest.mark.parametrize("backend", ["frameworks", "onnxrt"])
def test_caption_parity(backend, use_cache, workdir, hf_reference):
    run = _run(workdir, use_cache, DEVICE)
    steps = registry.backend(run.family, backend).setup(run)
    for case, items in enumerate(CASES):
        prompt = encode(run, items)
        for beams in (1, 3):
            expected = hf_reference(run, case, prompt, beams, use_cache)
            assert _ours(run, steps, prompt, beams) == expected, (items, beams)
    steps.close()


@pytest.mark.parametrize("use_cache", [True, False], ids=["kv", "nokv"])
def test_trt_steps_bookkeeping_gives_hf_captions(use_cache, workdir, hf_reference):
    """Seq2SeqTrtSteps over the vision-encoder / decoder / cache-generator graphs, ONNX Runtime executing each
    bound call from the bound memory (not TensorRT: nothing here is a TensorRT result)."""
    run = _run(workdir, use_cache)
    paths, _ = registry.backend(run.family, "onnxrt").onnx.paths(run)
    for case, items in enumerate(CASES):
        prompt = encode(run, items)
        for beams in (1, 3):
            ios = {part: OrtIO(path) for part, path in paths.items()}
            steps = Seq2SeqTrtSteps(ios, "cpu", use_cache, max_rows=2 * beams, max_input=8, max_output=8 + NEW)
            expected = hf_reference(run, case, prompt, beams, use_cache)
            assert _ours(run, steps, prompt, beams) == expected, (items, beams)


@pytest.mark.parametrize("args,message", [
    (("accuracy", "BLIP", "frameworks"), "error: accuracy (LAMBADA-style text scoring) is not defined for image "
                                         "captioning; use run, compare, chat --image or benchmark"),
    (("chat", "BLIP", "frameworks", "--prompt", "a picture of"),
     "error: image captioning needs images: give --image PATH (repeatable; PNG or JPEG)"),
    (("chat", "BLIP", "frameworks", "--image", "missing.png"),
     "error: --image missing.png: no such file; give a PNG or JPEG file"),
    (("chat", "BLIP", "frameworks", "--image", str(ROOT / "README.md")),
     f"error: {ROOT / 'README.md'}: not a readable image (UnidentifiedImageError); give a PNG or JPEG file"),
    (("chat", "GPT2", "frameworks", "--image", IMAGES[0]),
     "error: --image does not apply to GPT2 (decoder models): it belongs to image-to-text models (BLIP)"),
])
def test_image_errors(args, message, tmp_path, capsys):
    """In process (`cli.main`): each refusal comes before any model loads; the whole program's exit code and
    stderr are checked through run.py for the first (test_image_error_through_run_py)."""
    assert cli.main([*args, "-wd", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == message, err


def test_image_error_through_run_py(tmp_path):
    proc = run_cli("accuracy", "BLIP", "frameworks", "-wd", str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "error: accuracy (LAMBADA-style text scoring) is not defined for image captioning; use run, compare, "
        "chat --image or benchmark"), proc.stderr


def test_chat_and_run_on_user_images(workdir, tmp_path, capsys):
    """In process: chat and run go through run.py in test_cli.py, and BLIP's refusal in the test above."""
    import json

    path = tmp_path / "chat.json"
    proc = cli_in_process(capsys, "chat", "BLIP", "--compare", "frameworks", "onnxrt", "--use-cache", "--image",
                          IMAGES[1], "--prompt", "a picture of", "--max-new-tokens", "6", "-wd", str(workdir), "--json",
                          str(path))
    assert proc.returncode == 0, proc.stderr
    results = json.loads(path.read_text())["results"]
    assert [r["prompt"] for r in results] == [f"{IMAGES[1]} + a picture of"] * 2
    assert results[0]["output_ids"] == results[1]["output_ids"] and len(results[0]["output_ids"]) > 0
    proc = cli_in_process(capsys, "run", "BLIP", "onnxrt", "--use-cache", "--image", IMAGES[0], "--iterations", "1",
                          "--warmup", "0", "-wd", str(workdir))
    assert proc.returncode == 0 and "n/a" in proc.stdout and "red-square" in proc.stdout
    row = next(line for line in proc.stdout.splitlines() if line.startswith("| onnxrt"))
    assert f"| {Path(IMAGES[0]).name} " in row  # the table shows the file's name, the JSON its path
    # checkpoint.toml has blip-offline's expected outputs: n/a because the user's images ran instead of the samples
    assert ("note: the --image files were captioned instead of checkpoint.toml's samples: nothing is expected for "
            "them, so accuracy is n/a") in proc.stdout
    assert "has no expected outputs" not in proc.stdout
