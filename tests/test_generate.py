"""`generate`: padded batches of the user's prompts give, for every prompt, what that prompt gives alone
(decoders left padded: GPT2, OPT, BLOOM; T5 / BART encoder inputs right padded; BLIP images batched per text
prefix), equal to HF `generate` and on frameworks and onnxrt alike; a dataset line's own max_new_tokens; the --json fields; bad or empty JSONL
files and bad batches are one line, exit 2, naming the file and the line; predict and generate point to each
other. The triton backend's case is tests/test_triton_generate.py."""
from __future__ import annotations

import json

import pytest

from conftest import ROOT, cli_in_process, run_cli
from NNDF import cli

NEW = 5
TEXTS = ("The for statement is used to", "A", "Names refer to objects and the", "Hello, my dog is")
IMAGES = tuple(str(ROOT / "BLIP" / "offline" / "images" / n) for n in ("red-square.png", "blue-circle.jpg"))
FIELDS = {"backend", "prompt", "output_ids", "text", "batch_rows"}


def generate(tmp_path, family: str, *flags: str, backends=("frameworks", "onnxrt"), workdir=None) -> list[dict]:
    """`generate` in process; its JSON results."""
    out = tmp_path / f"generate-{len(list(tmp_path.iterdir()))}.json"
    argv = ["generate", family, *backends, "--use-cache", "--max-new-tokens", str(NEW), "-wd", str(workdir),
            "--device", "cpu", "--json", str(out), *flags]
    assert cli.main(argv) == 0, argv
    return json.loads(out.read_text())["results"]


def by_backend(results: list[dict]) -> dict[str, list[dict]]:
    table: dict[str, list[dict]] = {}
    for r in results:
        table.setdefault(r["backend"], []).append(r)
    return table


def _prompts(texts) -> list[str]:
    return [a for t in texts for a in ("--prompt", t)]


CASES = {  # family -> (its flags, rows of each batch at --batch-size 3)
    "GPT2": (_prompts(TEXTS), [3, 3, 3, 1]),
    "OPT": (_prompts(TEXTS[:3]), [3, 3, 3]),
    "BLOOM": (_prompts(TEXTS[:3]), [3, 3, 3]),  # ALiBi: positions from the mask alone
    "LLAMA": (_prompts(TEXTS[:3]), [3, 3, 3]),  # llama-offline: each prompt in its chat template
    "T5": (_prompts(("translate English to German: The house is wonderful.", "summarize: a short text", "hi")),
           [3, 3, 3]),
    "BART": (_prompts(TEXTS[:3]), [3, 3, 3]),
    # images x text prefixes, image by image: batches of one prefix (the decoder's positions cannot be padded)
    "BLIP": ([a for i in IMAGES for a in ("--image", i)] + _prompts(("a picture of", "this is")), [2, 2, 2, 2]),
}


@pytest.mark.parametrize("family", list(CASES))
def test_padded_batches_equal_each_prompt_alone_on_every_backend(family, tmp_path, workdir):
    flags, rows = CASES[family]
    batched = generate(tmp_path, family, *flags, "--batch-size", "3", "--use-mask", workdir=workdir)
    alone = generate(tmp_path, family, *flags, backends=("frameworks",), workdir=workdir)  # --batch-size 1
    for result in batched:
        assert set(result) == FIELDS, result
    table, single = by_backend(batched), by_backend(alone)
    assert list(table) == ["frameworks", "onnxrt"]
    for backend, results in table.items():
        assert [r["batch_rows"] for r in results] == rows, backend
        assert {r["batch_rows"] for r in single["frameworks"]} == {1}
        assert [r["prompt"] for r in results] == [r["prompt"] for r in single["frameworks"]]  # input order
        assert [r["output_ids"] for r in results] == [r["output_ids"] for r in single["frameworks"]], backend
        assert all(0 < len(r["output_ids"]) <= NEW for r in results)
    assert [r["output_ids"] for r in table["onnxrt"]] == [r["output_ids"] for r in table["frameworks"]]


