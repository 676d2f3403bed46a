"""A model's generation_config is honoured as HF `generate` honours it: offline models copied with rewritten
generation_config.json files (bart-large-cnn's settings, mBART-50's forced EOS, GPT-2 with penalties and bad
words) run through `--torch-dir`, token for token against HF `model.generate(**inputs, max_new_tokens=N)`
called with nothing else; flags override the config; --ignore-generation-config is the flags-only behaviour;
beam search's early_stopping True / False / "never" against HF."""
import json
import shutil

import pytest
import torch

from NNDF import registry
from NNDF.actions.common import backend_steps, encode, generate_prompt, generation_config
from CausalLM.torch_steps import TorchSteps
from NNDF.context import make_context
from NNDF.generation import GenerationConfig, generate
from NNDF.offline import redraw_weights
from NNDF.options import ModelOptions, SamplingOptions

from conftest import cli_in_process

NEW = 8
TEXTS = ["The for statement is used to", "A", "Names refer to objects and the"]
BART_CNN = dict(num_beams=4, length_penalty=2.0, min_length=5, max_length=142, no_repeat_ngram_size=3,
                early_stopping=True, forced_bos_token_id=0, forced_eos_token_id=2)


def _copy(workdir, tmp_path_factory, family: str, variant: str, name: str, **generation) -> str:
    """A copy of an offline model whose generation_config.json also carries `generation`."""
    run = make_context(registry.family(family), ModelOptions(variant=variant, working_dir=str(workdir), device="cpu"))
    folder = tmp_path_factory.mktemp("models") / name
    shutil.copytree(run.source.location, folder)
    path = folder / "generation_config.json"
    data = json.loads(path.read_text())
    data.update(generation)
    path.write_text(json.dumps(data, indent=2))
    return str(folder)


@pytest.fixture(scope="module")
def bart_cnn(workdir, tmp_path_factory):
    return _copy(workdir, tmp_path_factory, "BART", "bart-offline", "bart-cnn-like", **BART_CNN)


@pytest.fixture(scope="module")
def mbart50(workdir, tmp_path_factory):
    """mBART-50's generation settings (forced EOS, max_length 200, early stopping; 2 beams instead of 5) plus
    the target language (de_DE) as forced BOS, as a translation pipeline sets it."""
    run = make_context(registry.family("BART"), ModelOptions(variant="mbart-offline", working_dir=str(workdir),
                                                             device="cpu"))
    return _copy(workdir, tmp_path_factory, "BART", "mbart-offline", "mbart50-like", num_beams=2, max_length=200,
                 early_stopping=True, forced_eos_token_id=2,
                 forced_bos_token_id=run.tokenizer.convert_tokens_to_ids("de_DE"))


@pytest.fixture(scope="module")
def gpt2_penalties(workdir, tmp_path_factory):
    """GPT-2 with a repetition penalty, no-repeat 3-grams, bad words (two tokens its greedy search would emit
    and a two-token sequence) and beam search with early_stopping="never" and a length penalty."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run = make_context(registry.family("GPT2"), ModelOptions(variant="gpt2-offline", working_dir=str(workdir),
                                                             device="cpu"))
    model = AutoModelForCausalLM.from_pretrained(run.source.location)
    ids = AutoTokenizer.from_pretrained(run.source.location)(TEXTS[0], return_tensors="pt")
    greedy = model.generate(**ids, max_new_tokens=4, do_sample=False)[0, ids["input_ids"].shape[1]:].tolist()
    return _copy(workdir, tmp_path_factory, "GPT2", "gpt2-offline", "gpt2-penalties", repetition_penalty=1.3,
                 no_repeat_ngram_size=3, bad_words_ids=[[greedy[1]], [greedy[3]], [greedy[0], greedy[2]]],
                 num_beams=3, early_stopping="never", length_penalty=1.5)


def _run(family, folder, workdir, **options):
    return make_context(registry.family(family), ModelOptions(torch_dir=folder, working_dir=str(workdir),
                                                              use_cache=True, use_mask=True, device="cpu", **options))


def _hf(run, prompt, **kwargs):
    """HF generate on the same inputs, with the model's generation config and only `kwargs` added."""
    model = run.torch_model()
    inputs = prompt.encoder or {"input_ids": prompt.input_ids, "attention_mask": prompt.attention_mask}
    out = model.generate(**inputs, max_new_tokens=NEW, **kwargs)
    eos = run.tokenizer.eos_token_id
    rows = []
    for r in range(prompt.batch):
        new = out[r, prompt.input_ids.shape[1]:].tolist()
        rows.append(new[: new.index(eos) + 1] if eos in new else new)
    return rows


def _ours(run, steps, prompt, sampling=SamplingOptions()):
    config = generation_config(run, sampling, NEW)
    out = generate_prompt(steps, prompt, config)
    return [out.new_tokens(r, config.eos_token_id) for r in range(prompt.batch)]


