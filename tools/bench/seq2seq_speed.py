#!/usr/bin/env python3
"""Encoder-decoders' static-cache decode at published sizes on one CUDA machine, HF's paths beside ours:

    python tools/bench/seq2seq_speed.py OUT --models flan-t5-xl,bart-large,t5-small,t5-base,blip-large

Per model (random weights with the published shapes, tools/assets/make_shapes_model.py, made in --shapes-dir),
fp16, prompt 128 (BLIP: a 4-token caption prompt after the image), 64 new tokens:
  eager       frameworks with HF's own growing cache, and HF `generate` eager (--hf-baseline), batch 1
  compiled    frameworks --static-cache --use-cuda-graph --torch-compile (the family's fused decoder step), and
              HF `generate` with cache_implementation="static" (transformers compiles its own step), batch 1
  compiled-V  the compiled frameworks row with the step built with variant V's settings (--row-variants, VARIANTS;
              V+loop: also greedy tokens chosen by the loop, not inside the step: NNDF.generation.GREEDY_IN_STEP;
              V+beamhost: also beam search's bookkeeping op by op from the host: NNDF.generation.BEAMS_IN_GRAPH;
              V+nopdl: also no programmatic dependent launch: NNDF.backends.torch.compile.PROGRAMMATIC_LAUNCH;
              V+nodot: also our GEMV's products of several rows summed elementwise: NNDF.backends.torch.kernels)
  onnxrt      onnxrt --static-cache --use-cuda-graph (the graphs built from the weights), batch 1; onnxrt-V:
              the graphs built with variant V's settings (--ort-variants, ORT_VARIANTS) into their own working
              directory (also batch8-onnxrt-V, tokens-onnxrt-V, tokens8-onnxrt-V, kernels-onnxrt-V and
              kernels-onnxrt-rows8-V)
  beams       the compiled frameworks row and the onnxrt row with 4 beams (BART-large-cnn's default); beams-V
              the frameworks row with each of --batch-variants' settings (likewise batch8-V)
  batch8      the compiled frameworks row and the onnxrt row at batch 8
  kernels     the compiled frameworks step and the onnxrt step alone: wall ms per step, GPU ms and kernels per
              step, the top kernels (torch's profiler); also built with each of --variants' settings
              (kernels-V), at 4 and 8 rows (kernels-rows4, kernels-rows8, kernels-onnxrt-rows4,
              kernels-onnxrt-rows8, kernels-rows4-V and kernels-rows8-V for --batch-variants) and compiled with
              --compile-mode max-autotune (kernels-autotuned; its benchmark row: autotuned)
  loop        the compiled frameworks generation under torch's profiler (loop_profile.py): per token the GPU's busy
              and idle time and the kernels beside the step; loop-beams: the same per beam step, 4 beams
  tokens      fp16 greedy tokens of the compiled frameworks step and the onnxrt graphs against HF `generate`
              (eager) on the same random inputs, batch 2: where each row first differs; tokens-V: the
              frameworks step with each of --row-variants' settings; tokens8-onnxrt: the onnxrt graphs at batch 8
              (eight rows: the decoder's products through the Linear op's tensor-core kernel)
Every row carries the achieved bandwidth (the decoder's weight bytes / TPOT). Rows are saved as they come
(OUT/seq2seq-speed.json, .md); no job starts after --deadline seconds; each model's folder and artifacts are
deleted after its jobs unless --keep.
"""
from __future__ import annotations

import argparse
from contextlib import contextmanager
from dataclasses import replace
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from tools.bench import speed_matrix as sm  # noqa: E402