@pytest.mark.parametrize("family", ["GPT2", "T5"])
def test_outputs_equal_hf_generate_on_each_prompt_alone(family, tmp_path, workdir):
    """Batched (padded, and with beams) outputs against HF `generate` of the same model on each prompt alone."""
    from NNDF import registry
    from NNDF.actions.common import encode
    from NNDF.context import make_context
    from NNDF.options import ModelOptions

    flags = CASES[family][0]
    results = generate(tmp_path, family, *flags, "--batch-size", "3", "--use-mask", "--num-beams", "2",
                       backends=("frameworks",), workdir=workdir)
    run = make_context(registry.family(family), ModelOptions(working_dir=str(workdir), device="cpu", use_cache=True))
    model, task = run.torch_model(), run.family.task
    eos = task.special_ids(run)[0]
    for result in results:
        prompt = encode(run, [result["prompt"]])
        out = model.generate(**task.hf_generate_inputs(run, prompt), max_new_tokens=NEW, num_beams=2)
        new = out[0, prompt.input_ids.shape[1]:].tolist()
        assert result["output_ids"] == (new[: new.index(eos) + 1] if eos in new else new), result["prompt"]
        assert result["text"] == run.tokenizer.decode(result["output_ids"], skip_special_tokens=True)


def test_a_dataset_line_keeps_its_own_max_new_tokens_and_its_place(tmp_path, workdir):
    """Lines with equal settings share a batch (2 + 2 here); the results keep the file's order; a shorter
    generation is the start of the longer one (greedy)."""
    lines = [{"text": TEXTS[0], "max_new_tokens": 2}, {"text": TEXTS[1]}, {"text": TEXTS[2], "max_new_tokens": 2},
             {"text": TEXTS[3]}]
    dataset = tmp_path / "prompts.jsonl"
    dataset.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n", encoding="utf-8")
    got = generate(tmp_path, "GPT2", "--dataset", str(dataset), "--batch-size", "4", "--use-mask",
                   backends=("frameworks",), workdir=workdir)
    full = generate(tmp_path, "GPT2", *_prompts(TEXTS), backends=("frameworks",), workdir=workdir)
    assert [r["prompt"] for r in got] == list(TEXTS)
    assert [r["batch_rows"] for r in got] == [2, 2, 2, 2]
    for line, short, long in zip(lines, got, full):
        wanted = line.get("max_new_tokens", NEW)
        assert short["output_ids"] == long["output_ids"][:wanted]
        assert len(short["output_ids"]) == min(wanted, len(long["output_ids"]))


def test_a_max_length_from_the_model_becomes_each_prompts_own_length(tmp_path, workdir, monkeypatch):
    """A generation config capping prompt + new tokens (HF's max_length, min_length): prompts of different lengths
    get different new-token counts, so they never share a padded batch; equal lengths still do."""
    import dataclasses

    from NNDF import registry
    from NNDF.evaluate import generate as action
    from NNDF.context import make_context
    from NNDF.options import ModelOptions

    resolve = action.generation_config

    def capped(run, sampling, max_new_tokens=None):
        config = resolve(run, sampling, max_new_tokens)
        return dataclasses.replace(config, max_new_tokens=None, max_length=12, min_length=9, eos_token_id=None)

    monkeypatch.setattr(action, "generation_config", capped)
    texts = ("Hello, my dog is", "A", "Hello, my cat is")
    out = tmp_path / "capped.json"
    assert cli.main(["generate", "GPT2", "frameworks", *_prompts(texts), "-b", "4", "--use-mask", "--use-cache",
                     "-wd", str(workdir), "--device", "cpu", "--json", str(out)]) == 0
    got = json.loads(out.read_text())["results"]
    tokenizer = make_context(registry.family("GPT2"), ModelOptions(working_dir=str(workdir), device="cpu")).tokenizer
    assert [r["batch_rows"] for r in got] == [2, 1, 2]
    assert [len(r["output_ids"]) for r in got] == [12 - len(tokenizer(t)["input_ids"]) for t in texts]


