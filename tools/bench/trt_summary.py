#!/usr/bin/env python3
"""Summarise the `run.py build ... --json` files of a folder (named 1.json, 2.json, ..., then any other name) as
one markdown table (used by trt_check.sh and seq2seq_check.sh).

    python tools/bench/trt_summary.py temp/bench/builds > trt_builds.md
"""
import argparse
import json
from pathlib import Path

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("folder", type=Path, help="the builds' JSON files")
rows = []
for path in sorted(parser.parse_args().folder.glob("*.json"),
                   key=lambda p: (not p.stem.isdigit(), int(p.stem) if p.stem.isdigit() else p.stem)):
    data = json.loads(path.read_text())
    s = data["settings"]
    batch = "dynamic" if s["dynamic_batch"] else str(s["batch_size"])
    for r in data["results"]:  # one per engine part (decoder; or encoder, decoder, cache generator)
        built = format(r["build_seconds"], ".1f") if r["build_seconds"] is not None else "reused"
        rows.append(f"| {data['family']} {data['variant']} | {s['precision']} | {'kv' if s['use_cache'] else 'no cache'} | "
                    f"{batch} | {built} | {r['engine_mb']:.1f} | {r['module']} | {r['gpu']} (CC {r['compute_capability']}) | "
                    f"`{r['engine']}` |")
print("| model | precision | cache | batch | build s | engine MB | module | GPU | engine |")
print("|---|---|---|---|---|---|---|---|---|")
print("\n".join(rows))