FAMILIES = {"flan-t5-xl": "T5", "t5-small": "T5", "t5-base": "T5", "bart-large": "BART", "blip-large": "BLIP"}
NEW = 64
COMPILED = dict(static_cache=True, use_cuda_graph=True, torch_compile=True)
ORT = dict(static_cache=True, use_cuda_graph=True)
# the fused step's settings a job can be built with instead of the default (`Seq2Seq.fused_step.SEQ2SEQ_SETTINGS`,
# named `default`: our GEMV for one row's products, our attention kernels, split over column chunks at more rows and
# long encoder outputs)
VARIANTS = {
    "default": None,
    "inductor": dict(reduction_rows=1),  # inductor's reduction form for one row's products, plain-op attention
    "kernels": dict(reduction_rows=1, gemv_above=0, attention="auto"),  # one attention program per head at 64
    "cublas": dict(reduction_width=0),  # every product through cuBLAS, plain-op attention
    "gemv": dict(reduction_rows=1, gemv_above=0),  # our GEMV, plain-op attention
    "kernels-one": dict(reduction_rows=1, gemv_above=0, attention="kernel"),  # one program per head, any size
    "kernels-split": dict(reduction_rows=1, gemv_above=0, attention="split"),  # over column chunks
}
# variants that change the default in these fields only
OVER_DEFAULT = {
    "fp32-wo": dict(half_kept_fp32=False),  # T5's wo read as HF keeps it in half models, fp32 (not a half copy)
    "kv-apart": dict(paired_kv_write=False),  # each layer's new K and V written by two kernels, not one
    "cublas-rows": dict(gemv_rows=1),  # cuBLAS for the products of steps of several rows, not our GEMV
    "gemv4": dict(gemv_rows=4),  # our GEMV for the products of up to 4 rows (4 beams), cuBLAS above
    # the split attention kernel (and the kernel combining its column chunks) at any step of more than one row
    "split-rows": dict(split_rows=1),
}
VARIANTS.update(dict.fromkeys(OVER_DEFAULT))
ORT_VARIANTS, graph_settings = sm.ORT_VARIANTS, sm.graph_settings  # the graphs' settings by name
# the rows beside the default by default: inductor's kernels, the default with the loop choosing greedy tokens
ROW_VARIANTS = ("inductor", "default+loop")


def prompt_length(family: str) -> int:
    """The benchmark's prompt: 128 encoder tokens, or BLIP's 4-token caption prompt after the image."""
    return 4 if family == "BLIP" else 128
sm.CONFIGS.update({
    "s2s-eager": dict(backends=("frameworks",), options={}),
    "s2s-compiled": dict(backends=("frameworks",), options=COMPILED),
    "s2s-onnxrt": dict(backends=("onnxrt",), options=ORT),
    "s2s-autotuned": dict(backends=("frameworks",), options=dict(COMPILED, compile_mode="max-autotune")),
    "s2s-compiled-beams": dict(backends=("frameworks",), options=dict(COMPILED, num_beams=4)),
    "s2s-onnxrt-beams": dict(backends=("onnxrt",), options=dict(ORT, num_beams=4)),
})


@contextmanager
def step_settings(variant: str | None):
    """The encoder-decoder fused steps built with `variant`'s settings (VARIANTS; None: the default; VARIANT+MODE:
    also the generation loop in that mode, speed_matrix.loop_mode) while the block
    runs, each compiled afresh."""
    from CausalLM.fused_step import FusedSettings
    from Seq2Seq import fused_step

    base, _, extra = (variant or "").partition("+")
    saved = fused_step.SEQ2SEQ_SETTINGS
    if base in OVER_DEFAULT:
        fused_step.SEQ2SEQ_SETTINGS = replace(saved, **OVER_DEFAULT[base])
    elif VARIANTS.get(base) is not None:
        fused_step.SEQ2SEQ_SETTINGS = FusedSettings(**VARIANTS[base])
    torch._dynamo.reset()  # past 8 recompiles of the layer function dynamo would run it eagerly
    try:
        with sm.loop_mode(extra):
            yield
    finally:
        fused_step.SEQ2SEQ_SETTINGS = saved


