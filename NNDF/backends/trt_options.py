"""TensorRT's own flags: the trt backend owns them (`NNDF.registry.BACKENDS` lists `TRTOptions`, what the library
functions take; the CLI accepts a flag only when trt is in the run). The generative engines' length profiles are
read only by the kinds with a KV cache (`CacheOptions`), the encoder engines' profiles only by encoder models
(`HeadOptions`)."""
from __future__ import annotations

from dataclasses import dataclass

from NNDF.errors import UsageError
from NNDF.options import CacheOptions, HeadOptions, OptionGroup, _positive, flag


@dataclass(frozen=True)
class EngineOptions(OptionGroup):
    title = "TensorRT (trt backend)"
    owner = "the trt backend"
    backends = ("trt",)
    trt_module: str = flag("auto", "--trt-module", choices=("auto", "tensorrt", "tensorrt_rtx"),
                           help="TensorRT Python module (auto: tensorrt if installed, else tensorrt_rtx)")
    dynamic_batch: bool = flag(False, "--dynamic-batch", help="build engines for a batch range instead of --batch-size")
    min_dynamic_batch: int = flag(1, "--min-dynamic-batch", help="smallest batch of a dynamic-batch engine")
    max_dynamic_batch: int = flag(0, "--max-dynamic-batch", help="largest batch of a dynamic-batch engine (0: --batch-size)")
    use_timing_cache: bool = flag(False, "--use-timing-cache", help="reuse TensorRT's timing cache across builds")
    engine_postfix: str = flag("", "--engine-postfix", help="tag added to engine names (e.g. the GPU)")
    decoder_engine: str | None = flag(None, "--decoder-engine", help="use this decoder engine instead of building one")
    encoder_engine: str | None = flag(None, "--encoder-engine", help="use this encoder engine instead of building one (encoder-decoder models: with --decoder-engine)")
    cache_generator_engine: str | None = flag(None, "--cache-generator-engine", help="encoder-decoder models with --use-cache: this cache generator engine")
    disable_preview_dynamic_shapes: bool = flag(False, "--disable-preview-dynamic-shapes",
                                                help="turn off FASTER_DYNAMIC_SHAPES_0805 where the TensorRT version has it (8.6-9.x); a no-op on 10+")
    workspace_mb: int = flag(0, "--workspace-mb", help="builder workspace limit in MiB (0: TensorRT's default, the device memory)")
    nvtx_verbose: bool = flag(False, "--nvtx-verbose", help="detailed NVTX ranges in engines (profiling)")

    def check(self):
        _positive("--min-dynamic-batch", self.min_dynamic_batch)
        for name, value in (("--max-dynamic-batch", self.max_dynamic_batch), ("--workspace-mb", self.workspace_mb)):
            _positive(name, value, 0)
        if self.dynamic_batch and self.max_dynamic_batch and self.min_dynamic_batch > self.max_dynamic_batch:
            raise UsageError(f"--min-dynamic-batch {self.min_dynamic_batch} > --max-dynamic-batch {self.max_dynamic_batch}")
        if self.engine_postfix and not all(c.isalnum() or c in "-_." for c in self.engine_postfix):
            raise UsageError("--engine-postfix may only contain letters, digits, '-', '_' and '.'")


@dataclass(frozen=True)
class GenerativeProfileOptions(OptionGroup):
    title = "TensorRT: generative engines' lengths (trt backend, generative models)"
    owner = "generative models on the trt backend"
    backends = ("trt",)
    kind_scope = CacheOptions
    input_profile_max_len: int = flag(0, "--input-profile-max-len", help="longest prompt the engine accepts (0: model maximum)")
    output_profile_max_len: int = flag(0, "--output-profile-max-len", help="most new tokens the engine accepts (0: model maximum)")
    n_positions: int = flag(0, "--n-positions", help="longest prompt + output (0: the model config's maximum)")

    def check(self):
        for name, value in (("--input-profile-max-len", self.input_profile_max_len),
                            ("--output-profile-max-len", self.output_profile_max_len),
                            ("--n-positions", self.n_positions)):
            _positive(name, value, 0)


@dataclass(frozen=True)
class EncoderProfileOptions(OptionGroup):
    title = "TensorRT: encoder engines' profiles (trt backend, encoder models)"
    owner = "encoder models on the trt backend"
    backends = ("trt",)
    kind_scope = HeadOptions
    seq_len: tuple = flag((), "--seq-len", nargs=3, type=int, metavar=("MIN", "OPTIMUM", "MAX"), help="the engine's sequence-length profile, as transformer-deploy's convert takes it (default: 1, --input-seq-len, the model's position limit)")
    batch_profile: tuple = flag((), "--batch-profile", nargs=3, type=int, metavar=("MIN", "OPTIMUM", "MAX"), help="the engine's batch profile (also given as a three-value --batch-size, transformer-deploy's form; default: the batch size, or the --dynamic-batch range)")

    def check(self):
        for name, value in (("--seq-len", self.seq_len), ("--batch-profile", self.batch_profile)):
            if value and not 1 <= value[0] <= value[1] <= value[2]:
                raise UsageError(f"{name} min opt max must satisfy 1 <= min <= opt <= max, got {' '.join(map(str, value))}")


@dataclass(frozen=True)
class TRTOptions(EngineOptions, GenerativeProfileOptions, EncoderProfileOptions):
    """What the trt backend reads (`run.options_of(TRTOptions)`)."""
