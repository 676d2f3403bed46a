#!/usr/bin/env python3
"""Build a random-weight HF folder with the shapes of a real model, for benchmarks without the Hub.

    python tools/assets/make_shapes_model.py gpt2 temp/shapes/gpt2          # GPT-2 124M shapes
    python tools/assets/make_shapes_model.py gpt2-xl temp/shapes/gpt2-xl    # GPT-2 XL (1.56B) shapes
    python tools/assets/make_shapes_model.py llama-3-8b temp/shapes/llama-3-8b    # LLAMA family: Llama-3-8B,
    python tools/assets/make_shapes_model.py qwen2.5-0.5b temp/shapes/qwen    # Qwen2.5-0.5B and Mistral-7B
    python tools/assets/make_shapes_model.py mistral-7b-w64 temp/shapes/mw    # (with a 64-column window) shapes,
    python tools/assets/make_shapes_model.py gemma-3-1b temp/shapes/gemma    # Qwen3-0.6B/8B, Gemma-3-1B shapes
    python tools/assets/make_shapes_model.py opt-6.7b temp/shapes/opt-6.7b    # OPT-6.7B, GPT-J-6B, BLOOM-7B1,
    python tools/assets/make_shapes_model.py gpt-neox-20b temp/shapes/neox    # GPT-NeoX-20B, GPT-Neo-2.7B shapes
    python tools/assets/make_shapes_model.py flan-t5-xl temp/shapes/flan-t5-xl   # encoder-decoders: flan-T5-XL,
    python tools/assets/make_shapes_model.py bart-large temp/shapes/bart-large   # t5-small, t5-base, BART-large,
    python tools/assets/make_shapes_model.py blip-large temp/shapes/blip-large   # BLIP-large captioning shapes
    python tools/assets/make_shapes_model.py minilm-l6-h384 temp/shapes/minilm   # encoders (BERT family): a sequence
    python tools/assets/make_shapes_model.py roberta-base temp/shapes/rb         # classifier of MiniLM-L6-H384,
    python tools/assets/make_shapes_model.py roberta-large temp/shapes/rl        # roberta-base, roberta-large shapes

Weights use HF's default init (speed does not depend on values; std 0.02 keeps fp16 activations finite); the
tokenizer is an offline one (GPT-2: gpt2-offline's; encoders: the BERT family's committed WordPiece / BPE
folders): benchmarks feed random token ids, the tokenizer only supplies special ids and input names.
Run it as `benchmark GPT2 ... --torch-dir <folder>` (encoders: `benchmark BERT ... --torch-dir <folder>`).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SHAPES = {  # GPT-2 sizes from the published configs
    "gpt2": dict(n_layer=12, n_embd=768, n_head=12),
    "gpt2-medium": dict(n_layer=24, n_embd=1024, n_head=16),
    "gpt2-large": dict(n_layer=36, n_embd=1280, n_head=20),
    "gpt2-xl": dict(n_layer=48, n_embd=1600, n_head=25),
}
DECODER_SHAPES = {  # published configs: (config class, sizes); made in fp16, on the GPU when there is one
    "llama-3-8b": ("LlamaConfig", dict(
        vocab_size=128256, hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
        intermediate_size=14336, max_position_embeddings=8192, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0})),
    "qwen2.5-0.5b": ("Qwen2Config", dict(
        vocab_size=151936, hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
        intermediate_size=4864, max_position_embeddings=32768, rms_norm_eps=1e-6, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    # Qwen3: heads of 128 over a narrower hidden size (0.6B: 16 x 128 on 1024), each query and key head RMS-normed
    "qwen3-0.6b": ("Qwen3Config", dict(
        vocab_size=151936, hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
        head_dim=128, intermediate_size=3072, max_position_embeddings=40960, rms_norm_eps=1e-6,
        tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    "qwen3-8b": ("Qwen3Config", dict(
        vocab_size=151936, hidden_size=4096, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
        head_dim=128, intermediate_size=12288, max_position_embeddings=40960, rms_norm_eps=1e-6,
        tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    # Gemma-3-1B: five sliding-window layers (512 columns, rotary base 10000) to every full-attention one (base 1e6),
    # one key/value head of 256 under 4 query heads, a tied 262k-token head
    "gemma-3-1b": ("Gemma3TextConfig", dict(
        vocab_size=262144, hidden_size=1152, num_hidden_layers=26, num_attention_heads=4, num_key_value_heads=1,
        head_dim=256, intermediate_size=6912, max_position_embeddings=32768, rms_norm_eps=1e-6, sliding_window=512,
        query_pre_attn_scalar=256, tie_word_embeddings=True,
        layer_types=["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(26)])),
    # Mistral-7B-v0.1's shapes with its sliding window cut to 64 columns: a 128-token prompt is longer than it
    "mistral-7b-w64": ("MistralConfig", dict(
        vocab_size=32000, hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
        intermediate_size=14336, max_position_embeddings=32768, rms_norm_eps=1e-5, sliding_window=64,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    "opt-6.7b": ("OPTConfig", dict(
        vocab_size=50272, hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, ffn_dim=16384,
        max_position_embeddings=2048, word_embed_proj_dim=4096, do_layer_norm_before=True,
        activation_function="relu")),
    "gpt-j-6b": ("GPTJConfig", dict(
        vocab_size=50400, n_embd=4096, n_layer=28, n_head=16, rotary_dim=64, n_positions=2048,
        activation_function="gelu_new", tie_word_embeddings=False)),
    "bloom-7b1": ("BloomConfig", dict(vocab_size=250880, hidden_size=4096, n_layer=30, n_head=32)),
    "gpt-neox-20b": ("GPTNeoXConfig", dict(
        vocab_size=50432, hidden_size=6144, num_hidden_layers=44, num_attention_heads=64, intermediate_size=24576,
        rotary_pct=0.25, max_position_embeddings=2048, use_parallel_residual=True, hidden_act="gelu_fast",
        tie_word_embeddings=False)),
    "gpt-neo-2.7b": ("GPTNeoConfig", dict(
        vocab_size=50257, hidden_size=2560, num_layers=32, num_heads=20, window_size=256,
        attention_types=[[["global", "local"], 16]], max_position_embeddings=2048)),
}
SEQ2SEQ_SHAPES = {  # published configs: (config class, offline tokenizer folder, sizes); made in fp16
    "flan-t5-xl": ("T5Config", "T5/offline/t5-tokenizer", dict(
        vocab_size=32128, d_model=2048, d_kv=64, d_ff=5120, num_layers=24, num_decoder_layers=24, num_heads=32,
        feed_forward_proj="gated-gelu", tie_word_embeddings=False, pad_token_id=0, eos_token_id=1,
        decoder_start_token_id=0)),
    "t5-small": ("T5Config", "T5/offline/t5-tokenizer", dict(
        vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8, feed_forward_proj="relu",
        pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)),
    "t5-base": ("T5Config", "T5/offline/t5-tokenizer", dict(
        vocab_size=32128, d_model=768, d_kv=64, d_ff=3072, num_layers=12, num_heads=12, feed_forward_proj="relu",
        pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)),
    "bart-large": ("BartConfig", "BART/offline/bart-tokenizer", dict(
        vocab_size=50264, d_model=1024, encoder_layers=12, decoder_layers=12, encoder_attention_heads=16,
        decoder_attention_heads=16, encoder_ffn_dim=4096, decoder_ffn_dim=4096, max_position_embeddings=1024,
        bos_token_id=0, pad_token_id=1, eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=None)),
    "blip-large": ("BlipConfig", "BLIP/offline/blip-processor", dict(
        text_config=dict(vocab_size=30524, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                         intermediate_size=3072, encoder_hidden_size=1024, max_position_embeddings=512,
                         bos_token_id=30522, pad_token_id=0, sep_token_id=102, eos_token_id=102),
        vision_config=dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096,
                           image_size=384, patch_size=16))),
}
ENCODER_SHAPES = {  # published configs: (config class, tokenizer folder, sizes); two labels (SST-2)
    "minilm-l6-h384": ("BertConfig", "wordpiece-uncased", dict(
        vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536,
        max_position_embeddings=512, type_vocab_size=2)),
    "roberta-base": ("RobertaConfig", "roberta-bpe", dict(
        vocab_size=50265, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
        max_position_embeddings=514, type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2)),
    "roberta-large": ("RobertaConfig", "roberta-bpe", dict(
        vocab_size=50265, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096,
        max_position_embeddings=514, type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2)),
}


def gpt2(shape: str, out: Path) -> None:
    import torch
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    from NNDF.offline import SHARED_TOKENIZERS

    tok = AutoTokenizer.from_pretrained(SHARED_TOKENIZERS / "byte-bpe", local_files_only=True)
    eos = tok.eos_token_id
    config = GPT2Config(vocab_size=50257, n_positions=1024, bos_token_id=eos, eos_token_id=eos, pad_token_id=eos,
                        **SHAPES[shape])
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    print(f"{shape}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters -> {out}")


def decoder(shape: str, out: Path) -> None:
    """A decoder's shapes model (LLAMA family, OPT, BLOOM, GPT-J, GPT-NeoX, GPT-Neo), initialised and saved in fp16
    (an 8B model's fp32 copy would take 32 GB)."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from NNDF.offline import SHARED_TOKENIZERS

    class_name, sizes = DECODER_SHAPES[shape]
    tok = AutoTokenizer.from_pretrained(SHARED_TOKENIZERS / "byte-bpe", local_files_only=True)
    eos = tok.eos_token_id
    config = getattr(transformers, class_name)(bos_token_id=eos, eos_token_id=eos, pad_token_id=eos, **sizes)
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float16)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    print(f"{shape}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters -> {out}")


