"""The committed `llama-offline` folder (tools/assets/make_offline_llama.py): it loads offline, its chat template
renders system / user / assistant turns and the generation prompt, its generation config ends on end of text or
end of turn, and a greedy chat answer is words closed by `<|end|>`."""
from pathlib import Path

import pytest
from jinja2.exceptions import TemplateError

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "LLAMA" / "offline" / "llama-offline"


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(FOLDER, local_files_only=True)


def test_chat_template_renders_every_role_and_the_generation_prompt(tokenizer):
    messages = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "What is a list? "}]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == ("<s><|system|>\nAnswer briefly.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello!<|end|>\n"
                    "<|user|>\nWhat is a list?<|end|>\n<|assistant|>\n")
    ids = tokenizer.apply_chat_template(messages[1:2], add_generation_prompt=True)["input_ids"]
    assert ids.count(tokenizer.bos_token_id) == 1  # the template's <s>; the tokenizer adds no second one


def test_chat_template_refuses_an_unknown_role(tokenizer):
    with pytest.raises(TemplateError, match="system, user or assistant"):
        tokenizer.apply_chat_template([{"role": "tool", "content": "42"}], tokenize=False)


def test_plain_text_starts_with_bos_and_round_trips(tokenizer):
    text = "naïve café — “quoted” ✓ 東京\n\ttab"
    ids = tokenizer(text)["input_ids"]
    assert ids[0] == tokenizer.bos_token_id
    assert tokenizer.decode(ids, skip_special_tokens=True) == text


def test_generation_config_ends_on_end_of_text_or_end_of_turn(tokenizer):
    from transformers import GenerationConfig

    config = GenerationConfig.from_pretrained(FOLDER, local_files_only=True)
    assert config.eos_token_id == [tokenizer.convert_tokens_to_ids(t) for t in ("</s>", "<|end|>")]
    assert (config.bos_token_id, config.pad_token_id) == (tokenizer.bos_token_id, tokenizer.eos_token_id)


def test_greedy_chat_answer_is_words_closed_by_end_of_turn(tokenizer):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(FOLDER, local_files_only=True)
    chat = [{"role": "user", "content": 'What is the "for" statement?'}]
    inputs = tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**inputs, max_new_tokens=80, do_sample=False)
    answer = tokenizer.decode(out[0, inputs["input_ids"].shape[1]:])
    assert answer.endswith("<|end|>"), answer
    assert len(answer.removesuffix("<|end|>").split()) >= 5, answer


def test_folder_stays_small():
    assert sum(f.stat().st_size for f in FOLDER.iterdir()) < 12 * 1024 * 1024
