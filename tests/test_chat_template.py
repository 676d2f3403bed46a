"""Chat templates in `chat` and `generate` (NNDF/chat_template.py), on a tiny random Llama whose tokenizer has a
chat template and whose generation config lists two end ids (end of text, end of turn), written by a fixture:
the prompt ids are `apply_chat_template`'s (system prompt included), `--no-chat-template` sends the raw text,
the outputs equal HF `generate` on the templated ids, interactive chat keeps its history within the model's
positions by dropping whole oldest turns (with a note), a line too long alone is refused, generation stops at
any of several EOS ids, and `--system` where it cannot apply is one line, exit 2."""
from __future__ import annotations

import json

import pytest
import torch

from conftest import ROOT, run_cli
from NNDF import cli

POSITIONS = 64  # short, so that a few turns of chat fill it
NEW = 6
SYSTEM = "You answer in one line."
SPECIALS = ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def _write_model(folder, eos_ids=None):
    """A random 2-layer Llama on the shared byte-level BPE plus the template's special tokens."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from LLAMA.config import SHAPE
    from NNDF.offline import redraw_weights

    tok = AutoTokenizer.from_pretrained(ROOT / "data" / "tokenizers" / "byte-bpe")
    tok.add_special_tokens({"additional_special_tokens": SPECIALS})
    tok.chat_template = TEMPLATE
    eos = tok.eos_token_id
    config = LlamaConfig(**{**SHAPE, "max_position_embeddings": POSITIONS}, vocab_size=len(tok), bos_token_id=eos,
                         eos_token_id=eos, pad_token_id=eos)
    model = LlamaForCausalLM(config)
    redraw_weights(model, seed=5, std=0.5)
    model.generation_config.eos_token_id = eos_ids or [eos, tok.convert_tokens_to_ids("<|end|>")]
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    return _write_model(tmp_path_factory.mktemp("chat-llama"))


@pytest.fixture(scope="module")
def wd(tmp_path_factory):
    return str(tmp_path_factory.mktemp("chat-wd"))


def _hf(folder):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)


def _messages(message, system=None, turns=()):
    out = [{"role": "system", "content": system}] if system is not None else []
    for user, assistant in turns:
        out += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    return out + [{"role": "user", "content": message}]


def _hf_new_tokens(model, ids: list[int], new: int = NEW) -> list[int]:
    """HF generate's new tokens (greedy) up to and including the first of the generation config's end ids."""
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             max_new_tokens=new, do_sample=False, pad_token_id=model.config.pad_token_id)
    tokens, ends = out[0, len(ids):].tolist(), set(model.generation_config.eos_token_id)
    first = next((i for i, t in enumerate(tokens) if t in ends), None)
    return tokens if first is None else tokens[: first + 1]


def _generate(folder, wd, tmp_path, *flags, backends=("frameworks",)) -> list[dict]:
    out = tmp_path / f"generate-{len(list(tmp_path.iterdir()))}.json"
    argv = ["generate", "LLAMA", *backends, "--torch-dir", str(folder), "--max-new-tokens", str(NEW), "-wd", wd,
            "--device", "cpu", "--json", str(out), *flags]
    assert cli.main(argv) == 0, argv
    return json.loads(out.read_text())["results"]


def test_prompt_ids_are_apply_chat_template_s_with_the_system_prompt(chat_model, wd):
    from NNDF.actions.common import open_run
    from NNDF.chat_template import ChatTemplateOptions, template_of, templated
    from NNDF.options import ModelOptions
    from NNDF.session import encode

    _, tok = _hf(chat_model)
    texts = ["Hello there", "What is a for statement?"]
    run = open_run("LLAMA", ModelOptions(torch_dir=str(chat_model), working_dir=wd, use_mask=True), ("frameworks",))
    for system in (None, SYSTEM):
        prompt = encode(run, templated(template_of(run, ChatTemplateOptions(system=system)), texts))
        for row, text in enumerate(texts):
            want = tok.apply_chat_template(_messages(text, system), add_generation_prompt=True, return_dict=False)
            got = prompt.input_ids[row][prompt.attention_mask[row].bool()].tolist()  # left padding off
            assert got == want
            rendered = tok.decode(got)
            assert rendered.endswith(f"<|user|>{text}<|end|><|assistant|>")
            assert (f"<|system|>{SYSTEM}<|end|>" in rendered) == (system is not None)
    raw = encode(run, templated(template_of(run, ChatTemplateOptions(no_chat_template=True)), texts[:1]))
    assert raw.input_ids[0].tolist() == tok(texts[0])["input_ids"]  # --no-chat-template: the text as it is


def test_generate_equals_hf_generate_on_the_templated_ids(chat_model, wd, tmp_path):
    """Parity on frameworks and onnxrt, batched (left padded) with --system; --no-chat-template on the raw ids."""
    model, tok = _hf(chat_model)
    texts = ["Hello there", "Tell me about the for statement", "Hi"]
    prompts = [a for t in texts for a in ("--prompt", t)]
    results = _generate(chat_model, wd, tmp_path, *prompts, "--system", SYSTEM, "--batch-size", "3", "--use-mask",
                        backends=("frameworks", "onnxrt"))
    assert [(r["backend"], r["prompt"]) for r in results] == [(b, t) for t in texts for b in ("frameworks", "onnxrt")]
    for r in results:
        ids = tok.apply_chat_template(_messages(r["prompt"], SYSTEM), add_generation_prompt=True, return_dict=False)
        assert r["output_ids"] == _hf_new_tokens(model, ids), r["backend"]
        assert r["text"] == tok.decode(r["output_ids"], skip_special_tokens=True)
    raw = _generate(chat_model, wd, tmp_path, "--prompt", texts[0], "--no-chat-template")
    assert raw[0]["output_ids"] == _hf_new_tokens(model, tok(texts[0])["input_ids"])


def test_generation_stops_at_any_of_several_eos_ids(chat_model, wd, tmp_path):
    """The generation config's end ids all end generation: a folder whose list adds the token the model says third
    stops there (as HF generate does on the same ids); the tokenizer's EOS stays one of them."""
    model, tok = _hf(chat_model)
    free = _generate(chat_model, wd, tmp_path, "--prompt", "Hello there", "--max-new-tokens", "12")[0]["output_ids"]
    ends = set(model.generation_config.eos_token_id)
    assert len(free) == 12 and not ends & set(free), "pick a prompt whose free answer hits no end id"
    third = free[2]
    folder = _write_model(tmp_path / "three-ends", eos_ids=[tok.eos_token_id, third, tok.convert_tokens_to_ids("<|end|>")])
    got = _generate(folder, wd, tmp_path, "--prompt", "Hello there", "--max-new-tokens", "12")[0]["output_ids"]
    assert got == free[: free.index(third) + 1]
    ids = tok.apply_chat_template(_messages("Hello there"), add_generation_prompt=True, return_dict=False)
    assert got == _hf_new_tokens(_hf(folder)[0], ids, 12)

    from NNDF.generation import GenerationConfig, generate

    class Steps:  # says 5, 6, 7, 8, ... whatever it is given: which id ends the row is the only question
        device, use_cache = torch.device("cpu"), False

        def new_cache(self, batch, length):
            return None

        def forward(self, ids, mask, positions, cache, last_only=False):
            logits = torch.full((ids.shape[0], 1, 100), -1e9)  # [N, 1, V]
            logits[:, -1, 2 + int(mask.sum(dim=1).max())] = 0.0  # 5 after the 3-token prompt
            return logits, cache

    prompt = torch.tensor([[1, 2, 3]])
    for eos, want in ((7, [5, 6, 7]), ((9, 6), [5, 6]), (None, [5, 6, 7, 8, 9])):
        out = generate(Steps(), prompt, torch.ones_like(prompt), GenerationConfig(max_new_tokens=5, eos_token_id=eos))
        assert out.new_tokens(0, eos) == want