def jobs(shape: str, keep: bool, workdir: str, iterations: int, variants: tuple[str, ...] = ("kernels",),
         row_variants: tuple[str, ...] = ROW_VARIANTS, batch_variants: tuple[str, ...] = (),
         ort_variants: tuple[str, ...] = ()):
    folder, family = sm.SHAPES[shape], FAMILIES[shape]
    lengths = (prompt_length(family), NEW)

    def rows(config: str, batch: int = 1, hf: bool = False, variant: str | None = None, graphs: str | None = None):
        """The benchmark rows of `config` (its frameworks rows with `variant`'s step settings, its onnxrt rows with
        graphs built with `graphs`' settings, labelled so)."""
        def job():
            with step_settings(variant), graph_settings(graphs):
                got, report = sm.bench_rows(shape, family, folder, batch, config, ort_dir(graphs), iterations,
                                            lengths=lengths, hf=hf)
            for row in got:
                if variant and row["backend"] == "frameworks" or graphs and row["backend"] == "onnxrt":
                    row["config"] = f"{config}@{variant or graphs}"
            return got, report
        return job

    def ort_dir(graphs: str | None) -> str:
        return sm.graph_workdir(workdir, graphs)

    todo = [("shapes", lambda: make_shapes(shape, folder)),
            ("compiled", rows("s2s-compiled", hf=True))]
    todo += [(f"compiled-{v}", rows("s2s-compiled", variant=v)) for v in row_variants]
    todo += [("onnxrt", rows("s2s-onnxrt")),
             ("eager", rows("s2s-eager", hf=True)),
             ("beams", rows("s2s-compiled-beams")),
             *((f"beams-{v}", rows("s2s-compiled-beams", variant=v)) for v in batch_variants),
             ("beams-onnxrt", rows("s2s-onnxrt-beams")),
             ("batch8", rows("s2s-compiled", 8)),
             *((f"batch8-{v}", rows("s2s-compiled", 8, variant=v)) for v in batch_variants),
             ("batch8-onnxrt", rows("s2s-onnxrt", 8))]
    for v in ort_variants:
        todo += [(f"onnxrt-{v}", rows("s2s-onnxrt", graphs=v)), (f"batch8-onnxrt-{v}", rows("s2s-onnxrt", 8, graphs=v)),
                 (f"tokens-onnxrt-{v}", lambda v=v: tokens(shape, ort_dir(v), graphs=v)),
                 (f"tokens8-onnxrt-{v}", lambda v=v: tokens(shape, ort_dir(v), batch=8, graphs=v)),
                 (f"kernels-onnxrt-{v}", lambda v=v: kernels(shape, "onnxrt", ORT, ort_dir(v), graphs=v)),
                 (f"kernels-onnxrt-rows8-{v}", lambda v=v: kernels(shape, "onnxrt", ORT, ort_dir(v), 8, graphs=v))]
    todo += [("loop", lambda: loop(shape, workdir)), ("loop-beams", lambda: loop(shape, workdir, beams=4))]
    todo += [("tokens", lambda: tokens(shape, workdir)),
             ("tokens8-onnxrt", lambda: tokens(shape, workdir, batch=8, onnxrt_only=True))]
    todo += [(f"tokens-{v}", lambda v=v: tokens(shape, workdir, variant=v)) for v in row_variants]
    todo += [("kernels", lambda: kernels(shape, "frameworks", COMPILED, workdir))]
    todo += [(f"kernels-{v}", lambda v=v: kernels(shape, "frameworks", COMPILED, workdir, variant=v))
             for v in variants]
    for n in (4, 8):
        todo += [(f"kernels-rows{n}", lambda n=n: kernels(shape, "frameworks", COMPILED, workdir, n))]
        todo += [(f"kernels-rows{n}-{v}", lambda n=n, v=v: kernels(shape, "frameworks", COMPILED, workdir, n, v))
                 for v in batch_variants]
    todo += [("kernels-onnxrt", lambda: kernels(shape, "onnxrt", ORT, workdir)),
             ("kernels-onnxrt-rows4", lambda: kernels(shape, "onnxrt", ORT, workdir, 4)),
             ("kernels-onnxrt-rows8", lambda: kernels(shape, "onnxrt", ORT, workdir, 8)),
             ("kernels-autotuned", lambda: kernels(shape, "frameworks", dict(COMPILED, compile_mode="max-autotune"),
                                                   workdir)),
             ("autotuned", rows("s2s-autotuned"))]
    if not keep:
        folders = {folder, workdir, *(ort_dir(v) for v in ort_variants)}
        todo.append(("cleanup", lambda: {"removed": [shutil.rmtree(p, ignore_errors=True) or p for p in folders]}))
    return todo


class Stepper:
    """One-token decoder steps after the start token (the mask widens by one column a step, as in generation)."""

    def __init__(self, steps, run, batch: int, prompt: int, length: int):
        generator = torch.Generator().manual_seed(0)
        encoder = run.family.task.random_prompt(run, batch, prompt, generator).encoder
        self.steps, self.width = steps, 1
        self.cache = steps.start({k: v.to(steps.device) for k, v in encoder.items()}, length)
        self.token = torch.zeros(batch, 1, dtype=torch.long, device=steps.device)
        self.mask = torch.ones(batch, length, dtype=torch.long, device=steps.device)
        logits, self.cache = steps.forward(self.token, self.mask[:, :1], self.token, self.cache, last_only=True)

    def step(self) -> None:
        self.width += 1
        positions = torch.full_like(self.token, self.width - 1)
        logits, self.cache = self.steps.forward(self.token, self.mask[:, : self.width], positions, self.cache,
                                                last_only=True)
        self.token = logits[:, -1:].argmax(-1)


