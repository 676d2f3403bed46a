"""The option groups, by owner, and the library groups made of them.

Owner groups (see NNDF/option_group.py) say who reads a flag: an action lists the groups it reads
(`NNDF.actions.Action.reads`), a kind adds the groups only it reads (`Task.option_groups`, for groups marked
`by_kind`), a backend owns its own (NNDF/backends/onnxrt/options.py, trt/options.py, triton/options.py). The
library groups (`ModelOptions`, `SamplingOptions`, `TimingOptions`, `BenchmarkOptions`, `AccuracyOptions`) inherit
their owner groups' fields: the library functions take them, so `run.options.use_cache` and
`ModelOptions(working_dir=..., use_cache=True)` read as one object whoever owns each flag.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

from NNDF.errors import UsageError
from NNDF.option_group import OptionGroup, _positive, flag  # noqa: F401 - the groups' modules import them here

MAX_THREADS = 1024  # torch and ONNX Runtime thread pools: far above any CPU this runs on


# --- the model, where it runs, the batch, the output ---

@dataclass(frozen=True)
class SourceOptions(OptionGroup):
    title = "model source"
    owner = "every action that runs a model"
    variant: str | None = flag(None, "--variant", "-m", help="HF id or offline variant (default: the family's offline default); with --torch-dir, the label its artifacts are cached under")
    torch_dir: str | None = flag(None, "--torch-dir", help="local HF model folder (config, weights, tokenizer); never touches the network")
    working_dir: str = flag("temp", "--working-dir", "-wd", help="where ONNX files, engines and offline models are kept (written only when something must be built: a read-only one whose artifacts are current works)")
    trust_remote_code: bool = flag(False, "--trust-remote-code", help="allow model code from the hub (off by default)")


@dataclass(frozen=True)
class CleanupOptions(OptionGroup):
    title = "after the run"
    owner = "actions that run a model"
    cleanup: bool = flag(False, "--cleanup", help="remove this variant's artifacts from the working dir after the run")


@dataclass(frozen=True)
class DeviceOptions(OptionGroup):
    title = "device and precision"
    owner = "every action that runs a model"
    device: str | None = flag(None, "--device", choices=("cpu", "cuda"), help="cpu or cuda (default: cuda if available, else cpu)")
    cpu: bool = flag(False, "--cpu", help="same as --device cpu")
    fp16: bool = flag(False, "--fp16", help="fp16 weights and activations (CUDA only)")
    threads: int = flag(0, "--threads", help="CPU threads for ONNX Runtime (its intra-op pool) and torch (onnxrt on the CPU keeps torch on one: it only picks tokens; 0: library default)")

    def check(self):
        _positive("--threads", self.threads, 0)
        if self.threads > MAX_THREADS:
            raise UsageError(f"--threads must be <= {MAX_THREADS}, got {self.threads}")
        if self.cpu and self.device == "cuda":
            raise UsageError("--cpu contradicts --device cuda")


@dataclass(frozen=True)
class BatchOptions(OptionGroup):
    title = "batch"
    owner = "actions that run inputs in batches"
    batch_size: int = flag(1, "--batch-size", "-b", action="BatchSize", nargs="+", metavar="N", help="rows run together; encoder models on trt also take three values, min opt max (transformer-deploy's form): the engine's batch profile, and the middle one is the batch run")

    def check(self):
        _positive("--batch-size", self.batch_size)


@dataclass(frozen=True)
class MaskOptions(OptionGroup):
    title = "padding (generative models)"
    owner = "generative models"  # encoder models always pass masks
    by_kind = True
    use_mask: bool = flag(False, "--use-mask", help="pass attention masks (required for padded batches)")


@dataclass(frozen=True)
class OutputOptions(OptionGroup):
    title = "output"
    owner = "every action that runs a model"
    json: str | None = flag(None, "--json", help="also write the results as JSON to this path (-: to stdout, the tables then to stderr)")
    verbose: bool = flag(False, "--verbose", "-v", help="print library logs")
    info: bool = flag(False, "--info", help="show progress bars and status lines even when stderr is not a terminal")


@dataclass(frozen=True)
class ReportFileOptions(OptionGroup):
    title = "output (actions that run no model)"
    owner = "actions that run no model"
    json: str | None = flag(None, "--json", help="also write the report as JSON to this path (-: to stdout, the tables then to stderr)")


# --- the one-token step and the forward pass: caches, compiled and captured graphs ---

@dataclass(frozen=True)
class CacheOptions(OptionGroup):
    title = "KV cache (generative models)"
    owner = "generative models"
    by_kind = True
    use_cache: bool = flag(True, "--use-cache", "-kv", "--enable-kv-cache", action=argparse.BooleanOptionalAction, help="keep the keys and values of past tokens (the KV cache, on by default as in HF); --no-use-cache recomputes the whole sequence at every step")
    static_cache: bool = flag(False, "--static-cache", help="KV cache of the generation's full length written in place: every one-token step has the same shapes (not with --no-use-cache). Encoder-decoders: the decoder's self-attention buffers, plus cross-attention keys and values computed once per input; frameworks runs the family's own decoder step, onnxrt its graphs built from the weights, trt engines built from an ONNX export of that step")

    def check(self):
        if self.static_cache and not self.use_cache:
            raise UsageError("--static-cache is a kind of KV cache: it contradicts --no-use-cache")


@dataclass(frozen=True)
class CudaGraphOptions(OptionGroup):
    title = "captured steps"
    owner = "actions that run steps (generative models: the one-token step; encoder models: the forward pass)"
    use_cuda_graph: bool = flag(False, "--use-cuda-graph", help="replay the one-token step (encoder models: the forward pass) from a CUDA graph (CUDA only; for generative models frameworks and onnxrt need --static-cache; one graph per input shape otherwise)")


@dataclass(frozen=True)
class TorchCompileOptions(OptionGroup):
    title = "compiled steps (frameworks backend)"
    owner = "actions that run steps, on the frameworks backend"
    backends = ("frameworks",)  # an action's group, read only where frameworks runs (onnxrt and trt never compile)
    torch_compile: bool = flag(False, "--torch-compile", help="frameworks: compile with torch.compile (inductor; the first call compiles, which takes a while): the one-token step of generative models (needs --static-cache), the forward pass of encoder models")
    compile_mode: str = flag("default", "--compile-mode", choices=("default", "max-autotune"), help="with --torch-compile: default (inductor's defaults) or max-autotune (inductor benchmarks Triton GEMM templates against cuBLAS per shape, fuses GEMM epilogues and tunes kernel launch configs; compiling takes minutes)")

    def check(self):
        if self.compile_mode != "default" and not self.torch_compile:
            raise UsageError(f"--compile-mode {self.compile_mode} needs --torch-compile")


@dataclass(frozen=True)
class FusedStepOptions(OptionGroup):
    title = "fused decode step (generative models)"
    owner = "generative models"
    by_kind = True
    fused_decode: bool | None = flag(None, "--fused-decode", action=argparse.BooleanOptionalAction, help="the family's fused decode step instead of the model's own code (needs --static-cache): frameworks runs a one-token step written for inductor (one-row products as fused reductions, one-query attention with the cache write inside), onnxrt a graph built from the weights out of ONNX Runtime's fused attention with the cache written in place; families and backends without one refuse it. Default: onnxrt with --static-cache builds it wherever the family has one for the model type and it runs at the run's precision and device (without --decoder-onnx; with --quantize only for decoder-only models on the CPU, quantized too); else decoder-only models take the torch.onnx static-cache export, while encoder-decoders, which have no such export on onnxrt, are refused in one line (--static-cache with --quantize or --no-fused-decode: drop --static-cache); frameworks runs the model's own code. --no-fused-decode: the export (decoder-only models) / the model's own code")


# --- what one kind alone reads ---

@dataclass(frozen=True)
class DecodingOptions(OptionGroup):
    title = "decoding (generative models)"
    owner = "generative models"
    by_kind = True
    num_beams: int | None = flag(None, "--num-beams", "-nb", type=int, help="beam search width (1: greedy or sampling; default: the model's generation config, else 1)")
    ignore_generation_config: bool = flag(False, "--ignore-generation-config", help="do not apply the model's generation_config (beams, length penalty, min/max length, no-repeat n-grams, forced EOS, ...): the flags and their flags-only defaults decide; the decoder start token and a forced first token are still read")

    def check(self):
        if self.num_beams is not None:
            _positive("--num-beams", self.num_beams)


@dataclass(frozen=True)
class ImageOptions(OptionGroup):
    title = "images (image-to-text models)"
    owner = "image-to-text models"
    by_kind = True
    image: tuple = flag((), "--image", action="append", help="caption this PNG/JPEG (repeatable)")


@dataclass(frozen=True)
class HeadOptions(OptionGroup):
    title = "what the model computes (encoder models)"
    owner = "encoder models"
    by_kind = True
    task: str | None = flag(None, "--task", choices=("feature-extraction", "text-classification", "token-classification"), help="what the model computes (default: from the checkpoint: its classification head if it has one, else sentence embeddings)")


@dataclass(frozen=True)
class GraphFileOptions(OptionGroup):
    title = "your own ONNX graphs (onnxrt and trt backends)"
    owner = "the backends that run exported graphs"
    backends = ("onnxrt", "trt")
    decoder_onnx: str | None = flag(None, "--decoder-onnx", help="use this decoder ONNX file instead of exporting one")
    encoder_onnx: str | None = flag(None, "--encoder-onnx", help="use this encoder ONNX file instead of exporting one (encoder-decoder models: with --decoder-onnx)")
    cache_generator_onnx: str | None = flag(None, "--cache-generator-onnx", help="encoder-decoder models with --use-cache: this cross-attention cache generator ONNX file")


@dataclass(frozen=True)
class ModelOptions(SourceOptions, CleanupOptions, DeviceOptions, BatchOptions, MaskOptions, OutputOptions,
                   CacheOptions, CudaGraphOptions, TorchCompileOptions, FusedStepOptions, DecodingOptions, ImageOptions,
                   HeadOptions,
                   GraphFileOptions):
    """What every action that runs a model takes: the union of the groups above (each checks its own values)."""

    def check(self):
        if self.fused_decode and not self.static_cache:
            raise UsageError("--fused-decode needs --static-cache (the fused step writes a full-length cache in place)")

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


# --- decoding: sampling, penalties, lengths, the seed ---

@dataclass(frozen=True)
class SamplerOptions(OptionGroup):
    title = ("decoding: sampling, penalties, beam scoring (a flag not given takes the model's generation_config "
             "value, as HF generate does, unless --ignore-generation-config)")
    owner = "generative models"
    by_kind = True
    do_sample: bool | None = flag(None, "--do-sample", action=argparse.BooleanOptionalAction, help="sample instead of greedy / beam search (default: the model's generation config, else off)")
    temperature: float | None = flag(None, "--temperature", type=float, help="softmax temperature when sampling (> 0; without sampling refused unless 0 or 1, which change nothing; default: the model's generation config, else 1)")
    top_k: int | None = flag(None, "--top-k", type=int, help="keep the k most likely tokens when sampling (refused without it; 0: off; default: the model's generation config, else HF's 50; 0 with --ignore-generation-config)")
    top_p: float | None = flag(None, "--top-p", type=float, help="nucleus sampling mass in (0, 1] when sampling (refused without it, unless 1; 1: off; default: the model's generation config, else 1)")
    repetition_penalty: float | None = flag(None, "--repetition-penalty", type=float, help="HF-style repetition penalty (1: off; default: the model's generation config, else 1)")
    no_repeat_ngram_size: int | None = flag(None, "--no-repeat-ngram-size", type=int, help="forbid repeating any n-gram of this size (0: off; default: the model's generation config, else 0)")
    length_penalty: float | None = flag(None, "--length-penalty", type=float, help="beam search: scores are divided by length ** this (refused with one beam, unless 1; default: the model's generation config, else 1)")
    early_stopping: str | None = flag(None, "--early-stopping", choices=("true", "false", "never"), help="beam search stop rule, as HF's early_stopping (refused with one beam, unless false; default: the model's generation config, else false)")
    dry_multiplier: float = flag(0.0, "--dry-multiplier", help="DRY penalty strength (0: off; typical 0.8)")
    dry_base: float = flag(1.75, "--dry-base", help="DRY exponential base")
    dry_allowed_length: int = flag(2, "--dry-allowed-length", help="repeats up to this length are not penalised")
    dry_penalty_last_n: int = flag(0, "--dry-penalty-last-n", help="how far back DRY looks (0: everything)")
    dry_sequence_breakers: tuple = flag(("\n", ":", '"', "*"), "--dry-sequence-breakers", nargs="*", type=str,
                                        help="strings that end a repeat")

    def check(self):
        if self.temperature is not None and self.temperature < 0:
            raise UsageError(f"--temperature must be > 0 (0 only without sampling), got {self.temperature}")
        if self.temperature == 0 and self.do_sample:
            raise UsageError("--temperature 0 with --do-sample: sampling divides the scores by the temperature, so "
                             "it must be > 0 (for greedy decoding leave --do-sample out)")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise UsageError(f"--top-p must be in (0, 1], got {self.top_p}")
        if self.repetition_penalty is not None and self.repetition_penalty <= 0:
            raise UsageError(f"--repetition-penalty must be > 0, got {self.repetition_penalty}")
        for name, value in (("--top-k", self.top_k), ("--no-repeat-ngram-size", self.no_repeat_ngram_size)):
            if value is not None:
                _positive(name, value, 0)
        if self.dry_multiplier < 0 or self.dry_base <= 1:
            raise UsageError("--dry-multiplier must be >= 0 and --dry-base > 1")
        _positive("--dry-allowed-length", self.dry_allowed_length, 1)


@dataclass(frozen=True)
class MinLengthOptions(OptionGroup):
    title = "decoding: shortest generation (generative models)"
    owner = "generative models"
    by_kind = True
    min_new_tokens: int | None = flag(None, "--min-new-tokens", type=int, help="forbid EOS before this many new tokens (replaces the config's min_length, as in HF; default: the model's generation config, else 0; benchmark always runs --output-seq-len tokens)")

    def check(self):
        if self.min_new_tokens is not None:
            _positive("--min-new-tokens", self.min_new_tokens, 0)


@dataclass(frozen=True)
class SeedOptions(OptionGroup):
    title = "random seed"
    owner = "actions that sample or draw random inputs"
    seed: int = flag(0, "--seed", help="random seed for sampling and random inputs")


@dataclass(frozen=True)
class SamplingOptions(SamplerOptions, MinLengthOptions, SeedOptions):
    """What the generation loop's token choice reads (NNDF/decoding.py)."""


