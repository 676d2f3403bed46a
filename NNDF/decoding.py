"""Which decoding a run does: the model's HF `GenerationConfig`, honoured as HF `generate` honours it, under the
user's flags.

HF `generate` (transformers 5.23, `_prepare_generation_config`) starts from the model's `generation_config`
(generation_config.json, else derived from config.json: `ModelSource.generation`), fills what it leaves unset
with HF's global defaults (`GenerationConfig._get_default_generation_params`), and lets its caller's arguments
override both. `resolve` does the same with the user's flags as the caller's arguments: a flag that was given
(its option field is not None) wins; else the model's value; else HF's global default. These defaults are the
flags' old defaults except one: top-k is 50 when sampling (HF's), not 0.

Lengths are the caller's arguments too: an action that fixes them passes them (`run`/`compare`: checkpoint.toml's
max_new_tokens; `benchmark`: exactly --output-seq-len new tokens); `chat` without --max-new-tokens takes the
config's max_new_tokens, else its max_length (prompt + new tokens, the decoder's prompt counted as HF counts it),
else 32 new tokens.

`--ignore-generation-config` gives the flags-only behaviour: only the decoder's start token and a forced first
token (mBART's target language) come from the model (as the task reads them); everything else is the flag or
its flags-only default (greedy, one beam, no penalties, top-k off).

Settings HF honours that our loop does not implement (constraints, encoder_repetition_penalty, several returned
sequences, ...) are refused in one line naming the field and `--ignore-generation-config`, never ignored in
silence. EOS: the task's (the tokenizer's) and every id of the generation config's `eos_token_id` (a chat model
lists its end of turn there, as Llama 3's does): any of them ends a row. The effective beam count
is needed before any generation (TensorRT profiles size their rows by it): `effective_num_beams`, exposed as
`RunContext.num_beams`.
"""
from __future__ import annotations

from NNDF.errors import UsageError
from NNDF.generation import GenerationConfig
from NNDF.sampling import SamplingConfig, eos_ids

DEFAULT_MAX_NEW_TOKENS = 32  # chat, when neither --max-new-tokens nor the model's config gives a length
HF_TOP_K = 50  # HF's global default top_k (applies when sampling and the model's config sets none)

# generation-config fields HF `generate` acts on and our loop does not: field -> its neutral value(s)
_UNSUPPORTED = {
    "num_return_sequences": (None, 1),
    "encoder_repetition_penalty": (None, 1.0),
    "encoder_no_repeat_ngram_size": (None, 0),
    "num_beam_groups": (None, 1),
    "diversity_penalty": (None, 0.0),
    "constraints": (None,),
    "force_words_ids": (None,),
    "penalty_alpha": (None,),
    "dola_layers": (None,),
    "guidance_scale": (None, 1.0),
    "sequence_bias": (None,),
    "suppress_tokens": (None,),
    "begin_suppress_tokens": (None,),
    "exponential_decay_length_penalty": (None,),
    "remove_invalid_values": (None, False),
    "renormalize_logits": (None, False),
    "stop_strings": (None,),
    "max_time": (None,),
    "watermarking_config": (None,),
    "token_healing": (None, False),
    "prompt_lookup_num_tokens": (None,),
}
_UNSUPPORTED_WARPERS = {  # only act when sampling
    "min_p": (None,),
    "top_h": (None,),
    "typical_p": (None, 1.0),
    "epsilon_cutoff": (None, 0.0),
    "eta_cutoff": (None, 0.0),
}
_EARLY_STOPPING = {"true": True, "false": False, "never": "never"}


def model_generation_config(run):
    """The model's HF GenerationConfig, or None under --ignore-generation-config."""
    if run.options.ignore_generation_config:
        return None
    return run.source.generation


def effective_num_beams(options, generation) -> int:
    """--num-beams, else the model's generation config's num_beams (unless ignored), else 1."""
    if options.num_beams is not None:
        return options.num_beams
    if options.ignore_generation_config or generation is None:
        return 1
    return generation.num_beams or 1