def kernels(shape: str, backend: str, options: dict, workdir: str, batch: int = 1, variant: str | None = None,
            graphs: str | None = None) -> dict:
    """The one-token step of `backend` under `options` (the fused step with `variant`'s settings, VARIANTS; the
    built graphs with `graphs`', ORT_VARIANTS): wall
    ms per step (host work included) over 50 steps, and its GPU time and kernels per step over 20 more (torch's
    profiler; CUPTI sees ONNX Runtime's kernels too)."""
    import time

    from NNDF import registry
    from NNDF.actions.common import backend_steps
    from NNDF.context import make_context
    from NNDF.options import ModelOptions
    from tools.bench.kernel_table import kernel_table

    family = FAMILIES[shape]
    run = make_context(registry.family(family), ModelOptions(
        torch_dir=sm.SHAPES[shape], working_dir=workdir, device="cuda", fp16=True, use_cache=True, use_mask=True,
        batch_size=batch, **options))
    with step_settings(variant), graph_settings(graphs), \
            backend_steps(run, registry.backend(run.family, backend)) as (_, steps):
        stepper = Stepper(steps, run, batch, prompt_length(family), 1 + 10 + 50 + 20 + 2)
        for _ in range(10):  # capture, compilation, warm-up
            stepper.step()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(50):
            stepper.step()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - start) / 50 * 1e3
        table = kernel_table(stepper.step, 20, top=12)
    return {"model": shape, "backend": backend, "options": options, "variant": variant or graphs, "batch": batch,
            "step_wall_ms": round(wall, 4),
            "gpu_ms_per_step": table["us_per_step"] / 1e3, "kernels_per_step": table["kernels_per_step"],
            "top": [{"name": t["name"][:120], "us": round(t["us_per_step"], 1), "per_step": t["per_step"]}
                    for t in table["top"]]}


def loop(shape: str, workdir: str, beams: int = 1) -> dict:
    """The compiled frameworks generation of NEW tokens (`beams` beams), batch 1, profiled (loop_profile.py): where
    a token's time goes beyond the captured step."""
    from tools.bench.loop_profile import loop_profile

    family = FAMILIES[shape]
    options = replace(sm.options(sm.SHAPES[shape], 1, COMPILED, workdir), use_mask=True)
    return loop_profile(shape, family, options, "frameworks", prompt=prompt_length(family), new=NEW,
                        beams=beams)


def tokens(shape: str, workdir: str, batch: int = 2, new: int = NEW, variant: str | None = None,
           graphs: str | None = None, onnxrt_only: bool = False) -> dict:
    """fp16 greedy tokens of the compiled frameworks step and the onnxrt graphs against HF `generate` (its growing
    cache, eager) on the same random encoder inputs: the first position where each row differs (None: equal).
    `variant`: the frameworks step alone, built with that variant's settings (VARIANTS, `step_settings`);
    `graphs`: the onnxrt graphs alone, built with those settings (ORT_VARIANTS, `graph_settings`); `onnxrt_only`:
    the default onnxrt graphs alone."""
    from NNDF import registry
    from NNDF.actions.common import backend_steps, generate_prompt
    from NNDF.context import make_context
    from NNDF.generation import GenerationConfig

    family = FAMILIES[shape]
    out = {"model": shape, "new_tokens": new, "batch": batch, "variant": variant or graphs}
    paths = ((("frameworks", "frameworks", COMPILED),) if graphs is None and not onnxrt_only else ()) + (
        (("onnxrt", "onnxrt", ORT),) if variant is None else ())
    for label, backend, options in paths:
        run = make_context(registry.family(family), replace(sm.options(sm.SHAPES[shape], batch, options, workdir),
                                                            use_mask=True))
        prompt = run.family.task.random_prompt(run, batch, prompt_length(family),
                                                torch.Generator().manual_seed(3))
        if "hf" not in out:
            with torch.inference_mode():
                ref = run.torch_model().generate(**run.family.task.hf_generate_inputs(run, prompt),
                                                 max_new_tokens=new, min_new_tokens=new, do_sample=False)
            out["hf"] = ref[:, -new:].cpu()
        config = GenerationConfig(max_new_tokens=new, min_new_tokens=new, pad_token_id=0, eos_token_id=None)
        try:  # one backend's failure (no onnxruntime-gpu) keeps the other's result
            with step_settings(variant), graph_settings(graphs), \
                    backend_steps(run, registry.backend(run.family, backend)) as (_, steps):
                ours = generate_prompt(steps, prompt, config).sequences[:, -new:].cpu()
        except Exception as exc:  # noqa: BLE001 (a benchmark records what failed and goes on)
            out[label] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            continue
        finally:
            run.release_torch_model()
        out[label] = [None if (a == b).all() else int((a != b).nonzero()[0]) for a, b in zip(ours, out["hf"])]
    out.pop("hf")
    return out


