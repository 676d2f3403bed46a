#!/usr/bin/env python3
"""Fold the encoder benchmark JSONs of tools/bench/encoder_speed.sh into one table and one JSON.

    python3 tools/bench/encoder_speed_table.py JSON_DIR OUT_PREFIX   # writes OUT_PREFIX.md and OUT_PREFIX.json

File names are `<shape>-<batch>x<seq>-<tag>.json` (tag: fp32, fp16, fp16-noopt, graph, trtbuild). A row per
shape, batch x seq, configuration and backend: median (p50), p99, mean ms per forward, sequences/s; then the
ratio of each row's p50 to the shape's hf-eager fp32 p50 ("x PyTorch eager fp32", same run).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def rows(folder: Path) -> list[dict]:
    out = []
    for path in sorted(folder.glob("*.json")):
        shape, size, tag = path.stem.rsplit("-", 2) if path.stem.count("-") >= 2 else (path.stem, "", "")
        if tag == "noopt":  # fp16-noopt splits one dash further
            shape, size, tag = path.stem.rsplit("-", 3)[0], path.stem.rsplit("-", 3)[1], "fp16-noopt"
        data = json.loads(path.read_text())
        for result in data["results"]:
            if "latency_ms" in result:
                lat = result["latency_ms"]
                out.append({"shape": shape, "batch x seq": size, "config": tag, "backend": result["backend"],
                            "p50 ms": lat["p50"], "p99 ms": lat["p99"], "mean ms": lat["mean"],
                            "sequences/s": result["sequences_per_s"]})
            elif "engine" in result:
                out.append({"shape": shape, "batch x seq": size, "config": "trt build", "backend": "trt",
                            "engine": result["engine"], "build s": result["build_seconds"],
                            "engine MB": result["engine_mb"], "module": result["module"], "gpu": result["gpu"]})
    return out


def with_speedup(table: list[dict]) -> list[dict]:
    base = {(r["shape"], r["batch x seq"]): r["p50 ms"] for r in table
            if r["backend"] == "hf-eager" and r["config"] == "fp32"}
    for r in table:
        ref = base.get((r["shape"], r["batch x seq"]))
        if ref and "p50 ms" in r:
            r["x eager fp32"] = round(ref / r["p50 ms"], 2)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("json_dir", type=Path, help="the benchmark JSON files")
    parser.add_argument("out_prefix", help="writes OUT_PREFIX.md and OUT_PREFIX.json")
    args = parser.parse_args()
    folder, prefix = args.json_dir, args.out_prefix
    table = with_speedup(rows(folder))
    Path(prefix + ".json").write_text(json.dumps(table, indent=1))
    from tabulate import tabulate

    timed = [r for r in table if "p50 ms" in r]
    builds = [r for r in table if "engine" in r]
    text = tabulate(timed, headers="keys", tablefmt="github", floatfmt=".4g")
    if builds:
        text += "\n\n" + tabulate(builds, headers="keys", tablefmt="github", floatfmt=".4g")
    Path(prefix + ".md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
