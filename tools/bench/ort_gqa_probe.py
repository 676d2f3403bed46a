#!/usr/bin/env python3
"""What ONNX Runtime's GroupQueryAttention does with a one-token step by its host scalar `total_sequence_length`
and by `local_window_size`, on the decoder families' built graphs at published widths with few layers:

    python tools/bench/ort_gqa_probe.py OUT [mistral llama opt] [--layers 4]    # one CUDA machine, onnxruntime-gpu
    python tools/bench/ort_gqa_probe.py OUT mistral --layers 1 --device cpu      # the CPU kernel (fp32)

Models (random weights, tools/assets/make_shapes_model.py's shapes with --layers layers, made in --shapes-dir):
Mistral-7B's with its 64-column window, the same weights without a window (`sliding_window` None), Llama-3-8B's
and OPT-6.7B's. For each, the onnxrt static-cache graph (fp16 and replayed from ONNX Runtime's CUDA graph on CUDA)
runs a 128-token prompt, then one-token steps with `total_sequence_length` frozen at the buffer's length (256, what
the backend passes) and at smaller values (the window, 2): per value the step's wall time over 85 steps, the
kernels of 10 steps (torch's profiler: CUPTI sees ONNX Runtime's kernels), and the first 5 steps' logits against
the buffer length's (an exact kernel reads the per-row lengths from `seqlens_k` and gives the same logits).
Results in OUT/gqa-probe.json as they come.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from NNDF.actions.common import backend_steps, open_run  # noqa: E402
from NNDF.options import ModelOptions  # noqa: E402
from NNDF.timing import sync  # noqa: E402
from tools.assets import make_shapes_model as msm  # noqa: E402
from tools.bench.decoder_graphs import family_of  # noqa: E402
from tools.bench.kernel_table import kernel_table  # noqa: E402

PROMPT, STEPS, KEPT, PROFILED = 128, 100, 5, 10
BUFFER = 256  # the slot's length: prompt + 128 new tokens, as the benchmarks run


def make(shape: str, folder: Path, layers: int) -> Path:
    """The shapes model with `layers` layers (made unless there)."""
    if not (folder / "config.json").is_file():
        config_class, sizes = msm.DECODER_SHAPES[shape]
        msm.DECODER_SHAPES[shape] = (config_class, dict(sizes, num_hidden_layers=layers))
        msm.decoder(shape, folder)
    return folder


def without_window(folder: Path) -> Path:
    """A folder beside `folder` with its weights (linked) and its config without a sliding window."""
    other = folder.parent / f"{folder.name}-nowindow"
    if not other.exists():
        other.mkdir()
        for f in folder.iterdir():
            if f.name != "config.json":
                os.symlink(f, other / f.name)
        config = json.loads((folder / "config.json").read_text())
        (other / "config.json").write_text(json.dumps({**config, "sliding_window": None}))
    return other


def probe(label: str, folder: Path, totals: list[int | None], device: str, workdir: Path) -> list[dict]:
    cuda = device == "cuda"
    options = ModelOptions(torch_dir=str(folder), device=device, fp16=cuda, use_cache=True, batch_size=1,
                           working_dir=str(workdir / label), static_cache=True, use_cuda_graph=cuda, fused_decode=True)
    run = open_run(family_of(str(folder)), options, ("onnxrt",))
    ids = torch.randint(0, run.source.config.vocab_size, (1, PROMPT + STEPS + PROFILED),
                        generator=torch.Generator().manual_seed(0)).to(device)
    rows, reference = [], None
    with backend_steps(run, "onnxrt") as (backend, steps):
        for number, total in enumerate(totals):
            slot = steps.new_cache(1, BUFFER + number)  # a slot (and CUDA graph) of its own per value
            positions = torch.arange(PROMPT + STEPS + PROFILED, device=device)[None]
            steps.forward(ids[:, :PROMPT], torch.ones(1, PROMPT, dtype=torch.long, device=device),
                          positions[:, :PROMPT], slot)
            if total is not None:
                slot.inputs["total_sequence_length"].fill_(total)  # frozen by the graph the next step captures
            kept = []

            def step(n: int) -> None:
                mask = torch.ones(1, n + 1, dtype=torch.long, device=device)
                logits, _ = steps.forward(ids[:, n:n + 1], mask, positions[:, n:n + 1], slot)
                if n < PROMPT + KEPT:
                    kept.append(logits.float().clone())

            for n in range(PROMPT, PROMPT + KEPT):
                step(n)
            sync(run.device)
            start = time.perf_counter()
            for n in range(PROMPT + KEPT, PROMPT + STEPS - PROFILED):
                step(n)
            sync(run.device)
            wall = (time.perf_counter() - start) / (STEPS - PROFILED - KEPT) * 1e3
            later = iter(range(PROMPT + STEPS - PROFILED, PROMPT + STEPS))
            table = kernel_table(lambda: step(next(later)), PROFILED, cuda=cuda)
            got = torch.cat(kept)
            reference = got if reference is None else reference
            rows.append({"model": label, "graph": backend.choice, "total_sequence_length": total or BUFFER + number,
                         "step_ms": round(wall, 4), "kernels_per_step": table["kernels_per_step"],
                         "kernel_us_per_step": table["us_per_step"],
                         "max_logit_difference": float((got - reference).abs().max()),
                         "same_argmax": bool((got.argmax(-1) == reference.argmax(-1)).all()),
                         "top": [{k: t[k] for k in ("name", "per_step", "us_per_step")} for t in table["top"]]})
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "top"}), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("models", nargs="*", choices=("mistral", "llama", "opt"), default=["mistral", "llama", "opt"])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--shapes-dir", type=Path, default=Path("/tmp/shapes-probe"))
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/wd-probe"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = []

    def run(label, folder, totals):
        results.extend(probe(label, folder, totals, args.device, args.workdir))
        (args.out / "gqa-probe.json").write_text(json.dumps(results, indent=1))
        shutil.rmtree(args.workdir / label, ignore_errors=True)

    made = lambda shape: make(shape, args.shapes_dir / shape, args.layers)  # noqa: E731
    if "mistral" in args.models:
        run("mistral-7b-w64", made("mistral-7b-w64"), [None, 64, 2])
        run("mistral-7b-nowindow", without_window(made("mistral-7b-w64")), [None, 2])
    if "llama" in args.models:
        run("llama-3-8b", made("llama-3-8b"), [None, 2])
    if "opt" in args.models:
        run("opt-6.7b", made("opt-6.7b"), [None, 2])


if __name__ == "__main__":
    main()