def _chat(folder, wd, tmp_path, lines, *flags):
    out = tmp_path / f"chat-{len(list(tmp_path.iterdir()))}.json"
    proc = run_cli("chat", "LLAMA", "frameworks", "--torch-dir", str(folder), "--max-new-tokens", str(NEW), "-wd", wd,
                   "--json", str(out), *flags, stdin="".join(f"{line}\n" for line in lines))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return json.loads(out.read_text())["results"], proc.stderr


def test_interactive_chat_keeps_history_and_drops_whole_oldest_turns(chat_model, wd, tmp_path):
    """Each answer equals HF generate on the template over the system prompt, the turns kept so far and the line;
    turns are dropped whole, oldest first, only when prompt + new tokens would pass the positions, with a note."""
    model, tok = _hf(chat_model)
    lines = ["Hello there", "What is a loop", "Tell me more about it", "And the for statement",
             "Thanks a lot", "One more question"]
    results, stderr = _chat(chat_model, wd, tmp_path, lines, "--system", SYSTEM)
    assert [r["prompt"] for r in results] == lines
    turns, dropped = [], 0
    for r in results:
        while True:  # the rule, applied independently: the oldest turn goes until the prompt fits
            ids = tok.apply_chat_template(_messages(r["prompt"], SYSTEM, turns), add_generation_prompt=True,
                                          return_dict=False)
            if len(ids) + NEW <= POSITIONS:
                break
            turns.pop(0)
            dropped += 1
        assert r["output_ids"] == _hf_new_tokens(model, ids), r["prompt"]
        turns.append((r["prompt"], r["text"]))
    notes = [line for line in stderr.splitlines() if line.startswith("note: dropped the oldest")]
    assert dropped >= 2 and notes, "the conversation must outgrow the positions for this test"
    assert sum(int(n.split()[4]) for n in notes) == dropped and all("and the system prompt" in n for n in notes)


