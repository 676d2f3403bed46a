"""Options: frozen dataclasses are the single source of defaults, help text and validation.

Each field carries its flags and help in `metadata`; `add_to_parser` builds the argparse group from them and
`from_namespace` builds the dataclass back, so a flag is declared exactly once. `__post_init__` validates
values (impossible sizes, contradicting flags) and raises `UsageError` with the valid range.

Every flag's argparse default is `argparse.SUPPRESS`: a flag the user gave is exactly an attribute of the parsed
namespace (`given`), so the CLI can refuse a flag that does not apply to an action instead of ignoring it;
`from_namespace` fills in the dataclass defaults for the rest.
"""
from __future__ import annotations

import argparse
import math
from dataclasses import MISSING, dataclass, field, fields

from NNDF.errors import UsageError


def flag(default, *names: str, help: str, **argparse_kwargs):
    return field(default=default, metadata={"flags": names, "help": help, "argparse": argparse_kwargs})


def _positive(name: str, value: int, minimum: int = 1) -> None:
    if value < minimum:
        raise UsageError(f"{name} must be >= {minimum}, got {value}")


def finite_float(text: str) -> float:
    """argparse type for float flags: a finite number (`inf` / `nan` are refused, e.g. --duration inf never ends)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def int64(text: str) -> int:
    """argparse type for integer flags: what the libraries underneath accept (an int64)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer: {text!r}") from None
    if not -(2 ** 63) <= value < 2 ** 63:
        raise argparse.ArgumentTypeError(f"{text} is out of range (a 64-bit integer)")
    return value


