"""GPT2 family facts: the TensorRT HuggingFace demo's variants, the architectures it runs, and its offline defaults.

`gpt2-offline` is a small GPT-2 trained offline by `tools/assets/make_offline_gpt2.py` (committed, ~11 MB), so
`accuracy` and `chat` show meaningful numbers and text without the Hub. The other offline variants are
random-weight models of the GPT-Neo, GPT-NeoX and GPT-J architectures, for parity tests and smoke runs.
"""
from __future__ import annotations

from pathlib import Path

from NNDF.family import Family, RandomWeights, Variant
from NNDF.offline import SHARED_TOKENIZERS, decoder_token_ids
from CausalLM.task import CAUSAL_LM

HERE = Path(__file__).resolve().parent
# GPT-2 `activation_function` values the fused decode paths implement -> F.gelu's `approximate` ("tanh": the
# tanh approximation, ORT's FastGelu; "none": the exact erf form, ORT's BiasGelu); GPT2/fused_decode.py and
# GPT2/fused_onnx.py refuse the others
FUSED_GELUS = {"gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "gelu_fast": "tanh", "gelu": "none"}
BPE_TOKENIZER_DIR = SHARED_TOKENIZERS / "byte-bpe"  # trained with gpt2-offline; OPT's and BLOOM's variants use it too


def _neo_config(tok):
    from transformers import GPTNeoConfig

    return GPTNeoConfig(num_layers=2, hidden_size=64, num_heads=4, max_position_embeddings=256,
                        attention_types=[[["global", "local"], 1]], window_size=16, **decoder_token_ids(tok))


def _neox_config(tok):
    from transformers import GPTNeoXConfig

    return GPTNeoXConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                         max_position_embeddings=256, rotary_pct=0.5, **decoder_token_ids(tok))


def _gptj_config(tok):
    from transformers import GPTJConfig

    return GPTJConfig(n_layer=2, n_embd=64, n_head=4, n_positions=256, rotary_dim=8, **decoder_token_ids(tok))


FAMILY = Family(
    name="GPT2",
    task=CAUSAL_LM,
    description="GPT-2 and GPT-2-like decoders (GPT-Neo, GPT-NeoX, GPT-J, Cerebras-GPT)",
    model_types=("gpt2", "gpt_neo", "gpt_neox", "gptj"),
    default_variant="gpt2-offline",
    checkpoint=HERE / "checkpoint.toml",
    variants=(
        Variant("gpt2-offline", "2.6M, trained offline", local_dir=HERE / "offline" / "gpt2-offline"),
        Variant("gpt-neo-offline", "random, tiny", random=RandomWeights(_neo_config, BPE_TOKENIZER_DIR, seed=1)),
        Variant("gpt-neox-offline", "random, tiny", random=RandomWeights(_neox_config, BPE_TOKENIZER_DIR, seed=2)),
        Variant("gptj-offline", "random, tiny", random=RandomWeights(_gptj_config, BPE_TOKENIZER_DIR, seed=3)),
        Variant("gpt2", "124M"),
        Variant("gpt2-medium", "355M"),
        Variant("gpt2-large", "774M"),
        Variant("gpt2-xl", "1.5B"),
        Variant("EleutherAI/gpt-neo-125m", "125M"),
        Variant("EleutherAI/gpt-neo-1.3B", "1.3B"),
        Variant("EleutherAI/gpt-neo-2.7B", "2.7B"),
        Variant("EleutherAI/gpt-neox-20b", "20B"),
        Variant("EleutherAI/gpt-j-6B", "6B"),
        Variant("cerebras/Cerebras-GPT-111M", "111M"),
        Variant("cerebras/Cerebras-GPT-256M", "256M"),
        Variant("cerebras/Cerebras-GPT-590M", "590M"),
        Variant("cerebras/Cerebras-GPT-1.3B", "1.3B"),
        Variant("cerebras/Cerebras-GPT-2.7B", "2.7B"),
        Variant("cerebras/Cerebras-GPT-6.7B", "6.7B"),
        Variant("cerebras/Cerebras-GPT-13B", "13B"),
    ),
)