def seq2seq(shape: str, out: Path) -> None:
    """An encoder-decoder's shapes model (T5, BART, BLIP), initialised and saved in fp16, with the family's offline
    tokenizer (or BLIP's processor) files."""
    import shutil

    import torch
    import transformers

    class_name, files, sizes = SEQ2SEQ_SHAPES[shape]
    config = getattr(transformers, class_name)(**sizes)
    auto = transformers.BlipForConditionalGeneration if class_name == "BlipConfig" else transformers.AutoModelForSeq2SeqLM
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = (auto(config) if class_name == "BlipConfig" else auto.from_config(config)).to(torch.float16)
    model.save_pretrained(out, safe_serialization=True)
    for f in (ROOT / files).iterdir():
        if f.is_file() and f.name != "config.json":
            shutil.copy(f, out / f.name)
    print(f"{shape}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters -> {out}")


def encoder(shape: str, out: Path) -> None:
    import torch
    import transformers
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    class_name, tokenizer, sizes = ENCODER_SHAPES[shape]
    tok = AutoTokenizer.from_pretrained(ROOT / "BERT" / "offline" / tokenizer, local_files_only=True)
    config = getattr(transformers, class_name)(num_labels=2, id2label={0: "NEGATIVE", 1: "POSITIVE"},
                                               label2id={"NEGATIVE": 0, "POSITIVE": 1}, **sizes)
    config.architectures = [class_name.replace("Config", "ForSequenceClassification")]
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_config(config)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    print(f"{shape}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters -> {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shape", choices=sorted(SHAPES) + sorted(DECODER_SHAPES) + sorted(SEQ2SEQ_SHAPES)
                        + sorted(ENCODER_SHAPES))
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    make = (gpt2 if args.shape in SHAPES else decoder if args.shape in DECODER_SHAPES else
            seq2seq if args.shape in SEQ2SEQ_SHAPES else encoder)
    make(args.shape, args.out)


if __name__ == "__main__":
    main()
