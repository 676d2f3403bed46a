"""The shared loop's own contracts: sampling determinism, min_new_tokens, no-cache recompute equivalence, beam
search's bookkeeping (finished hypotheses, stopping rules, output width and padding) equal to HF `generate`."""
import pytest
import torch

from CausalLM.torch_steps import TorchSteps
from NNDF.generation import GenerationConfig, generate
from NNDF.offline import redraw_weights
from NNDF.sampling import SamplingConfig


def _tiny(vocab: int = 64):
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=vocab, n_positions=64,
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


def _greedy_case(new: int):
    """The tiny model, its steps, a 3-token prompt and mask, and its first `new` greedy tokens (no EOS)."""
    model = _tiny()
    steps = TorchSteps(model, use_cache=True)
    ids = torch.tensor([[5, 6, 7]])
    mask = torch.ones_like(ids)
    greedy = generate(steps, ids, mask, GenerationConfig(max_new_tokens=new)).sequences[0, 3:].tolist()
    return model, steps, ids, mask, greedy


def test_min_new_tokens_forbids_eos_and_runs_full_length():
    _, steps, ids, mask, greedy = _greedy_case(8)
    eos = greedy[1]
    stopped = generate(steps, ids, mask, GenerationConfig(max_new_tokens=8, eos_token_id=eos))
    assert stopped.new_tokens(0, eos) == greedy[:2]
    full = generate(steps, ids, mask, GenerationConfig(max_new_tokens=8, min_new_tokens=8, eos_token_id=eos))
    assert full.sequences.shape[1] == 3 + 8 and eos not in full.sequences[0, 3:].tolist()


def test_min_new_tokens_overrides_min_length_as_hf():
    """With both set, HF lets EOS come after min_new_tokens new tokens whatever min_length says (it replaces
    min_length by prompt + min_new_tokens): a row stops at the EOS chosen there, as HF's does."""
    model, steps, ids, mask, greedy = _greedy_case(12)
    eos = greedy[2]
    config = dict(max_new_tokens=12, min_new_tokens=2, min_length=3 + 8, eos_token_id=eos, pad_token_id=1)
    ours = generate(steps, ids, mask, GenerationConfig(**config))
    hf = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, **config)
    assert ours.sequences.tolist() == hf.tolist()
    assert hf.shape[1] < 3 + 8  # stopped before min_length would have allowed


@pytest.mark.parametrize("sample", [False, True])
def test_rows_ending_at_different_steps_are_padded_as_hf(sample):
    """A left-padded batch whose rows emit EOS at different steps: every row's whole sequence, the pad after its
    EOS included, equals HF `generate`'s (greedy; sampling under a fixed draw: top_k=1, so both pick the argmax)."""
    model = _tiny()
    ids = torch.tensor([[0, 0, 5, 6], [9, 3, 2, 7], [0, 11, 12, 13]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1], [0, 1, 1, 1]])
    free = generate(TorchSteps(model, use_cache=True), ids, mask, GenerationConfig(max_new_tokens=12)).sequences
    eos = free[0, 4 + 2].item()  # the first row's third new token: it ends by there, the others later or never
    sampling = SamplingConfig(do_sample=True, top_k=1) if sample else SamplingConfig()
    config = GenerationConfig(max_new_tokens=12, eos_token_id=eos, pad_token_id=1, sampling=sampling)
    ours = generate(TorchSteps(model, use_cache=True), ids, mask, config).sequences
    hf = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=12, eos_token_id=eos, pad_token_id=1,
                        do_sample=sample, top_k=1 if sample else None)
    assert ours.tolist() == hf.tolist()
    ends = [row[4:].index(eos) if eos in row[4:] else None for row in hf.tolist()]
    assert ends[0] is not None and ends[0] <= 2 and len(set(ends)) > 1  # the rows end apart
    assert set(hf[0, 4 + ends[0] + 1:].tolist()) == {1}  # the first row's pads


def test_processors_kept_between_generations_except_bad_words():
    """An unpadded prompt's processors are made once and kept for the next generation of the same settings; with bad
    words they are made anew (HF's processor sizes its bias by the first vocabulary it meets): two models of
    different vocabularies under the same bad words each give HF's tokens."""
    from NNDF.generation import _processors

    mask = torch.ones(1, 3, dtype=torch.long)
    plain = GenerationConfig(max_new_tokens=8, min_new_tokens=4, eos_token_id=3)
    assert _processors(plain, mask) is _processors(plain, mask)
    worded = GenerationConfig(max_new_tokens=8, bad_words_ids=((5,), (7, 8)))
    assert _processors(worded, mask) is not _processors(worded, mask)
    ids = torch.tensor([[5, 6, 7]])
    for vocab in (64, 80):
        model = _tiny(vocab)
        ours = generate(TorchSteps(model, use_cache=True), ids, mask, worded).sequences
        hf = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8, do_sample=False,
                            bad_words_ids=[[5], [7, 8]], pad_token_id=0, eos_token_id=None)
        assert ours.tolist() == hf.tolist()