def make_shapes(shape: str, folder: str) -> dict:
    import subprocess

    if not (Path(folder) / "config.json").is_file():
        subprocess.run([sys.executable, str(ROOT / "tools" / "assets" / "make_shapes_model.py"), shape, folder],
                       check=True)
    return {"shapes": shape}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--models", default="flan-t5-xl", help=f"comma-separated shapes ({', '.join(FAMILIES)})")
    parser.add_argument("--skip", default="", help="comma-separated jobs to leave out (compiled, onnxrt, eager, "
                        "beams, beams-onnxrt, batch8, batch8-onnxrt, tokens, kernels, ...)")
    parser.add_argument("--only", default="", help="comma-separated jobs to run, all others left out (the shapes "
                        "and the cleanup always run)")
    parser.add_argument("--variants", default="inductor", help="comma-separated step settings (VARIANTS: "
                        f"{', '.join(VARIANTS)}) timed alone beside the default (kernels-V)")
    parser.add_argument("--row-variants", default=",".join(ROW_VARIANTS), help="comma-separated step settings "
                        "benchmarked beside the default compiled row (compiled-V); VARIANT+loop: greedy tokens "
                        "chosen by the loop, not the step")
    parser.add_argument("--batch-variants", default="", help="comma-separated step settings timed at 4 and 8 rows "
                        "and benchmarked with 4 beams and at batch 8 beside the default (kernels-rows4-V, "
                        "kernels-rows8-V, beams-V, batch8-V)")
    parser.add_argument("--ort-variants", default="", help="comma-separated settings of the built ONNX Runtime "
                        f"graphs ({', '.join(ORT_VARIANTS)}) benchmarked, timed and checked beside the default "
                        "(onnxrt-V, batch8-onnxrt-V, kernels-onnxrt-V, tokens-onnxrt-V, tokens8-onnxrt-V)")
    parser.add_argument("--shapes-dir", type=Path, default=Path("/tmp/shapes"))
    parser.add_argument("--workdir", default="/tmp/wd")
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--deadline", type=float, default=500)
    parser.add_argument("--keep", action="store_true", help="keep the shapes folders and artifacts")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cpu: a smoke test of this script (fp32, no CUDA graphs or compilation)")
    args = parser.parse_args()
    sm.DEVICE, sm.NEW = args.device, NEW
    args.out.mkdir(parents=True, exist_ok=True)
    sm.SHAPES.update({s: str(args.shapes_dir / s) for s in args.models.split(",")})
    skip = set(filter(None, args.skip.split(",")))
    only = set(filter(None, args.only.split(",")))
    variants, row_variants, batch_variants = (tuple(filter(None, v.split(",")))
                                              for v in (args.variants, args.row_variants, args.batch_variants))
    ort_variants = tuple(filter(None, args.ort_variants.split(",")))
    for name in ort_variants:
        if name not in ORT_VARIANTS:
            parser.error(f"ONNX Runtime graph variant {name!r}: one of {', '.join(ORT_VARIANTS)}")
    for name in variants + row_variants + batch_variants:
        if not sm.known_variant(name, VARIANTS):
            parser.error(f"variant {name!r}: one of {', '.join(VARIANTS)}, each also as VARIANT+MODE, "
                         f"MODE one of {', '.join(filter(None, sm.LOOP_MODES))}")
    todo, known = [("copy", sm.copy_bandwidth)], set()
    for shape in args.models.split(","):
        checks = ("tokens", "kernels", "loop")
        listed = jobs(shape, args.keep, f"{args.workdir}/{shape}", args.iterations, variants, row_variants,
                      batch_variants, ort_variants)
        known.update(kind for kind, _ in listed)
        todo += [("check" if kind in ("shapes", "cleanup") or kind.startswith(checks) else "bench", job)
                 for kind, job in listed
                 if kind not in skip and (not only or kind in only or kind in ("shapes", "cleanup"))]
    if only - known:
        parser.error(f"--only: no job {', '.join(sorted(only - known))} (jobs: {', '.join(sorted(known))})")
    sm.run_jobs(args.out, todo, args.deadline, "seq2seq-speed")


if __name__ == "__main__":
    main()