# --- timing ---

@dataclass(frozen=True)
class TimingLoopOptions(OptionGroup):
    title = "timing"
    owner = "actions that time their runs"
    iterations: int = flag(10, "--iterations", help="measured iterations")
    number: int = flag(1, "--number", help="calls per iteration (the iteration's time is divided by it)")
    warmup: int = flag(3, "--warmup", help="untimed iterations first")
    duration: float = flag(0.0, "--duration", help="keep measuring for at least this many seconds")

    def check(self):
        _positive("--iterations", self.iterations)
        _positive("--number", self.number)
        _positive("--warmup", self.warmup, 0)
        if self.duration < 0:
            raise UsageError(f"--duration must be >= 0, got {self.duration}")


@dataclass(frozen=True)
class PercentileOptions(OptionGroup):
    title = "timing: percentiles"
    owner = "actions that report latency percentiles"
    percentile: int = flag(50, "--percentile", help="extra percentile to report besides p50, p90, p99")

    def check(self):
        if not 0 < self.percentile <= 100:
            raise UsageError(f"--percentile must be in (0, 100], got {self.percentile}")


@dataclass(frozen=True)
class TimingOptions(TimingLoopOptions, PercentileOptions):
    """What NNDF/timing.py reads."""


# --- benchmark, accuracy, predict, chat ---