@pytest.fixture(scope="module")
def hf_reference():
    """HF generate's rows per (model folder, extra generate arguments), computed on the first backend's case and
    read on the other's: both backends compare with the same reference (same model, same prompts)."""
    rows = {}

    def get(run, prompt, **kwargs):
        key = (str(run.source.location), tuple(sorted(kwargs.items())))
        if key not in rows:
            rows[key] = _hf(run, prompt, **kwargs)
        return rows[key]

    return get


@pytest.mark.parametrize("backend", ["frameworks", "onnxrt"])
@pytest.mark.parametrize("model", ["bart_cnn", "mbart50", "gpt2_penalties"])
def test_config_parity_with_hf_generate(model, backend, workdir, request, hf_reference):
    family = "GPT2" if model.startswith("gpt2") else "BART"
    run = _run(family, request.getfixturevalue(model), workdir)
    assert run.num_beams == run.source.generation.num_beams > 1
    prompt = encode(run, TEXTS)
    expected = hf_reference(run, prompt)
    with backend_steps(run, backend) as (_, steps):
        assert _ours(run, steps, prompt) == expected
        greedy = SamplingOptions()  # the config's beams overridden by the flag; every other setting still applies
        greedy_run = _run(family, request.getfixturevalue(model), workdir, num_beams=1)
        assert _ours(greedy_run, steps, prompt, greedy) == hf_reference(run, prompt, num_beams=1)


@pytest.mark.parametrize("num_beams", [1, 2])
def test_forced_eos_ends_a_generation_cut_by_the_length_limit(mbart50, workdir, num_beams):
    """The measured defect: mBART-50 (and every BART checkpoint) carries forced_eos_token_id; a generation that
    reaches the limit ends with EOS in HF, and now here (it did not when the config was ignored)."""
    run = _run("BART", mbart50, workdir, num_beams=num_beams)
    prompt = encode(run, TEXTS)
    eos = run.tokenizer.eos_token_id
    expected = _hf(run, prompt, num_beams=num_beams)
    with backend_steps(run, "frameworks") as (_, steps):
        ours = _ours(run, steps, prompt)
        plain = _ours(_run("BART", mbart50, workdir, num_beams=num_beams, ignore_generation_config=True), steps,
                      prompt)
    assert ours == expected
    assert all(row[-1] == eos for row in ours)
    cut = [r for r, row in enumerate(ours) if len(row) == NEW]
    assert cut, "some row must reach the length limit"
    assert any(plain[r][-1] != eos for r in cut), "without the config the limit cuts a row before EOS"
    assert all(row[0] == run.source.generation.forced_bos_token_id for row in ours + plain)


def test_flags_override_the_config(bart_cnn, workdir):
    run = _run("BART", bart_cnn, workdir, num_beams=2)
    flags = SamplingOptions(length_penalty=0.5, no_repeat_ngram_size=0, early_stopping="never", min_new_tokens=2,
                            repetition_penalty=1.2)
    config = generation_config(run, flags, NEW)
    assert (config.num_beams, config.length_penalty, config.no_repeat_ngram_size, config.early_stopping,
            config.min_new_tokens, config.min_length, config.sampling.repetition_penalty) == (2, 0.5, 0, "never", 2, 0,
                                                                                            1.2)
    assert config.forced_eos_token_id == 2 and config.forced_bos_token_id == 0  # not overridden: from the config
    prompt = encode(run, TEXTS)
    expected = _hf(run, prompt, num_beams=2, length_penalty=0.5, no_repeat_ngram_size=0, early_stopping="never",
                   min_new_tokens=2, repetition_penalty=1.2)
    with backend_steps(run, "frameworks") as (_, steps):
        assert _ours(run, steps, prompt, flags) == expected


def test_ignore_generation_config_is_the_flags_only_behaviour(bart_cnn, workdir):
    honoured = _run("BART", bart_cnn, workdir)
    ignored = _run("BART", bart_cnn, workdir, ignore_generation_config=True)
    tok = ignored.tokenizer
    assert (honoured.num_beams, ignored.num_beams) == (4, 1)
    plain = GenerationConfig(max_new_tokens=NEW, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                             forced_bos_token_id=0)  # the forced first token is still read (mBART's language)
    assert generation_config(ignored, SamplingOptions(), NEW) == plain
    assert generation_config(honoured, SamplingOptions(), NEW) != plain
    # flags still apply; flags-only defaults (top-k off) replace HF's global ones (top-k 50)
    flags = SamplingOptions(do_sample=True, temperature=0.7)
    assert generation_config(ignored, flags, NEW).sampling.top_k == 0
    assert generation_config(_run("BART", bart_cnn, workdir, num_beams=1), flags, NEW).sampling.top_k == 50
    prompt = encode(ignored, TEXTS)
    with backend_steps(ignored, "frameworks") as (_, steps):
        expected = _hf(ignored, prompt, num_beams=1, length_penalty=1.0, min_length=0, no_repeat_ngram_size=0,
                       early_stopping=False, forced_eos_token_id=None)
        assert _ours(ignored, steps, prompt) == expected


