"""`run` and `compare` for the generative kinds: the family's golden samples from `checkpoint.toml`, on one or several backends.

checkpoint.toml holds `[generation] max_new_tokens` and `[[sample]]` entries with an `input` and, per
variant and precision, the `expected` greedy continuation. For every sample and backend: the generated text,
whether it equals the expected text (accuracy = share of samples that do; n/a where nothing is expected
for this variant and precision, or for images given with `--image` instead of the samples), the teacher-forced
perplexity of the expected text, and median seconds for the prompt pass, one decoder step (n/a where the
generation is one token: EOS first), and the full generation. `run` prints one row per sample; `compare` one row
per backend, side by side.

The expected outputs are HF `generate`'s greedy outputs under the model's generation config
(tools/assets/make_checkpoints.py). A run that decodes differently (beams, sampling, a penalty or rule the flags add or
change) cannot be held to them: its accuracy is n/a and a note says why (perplexity, teacher-forced on the
expected text, still applies).
"""
from __future__ import annotations

import dataclasses
import math
import statistics
import tomllib
from dataclasses import dataclass
from pathlib import Path

import torch

from NNDF.context import RunContext
from NNDF.decoding import report_settings
from NNDF.errors import HarnessError, UsageError
from NNDF.evaluate import Evaluator
from NNDF.options import ModelOptions, SamplingOptions, TimingOptions
from NNDF.session import decode, encode, generate_prompt, generation_config
from NNDF.timing import GenerationClock, measure


@dataclass(frozen=True)
class SampleResult:
    backend: str
    input: str
    output: str
    expected: str | None
    accuracy: float | None  # 1.0 if output == expected, 0.0 if not, None if nothing is expected
    perplexity: float | None  # of the expected text given the input
    prefill_s: float
    decoder_s: float | None  # None: one new token in every timed call, no decoder step after the first
    full_s: float
    encoder_s: float | None = None  # encoder-decoder models: the encoder's share of the prefill
    tokens: tuple[int, ...] = ()  # the new tokens of the first row (agreement between backends)
    shown: str = ""  # the input as the table shows it (the task's `shown`; "": the input itself)

    WIDE = ("input", "output")  # shortened to fit the terminal (NNDF/results.py); the JSON has them whole

    def row(self) -> dict:
        row = {"backend": self.backend, "input": self.shown or self.input, "output": self.output,
               "accuracy": "n/a" if self.accuracy is None else self.accuracy, "perplexity": self.perplexity}
        if self.encoder_s is not None:
            row["encoder (sec)"] = self.encoder_s
        return row | {"decoder (sec)": _or_na(self.decoder_s), "full (sec)": self.full_s}


def _or_na(seconds: float | None):
    return "n/a" if seconds is None else seconds


@dataclass(frozen=True)
class BackendSummary:
    backend: str
    accuracy: float | None
    perplexity: float | None
    prefill_s: float
    decoder_s: float | None  # None as SampleResult's, for every sample
    full_s: float
    samples: tuple[SampleResult, ...]
    encoder_s: float | None = None

    def row(self) -> dict:
        row = {"backend": self.backend, "accuracy": "n/a" if self.accuracy is None else self.accuracy,
               "perplexity": self.perplexity}
        if self.encoder_s is not None:
            row["encoder (sec)"] = self.encoder_s
        return row | {"prefill (sec)": self.prefill_s, "decoder (sec)": _or_na(self.decoder_s),
                      "full (sec)": self.full_s}


def load_checkpoint(run: RunContext) -> tuple[int, list[dict]]:
    path = run.family.checkpoint
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from exc
    samples = list(data.get("sample", []))
    if not samples:
        raise UsageError(f"{path} has no [[sample]] entries: nothing to run (tools/assets/make_checkpoints.py "
                         "writes them)")
    return int(data.get("generation", {}).get("max_new_tokens", 16)), samples


def _expected(sample: dict, run: RunContext) -> str | None:
    return sample.get("expected", {}).get(run.source.variant, {}).get(run.options.precision)


def _perplexity(run: RunContext, steps, item, expected: str | None) -> float | None:
    if not expected:
        return None
    target = run.tokenizer(expected, add_special_tokens=False)["input_ids"]
    logp = run.family.task.score_item(run, steps, item, target)  # [len(target), V]
    nll = -logp.gather(1, torch.tensor(target, device=logp.device)[:, None]).mean()
    return math.exp(float(nll))


# GenerationConfig fields that change a greedy continuation (beam-only ones count with beams)
_DECODING = ("num_beams", "min_new_tokens", "min_length", "no_repeat_ngram_size", "bad_words_ids",
             "forced_bos_token_id", "forced_eos_token_id")
_BEAM_ONLY = ("length_penalty", "early_stopping")


def decoding_change(run: RunContext, sampling: SamplingOptions, config, max_new: int) -> str | None:
    """How this run's decoding differs from the one the expected outputs were made with (HF generate, greedy,
    under the model's generation config), or None when it does not."""
    if config.sampling.do_sample:
        return "sampling (--do-sample or the model's do_sample)"
    defaults = SamplingOptions()
    flags_given = (run.options.num_beams is not None or run.options.ignore_generation_config
                   or any(getattr(sampling, f.name) != getattr(defaults, f.name)
                          for f in dataclasses.fields(SamplingOptions) if f.name != "seed"))
    if not flags_given:
        return None
    reference_run = dataclasses.replace(run, options=dataclasses.replace(
        run.options, num_beams=None, ignore_generation_config=False))
    try:
        reference = generation_config(reference_run, SamplingOptions(do_sample=False), max_new)
    except HarnessError:
        return "the model's generation config, which the expected outputs follow, cannot be applied here"
    names = _DECODING + (_BEAM_ONLY if config.num_beams > 1 else ())
    changed = [f"{n} {getattr(config, n)} instead of {getattr(reference, n)}" for n in names
               if getattr(config, n) != getattr(reference, n)]
    cfg, ref = config.sampling, reference.sampling
    changed += [f"{n} {getattr(cfg, n)} instead of {getattr(ref, n)}" for n in ("repetition_penalty", "dry_multiplier")
                if getattr(cfg, n) != getattr(ref, n)]
    return ", ".join(changed) or None


