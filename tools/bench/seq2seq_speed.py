#!/usr/bin/env python3
"""Encoder-decoders' static-cache decode at published sizes on one CUDA machine, HF's paths beside ours:

    python tools/bench/seq2seq_speed.py OUT --models flan-t5-xl,bart-large,t5-small,t5-base,blip-large

Per model (random weights with the published shapes, tools/assets/make_shapes_model.py, made in --shapes-dir),
fp16, prompt 128 (BLIP: a 4-token caption prompt after the image), 64 new tokens:
  eager       frameworks with HF's own growing cache, and HF `generate` eager (--hf-baseline), batch 1
  compiled    frameworks --static-cache --use-cuda-graph --torch-compile (the family's fused decoder step), and
              HF `generate` with cache_implementation="static" (transformers compiles its own step), batch 1
  onnxrt      onnxrt --static-cache --use-cuda-graph (the graphs built from the weights), batch 1
  beams       the compiled frameworks row and the onnxrt row with 4 beams (BART-large-cnn's default)
  batch8      the compiled frameworks row and the onnxrt row at batch 8
Every row carries the achieved bandwidth (the decoder's weight bytes / TPOT). Rows are saved as they come
(OUT/seq2seq-speed.json, .md); no job starts after --deadline seconds; each model's folder and artifacts are
deleted after its jobs unless --keep.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tools.bench import speed_matrix as sm  # noqa: E402

FAMILIES = {"flan-t5-xl": "T5", "t5-small": "T5", "t5-base": "T5", "bart-large": "BART", "blip-large": "BLIP"}
NEW = 64
COMPILED = dict(static_cache=True, use_cuda_graph=True, torch_compile=True)
ORT = dict(static_cache=True, use_cuda_graph=True)
sm.CONFIGS.update({
    "s2s-eager": dict(backends=("frameworks",), options={}),
    "s2s-compiled": dict(backends=("frameworks",), options=COMPILED),
    "s2s-onnxrt": dict(backends=("onnxrt",), options=ORT),
    "s2s-compiled-beams": dict(backends=("frameworks",), options=dict(COMPILED, num_beams=4)),
    "s2s-onnxrt-beams": dict(backends=("onnxrt",), options=dict(ORT, num_beams=4)),
})


def jobs(shape: str, keep: bool, workdir: str, iterations: int) -> list[tuple[str, object]]:
    folder, family = sm.SHAPES[shape], FAMILIES[shape]
    lengths = (4 if family == "BLIP" else 128, NEW)

    def rows(config: str, batch: int = 1, hf: bool = False):
        return lambda: sm.bench_rows(shape, family, folder, batch, config, workdir, iterations, lengths=lengths,
                                     hf=hf)

    todo = [("shapes", lambda: make_shapes(shape, folder)),
            ("compiled", rows("s2s-compiled", hf=True)),
            ("onnxrt", rows("s2s-onnxrt")),
            ("eager", rows("s2s-eager", hf=True)),
            ("beams", rows("s2s-compiled-beams")),
            ("beams-onnxrt", rows("s2s-onnxrt-beams")),
            ("batch8", rows("s2s-compiled", 8)),
            ("batch8-onnxrt", rows("s2s-onnxrt", 8))]
    if not keep:
        todo.append(("cleanup", lambda: {"removed": [shutil.rmtree(p, ignore_errors=True) or str(p)
                                                     for p in (Path(folder), Path(workdir))]}))
    return todo


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
                        "beams, beams-onnxrt, batch8, batch8-onnxrt)")
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
    todo = [("copy", sm.copy_bandwidth)]
    for shape in args.models.split(","):
        todo += [("bench" if kind not in ("shapes", "cleanup") else "other", job)
                 for kind, job in jobs(shape, args.keep, f"{args.workdir}/{shape}", args.iterations)
                 if kind not in skip]
    sm.run_jobs(args.out, todo, args.deadline, "seq2seq-speed")


if __name__ == "__main__":
    main()