class BatchSize(argparse.Action):
    """--batch-size N, or min opt max (a TensorRT profile, seed 002's spelling): the batch run is N (or opt);
    the three values also go to `batch_profile` (TensorRT's option group), which only encoder engines read."""

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            numbers = [int(v) for v in values]
        except ValueError:
            parser.error(f"argument {option_string}: invalid integer in {' '.join(values)!r}")
        if len(numbers) not in (1, 3):
            parser.error(f"argument {option_string}: give N, or min opt max (got {len(numbers)} values)")
        if len(numbers) == 3:
            if not 1 <= numbers[0] <= numbers[1] <= numbers[2]:
                parser.error(f"argument {option_string}: min opt max must satisfy 1 <= min <= opt <= max, "
                             f"got {' '.join(values)}")
            namespace.batch_profile = tuple(numbers)
        setattr(namespace, self.dest, numbers[len(numbers) // 2])


ACTIONS = {"BatchSize": BatchSize}  # argparse actions named in `flag(..., action=...)` by string


class OptionGroup:
    """Mixin: argparse round-trip for a dataclass of `flag` fields."""

    title = "options"

    @classmethod
    def add_to_parser(cls, parser: argparse.ArgumentParser, hidden: frozenset[str] = frozenset()) -> None:
        """Add every field's flags; `hidden`: field names left out of `--help` (flags that do not apply to the
        parser's action: still parsed, so the CLI can refuse them by name)."""
        group = parser.add_argument_group(cls.title)
        for f in fields(cls):
            meta = f.metadata
            kwargs = dict(meta["argparse"])
            kwargs["action"] = ACTIONS.get(kwargs.get("action"), kwargs.get("action"))
            if kwargs["action"] is None:
                del kwargs["action"]
            default = f.default if f.default is not MISSING else f.default_factory()
            if isinstance(default, bool) and "action" not in kwargs:
                kwargs["action"] = "store_true"
            elif "type" not in kwargs and "action" not in kwargs and default is not None:
                kwargs["type"] = type(default)
            if kwargs.get("type") in (float, int):  # numbers the libraries underneath can take
                kwargs["type"] = finite_float if kwargs["type"] is float else int64
            help_text = argparse.SUPPRESS if f.name in hidden else meta["help"]
            group.add_argument(*meta["flags"], dest=f.name, default=argparse.SUPPRESS, help=help_text, **kwargs)

    @classmethod
    def flag_name(cls, name: str) -> str:
        """The flag spelling of field `name` (its first, long spelling)."""
        return next(f.metadata["flags"][0] for f in fields(cls) if f.name == name)

    @classmethod
    def given(cls, ns: argparse.Namespace) -> list[str]:
        """Names of this group's fields the user gave on the command line."""
        return [f.name for f in fields(cls) if hasattr(ns, f.name)]

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace):
        values = {}
        for f in fields(cls):
            value = getattr(ns, f.name, MISSING)
            if value is MISSING:  # not given: the dataclass default
                value = f.default if f.default is not MISSING else f.default_factory()
            if isinstance(value, list):  # argparse gives lists for nargs; the dataclasses are frozen and hashable
                value = tuple(value)
            elif value is None and isinstance(f.default, tuple):
                value = f.default
            values[f.name] = value
        return cls(**values)


MAX_THREADS = 1024  # torch and ONNX Runtime thread pools: far above any CPU this runs on


@dataclass(frozen=True)
class ModelOptions(OptionGroup):
    title = "model and backend"
    variant: str | None = flag(None, "--variant", "-m", help="HF id or offline variant (default: the family's offline default)")
    torch_dir: str | None = flag(None, "--torch-dir", help="local HF model folder (config, weights, tokenizer); never touches the network")
    working_dir: str = flag("temp", "--working-dir", "-wd", help="where ONNX files, engines and offline models are kept")
    device: str | None = flag(None, "--device", choices=("cpu", "cuda"), help="cpu or cuda (default: cuda if available, else cpu)")
    cpu: bool = flag(False, "--cpu", help="same as --device cpu")
    fp16: bool = flag(False, "--fp16", help="fp16 weights and activations (CUDA only)")
    use_cache: bool = flag(False, "--use-cache", "-kv", "--enable-kv-cache", help="use the KV cache (recommended)")
    static_cache: bool = flag(False, "--static-cache", help="KV cache of the generation's full length written in place: every one-token step has the same shapes (decoder-only families; needs --use-cache)")
    use_cuda_graph: bool = flag(False, "--use-cuda-graph", help="replay the one-token step (encoder models: the forward pass) from a CUDA graph (CUDA only; for generative models frameworks and onnxrt need --static-cache; one graph per input shape otherwise)")
    torch_compile: bool = flag(False, "--torch-compile", help="frameworks: compile with torch.compile (inductor; the first call compiles, which takes a while): the one-token step of generative models (needs --static-cache), the forward pass of encoder models")
    compile_mode: str = flag("default", "--compile-mode", choices=("default", "max-autotune"), help="with --torch-compile: default (inductor's defaults) or max-autotune (inductor benchmarks Triton GEMM templates against cuBLAS per shape, fuses GEMM epilogues and tunes kernel launch configs; compiling takes minutes)")
    fused_decode: bool = flag(False, "--fused-decode", help="the family's fused decode step instead of the model's own code (needs --static-cache): frameworks runs a one-token step written for inductor (one-row products as fused reductions, one-query attention with the cache write inside), onnxrt a graph of ONNX Runtime's fused attention with the cache written in place; families and backends without one refuse it")
    use_mask: bool = flag(False, "--use-mask", help="pass attention masks (required for padded batches)")
    batch_size: int = flag(1, "--batch-size", "-b", action="BatchSize", nargs="+", metavar="N", help="batch size (benchmark, run, compare, predict); encoder models on trt also take three values, min opt max (seed 002's form): the engine's batch profile, and the middle one is the batch run")
    num_beams: int | None = flag(None, "--num-beams", "-nb", type=int, help="beam search width (1: greedy or sampling; default: the model's generation config, else 1)")
    ignore_generation_config: bool = flag(False, "--ignore-generation-config", help="do not apply the model's generation_config (beams, length penalty, min/max length, no-repeat n-grams, forced EOS, ...): the flags and their flags-only defaults decide; the decoder start token and a forced first token are still read")
    decoder_onnx: str | None = flag(None, "--decoder-onnx", help="use this decoder ONNX file instead of exporting one")
    encoder_onnx: str | None = flag(None, "--encoder-onnx", help="encoder-decoder models: this encoder ONNX file (with --decoder-onnx)")
    cache_generator_onnx: str | None = flag(None, "--cache-generator-onnx", help="encoder-decoder models with --use-cache: this cross-attention cache generator ONNX file")
    image: tuple = flag((), "--image", action="append", help="image-to-text models: caption this PNG/JPEG (repeatable; run, compare, chat)")
    task: str | None = flag(None, "--task", choices=("feature-extraction", "text-classification", "token-classification"), help="encoder models: what the model computes (default: from the checkpoint: its classification head if it has one, else sentence embeddings)")
    trust_remote_code: bool = flag(False, "--trust-remote-code", help="allow model code from the hub (off by default)")
    cleanup: bool = flag(False, "--cleanup", help="remove this variant's artifacts from the working dir after the run")
    threads: int = flag(0, "--threads", help="CPU threads for torch and ONNX Runtime (0: library default)")
    json: str | None = flag(None, "--json", help="also write the results as JSON to this path")
    verbose: bool = flag(False, "--verbose", "-v", help="print library logs")
    info: bool = flag(False, "--info", help="show progress bars and status lines even when stderr is not a terminal")

    def __post_init__(self):
        _positive("--batch-size", self.batch_size)
        if self.num_beams is not None:
            _positive("--num-beams", self.num_beams)
        _positive("--threads", self.threads, 0)
        if self.threads > MAX_THREADS:
            raise UsageError(f"--threads must be <= {MAX_THREADS}, got {self.threads}")
        if self.cpu and self.device == "cuda":
            raise UsageError("--cpu contradicts --device cuda")
        if self.static_cache and not self.use_cache:
            raise UsageError("--static-cache needs --use-cache (it is a kind of KV cache)")
        if self.fused_decode and not self.static_cache:
            raise UsageError("--fused-decode needs --static-cache (the fused step writes a full-length cache in place)")
        if self.compile_mode != "default" and not self.torch_compile:
            raise UsageError(f"--compile-mode {self.compile_mode} needs --torch-compile")

    @property
    def precision(self) -> str:
        return "fp16" if self.fp16 else "fp32"

    def check_graph_needs_static(self, backend: str) -> None:
        """Generative models: frameworks and onnxrt compile and capture only the static cache's fixed-shape
        one-token step (encoder models compile and capture their one forward pass without it)."""
        if self.torch_compile and not self.static_cache:
            raise UsageError("--torch-compile needs --static-cache (it compiles the fixed-shape one-token step)")
        if self.use_cuda_graph and not self.static_cache:
            raise UsageError(f"--use-cuda-graph with the {backend} backend needs --static-cache (a growing cache "
                             "changes shapes every step)")

    @property
    def cache_layout(self) -> str:
        """How the KV cache is kept (artifact and engine names say it): nokv, kv (growing) or static."""
        return "static" if self.static_cache else ("kv" if self.use_cache else "nokv")


@dataclass(frozen=True)
class SamplingOptions(OptionGroup):
    title = ("decoding: sampling, penalties, beam scoring (a flag not given takes the model's generation_config "
             "value, as HF generate does, unless --ignore-generation-config)")
    do_sample: bool | None = flag(None, "--do-sample", action=argparse.BooleanOptionalAction, help="sample instead of greedy / beam search (default: the model's generation config, else off)")
    temperature: float | None = flag(None, "--temperature", type=float, help="softmax temperature (> 0; default: the model's generation config, else 1)")
    top_k: int | None = flag(None, "--top-k", type=int, help="keep the k most likely tokens when sampling (0: off; default: the model's generation config, else HF's 50; 0 with --ignore-generation-config)")
    top_p: float | None = flag(None, "--top-p", type=float, help="nucleus sampling mass in (0, 1] (1: off; default: the model's generation config, else 1)")
    repetition_penalty: float | None = flag(None, "--repetition-penalty", type=float, help="HF-style repetition penalty (1: off; default: the model's generation config, else 1)")
    no_repeat_ngram_size: int | None = flag(None, "--no-repeat-ngram-size", type=int, help="forbid repeating any n-gram of this size (0: off; default: the model's generation config, else 0)")
    min_new_tokens: int | None = flag(None, "--min-new-tokens", type=int, help="forbid EOS before this many new tokens (replaces the config's min_length, as in HF; default: the model's generation config, else 0; benchmark always runs --output-seq-len tokens)")
    length_penalty: float | None = flag(None, "--length-penalty", type=float, help="beam search: scores are divided by length ** this (default: the model's generation config, else 1)")
    early_stopping: str | None = flag(None, "--early-stopping", choices=("true", "false", "never"), help="beam search stop rule, as HF's early_stopping (default: the model's generation config, else false)")
    dry_multiplier: float = flag(0.0, "--dry-multiplier", help="DRY penalty strength (0: off; typical 0.8)")
    dry_base: float = flag(1.75, "--dry-base", help="DRY exponential base")
    dry_allowed_length: int = flag(2, "--dry-allowed-length", help="repeats up to this length are not penalised")
    dry_penalty_last_n: int = flag(0, "--dry-penalty-last-n", help="how far back DRY looks (0: everything)")
    dry_sequence_breakers: tuple = flag(("\n", ":", '"', "*"), "--dry-sequence-breakers", nargs="*", type=str,
                                        help="strings that end a repeat")
    seed: int = flag(0, "--seed", help="random seed for sampling and random inputs")

    def __post_init__(self):
        if self.temperature is not None and self.temperature <= 0:
            raise UsageError(f"--temperature must be > 0, got {self.temperature}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise UsageError(f"--top-p must be in (0, 1], got {self.top_p}")
        if self.repetition_penalty is not None and self.repetition_penalty <= 0:
            raise UsageError(f"--repetition-penalty must be > 0, got {self.repetition_penalty}")
        for name, value in (("--top-k", self.top_k), ("--no-repeat-ngram-size", self.no_repeat_ngram_size),
                            ("--min-new-tokens", self.min_new_tokens)):
            if value is not None:
                _positive(name, value, 0)
        if self.dry_multiplier < 0 or self.dry_base <= 1:
            raise UsageError("--dry-multiplier must be >= 0 and --dry-base > 1")
        _positive("--dry-allowed-length", self.dry_allowed_length, 1)


@dataclass(frozen=True)
class TimingOptions(OptionGroup):
    title = "timing"
    iterations: int = flag(10, "--iterations", help="measured iterations")
    number: int = flag(1, "--number", help="calls per iteration (the iteration's time is divided by it)")
    warmup: int = flag(3, "--warmup", help="untimed iterations first")
    duration: float = flag(0.0, "--duration", help="keep measuring for at least this many seconds")
    percentile: int = flag(50, "--percentile", help="extra percentile to report besides p50, p90, p99")

    def __post_init__(self):
        _positive("--iterations", self.iterations)
        _positive("--number", self.number)
        _positive("--warmup", self.warmup, 0)
        if self.duration < 0:
            raise UsageError(f"--duration must be >= 0, got {self.duration}")
        if not 0 < self.percentile <= 100:
            raise UsageError(f"--percentile must be in (0, 100], got {self.percentile}")


@dataclass(frozen=True)
class BenchmarkOptions(OptionGroup):
    title = "benchmark"
    input_seq_len: int | None = flag(None, "--input-seq-len", type=int, help="prompt length in random tokens (default 128; when both lengths are left to their defaults and exceed the model's position table, both are halved until they fit, and the report says so)")
    output_seq_len: int | None = flag(None, "--output-seq-len", type=int, help="new tokens per run, early stopping off (default 256; see --input-seq-len)")
    hf_baseline: bool = flag(False, "--hf-baseline", help="also time HF generate on the same inputs")
    plot: str | None = flag(None, "--plot", help="write a PNG of per-token latency against sequence length")

    DEFAULT_LENGTHS = (128, 256)  # (prompt, new tokens): the reference demo's and the GPU anchors' shape

    def __post_init__(self):
        for name, value in (("--input-seq-len", self.input_seq_len), ("--output-seq-len", self.output_seq_len)):
            if value is not None:
                _positive(name, value)


@dataclass(frozen=True)
class AccuracyOptions(OptionGroup):
    title = "accuracy"
    dataset: str = flag("lambada", "--dataset", help="local JSONL file (field 'text'; encoder models: 'text' and 'label') or HF dataset name (default: LAMBADA; encoder models: data/encoder_offline.jsonl)")
    num_samples: int = flag(20, "--num-samples", help="passages, in order")
    tokens_to_generate: int = flag(5, "--tokens-to-generate", help="last tokens scored by teacher forcing")
    topN: int = flag(2, "--topN", help="also report TopN accuracy for this N (Top1 and Top10 always)")

    def __post_init__(self):
        _positive("--num-samples", self.num_samples)
        _positive("--tokens-to-generate", self.tokens_to_generate)
        _positive("--topN", self.topN)


@dataclass(frozen=True)
class PredictOptions(OptionGroup):
    title = "predict (encoder models)"
    prompt: tuple = flag((), "--prompt", action="append", help="a text to embed or classify (repeatable)")
    dataset: str | None = flag(None, "--dataset", help="a JSONL file of texts (field 'text'), one prediction per line")

    def __post_init__(self):
        if self.prompt and self.dataset:
            raise UsageError("--prompt and --dataset are alternatives: give one")


@dataclass(frozen=True)
class ChatOptions(OptionGroup):
    title = "chat"
    prompt: tuple = flag((), "--prompt", action="append", help="run this prompt and exit (repeatable)")
    max_new_tokens: int | None = flag(None, "--max-new-tokens", type=int, help="most tokens to generate per prompt (default: the model's generation config's max_new_tokens or max_length, else 32)")

    def __post_init__(self):
        if self.max_new_tokens is not None:
            _positive("--max-new-tokens", self.max_new_tokens)