def _run_sample(run, name, steps, sample, config, timing, greedy: bool = True) -> SampleResult:
    item = run.family.task.sample_item(sample)
    inputs = encode(run, [item] * run.options.batch_size)
    out = generate_prompt(steps, inputs, config)
    new_tokens = out.new_tokens(0, config.eos_token_id)
    text = decode(run, new_tokens)

    def call():
        clock = GenerationClock(run.device)
        result = generate_prompt(steps, inputs, config, clock)
        steps_taken = result.sequences.shape[1] - result.prompt_length
        seconds = clock.seconds()
        if steps_taken > 1:  # one token (EOS first): no decoder step to time
            seconds["decoder"] = (seconds["e2e"] - seconds["prefill"]) / (steps_taken - 1)
        return seconds

    samples = measure(call, timing, f"{name} sample")
    med = {k: _median([s[k] for s in samples if k in s]) for k in ("prefill", "e2e", "encoder", "decoder")}
    expected = _expected(sample, run)
    accuracy = None if expected is None or not greedy else float(text == expected)
    return SampleResult(name, str(item), text, expected, accuracy, _perplexity(run, steps, item, expected),
                        med["prefill"], med["decoder"], med["e2e"], med["encoder"], tuple(new_tokens),
                        run.family.task.shown(item))


def _median(values: list) -> float | None:
    """The median of the values there are (None: none)."""
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _summary(name: str, results: list[SampleResult]) -> BackendSummary:
    acc = [r.accuracy for r in results if r.accuracy is not None]
    ppl = [math.log(r.perplexity) for r in results if r.perplexity is not None]
    med = lambda attr: _median([getattr(r, attr) for r in results])  # noqa: E731
    return BackendSummary(name, sum(acc) / len(acc) if acc else None, math.exp(sum(ppl) / len(ppl)) if ppl else None,
                          med("prefill_s"), med("decoder_s"), med("full_s"), tuple(results), med("encoder_s"))


def _agreement(outputs: list[list[SampleResult]]) -> list[str]:
    """Each later backend's outputs against the first's (e.g. --quantize none int8 int4): samples whose new tokens
    are equal, and the new token where the others first differ."""
    notes, first = [], outputs[0]
    for results in outputs[1:]:
        differ = [next((i for i, (a, b) in enumerate(zip(x.tokens, y.tokens)) if a != b),
                       None if len(x.tokens) == len(y.tokens) else min(len(x.tokens), len(y.tokens)))
                  for x, y in zip(first, results)]
        where = sorted(i + 1 for i in differ if i is not None)
        notes.append(f"{results[0].backend}: output equals {first[0].backend}'s on {differ.count(None)} of "
                     f"{len(differ)} samples" + (f"; the others first differ at new token {', '.join(map(str, where))}"
                                                 if where else ""))
    return notes


class Checkpoint(Evaluator):
    """`run` and `compare` for the generative kinds: the golden samples through the shared generation loop."""

    def __init__(self, action: str, options: ModelOptions, sampling: SamplingOptions, timing: TimingOptions) -> None:
        super().__init__(action, options, sampling, timing)
        self.sampling, self.timing = sampling, timing
        self.side_by_side = action == "compare"

    def begin(self, run, report) -> None:
        options = self.options
        self.max_new, self.samples = load_checkpoint(run)
        if options.image:  # the user's images instead of the golden samples (nothing expected: accuracy n/a)
            self.samples = [{"image": str(Path(item.image).resolve()), "input": item.text}
                            for item in run.family.task.items(options, ())]
        self.config = generation_config(run, self.sampling, self.max_new)
        self.change = decoding_change(run, self.sampling, self.config, self.max_new)
        report.settings = {"device": run.device.type, "precision": options.precision,
                           **report_settings(options, self.config), "max_new_tokens": self.max_new,
                           "iterations": self.timing.iterations}

    def evaluate(self, run, name: str, backend, steps, report):
        results = [_run_sample(run, name, steps, s, self.config, self.timing, self.change is None)
                   for s in self.samples]
        report.results.extend([_summary(name, results)] if self.side_by_side else results)
        return results

    def end(self, run, report, outcomes: list) -> None:
        report.notes.extend(_agreement([results for _, results in outcomes]))
        if self.options.image:
            report.notes.append("the --image files were captioned instead of checkpoint.toml's samples: nothing is "
                                "expected for them, so accuracy is n/a")
        elif not any(_expected(s, run) for s in self.samples):
            report.notes.append(f"checkpoint.toml has no expected outputs for {run.source.variant} "
                                f"{self.options.precision}: accuracy is n/a")
        elif self.change:
            report.notes.append(f"checkpoint.toml's expected outputs are HF generate's greedy outputs under the "
                                f"model's generation config; this run decodes otherwise ({self.change}): accuracy "
                                "is n/a (perplexity of the expected text still applies)")