def _value(flag, hf, name: str, default):
    """The flag if given, else the model's value, else the default."""
    if flag is not None:
        return flag
    value = getattr(hf, name, None) if hf is not None else None
    return default if value is None else value


def _refuse_unsupported(hf, do_sample: bool) -> None:
    fields = dict(_UNSUPPORTED, **(_UNSUPPORTED_WARPERS if do_sample else {}))
    active = [f"{name}={getattr(hf, name, None)!r}" for name, neutral in fields.items()
              if getattr(hf, name, None) not in neutral]
    if active:
        raise UsageError(f"the model's generation config sets {', '.join(active)}, which this harness's generation "
                         "loop does not implement: add --ignore-generation-config to run without it")


def resolve(run, sampling, max_new_tokens: int | None = None, min_new_tokens: int | None = None) -> GenerationConfig:
    """Our GenerationConfig for a run: the model's generation config (`run.source.generation`) under the flags
    (`run.options`: --num-beams, --ignore-generation-config; `sampling`: a SamplingOptions), as HF `generate`
    would decode with the same arguments. `max_new_tokens` / `min_new_tokens`: lengths the action fixes
    (None: --max-new-tokens / --min-new-tokens, else the model's config, else the defaults)."""
    hf = model_generation_config(run)
    beams = effective_num_beams(run.options, hf)
    do_sample = bool(_value(sampling.do_sample, hf, "do_sample", False))
    if do_sample and beams > 1:
        says = "the model's generation config"
        sample_src = "--do-sample" if sampling.do_sample else f"{says}'s do_sample=True"
        beam_src = "--num-beams > 1" if run.options.num_beams is not None else f"{says}'s num_beams={beams}"
        raise UsageError(f"{sample_src} with {beam_src} (beam sampling) is not supported: use one of them "
                         "(--no-do-sample, --num-beams 1, or --ignore-generation-config)")
    if hf is not None:
        _refuse_unsupported(hf, do_sample)
    eos, pad = run.family.task.special_ids(run)
    eos = _eos(eos, hf)

    max_length = None
    if max_new_tokens is None:
        max_new_tokens = _value(None, hf, "max_new_tokens", None)
        if max_new_tokens is None and hf is not None and hf.max_length is not None:
            max_length = hf.max_length
        elif max_new_tokens is None:
            max_new_tokens = DEFAULT_MAX_NEW_TOKENS
    min_length = 0
    if min_new_tokens is None:
        min_new_tokens = _value(sampling.min_new_tokens, hf, "min_new_tokens", None)
        if min_new_tokens is None:  # HF: min_new_tokens, when set, replaces min_length
            min_length = _value(None, hf, "min_length", 0)
            min_new_tokens = 0

    temperature = float(_value(sampling.temperature, hf, "temperature", 1.0))
    if do_sample and temperature <= 0:  # without sampling the temperature is ignored, as in HF
        says = "the model's generation config"
        temp_src = "--temperature" if sampling.temperature is not None else f"{says}'s temperature"
        sample_src = "--do-sample" if sampling.do_sample else f"{says}'s do_sample=True"
        raise UsageError(f"{temp_src} {temperature:g} with {sample_src}: sampling divides the scores by the "
                         "temperature; give --temperature > 0, or --no-do-sample")

    check_cache_fits(run, beams, max_new_tokens or max_length)
    vocab = run.source.dims.vocab
    if beams > vocab:  # the first step has only `vocab` continuations: the other beams could never be filled
        source = "--num-beams" if run.options.num_beams is not None else "the model's generation config's num_beams"
        raise UsageError(f"{source} {beams} is more than {run.source.variant}'s {vocab}-token vocabulary: give at "
                         f"most {vocab}")
    cfg = SamplingConfig(
        do_sample=do_sample,
        temperature=temperature,
        top_k=int(_value(sampling.top_k, hf, "top_k", HF_TOP_K if hf is not None else 0)),
        top_p=float(_value(sampling.top_p, hf, "top_p", 1.0)),
        repetition_penalty=float(_value(sampling.repetition_penalty, hf, "repetition_penalty", 1.0)),
        dry_multiplier=sampling.dry_multiplier, dry_base=sampling.dry_base,
        dry_allowed_length=sampling.dry_allowed_length, dry_penalty_last_n=sampling.dry_penalty_last_n,
    )
    early = sampling.early_stopping
    early = _EARLY_STOPPING[early] if isinstance(early, str) else early
    bad_words = _value(None, hf, "bad_words_ids", ())
    breakers = frozenset()
    if sampling.dry_multiplier > 0:
        breakers = dry_breaker_ids(run.tokenizer, sampling.dry_sequence_breakers)
    return GenerationConfig(
        max_new_tokens=max_new_tokens, max_length=max_length, min_new_tokens=min_new_tokens,
        min_length=int(min_length), num_beams=beams,
        length_penalty=float(_value(sampling.length_penalty, hf, "length_penalty", 1.0)),
        early_stopping=_value(early, hf, "early_stopping", False),
        eos_token_id=eos, pad_token_id=pad, sampling=cfg, seed=sampling.seed, dry_breakers=breakers,
        # the forced first token is part of the task's prompt (mBART's target language): read even when ignored
        forced_bos_token_id=run.source.generation.forced_bos_token_id,
        forced_eos_token_id=_value(None, hf, "forced_eos_token_id", None),
        no_repeat_ngram_size=int(_value(sampling.no_repeat_ngram_size, hf, "no_repeat_ngram_size", 0)),
        bad_words_ids=tuple(tuple(int(t) for t in word) for word in bad_words),
    )