def test_chat_takes_max_length_from_the_config(mbart50, workdir):
    run = _run("BART", mbart50, workdir)
    config = generation_config(run, SamplingOptions())  # chat without --max-new-tokens
    assert (config.max_new_tokens, config.max_length) == (None, 200) and config.new_tokens(1) == 199
    assert generation_config(_run("BART", mbart50, workdir, ignore_generation_config=True),
                             SamplingOptions()).max_new_tokens == 32


def test_unsupported_config_fields_are_refused(workdir, tmp_path_factory, capsys):
    folder = _copy(workdir, tmp_path_factory, "GPT2", "gpt2-offline", "gpt2-unsupported",
                   encoder_repetition_penalty=1.2, suppress_tokens=[5])
    proc = cli_in_process(capsys, "chat", "GPT2", "frameworks", "--torch-dir", folder, "--prompt", "x", "-wd",
                          str(workdir))
    assert proc.returncode != 0
    assert "encoder_repetition_penalty=1.2" in proc.stderr and "suppress_tokens=[5]" in proc.stderr
    assert "--ignore-generation-config" in proc.stderr and "Traceback" not in proc.stderr
    ok = cli_in_process(capsys, "chat", "GPT2", "frameworks", "--torch-dir", folder, "--prompt", "x",
                        "--max-new-tokens", "3", "--ignore-generation-config", "-wd", str(workdir))
    assert ok.returncode == 0, ok.stderr[-2000:]


def test_beam_sampling_from_the_config_is_refused(workdir, tmp_path_factory, capsys):
    folder = _copy(workdir, tmp_path_factory, "GPT2", "gpt2-offline", "gpt2-beam-sampling", do_sample=True,
                   num_beams=2)
    proc = cli_in_process(capsys, "chat", "GPT2", "frameworks", "--torch-dir", folder, "--prompt", "x", "-wd",
                          str(workdir))
    assert proc.returncode != 0 and "(beam sampling) is not supported" in proc.stderr
    assert "num_beams=2" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def _tiny():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=24, n_positions=64,
                                       bos_token_id=0, eos_token_id=0, pad_token_id=0)).eval()
    redraw_weights(model, 0, 0.3)
    return model


@pytest.mark.parametrize("early_stopping", [True, False, "never"], ids=str)
@pytest.mark.parametrize("length_penalty", [1.0, 2.0, -0.5])
def test_early_stopping_parity(early_stopping, length_penalty):
    """HF 5.23's beam-search stop rules on a tiny model whose EOS comes early and often (many finished
    hypotheses per item), padded batch of 3 prompts, 3 and 4 beams."""
    model = _tiny()
    steps = TorchSteps(model, use_cache=True)
    ids = torch.tensor([[0, 0, 5, 6, 7], [0, 9, 3, 2, 1], [4, 4, 8, 8, 11]])
    mask = torch.tensor([[0, 0, 1, 1, 1], [0, 1, 1, 1, 1], [1, 1, 1, 1, 1]])
    for eos in (4, 7, 11):
        for beams in (3, 4):
            ref = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=12, num_beams=beams,
                                 do_sample=False, eos_token_id=eos, pad_token_id=0, early_stopping=early_stopping,
                                 length_penalty=length_penalty)
            out = generate(steps, ids, mask, GenerationConfig(max_new_tokens=12, num_beams=beams, eos_token_id=eos,
                                                               early_stopping=early_stopping,
                                                               length_penalty=length_penalty))
            for r in range(3):
                new = ref[r, 5:].tolist()
                new = new[: new.index(eos) + 1] if eos in new else new
                assert out.new_tokens(r, eos) == new, (eos, beams, r)


def test_early_stopping_modes_differ():
    """The parity above is not vacuous: the three rules choose different hypotheses on these inputs."""
    model = _tiny()
    steps = TorchSteps(model, use_cache=True)
    ids = torch.tensor([[0, 0, 5, 6, 7], [0, 9, 3, 2, 1], [4, 4, 8, 8, 11]])
    mask = torch.tensor([[0, 0, 1, 1, 1], [0, 1, 1, 1, 1], [1, 1, 1, 1, 1]])
    outs = set()
    for early_stopping in (True, False, "never"):
        rows = []
        for eos in (4, 7, 11):
            out = generate(steps, ids, mask, GenerationConfig(max_new_tokens=12, num_beams=3, eos_token_id=eos,
                                                               early_stopping=early_stopping, length_penalty=1.0))
            rows.append(tuple(tuple(out.new_tokens(r, eos)) for r in range(3)))
        outs.add(tuple(rows))
    assert len(outs) == 3