@dataclass(frozen=True)
class BenchmarkInputOptions(OptionGroup):
    title = "benchmark"
    owner = "benchmark"
    input_seq_len: int | None = flag(None, "--input-seq-len", type=int, help="prompt length in random tokens (default 128; when both lengths are left to their defaults and exceed the model's position table, both are halved until they fit, and the report says so)")
    hf_baseline: bool = flag(False, "--hf-baseline", help="also time HF generate on the same inputs")
    interleave: bool = flag(False, "--interleave", help="set every backend row up at once and time them in turns: each iteration runs every row once, each turn after 0.05 s idle and 0.05 s of untimed calls, so load from other processes and the machine's drift hit every row alike (for ratios on a shared machine; the report adds each row's rate over the first row's, paired round by round); peak memory is then that of all rows together, and --hf-baseline's row runs before them on its own")

    def check(self):
        if self.input_seq_len is not None:
            _positive("--input-seq-len", self.input_seq_len)


@dataclass(frozen=True)
class BenchmarkGenerationOptions(OptionGroup):
    title = "benchmark: generation (generative models)"
    owner = "generative models"
    by_kind = True
    output_seq_len: int | None = flag(None, "--output-seq-len", type=int, help="new tokens per run, early stopping off (default 256; see --input-seq-len)")
    plot: str | None = flag(None, "--plot", help="write a plot of per-token latency against sequence length; its extension names the format (.png, .svg, .pdf)")

    def check(self):
        if self.output_seq_len is not None:
            _positive("--output-seq-len", self.output_seq_len)


