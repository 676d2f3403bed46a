#!/usr/bin/env python3
"""The decoder families' ONNX Runtime graphs built from the weights, at published sizes, on one CUDA machine:

    python tools/bench/decoder_graphs.py OUT --models opt-6.7b,gpt-j-6b [--deadline 500] [--keep]

Per model (random weights with the published shapes, tools/assets/make_shapes_model.py, made in --shapes-dir):
  build    `run.py build <FAMILY> onnxrt --fp16 --use-cache --static-cache` in a child process: the fused graph
           built from the checkpoint's safetensors files, then validated against PyTorch; wall seconds, the
           graph-only seconds (validation.json's build_seconds) and the child's peak resident memory against the
           checkpoint's bytes
  onnxrt   `benchmark ... onnxrt --static-cache --use-cuda-graph` (the fused graph by default), batch 1, with HF
           `generate`'s static-cache row beside it (--hf-baseline)
  onnxrt-matmul  the same with the graph's products as ONNX Runtime's MatMul (`--ort-products matmul`; the
           default is this project's Linear op on CUDA), no HF row
  onnxrt-V, flash-V, batch8-V  the onnxrt row, its captured step (as `flash`) and its batch-8 row with the graph
           built with each of --ort-variants' settings (speed_matrix.ORT_VARIANTS, e.g. `normkernels`: the skip norms
           in their own kernels; `alibi`: BLOOM's ALiBi columns inside the q/k/v product) in their own working
           directory (the default graph's for a variant that only sets the ops' environment, e.g. `cublasrows`)
  kernels  the onnxrt one-token step under torch's profiler (CUPTI sees ONNX Runtime's kernels): GPU time per step,
           kernels per step, the top kernels (XQA on: `flash` is the default path, XQA off; `flash-matmul` that
           with `--ort-products matmul`)
  frameworks  `benchmark ... frameworks --static-cache --use-cuda-graph --torch-compile` (HF's model under our
           static cache; `--fused-decode` too where the family has a fused torch step), batch 1
  frameworks-<variant>  the same with the fused step built with each of --row-variants' settings (default
           `inductor`: the products and attention on inductor's kernels and cuBLAS, not our Triton kernels)
  step     the frameworks fused step alone, replayed from its CUDA graph: GPU time per step, kernels per step, the
           top kernels (speed_matrix.step_time); with --variants, the same for each fused-step variant
  loop     each backend's whole generation loop profiled (loop_profile.py): per token the GPU's busy and idle
           time and the kernels the loop runs around the step
  tokens   fp16 greedy tokens (64) of the frameworks fused step from its CUDA graph against the step uncaptured
           and against HF's model with its growing cache: the first difference per row
  eager    HF `generate` eager (the anchor without any static cache) beside frameworks' eager row, batch 1
  batch8   the onnxrt row at batch 8
Prompt 128, 128 new tokens, fp16. Every row is saved as it comes (OUT/decoder-graphs.json, .md); no job starts
after --deadline seconds; each model's folder and artifacts are deleted after its jobs unless --keep (a 20B
checkpoint and its graph are 41 GB each).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tools.bench import speed_matrix as sm  # noqa: E402

FAMILIES = {"opt": "OPT", "bloom": "BLOOM", "gptj": "GPT2", "gpt_neox": "GPT2", "gpt_neo": "GPT2", "gpt2": "GPT2",
            "llama": "LLAMA", "mistral": "LLAMA", "qwen2": "LLAMA", "qwen3": "LLAMA", "phi3": "LLAMA",
            "gemma": "LLAMA", "gemma2": "LLAMA", "gemma3_text": "LLAMA"}
NEW = 128


def family_of(folder: str) -> str:
    return FAMILIES[json.loads((Path(folder) / "config.json").read_text())["model_type"]]


PEAK = ("import resource, runpy, sys\n"
        "sys.argv = sys.argv[1:]\n"
        "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\n"
        "finally:\n    print('PEAK_RSS_KIB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n")


def build(shape: str, folder: str, workdir: str) -> dict:
    """The fused graph's build and validation in a child process: wall time, its peak RSS, validation record."""
    command = [sys.executable, "-c", PEAK, str(ROOT / "run.py"), "build", family_of(folder), "onnxrt",
               "--torch-dir", folder, "--fp16", "--device", "cuda", "--use-cache", "--static-cache", "-wd", workdir]
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - start
    print(proc.stdout[-2000:], proc.stderr[-3000:], flush=True)
    peak = [int(line.split()[1]) * 1024 for line in proc.stderr.splitlines() if line.startswith("PEAK_RSS_KIB")]
    record = {}
    for path in Path(workdir).rglob("decoder-fp16-fused/validation.json"):
        record = json.loads(path.read_text())
    weights = sum(p.stat().st_size for p in Path(folder).glob("*.safetensors"))
    return {"model": shape, "rc": proc.returncode, "wall_s": round(wall, 1), "validation": record,
            "peak_rss_gb": round(peak[0] / 1e9, 2) if peak else None, "checkpoint_gb": round(weights / 1e9, 2),
            "peak_over_weights": round(peak[0] / weights, 2) if peak else None}