_SAMPLING_ONLY = (("--temperature", "temperature", (0.0, 1.0)), ("--top-k", "top_k", ()),
                  ("--top-p", "top_p", (1.0,)))  # (flag, field, values that change nothing)
_BEAMS_ONLY = (("--length-penalty", "length_penalty", (1.0,)), ("--early-stopping", "early_stopping", ("false",)))


def _number(value) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) else str(value)


def refuse_unread(sampling, config: GenerationConfig) -> None:
    """Decoding flags given that this run's decoding never reads: sampling's without sampling, beam scoring's with
    one beam (HF `generate` warns and ignores them). Refused in one line, naming what reads them; a value that
    changes nothing either way (--temperature 0 or 1, --top-p 1, --length-penalty 1) is accepted."""
    decodes = "by beam search" if config.num_beams > 1 else "greedily"
    if not config.sampling.do_sample:
        for flag, name, neutral in _SAMPLING_ONLY:
            value = getattr(sampling, name)
            if value is not None and value not in neutral:
                raise UsageError(f"{flag} {_number(value)} applies when sampling, and this run decodes {decodes}: add "
                                 f"--do-sample or drop {flag}")
    if config.num_beams == 1:
        for flag, name, neutral in _BEAMS_ONLY:
            value = getattr(sampling, name)
            if value is not None and value not in neutral:
                raise UsageError(f"{flag} {_number(value)} applies to beam search, and this run decodes with one "
                                 f"beam: add --num-beams N (N > 1) or drop {flag}")


def report_settings(options, config: GenerationConfig) -> dict:
    """What the report of an action that generates shows of how it generates (its header and the JSON's
    `settings`): the KV cache (`options`: a ModelOptions), the beams, whether it samples and, when it does, the
    sampling settings and the seed (a sampled result can be drawn again from its JSON), the repetition penalty,
    and the other rules where they are on."""
    sampling = config.sampling
    settings = {"use_cache": options.use_cache, "static_cache": options.static_cache, "num_beams": config.num_beams,
                "do_sample": sampling.do_sample}
    if sampling.do_sample:
        settings |= {"temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p,
                     "seed": config.seed}
    settings["repetition_penalty"] = sampling.repetition_penalty
    if config.no_repeat_ngram_size:
        settings["no_repeat_ngram_size"] = config.no_repeat_ngram_size
    if sampling.dry_multiplier > 0:
        settings |= {"dry_multiplier": sampling.dry_multiplier, "dry_base": sampling.dry_base,
                     "dry_allowed_length": sampling.dry_allowed_length,
                     "dry_penalty_last_n": sampling.dry_penalty_last_n}
    if config.num_beams > 1:
        settings |= {"length_penalty": config.length_penalty, "early_stopping": config.early_stopping}
    return settings


