"""Build the offline default Llama model: a small chat-tuned Llama trained from scratch on local text.

The LLAMA family's default variant must load without the HuggingFace Hub and answer a `chat` prompt in words,
so it is trained here, like ``make_offline_gpt2.py``'s GPT-2, on the offline corpus
(``tools/assets/offline_corpus.py``) plus chat conversations made from its training topics
(``tools/assets/offline_chat.py``). The training loop is the shared one (``tools/assets/offline_training.py``).

Steps:
  1. train a byte-level BPE tokenizer with Llama-style specials (``<s>`` bos, ``</s>`` end of text) and chat
     specials (``<|system|>``, ``<|user|>``, ``<|assistant|>``, ``<|end|>`` end of turn); the tokenizer adds
     ``<s>`` in front of a text, as Llama's do; its config carries the chat template (``CHAT_TEMPLATE``);
  2. pack ``<s>`` document ``</s>`` for every corpus document and every rendered conversation into one stream;
  3. train a 4-layer LlamaForCausalLM with grouped-query attention on random windows of that stream;
  4. measure held-out perplexity and the LAMBADA-style scores on ``data/lambada_offline.jsonl`` (both on the
     held-out topics, which neither the corpus nor the conversations contain), save, reload and chat.

The generation config ends generation on either ``</s>`` or ``<|end|>``, as Llama 3's does with its two end ids.
Seeded, fixed step count: a re-run reproduces the same weights on the same software stack.

Rebuild (300 steps: 26 minutes on a busy shared 2-core CPU, a few minutes on 2 idle cores):
    .venv/bin/python tools/assets/make_offline_llama.py
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

# The whole point is to work without the Hub; fail loudly instead of downloading.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch
from tokenizers import Tokenizer, processors
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

sys.path.insert(0, str(Path(__file__).resolve().parent))
from offline_chat import conversations  # noqa: E402
from offline_corpus import SEED, eval_documents, split_topic_names, train_documents  # noqa: E402
from offline_training import byte_level_bpe, encode_stream, folder_bytes, held_out_loss, lambada_scores, train  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO_ROOT / "LLAMA" / "offline" / "llama-offline"
LAMBADA = REPO_ROOT / "data" / "lambada_offline.jsonl"
MAX_FOLDER_BYTES = 12 * 1024 * 1024

BOS, EOS, END_OF_TURN = "<s>", "</s>", "<|end|>"
ROLES = ("system", "user", "assistant")
SPECIALS = [BOS, EOS] + [f"<|{role}|>" for role in ROLES] + [END_OF_TURN]  # ids 0..5
# <s><|system|>\n...<|end|>\n<|user|>\n...<|end|>\n<|assistant|>\n...<|end|>\n  (Phi-3 / Zephyr style turns)
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('a message role is system, user or assistant, not ' + message['role']) }}"
    "{% endif %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] | trim + '<|end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)
SAMPLE_CHAT = [{"role": "user", "content": 'What is the "for" statement?'}]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--vocab-size", type=int, default=4096, help="including the 6 special tokens")
    p.add_argument("--hidden-size", type=int, default=192)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=6, help="query heads (head_dim = hidden / heads = 32)")
    p.add_argument("--kv-heads", type=int, default=2, help="key/value heads: 3 query heads share each")
    p.add_argument("--intermediate-size", type=int, default=512, help="SwiGLU MLP width")
    p.add_argument("--max-positions", type=int, default=512)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup-steps", type=int, default=30)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--eval-every", type=int, default=100, help="held-out loss print interval (monitoring only)")
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--threads", type=int, default=2)
    return p.parse_args()


# --------------------------------------------------------------------------- tokenizer


def train_tokenizer(texts: list[str], vocab_size: int) -> Tokenizer:
    """Byte-level BPE (offline_training.byte_level_bpe) whose post-processor puts <s> in front."""
    tok = byte_level_bpe(texts, vocab_size, SPECIALS)
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]),
    ])
    assert tok.get_vocab_size() == vocab_size and [tok.token_to_id(s) for s in SPECIALS] == list(range(6))
    return tok


def wrap_tokenizer(tok: Tokenizer, model_max_length: int) -> PreTrainedTokenizerFast:
    # No unk: byte-level BPE encodes every string. Padding uses </s> (Llama has no pad token); the mask hides it.
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=EOS,
        model_max_length=model_max_length,
        chat_template=CHAT_TEMPLATE,
    )


# --------------------------------------------------------------------------- model


def build_model(args: argparse.Namespace, tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=args.hidden_size,
        intermediate_size=args.intermediate_size,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,  # grouped-query attention
        max_position_embeddings=args.max_positions,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,  # untied, the 4096 x 192 head would take the folder past 12 MB
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(args.seed)  # weight init
    model = LlamaForCausalLM(config)
    # Stop on end of text or end of turn (Llama 3 lists its two end ids the same way).
    model.generation_config.update(bos_token_id=tokenizer.bos_token_id, pad_token_id=tokenizer.pad_token_id,
                                   eos_token_id=[tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids(END_OF_TURN)])
    return model


def training_streams(tok: Tokenizer, tokenizer: PreTrainedTokenizerFast, seed: int):
    """(train ids, held-out ids, conversation count): corpus documents and rendered conversations, each as
    <s> ... </s>; the held-out topics as plain documents."""
    bos_id, eos_id = tok.token_to_id(BOS), tok.token_to_id(EOS)
    chats = [tokenizer.apply_chat_template(c, tokenize=False) for c in conversations(seed)]
    chats = [text.removeprefix(BOS) for text in chats]  # encode_stream adds the <s>
    corpus = [text for _, text in train_documents()]
    train_ids = torch.cat([encode_stream(tok, corpus, eos_id, bos_id), encode_stream(tok, chats, eos_id, bos_id)])
    eval_ids = encode_stream(tok, [text for _, text in eval_documents()], eos_id, bos_id)
    return train_ids, eval_ids, len(chats)


# --------------------------------------------------------------------------- output


def save(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, out: Path) -> None:
    # Start from an empty folder so a re-run never leaves stale files behind.
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out, save_jinja_files=False)  # the chat template stays in tokenizer_config.json
    keep = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
            "special_tokens_map.json"}
    for path in out.iterdir():  # anything else (pickles, training state) is not needed to load
        if path.name not in keep:
            path.unlink()


def chat_answer(model, tokenizer, messages: list[dict], max_new_tokens: int = 80) -> str:
    """Greedy answer to a chat, decoded with its specials (so the closing <|end|> shows)."""
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    generated = model.generate(**ids, max_new_tokens=max_new_tokens, do_sample=False)
    return tokenizer.decode(generated[0, ids["input_ids"].shape[1]:])


def verify(out: Path, sample_texts: list[str]) -> str:
    """Reload the folder the way users will, check the tokenizer and the ids; return a sample chat answer."""
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    for text in sample_texts:
        ids = tokenizer.encode(text)
        assert ids[0] == tokenizer.bos_token_id, "the tokenizer does not add <s>"
        assert tokenizer.decode(ids, skip_special_tokens=True) == text, "tokenizer does not round-trip"
    end_ids = [tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids(END_OF_TURN)]
    assert model.generation_config.eos_token_id == end_ids and len(tokenizer) == model.config.vocab_size
    prompt = tokenizer.apply_chat_template(SAMPLE_CHAT, add_generation_prompt=True, tokenize=False)
    assert prompt == f'{BOS}<|user|>\n{SAMPLE_CHAT[0]["content"]}{END_OF_TURN}\n<|assistant|>\n', prompt
    return chat_answer(model, tokenizer, SAMPLE_CHAT)


def write_readme(out: Path, stats: dict, args: argparse.Namespace) -> None:
    train_names, eval_names = split_topic_names()
    one_line_sample = stats["sample"].replace("\n", "\\n")
    prompt = f'<s><|user|>\\n{SAMPLE_CHAT[0]["content"]}<|end|>\\n<|assistant|>\\n'
    text = f"""# llama-offline

