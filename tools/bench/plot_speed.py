#!/usr/bin/env python3
"""Bar plots of time per token (TPOT p50) from speed_matrix.py's JSON files, one panel per (model, batch), with
the weight-bytes floor (weight bytes / the run's measured copy bandwidth) and a goal per model drawn across:

    python3 tools/bench/plot_speed.py OUT.png RUN.json[@LABEL] [...] [--goal gpt2=0.33 --goal gpt2-xl=2.08]

Rows are labelled "<config> <backend>" (e.g. "fused onnxrt"), plus " [LABEL]" for a file given as PATH@LABEL (to
tell runs apart); each bar carries its ms and achieved bandwidth.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path


def panels(docs: list[tuple[dict, str]]) -> dict[tuple[str, int], list[dict]]:
    out: dict[tuple[str, int], list[dict]] = {}
    for doc, label in docs:
        for row in doc["rows"]:
            if "error" not in row and row.get("tpot_p50_ms"):
                config = f"{row['config']} [{label}]" if label else row["config"]
                out.setdefault((row["model"], row["batch"]), []).append(
                    {**row, "config": config, "copy": doc.get("copy_bandwidth")})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("runs", nargs="+", help="speed_matrix JSON files, each optionally @LABEL")
    parser.add_argument("--goal", action="append", default=[], help="MODEL=ms (batch 1)")
    parser.add_argument("--title", default="")
    args = parser.parse_args()
    goals = {k: float(v) for k, v in (g.split("=") for g in args.goal)}
    runs = [(run.split("@", 1) + [""])[:2] for run in args.runs]
    groups = panels([(json.loads(Path(path).read_text()), label) for path, label in runs])
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    heights = [1 + 0.3 * len(rows) for rows in groups.values()]
    fig, axes = plt.subplots(len(groups), 1, figsize=(8, sum(heights) + 0.6), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for ax, ((model, batch), rows) in zip(axes[:, 0], sorted(groups.items())):
        rows = sorted(rows, key=lambda r: r["tpot_p50_ms"], reverse=True)
        labels = [f"{r['config']} {r['backend']}" for r in rows]
        ax.barh(labels, [r["tpot_p50_ms"] for r in rows], color="tab:blue")
        for i, r in enumerate(rows):
            gbs = r.get("weights_gb_s")
            note = f" {r['tpot_p50_ms']:.3g} ms" + (f", {gbs:.0f} GB/s" if gbs else "")
            ax.text(r["tpot_p50_ms"], i, note, va="center", fontsize=7)
        copy = rows[0]["copy"]
        if copy and rows[0].get("weight_bytes"):
            floor = rows[0]["weight_bytes"] / (copy["copy_tb_s_median"] * 1e12) * 1e3
            ax.axvline(floor, color="tab:green", linestyle="--", linewidth=1, label=f"weight-bytes floor {floor:.3g} ms")
        if batch == 1 and model in goals:
            ax.axvline(goals[model], color="tab:red", linestyle=":", linewidth=1, label=f"goal {goals[model]:g} ms")
        ax.set_xscale("log")
        ax.set_title(f"{model} shapes, batch {batch}: time per token (p50)", fontsize=9)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=7, loc="upper right")
    fig.suptitle(args.title, fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fd, tmp = tempfile.mkstemp(dir=args.out.parent, suffix=".png")
    os.close(fd)
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