def test_a_dataset_of_images_batches_per_text_prefix_with_paths_relative_to_the_file(tmp_path, workdir):
    import shutil

    images = tmp_path / "images"
    images.mkdir()
    for image in IMAGES:
        shutil.copy(image, images)
    lines = [{"image": "images/red-square.png"}, {"image": "images/blue-circle.jpg", "text": "a picture of"},
             {"image": "images/red-square.png", "max_new_tokens": 2}, {"image": "images/blue-circle.jpg"}]
    dataset = tmp_path / "captions.jsonl"
    dataset.write_text("\n".join(json.dumps(line) for line in lines), encoding="utf-8")
    got = generate(tmp_path, "BLIP", "--dataset", str(dataset), "--batch-size", "4", backends=("frameworks",),
                   workdir=workdir)
    assert [r["prompt"] for r in got] == [f"{images / 'red-square.png'}", f"{images / 'blue-circle.jpg'} + a picture of",
                                          f"{images / 'red-square.png'}", f"{images / 'blue-circle.jpg'}"]
    assert [r["batch_rows"] for r in got] == [2, 1, 1, 2]
    assert got[2]["output_ids"] == got[0]["output_ids"][:2]


def test_the_report_prints_a_row_per_prompt_and_backend_and_tokens_per_second(tmp_path, workdir, capsys):
    assert cli.main(["generate", "GPT2", "--compare", "frameworks", *_prompts(TEXTS[:2]), "-b", "2", "--use-mask",
                     "--max-new-tokens", "3", "-wd", str(workdir), "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "generate: GPT2 gpt2-offline" in out and "tokens/s" in out
    assert sum(TEXTS[0][:30] in line for line in out.splitlines()) == 1


def test_image_prompts_and_pipes_keep_the_table_in_its_columns(tmp_path, workdir, capsys):
    """An image prompt's cell joins the image and its text with "+", a "|" of the user's own is escaped: every row
    of the Markdown table has the header's cells."""
    argv = ["generate", "BLIP", "frameworks", "--image", IMAGES[0], "--prompt", "a picture of", "--prompt", "a|b",
            "--max-new-tokens", "2", "-wd", str(workdir), "--device", "cpu"]
    assert cli.main(argv) == 0
    table = [ln for ln in capsys.readouterr().out.splitlines() if "red-square" in ln]
    assert [ln.split(" | ")[2].strip() for ln in table] == [f"{IMAGES[0]} + a picture of", f"{IMAGES[0]} + a\\|b"]
    assert all(ln.replace("\\|", "").count("|") == 5 for ln in table), table  # #, backend, prompt, text


def test_settings_show_the_decoding_a_result_was_made_with(tmp_path, workdir, capsys):
    """Every generating action's header and JSON settings: the cache (static too) and beams, and when sampling the
    sampling settings and the seed, so a sampled result can be drawn again from its JSON."""
    wd = ("-wd", str(workdir), "--device", "cpu")
    sampled = ("--do-sample", "--temperature", "0.7", "--top-k", "5", "--top-p", "0.9", "--repetition-penalty",
               "1.2", "--seed", "3")
    expected = {"use_cache": True, "static_cache": False, "num_beams": 1, "do_sample": True, "temperature": 0.7,
                "top_k": 5, "top_p": 0.9, "seed": 3, "repetition_penalty": 1.2}
    for action, flags in (("generate", ("--prompt", "Hello", "--max-new-tokens", "2")),
                          ("chat", ("--prompt", "Hello", "--max-new-tokens", "2")),
                          ("run", ("--iterations", "1", "--warmup", "0")),
                          ("benchmark", ("--input-seq-len", "4", "--output-seq-len", "2", "--iterations", "1",
                                         "--warmup", "0"))):
        out = tmp_path / f"{action}.json"
        assert cli.main([action, "GPT2", "frameworks", *flags, *sampled, *wd, "--json", str(out)]) == 0, action
        settings = json.loads(out.read_text())["settings"]
        assert {k: settings.get(k) for k in expected} == expected, (action, settings)
        header = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(f"{action}: GPT2"))
        assert "static_cache=False" in header and "temperature=0.7, top_k=5, top_p=0.9, seed=3" in header, header
    assert cli.main(["generate", "GPT2", "frameworks", "--prompt", "Hello", "--max-new-tokens", "2", *wd]) == 0
    header = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("generate: GPT2"))
    assert "do_sample=False, repetition_penalty=1.0)" in header and "temperature" not in header  # greedy


# --- bad input: one line, exit 2, before any model loads ----------------------------------------------------------

def _one_error(capsys, *argv: str) -> str:
    code = cli.main(list(argv))
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