def _eos(eos: int | None, hf) -> int | tuple[int, ...] | None:
    """The ids that end generation: the task's EOS first, then the generation config's others (one id stays an
    int, as HF writes it)."""
    ids = tuple(dict.fromkeys(eos_ids(eos) + eos_ids(hf.eos_token_id if hf is not None else None)))
    return ids[0] if len(ids) == 1 else (ids or None)


def available_bytes(device) -> int:
    """Memory free for a new allocation on `device` (a torch.device): the GPU's free memory, else the host's
    available memory."""
    import psutil
    import torch

    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return psutil.virtual_memory().available


def check_cache_fits(run, beams: int, length: int) -> None:
    """One line, before anything is allocated, when the KV cache alone of --batch-size rows x `beams` beams x
    `length` new tokens (the prompt not counted: a floor) would not fit the memory available on the run's
    device twice: a decoding step holds two copies of it (the grown or beam-reordered cache is a new tensor).
    Lengths past the model's position table are left to the checks of the prompt and generation lengths."""
    from NNDF.generation import cache_bytes

    limit = run.source.dims.positions
    if limit and length > limit:  # no cache grows past the position table: the length check names that limit
        return
    rows = run.options.batch_size
    need = cache_bytes(run.source.dims, rows, beams, length, 2 if run.options.fp16 else 4)
    free = available_bytes(run.device)
    if 2 * need > free:
        raise UsageError(f"{rows} row(s) x {beams} beam(s) x {length} new tokens: the KV cache alone needs about "
                         f"{need / 1e9:.1f} GB, twice that while a step copies it, and {run.device.type} has "
                         f"{free / 1e9:.1f} GB available: lower --num-beams, --batch-size or --max-new-tokens")


# tensors [rows, heads, L, L] one attention layer holds at once over a prompt of L tokens (scores, position bias,
# their sum, softmax): t5-offline's encoder on the CPU grew by 5.0 of them from 3000 to 6000 tokens on ONNX Runtime
# (+2170 MB, 432 MB a tensor), by 2.9 on PyTorch
ATTENTION_TENSORS = 5


def attention_problem(run, rows: int, length: int) -> str | None:
    """Why a prompt of `length` tokens in `rows` rows would not fit the memory available on the run's device (None:
    it would), from what one attention layer holds over it (`ATTENTION_TENSORS` x [rows, heads, length, length]),
    before anything runs. Only where the model has no position table (relative positions, ALiBi): nothing else
    bounds its length there, and those families' attention (HF's T5 and BLOOM, and the graphs exported from them)
    holds the scores whole; a table bounds the length otherwise, within which fused attention kernels need not
    hold them."""
    dims = run.source.dims
    if dims.positions:
        return None
    need = ATTENTION_TENSORS * rows * dims.heads * length * length * (2 if run.options.fp16 else 4)
    free = available_bytes(run.device)
    if need <= free:
        return None
    return (f"a prompt of {length} tokens: one attention layer over it holds about {need / 1e9:.0f} GB "
            f"({ATTENTION_TENSORS} tensors of {rows} row(s) x {dims.heads} heads x {length} x {length}: scores, "
            f"position bias, softmax) and {run.device.type} has {free / 1e9:.1f} GB available "
            f"({run.source.variant} has no position table to bound the length)")


def dry_breaker_ids(tokenizer, breakers) -> frozenset[int]:
    """Token ids whose text contains a sequence breaker (so a DRY repeat never spans one)."""
    ids = set()
    for i in range(len(tokenizer)):
        text = tokenizer.decode([i])
        if any(b and b in text for b in breakers):
            ids.add(i)
    return frozenset(ids)