def kernels(shape: str, folder: str, workdir: str, xqa: bool = True, products: str | None = None,
            graphs: str | None = None) -> dict:
    """The onnxrt one-token step's GPU time and kernels (tools/bench/ort_fused_bench.py's measurement); `xqa`
    False: with ONNX Runtime's XQA decode attention off (ORT_ENABLE_XQA=0, read when the session is made), so
    GroupQueryAttention takes its flash-decoding path instead."""
    import os

    before = os.environ.get("ORT_ENABLE_XQA")
    os.environ["ORT_ENABLE_XQA"] = "1" if xqa else "0"
    try:
        with sm.graph_settings(graphs):
            return {"xqa": xqa, **({"graphs": graphs} if graphs else {}), **_kernels(shape, folder, workdir, products)}
    finally:
        os.environ.pop("ORT_ENABLE_XQA") if before is None else os.environ.update(ORT_ENABLE_XQA=before)


def _kernels(shape: str, folder: str, workdir: str, products: str | None = None) -> dict:
    from NNDF import registry
    from NNDF.backends.onnxrt.options import ORTOptions
    from NNDF.context import make_context
    from NNDF.options import ModelOptions
    from tools.bench import ort_fused_bench as ofb

    options = ModelOptions(torch_dir=folder, working_dir=workdir, device="cuda", fp16=True, use_cache=True,
                           use_mask=True, static_cache=True, use_cuda_graph=True)
    run = make_context(registry.family(family_of(folder)), options, ORTOptions(ort_products=products))
    backend = registry.backend(run.family, "onnxrt")
    steps = backend.setup(run)
    run.release_torch_model()
    args = argparse.Namespace(repeats=3, warmup=10, steps=100, profile_steps=20, top=12)
    try:
        return {"model": shape, "graph": backend.choice, **ofb.measure(steps, run.source.config.vocab_size, 1, args)}
    finally:
        steps.close()


def bench(shape: str, folder: str, workdir: str, backend: str, batch: int, hf: bool, variant: str = "default",
          products: str | None = None, graphs: str | None = None) -> tuple:
    """One benchmark row set (speed_matrix's), fused torch step where the family has one for frameworks (built with
    `variant`'s settings, speed_matrix.LLAMA_VARIANTS: `inductor` is the step without our Triton kernels); onnxrt's
    graph with `products` (--ort-products; None: its default)."""
    from NNDF import registry
    from NNDF.backends.onnxrt.options import ORTOptions

    config = "static-graph" if backend == "onnxrt" else "compiled"
    model_type = json.loads((Path(folder) / "config.json").read_text())["model_type"]
    fused = model_type in registry.backend(registry.family(family_of(folder)), "frameworks").fused_decode_types()
    if backend == "frameworks" and fused:
        config = "fused"
    with sm.step_settings(variant), sm.graph_settings(graphs):
        rows, report = sm.bench_rows(shape, family_of(folder), folder, batch, config, workdir, 5, lengths=(128, NEW),
                                     hf=hf, backends=(backend,), backend_options=(ORTOptions(ort_products=products),))
    if variant != "default":
        rows = [{**row, "config": f"{row['config']}-{variant}"} for row in rows]
    for label in filter(None, (products, graphs)):
        rows = [{**row, "config": f"{row['config']}-{label}"} for row in rows]
    return rows, report


def variant_step(shape: str, folder: str, workdir: str, variant: str) -> dict:
    """The frameworks fused step's GPU time and kernels (speed_matrix.step_time) built with `variant`'s settings."""
    with sm.step_settings(variant):
        return {**sm.step_time(shape, family_of(folder), folder, 1, "fused", workdir), "config": f"fused-{variant}"}