def test_settings_given_as_lists_generate_as_tuples():
    """A config whose EOS ids and bad words come as lists (as a caller may write them) is hashable and generates
    what the same config of tuples does."""
    _, steps, ids, mask, greedy = _greedy_case(8)
    listed = GenerationConfig(max_new_tokens=8, eos_token_id=[greedy[3], 63], bad_words_ids=[[greedy[1]]],
                              dry_breakers={1})
    tupled = GenerationConfig(max_new_tokens=8, eos_token_id=(greedy[3], 63), bad_words_ids=((greedy[1],),),
                              dry_breakers=frozenset({1}))
    assert listed == tupled and hash(listed) == hash(tupled)
    assert generate(steps, ids, mask, listed).sequences.tolist() == generate(steps, ids, mask, tupled).sequences.tolist()


NEW = 20


@pytest.fixture(scope="module")
def beam_case():
    """The tiny model, a left-padded batch of 3 and an EOS id (a token of its beams) that ends hypotheses mid-way
    often enough for every stopping rule to decide something (finished slots fill, items stop early)."""
    model = _tiny()
    ids = torch.tensor([[0, 0, 5, 6], [9, 3, 2, 7], [0, 11, 12, 13]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1], [0, 1, 1, 1]])
    eos = 24
    ended = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW, num_beams=3, do_sample=False,
                           eos_token_id=eos, pad_token_id=1)
    assert any(eos in row[4:-1] for row in ended.tolist())  # a hypothesis ended before the length limit
    return model, ids, mask, eos


@pytest.mark.parametrize("early_stopping,length_penalty,ngram", [
    (False, 1.0, 0), (True, 1.0, 0), ("never", 1.0, 0), ("never", 2.0, 0), (False, -1.0, 0), (True, 0.5, 2)])
def test_beam_search_equals_hf_generate(beam_case, early_stopping, length_penalty, ngram):
    """Whole sequences (width and pad included) equal HF's for every stopping rule and length penalty, with EOS
    mid-way and a processor over the history (no-repeat n-grams): the finished set, the stop test read a step
    late and the beam reordering of the cache give HF's choice."""
    model, ids, mask, eos = beam_case
    ref = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW, num_beams=3, do_sample=False,
                         early_stopping=early_stopping, length_penalty=length_penalty, no_repeat_ngram_size=ngram,
                         eos_token_id=eos, pad_token_id=1)
    config = GenerationConfig(max_new_tokens=NEW, num_beams=3, early_stopping=early_stopping,
                              length_penalty=length_penalty, no_repeat_ngram_size=ngram, eos_token_id=eos,
                              pad_token_id=1)
    ours = generate(TorchSteps(model, use_cache=True), ids, mask, config).sequences
    assert ours.tolist() == ref.tolist()


class _FixedLogits:
    """Steps whose every forward gives the same logits [rows, 1, V]: EOS (id 2) ranks second, so hypotheses
    finish at every step."""

    device, use_cache, name = torch.device("cpu"), True, "fixed"

    def __init__(self):
        self.logits = torch.randn(40, generator=torch.Generator().manual_seed(0))
        self.logits[5], self.logits[2] = 9.0, 8.5

    def forward(self, input_ids, attention_mask, position_ids, cache, last_only=False):
        return self.logits.expand(input_ids.shape[0], 1, -1), cache

    def new_cache(self, batch, max_length):
        return None

    def reorder_cache(self, cache, index, within_inputs=False):
        return cache


def test_beam_steps_never_wait_for_the_device():
    """No op that makes the host wait for the device (`item`/`bool`, `nonzero`, `equal`) runs per beam step: one
    check of the prompt's padding before the loop and one read of the output width after it, whatever the
    number of steps."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Syncs(TorchDispatchMode):
        count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.__name__.split(".")[0] in ("_local_scalar_dense", "nonzero", "equal", "is_nonzero"):
                Syncs.count += 1
            return func(*args, **(kwargs or {}))

    ids, mask = torch.tensor([[3, 4], [0, 6]]), torch.tensor([[1, 1], [0, 1]])
    config = GenerationConfig(max_new_tokens=16, num_beams=4, eos_token_id=2, pad_token_id=0)
    with Syncs():
        out = generate(_FixedLogits(), ids, mask, config)
    assert Syncs.count == 2 and out.sequences.shape[1] == 2 + 16