def test_clear_starts_a_new_conversation(chat_model, wd, tmp_path):
    """`/clear` forgets the turns before it (the system prompt stays): the next answer is HF generate's on that line
    alone; the turn before `/clear` had the first in its prompt."""
    model, tok = _hf(chat_model)
    results, stderr = _chat(chat_model, wd, tmp_path, ["Hello there", "What is a loop", "/clear", "Thanks"],
                            "--system", SYSTEM)
    assert [r["prompt"] for r in results] == ["Hello there", "What is a loop", "Thanks"]
    assert "'/clear' starts a new conversation" in stderr
    assert [line for line in stderr.splitlines() if "a new conversation:" in line] == [
        "note: a new conversation: the turns before are forgotten"]
    kept = tok.apply_chat_template(_messages("What is a loop", SYSTEM, [("Hello there", results[0]["text"])]),
                                   add_generation_prompt=True, return_dict=False)
    assert results[1]["output_ids"] == _hf_new_tokens(model, kept)
    alone = tok.apply_chat_template(_messages("Thanks", SYSTEM), add_generation_prompt=True, return_dict=False)
    assert results[2]["output_ids"] == _hf_new_tokens(model, alone)


def test_a_line_too_long_alone_is_refused_and_the_conversation_goes_on(chat_model, wd, tmp_path):
    model, tok = _hf(chat_model)
    long = " ".join(["word"] * POSITIONS)
    results, stderr = _chat(chat_model, wd, tmp_path, ["Hello there", long, "Thanks"])
    assert [r["prompt"] for r in results] == ["Hello there", "Thanks"]
    refusal = [line for line in stderr.splitlines() if line.startswith("error: line 2:")]
    assert len(refusal) == 1 and "the line alone in the chat template" in refusal[0]
    # the history is kept: the third line's prompt holds the first turn
    ids = tok.apply_chat_template(_messages("Thanks", None, [("Hello there", results[0]["text"])]),
                                  add_generation_prompt=True, return_dict=False)
    assert results[1]["output_ids"] == _hf_new_tokens(model, ids)


@pytest.mark.parametrize("args,expect", [
    (("chat", "--prompt", " ".join(["word"] * POSITIONS)), "positions take a prompt of at most"),
    (("generate", "--prompt", " ".join(["word"] * POSITIONS)), "prompt 1: the prompt is"),
])
def test_a_prompt_too_long_is_one_line_exit_2(chat_model, wd, args, expect, capsys):
    """chat through run.py (the whole program); generate's refusal, before any backend is set up, in process."""
    argv = (args[0], "LLAMA", "frameworks", "--torch-dir", str(chat_model), "--max-new-tokens", str(NEW), "-wd", wd,
            *args[1:])
    if args[0] == "chat":
        proc = run_cli(*argv)
        code, err = proc.returncode, proc.stderr
        assert "Traceback" not in err
    else:
        code, err = cli.main(list(argv)), capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expect in lines[0], err


