"""The shared loop's own contracts: sampling determinism, min_new_tokens, no-cache recompute equivalence."""
import torch

from CausalLM.torch_steps import TorchSteps
from NNDF.generation import GenerationConfig, generate
from NNDF.offline import redraw_weights
from NNDF.sampling import SamplingConfig


def _tiny():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=64,
                                       bos_token_id=0, eos_token_id=0, pad_token_id=0)).eval()
    redraw_weights(model, 0, 0.3)
    return model


def test_sampling_reproducible_and_seed_dependent():
    steps = TorchSteps(_tiny(), use_cache=True)
    ids = torch.tensor([[5, 6, 7]])
    mask = torch.ones_like(ids)
    cfg = lambda seed: GenerationConfig(max_new_tokens=20, sampling=SamplingConfig(do_sample=True, top_k=20, top_p=0.9), seed=seed)  # noqa: E731
    a = generate(steps, ids, mask, cfg(1)).sequences
    assert torch.equal(a, generate(steps, ids, mask, cfg(1)).sequences)
    assert not torch.equal(a, generate(steps, ids, mask, cfg(2)).sequences)


def test_min_new_tokens_forbids_eos_and_runs_full_length():
    model = _tiny()
    steps = TorchSteps(model, use_cache=True)
    ids = torch.tensor([[5, 6, 7]])
    mask = torch.ones_like(ids)
    greedy = generate(steps, ids, mask, GenerationConfig(max_new_tokens=8)).sequences[0, 3:].tolist()
    eos = greedy[1]
    stopped = generate(steps, ids, mask, GenerationConfig(max_new_tokens=8, eos_token_id=eos))
    assert stopped.new_tokens(0, eos) == greedy[:2]
    full = generate(steps, ids, mask, GenerationConfig(max_new_tokens=8, min_new_tokens=8, eos_token_id=eos))
    assert full.sequences.shape[1] == 3 + 8 and eos not in full.sequences[0, 3:].tolist()
