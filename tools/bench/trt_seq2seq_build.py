#!/usr/bin/env python3
"""Build the `trt --static-cache` engines of an encoder-decoder (encoder, cache generator, static decoder) for a
local checkpoint and print each engine's size and build seconds (a CUDA machine with TensorRT or TensorRT-RTX):

    python tools/bench/trt_seq2seq_build.py --family T5 --torch-dir temp/shapes/flan-t5-xl
    python tools/bench/trt_seq2seq_build.py --family BART --torch-dir DIR --fp32 --beams 4 --output 64

It runs `python run.py build FAMILY trt --static-cache --fp16 --device cuda --torch-dir DIR ...` (the static
export and its validation on ONNX Runtime, then the engines) and reads the build's --json report. Arguments after
`--` go to run.py unchanged (e.g. `-- --use-timing-cache --trt-module tensorrt`).
"""
import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", required=True, help="T5, BART or BLIP")
    parser.add_argument("--torch-dir", required=True, help="the checkpoint folder (HF save_pretrained layout)")
    parser.add_argument("--fp32", action="store_true", help="fp32 engines (default fp16)")
    parser.add_argument("--batch", type=int, default=1, help="--batch-size (default 1)")
    parser.add_argument("--beams", type=int, default=1, help="--num-beams (default 1)")
    parser.add_argument("--input", type=int, default=512, help="--input-profile-max-len (default 512)")
    parser.add_argument("--output", type=int, default=128, help="--output-profile-max-len (default 128)")
    parser.add_argument("--working-dir", default="/tmp/wd-trt-seq2seq", help="run.py -wd (default %(default)s)")
    parser.add_argument("rest", nargs="*", help="more run.py flags, after --")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "build.json"
        command = [sys.executable, str(ROOT / "run.py"), "build", args.family, "trt", "--static-cache",
                   "--device", "cuda", "--torch-dir", args.torch_dir, "--batch-size", str(args.batch),
                   "--num-beams", str(args.beams), "--input-profile-max-len", str(args.input),
                   "--output-profile-max-len", str(args.output), "-wd", args.working_dir,
                   "--json", str(report), *([] if args.fp32 else ["--fp16"]), *args.rest]
        print(" ".join(command), flush=True)
        code = subprocess.call(command, cwd=ROOT)
        if code or not report.is_file():
            return code or 1
        data = json.loads(report.read_text())
    print("| engine | built now | build s | MB | module | GPU |")
    print("|---|---|---|---|---|---|")
    for row in data["results"]:
        seconds = format(row["build_seconds"], ".1f") if row["build_seconds"] is not None else "reused"
        print(f"| `{row['engine']}` | {'yes' if row['build_seconds'] is not None else 'no'} | {seconds} | "
              f"{row['engine_mb']:.1f} | {row['module']} | {row['gpu']} (CC {row['compute_capability']}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