def tokens(shape: str, folder: str, workdir: str, new: int = 64) -> dict:
    """fp16 greedy tokens of the frameworks fused step (our kernels) from its CUDA graph against the same step
    uncaptured and against HF's model with its growing cache (speed_matrix.same_tokens): the first difference per
    row, None where equal."""
    saved, sm.BACKENDS = sm.BACKENDS, ("frameworks",)
    try:
        return {"model": shape, "new_tokens": new,
                "first_difference": sm.same_tokens(family_of(folder), folder, 1, "fused", workdir, new=new)}
    finally:
        sm.BACKENDS = saved


def eager(shape: str, folder: str, workdir: str) -> tuple:
    """HF `generate` eager and frameworks' eager row (HF's model, growing cache), batch 1, 2 timed generations."""
    return sm.bench_rows(shape, family_of(folder), folder, 1, "eager", workdir, 2, lengths=(128, NEW), hf=True,
                         backends=("frameworks",))


def loops(shape: str, folder: str, workdir: str) -> dict:
    """Each backend's generation loop around its step, profiled (loop_profile.py): frameworks' fused step, onnxrt's
    graph, both from CUDA graphs."""
    from tools.bench.loop_profile import loop_profile

    got = {}
    for backend, config in (("frameworks", "fused"), ("onnxrt", "static-graph")):
        try:
            got[backend] = loop_profile(shape, family_of(folder), sm.options(folder, 1, sm.CONFIGS[config]["options"],
                                                                            workdir), backend)
        except Exception as exc:  # one backend's failure keeps the other's profile
            got[backend] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    return got


def jobs(shape: str, keep: bool, workdir: str, variants: tuple[str, ...] = (),
         row_variants: tuple[str, ...] = ("inductor",), ort_variants: tuple[str, ...] = ()) -> list[tuple[str, object]]:
    """(name, job) in order; the benchmark jobs' names are onnxrt, frameworks and batch8 (`--skip` takes any)."""
    folder = sm.SHAPES[shape]
    done = [("shapes", lambda: sm.make_shapes(shape)),
            ("build", lambda: build(shape, folder, workdir)),
            ("onnxrt", lambda: bench(shape, folder, workdir, "onnxrt", 1, hf=True)),
            ("onnxrt-matmul", lambda: bench(shape, folder, workdir, "onnxrt", 1, hf=False, products="matmul")),
            ("kernels", lambda: kernels(shape, folder, workdir)),
            ("flash", lambda: kernels(shape, folder, workdir, xqa=False)),
            ("flash-matmul", lambda: kernels(shape, folder, workdir, xqa=False, products="matmul")),
            ("frameworks", lambda: bench(shape, folder, workdir, "frameworks", 1, hf=False)),
            ("step", lambda: sm.step_time(shape, family_of(folder), folder, 1, "fused", workdir)),
            ("loop", lambda: loops(shape, folder, workdir)),
            ("tokens", lambda: tokens(shape, folder, workdir)),
            ("eager", lambda: eager(shape, folder, workdir)),
            ("batch8", lambda: bench(shape, folder, workdir, "onnxrt", 8, hf=False))]
    at = [name for name, _ in done].index("onnxrt-matmul") + 1  # each graph variant's jobs after the default's
    done[at:at] = [job for v in ort_variants for job in (
        (f"onnxrt-{v}", lambda v=v: bench(shape, folder, sm.graph_workdir(workdir, v), "onnxrt", 1, hf=False,
                                          graphs=v)),
        (f"flash-{v}", lambda v=v: kernels(shape, folder, sm.graph_workdir(workdir, v), xqa=False, graphs=v)))]
    done += [(f"batch8-{v}", lambda v=v: bench(shape, folder, sm.graph_workdir(workdir, v), "onnxrt", 8, hf=False,
                                               graphs=v)) for v in ort_variants]
    at = [name for name, _ in done].index("frameworks") + 1  # each variant's row after the default's
    done[at:at] = [(f"frameworks-{v}", lambda v=v: bench(shape, folder, workdir, "frameworks", 1, hf=False, variant=v))
                   for v in row_variants]
    done += [("step", lambda v=v: variant_step(shape, folder, workdir, v)) for v in variants]
    if not keep:
        folders = {folder, workdir, *(sm.graph_workdir(workdir, v) for v in ort_variants)}
        done.append(("cleanup", lambda: {"removed": [shutil.rmtree(p, ignore_errors=True) or p for p in folders]}))
    return done


