"""GPT-J's and GPT-NeoX's fused decode step (`--fused-decode` on frameworks, GPT2/fused_decode_rotary.py) gives
HF `generate`'s tokens, token for token in fp32: gptj-offline (tanh GELU), gpt-neox-offline (parallel residual,
exact GELU) and two tiny random models with what the variants lack, every weight random (norms and biases too): a
GPT-J with GPT-J-6B's proportion of rotary columns in a wider head (12 interleaved pairs in 64) and the exact GELU,
and a sequential GPT-NeoX (use_parallel_residual False) without attention biases, with GPT-NeoX-20B's gelu_fast
and a tied head. Greedy and beam search, a left-padded batch of three prompt lengths, EOS mid-way, a second
generation on the same buffers; compiled once on the CPU. Configs the step does not reproduce are refused in one
line.

With HARNESS_TEST_DEVICE=cuda the parity cases also run the step from a CUDA graph, eager and compiled.
"""
import os

import pytest

from NNDF import registry
from NNDF.actions.common import backend_steps, encode
from NNDF.errors import UsageError

from conftest import random_model
from test_fused_decode import (MODES, PROMPTS, _check_kernels, _check_parity, _fused_tokens, _hf_tokens, _mode_id,
                               _run)

DEVICE = os.environ.get("HARNESS_TEST_DEVICE", "cpu")
TINY = {"gptj-wide": "gptj-offline", "neox-sequential": "gpt-neox-offline"}  # tiny model -> its variant


def _tiny_configs(tok) -> dict:
    from transformers import GPTJConfig, GPTNeoXConfig

    from NNDF.offline import decoder_token_ids

    ids = decoder_token_ids(tok)
    return {
        "gptj-wide": GPTJConfig(n_layer=2, n_embd=128, n_head=2, n_positions=64, rotary_dim=24,
                                activation_function="gelu", **ids),
        "neox-sequential": GPTNeoXConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                         intermediate_size=96, max_position_embeddings=64, rotary_pct=0.5,
                                         use_parallel_residual=False, attention_bias=False, hidden_act="gelu_fast",
                                         tie_word_embeddings=True, **ids),
    }


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, str]:
    """name -> model folder; every weight random (biases and norms too: `conftest.random_model`)."""
    from transformers import AutoTokenizer

    from GPT2.config import BPE_TOKENIZER_DIR

    tok = AutoTokenizer.from_pretrained(BPE_TOKENIZER_DIR, local_files_only=True)
    return {name: random_model(config, tmp_path_factory.mktemp("models") / name, seed, BPE_TOKENIZER_DIR)
            for seed, (name, config) in enumerate(_tiny_configs(tok).items())}


def _model_run(workdir, name, tiny, **flags):
    variant = TINY.get(name, name)
    return _run(workdir, variant=variant, torch_dir=tiny.get(name), **flags)


@pytest.mark.parametrize("mode", MODES, ids=_mode_id)
@pytest.mark.parametrize("name", ["gptj-offline", "gpt-neox-offline"] + list(TINY))
def test_fused_step_matches_hf_generate(name, mode, tiny, workdir):
    run = _model_run(workdir, name, tiny, graph=mode[0], compiled=mode[1])
    with backend_steps(run, "frameworks") as (_, steps):
        assert type(steps.fused).__name__ == "FusedRotaryStep"
        expected = {"gptj-offline": "shared", "gptj-wide": "shared", "gpt-neox-offline": "parallel",
                    "neox-sequential": "sequential"}[name]
        assert steps.fused.parts.residual == expected
        _check_parity(run, steps)


@pytest.mark.parametrize("name", ["gptj-wide", "neox-sequential"])
def test_step_on_our_kernels(name, tiny, workdir, monkeypatch):
    """GPT-J's and GPT-NeoX's step on our Triton GEMV and attention kernels (the default on CUDA) gives HF
    generate's tokens."""
    run = _model_run(workdir, name, tiny)
    with backend_steps(run, "frameworks") as (_, steps):
        _check_kernels(run, steps, monkeypatch)


@pytest.mark.skipif(DEVICE == "cuda", reason="on CUDA the compiled step runs in the parity tests")
def test_compiled_step_on_cpu(tiny, workdir):
    """torch.compile of the three step functions on the CPU, greedy (3 rows: the reduction form of the products;
    F.linear is the eager cases'), on the sequential GPT-NeoX (per-head query_key_value, partial rotary)."""
    run = _model_run(workdir, "neox-sequential", tiny, compiled=True)
    with backend_steps(run, "frameworks") as (_, steps):
        assert steps.fused.compiled and steps.fused.settings.reduces(3, True, steps.fused.width)
        prompt, eos = encode(run, PROMPTS), run.tokenizer.eos_token_id
        assert _fused_tokens(run, steps, prompt, 1, eos) == _hf_tokens(run, prompt, 1, eos)


@pytest.mark.skipif(DEVICE == "cuda", reason="refusals are checked on the CPU")
def test_unsupported_configs_are_refused():
    """In process (a UsageError is the CLI's one line, exit 2: tests/test_llama_fused.py runs that path)."""
    from transformers import GPTJConfig, GPTNeoXConfig

    from GPT2.fused_decode_rotary import check_config

    with pytest.raises(UsageError) as refused:
        check_config(GPTNeoXConfig(hidden_act="relu"))
    assert str(refused.value) == ("--fused-decode: activation 'relu' is not one the fused step implements (gelu_new, "
                                  "gelu_pytorch_tanh, gelu_fast, gelu); drop --fused-decode")
    with pytest.raises(UsageError, match="^--fused-decode: activation 'silu' is not one"):
        check_config(GPTJConfig(activation_function="silu"))
    dynamic = GPTNeoXConfig(rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0})
    with pytest.raises(UsageError) as refused:
        check_config(dynamic)
    assert str(refused.value) == ("--fused-decode: rope type 'dynamic' changes its frequencies with the sequence "
                                  "length, which the fused step's precomputed table does not; drop --fused-decode")


def test_family_steps_by_model_type():
    """GPT-2, GPT-J and GPT-NeoX have a frameworks fused step; GPT-Neo has none (tests/test_fused_decode.py)."""
    from GPT2.fused_decode_rotary import MODEL_TYPES

    fused = registry.facts(registry.family("GPT2"), "frameworks").fused
    assert set(fused) == {"gpt2", *MODEL_TYPES} and "gpt_neo" in registry.family("GPT2").model_types