A small Llama (`LlamaForCausalLM`, {stats['params']:,} parameters, fp32 safetensors) trained from scratch so
the LLAMA family has a default model that loads without the HuggingFace Hub and answers a chat in words.
It is a smoke-test model: it knows the phrasing of Python's help text, not facts.

- Architecture: {args.layers} layers, hidden {args.hidden_size}, {args.heads} query heads over {args.kv_heads} key/value
  heads (grouped-query attention, head_dim {args.hidden_size // args.heads}), SwiGLU MLP {args.intermediate_size},
  RMSNorm, rope_theta 10000, max_position_embeddings {args.max_positions}, tied input/output embeddings.
- Tokenizer: byte-level BPE (no prefix space), vocab {stats['vocab_size']}; ids 0-5 are `<s>` (bos, added in front of
  every text), `</s>` (end of text, also pad), `<|system|>`, `<|user|>`, `<|assistant|>`, `<|end|>` (end of turn).
- Chat template (`tokenizer_config.json`): `<s>` then, per message, `<|role|>\\n` content `<|end|>\\n`; with
  `add_generation_prompt`, a closing `<|assistant|>\\n`. Roles: system, user, assistant.
- Generation config: `eos_token_id` = [{stats['eos_ids'][0]}, {stats['eos_ids'][1]}] (`</s>`, `<|end|>`), as Llama 3 ends on
  end of text or end of turn.
- Training text ({stats['train_tokens']:,} tokens): CPython's pydoc topics ({len(train_names)} of
  {len(train_names) + len(eval_names)} topics, minus every paragraph that also occurs in a held-out topic) plus
  `/usr/share/common-licenses/*`, and {stats['conversations']} chat conversations made from those training topics
  (`tools/assets/offline_chat.py`: "Explain <section heading>." answered by the section's first sentences).
- Training: {args.steps} AdamW steps, batch {args.batch_size} x {args.seq_len} tokens, lr {args.lr} (warm-up + cosine),
  seed {args.seed}, {args.threads} CPU threads ({stats['train_minutes']:.0f} minutes on a shared 2-core machine).
- Final training loss (mean of last 100 steps): {stats['train_loss']:.3f}
- Held-out loss / perplexity ({len(eval_names)} held-out pydoc topics, {stats['eval_tokens']:,} tokens,
  non-overlapping {args.seq_len}-token windows): {stats['eval_loss']:.3f} / {stats['eval_ppl']:.1f}
  (a uniform guess over the vocab would be {stats['vocab_size']}).
- `data/lambada_offline.jsonl` (passages from the same held-out topics), last word given the rest as lm-eval
  scores it: accuracy {stats['lambada_acc']:.3f}, perplexity {stats['lambada_ppl']:.1f}.
- Greedy answer (decoded with its special tokens, newlines as `\\n`) to `{prompt}`:
  `{one_line_sample}`

Rebuild (deterministic; same split as `data/lambada_offline.jsonl`, see `tools/assets/offline_corpus.py`):

    .venv/bin/python tools/assets/make_offline_llama.py
"""
    (out / "README.md").write_text(text)


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)

    train_texts = [text for _, text in train_documents()]
    chat_texts = [m["content"] for conv in conversations(args.seed) for m in conv]
    tok = train_tokenizer(train_texts + chat_texts, args.vocab_size)
    tokenizer = wrap_tokenizer(tok, args.max_positions)
    train_ids, eval_ids, n_chats = training_streams(tok, tokenizer, args.seed)
    print(f"tokens: train {len(train_ids):,} (with {n_chats} conversations), held-out {len(eval_ids):,}")

    model = build_model(args, tokenizer)
    n_params = sum(p.numel() for p in model.parameters())  # tied weights counted once
    print(f"model: {n_params:,} parameters")

    started = time.time()
    train_loss = train(model, train_ids, eval_ids, args)
    train_minutes = (time.time() - started) / 60
    eval_loss = held_out_loss(model, eval_ids, args.seq_len)
    lambada_acc, lambada_ppl = lambada_scores(model, tokenizer, LAMBADA)

    save(model, tokenizer, args.out)
    # A few held-out paragraphs (short enough for the context) plus non-ASCII text.
    samples = [text[:600] for _, text in eval_documents()[:3]] + ["naïve café — “quoted” ✓ 東京\n\ttab"]
    sample = verify(args.out, samples)
    stats = {
        "params": n_params, "vocab_size": len(tokenizer), "eos_ids": model.generation_config.eos_token_id,
        "train_tokens": len(train_ids), "eval_tokens": len(eval_ids), "conversations": n_chats,
        "train_minutes": train_minutes, "train_loss": train_loss, "eval_loss": eval_loss,
        "eval_ppl": math.exp(eval_loss), "lambada_acc": lambada_acc, "lambada_ppl": lambada_ppl, "sample": sample,
    }
    write_readme(args.out, stats, args)
    assert folder_bytes(args.out) <= MAX_FOLDER_BYTES, f"{args.out} is larger than 12 MB"

    print(json.dumps({
        "out": str(args.out), "folder_bytes": folder_bytes(args.out), "params": n_params,
        "train_loss": round(train_loss, 4), "held_out_loss": round(eval_loss, 4),
        "held_out_ppl": round(math.exp(eval_loss), 2), "lambada_acc": round(lambada_acc, 3),
        "lambada_ppl": round(lambada_ppl, 1), "train_minutes": round(train_minutes, 1),
    }, indent=2))
    print(f"chat (greedy): {SAMPLE_CHAT[0]['content']!r} -> {sample!r}")


if __name__ == "__main__":
    main()