BENCH = ("onnxrt", "onnxrt-matmul", "frameworks", "eager", "batch8")  # and onnxrt-V (`_bench`)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--models", default="opt-6.7b", help="comma-separated shapes (make_shapes_model.py)")
    parser.add_argument("--skip", default="", help="comma-separated jobs to leave out (build, onnxrt, kernels, "
                        "flash, frameworks, frameworks-<variant>, step, loop, tokens, eager, batch8)")
    parser.add_argument("--shapes-dir", type=Path, default=Path("/tmp/shapes"))
    parser.add_argument("--workdir", default="/tmp/wd")
    parser.add_argument("--deadline", type=float, default=500)
    parser.add_argument("--keep", action="store_true", help="keep the shapes folders and artifacts")
    parser.add_argument("--row-variants", default="inductor", help="comma-separated fused-step settings "
                        "(speed_matrix.LLAMA_VARIANTS) benchmarked beside the default frameworks row, each a "
                        "`frameworks-<variant>` job; VARIANT+loop: greedy tokens chosen by the loop, not the step "
                        "(e.g. default+loop)")
    parser.add_argument("--variants", default="", help="comma-separated fused-step settings (speed_matrix."
                        "LLAMA_VARIANTS) whose captured step is timed after the rows, each a `step` job")
    parser.add_argument("--ort-variants", default="", help="comma-separated settings of the built graphs "
                        f"({', '.join(sm.ORT_VARIANTS)}) each benchmarked as `onnxrt-<variant>` and "
                        "`batch8-<variant>` jobs and profiled as `flash-<variant>`")
    parser.add_argument("--xqa", choices=("on", "off"), help="ONNX Runtime's XQA decode attention for every onnxrt "
                        "row (ORT_ENABLE_XQA; default: ONNX Runtime's own choice, on for fp16)")
    args = parser.parse_args()
    for name in filter(None, f"{args.row_variants},{args.variants}".split(",")):
        if not sm.known_variant(name, sm.LLAMA_VARIANTS):
            parser.error(f"variant {name!r}: one of {', '.join(sm.LLAMA_VARIANTS)}, each also as VARIANT+MODE, "
                         f"MODE one of {', '.join(filter(None, sm.LOOP_MODES))}")
    ort_variants = tuple(filter(None, args.ort_variants.split(",")))
    for name in ort_variants:
        if name not in sm.ORT_VARIANTS:
            parser.error(f"ONNX Runtime graph variant {name!r}: one of {', '.join(sm.ORT_VARIANTS)}")
    if args.xqa:
        import os

        os.environ["ORT_ENABLE_XQA"] = "1" if args.xqa == "on" else "0"
    args.out.mkdir(parents=True, exist_ok=True)
    sm.SHAPES.update({s: str(args.shapes_dir / s) for s in args.models.split(",")})
    sm.NEW = NEW
    skip = set(filter(None, args.skip.split(",")))
    todo = []
    for shape in args.models.split(","):
        workdir = f"{args.workdir}/{shape}"
        variants = tuple(filter(None, args.variants.split(",")))
        rows = tuple(filter(None, args.row_variants.split(",")))
        todo += [(kind, job) for kind, job in jobs(shape, args.keep, workdir, variants, rows, ort_variants)
                 if kind not in skip or kind in ("shapes", "cleanup")]
    doc = {"copy_bandwidth": sm.copy_bandwidth(), "builds": [], "kernels": []}
    torch.cuda.empty_cache()  # the copy's buffers: the build's child process needs the card to itself
    todo = [(k if k == "step" else "bench" if _bench(k) else "other", _collect(doc, k, j)) for k, j in todo]
    sm.run_jobs(args.out, todo, args.deadline, "decoder-graphs")
    (args.out / "decoder-graphs-extra.json").write_text(json.dumps(doc, indent=1, default=str))
    print(json.dumps(doc, indent=1, default=str)[:6000])


def _bench(kind: str) -> bool:
    return kind in BENCH or kind.startswith(("frameworks-", "onnxrt-", "batch8-"))


def _collect(doc: dict, kind: str, job):
    """Jobs other than benchmarks keep their result in `doc` (written beside speed_matrix's JSON)."""
    if _bench(kind) or kind == "step":
        return job

    def run():
        got = job()
        key = "kernels" if kind.startswith(("kernels", "flash")) else {"build": "builds", "loop": "loops",
                                                                          "tokens": "tokens"}.get(kind, "other")
        doc.setdefault(key, []).append(got)
        print(json.dumps(got, default=str)[:3000], flush=True)
        return got
    return run


if __name__ == "__main__":
    main()