@pytest.mark.parametrize("content, expect", [
    ('{"text": "fine"}\n{"text": "also fine"}\n{"text": broken\n', "line 3 is not JSON"),
    ('{"text": "fine"}\n{"prompt": "x"}\n', 'line 2 has an unknown field "prompt"'),
    ('{"text": "fine"}\n\n{"max_new_tokens": 3}\n', 'line 3 has no "text" field'),
    ('{"text": "fine", "max_new_tokens": "many"}\n', 'line 1 has "max_new_tokens": "many"'),
    ('["a list"]\n', "line 1 has no \"text\" field (it is not a JSON object)"),
    ("\n  \n", "no lines"),
], ids=["not-json", "unknown-field", "no-text", "bad-max-new-tokens", "not-an-object", "empty"])
def test_bad_jsonl_is_one_line_naming_the_file_and_line(content, expect, tmp_path, capsys):
    dataset = tmp_path / "bad.jsonl"
    dataset.write_text(content, encoding="utf-8")
    line = _one_error(capsys, "generate", "GPT2", "frameworks", "--dataset", str(dataset))
    assert line.startswith(f"error: --dataset {dataset}: ") and expect in line, line


def test_bad_jsonl_from_run_py_exits_2_with_one_line(tmp_path, capsys):
    """The whole program: exit code 2, one line, no traceback (a bad line through run.py, then an empty file in
    process with the same checks)."""
    dataset = tmp_path / "bad.jsonl"
    for content, expect in (('{"text": "fine"}\n{"text": broken\n', "line 2 is not JSON"), ("", "no lines")):
        dataset.write_text(content, encoding="utf-8")
        argv = ("generate", "GPT2", "frameworks", "--dataset", str(dataset))
        proc = run_cli(*argv, timeout=300) if content else cli_in_process(capsys, *argv)
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        assert len(lines) == 1 and lines[0].startswith(f"error: --dataset {dataset}: ") and expect in lines[0], lines


def test_bad_prompts_and_batches_are_one_line(tmp_path, workdir, capsys):
    wd = ("-wd", str(workdir), "--device", "cpu")
    images = tmp_path / "images.jsonl"
    images.write_text(json.dumps({"text": "a picture of"}) + "\n", encoding="utf-8")
    lost = tmp_path / "lost-image.jsonl"
    lost.write_text(json.dumps({"image": "missing.png"}) + "\n", encoding="utf-8")
    cases = [
        (("generate", "GPT2", "frameworks", *wd), "generate needs prompts"),
        (("generate", "GPT2", "frameworks", "--prompt", " ", *wd), "empty --prompt"),
        (("generate", "GPT2", "frameworks", "--prompt", "a", "--dataset", str(images), *wd), "alternatives"),
        (("generate", "GPT2", "frameworks", "--dataset", str(tmp_path / "missing.jsonl"), *wd), "no such file"),
        (("generate", "BLIP", "frameworks", "--dataset", str(images), *wd), f"{images}: line 1: image captioning"),
        (("generate", "GPT2", "frameworks", "--prompt", "a", "--prompt", "a b c d e", "-b", "2", *wd),
         "prompt 1 and the prompt batched with it: prompts of different lengths are padded: add --use-mask"),
        (("generate", "GPT2", "frameworks", *_prompts(("a", "a b", "a b c")), "-b", "3", *wd),
         "prompt 1 and the 2 prompts batched with it: prompts of different lengths"),
        # a dataset line's image is its "image" field, not a --image flag
        (("generate", "BLIP", "frameworks", "--dataset", str(lost), *wd),
         f"--dataset {lost}: line 1: image {tmp_path / 'missing.png'}: no such file; give a PNG or JPEG file"),
        (("generate", "GPT2", "frameworks", "--dataset", str(lost), *wd),
         f"--dataset {lost}: line 1: image applies to image-to-text models; decoder models read text"),
        (("generate", "GPT2", "frameworks", "--prompt", "hello world " * 300, *wd), "prompt 1: the prompt is"),
    ]
    for argv, expect in cases:
        assert expect in _one_error(capsys, *argv), argv


def test_predict_and_generate_point_to_each_other(capsys):
    assert "use predict" in _one_error(capsys, "generate", "BERT", "frameworks", "--prompt", "hi")
    assert "use generate" in _one_error(capsys, "predict", "GPT2", "frameworks", "--prompt", "hi")