SYSTEM_CASES = [
    (("chat", "GPT2", "frameworks", "--system", "Be brief.", "--prompt", "Hi"),
     "--system needs a chat template, and gpt2-offline's tokenizer has none"),
    (("generate", "GPT2", "frameworks", "--system", "Be brief.", "--prompt", "Hi"),
     "--system needs a chat template, and gpt2-offline's tokenizer has none"),
    (("chat", "T5", "frameworks", "--system", "Be brief.", "--prompt", "Hi"),
     "--system does not apply to T5 (seq2seq models): it belongs to decoder-only models"),
    (("chat", "GPT2", "frameworks", "--system", "Be brief.", "--no-chat-template", "--prompt", "Hi"),
     "drop --no-chat-template, or --system"),
]


@pytest.mark.parametrize("args,expect", SYSTEM_CASES)
def test_system_where_it_cannot_apply_is_one_line_exit_2(args, expect, wd, capsys):
    """The first case through run.py (the whole program: exit code, one line, no traceback); the others, refused
    before any model loads, through cli.main in process with the same checks."""
    if args == SYSTEM_CASES[0][0]:
        proc = run_cli(*args, "-wd", wd)
        code, err = proc.returncode, proc.stderr
        assert "Traceback" not in err
    else:
        code, err = cli.main([*args, "-wd", wd]), capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines() == [f"error: {err.strip()[7:]}"] and expect in err


def test_a_model_without_a_template_runs_raw_text(wd, tmp_path):
    """GPT2's offline tokenizer has no chat template: generate sends the text as it is (HF generate on tok(text))."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = ROOT / "GPT2" / "offline" / "gpt2-offline"
    model, tok = AutoModelForCausalLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)
    out = tmp_path / "raw.json"
    assert cli.main(["generate", "GPT2", "frameworks", "--prompt", "The for statement", "--max-new-tokens", "5",
                     "-wd", wd, "--json", str(out)]) == 0
    ids = tok("The for statement")["input_ids"]
    with torch.no_grad():
        ref = model.generate(torch.tensor([ids]), max_new_tokens=5, do_sample=False, pad_token_id=tok.eos_token_id)
    new = ref[0, len(ids):].tolist()
    new = new[: new.index(tok.eos_token_id) + 1] if tok.eos_token_id in new else new
    assert json.loads(out.read_text())["results"][0]["output_ids"] == new


def test_benchmark_and_accuracy_take_no_chat_template_flags(chat_model, wd, capsys):
    """benchmark through run.py; accuracy's refusal (the same one) in process: both name where the flag applies."""
    proc = run_cli("benchmark", "LLAMA", "frameworks", "--torch-dir", str(chat_model), "--system", "x", "-wd", wd)
    where = "--system does not apply to {} (it applies to chat, generate)"
    assert proc.returncode == 2 and where.format("benchmark") in proc.stderr
    code = cli.main(["accuracy", "LLAMA", "frameworks", "--torch-dir", str(chat_model), "--system", "x", "-wd", wd])
    assert code == 2 and where.format("accuracy") in capsys.readouterr().err



def test_the_usage_raw_text_example_gets_a_visible_answer(wd, tmp_path):
    """docs/USAGE.md's --no-chat-template command, as written: llama-offline continues the text."""
    import shlex

    usage = (ROOT / "docs" / "USAGE.md").read_text()
    line = next(ln for ln in usage.splitlines() if ln.startswith("python run.py") and "--no-chat-template" in ln)
    out = tmp_path / "raw.json"
    assert cli.main([*shlex.split(line)[2:], "--max-new-tokens", "8", "-wd", wd, "--device", "cpu", "--json",
                     str(out)]) == 0
    assert json.loads(out.read_text())["results"][0]["text"].strip()