@dataclass(frozen=True)
class BenchmarkOptions(BenchmarkInputOptions, BenchmarkGenerationOptions):
    """What `benchmark` reads of its own."""

    DEFAULT_LENGTHS = (128, 256)  # (prompt, new tokens): the reference demo's and the GPU anchors' shape


@dataclass(frozen=True)
class AccuracyDataOptions(OptionGroup):
    title = "accuracy"
    owner = "accuracy"
    dataset: str = flag("lambada", "--dataset", help="local JSONL file (field 'text'; encoder models: 'text' and 'label') or HF dataset name (default: LAMBADA; encoder models: data/encoder_offline.jsonl)")
    num_samples: int = flag(20, "--num-samples", help="passages, in order (all, and a note, if there are fewer)")

    def check(self):
        _positive("--num-samples", self.num_samples)


@dataclass(frozen=True)
class ScoringOptions(OptionGroup):
    title = "accuracy: teacher-forced scoring (generative models)"
    owner = "generative models"
    by_kind = True
    tokens_to_generate: int = flag(5, "--tokens-to-generate", help="last tokens scored by teacher forcing")
    topN: int = flag(2, "--topN", help="also report TopN accuracy for this N (Top1 and Top10 always)")

    def check(self):
        _positive("--tokens-to-generate", self.tokens_to_generate)
        _positive("--topN", self.topN)


@dataclass(frozen=True)
class AccuracyOptions(AccuracyDataOptions, ScoringOptions):
    """What `accuracy` reads of its own."""


@dataclass(frozen=True)
class PredictOptions(OptionGroup):
    title = "predict"
    owner = "predict"
    prompt: tuple = flag((), "--prompt", action="append", help="a text to embed or classify (repeatable)")
    dataset: str | None = flag(None, "--dataset", help="a JSONL file of texts (field 'text'), one prediction per line")

    def check(self):
        if self.prompt and self.dataset:
            raise UsageError("--prompt and --dataset are alternatives: give one")


@dataclass(frozen=True)
class ChatOptions(OptionGroup):
    title = "chat"
    owner = "chat"
    prompt: tuple = flag((), "--prompt", action="append", help="run this prompt and exit (repeatable)")
    max_new_tokens: int | None = flag(None, "--max-new-tokens", type=int, help="most tokens to generate per prompt (default: the model's generation config's max_new_tokens or max_length, else 32)")

    def check(self):
        if self.max_new_tokens is not None:
            _positive("--max-new-tokens", self.max_new_tokens)

