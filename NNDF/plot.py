"""`benchmark --plot PATH`: per-token decode latency against sequence length, one line per backend (PNG)."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def plot_per_token(results, input_seq_len: int, path: str, title: str) -> None:
    """Each result's `per_token_ms[i]` is the latency of the token at position input_seq_len + i + 1."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r in results:
        if r.per_token_ms:
            xs = range(input_seq_len + 2, input_seq_len + 2 + len(r.per_token_ms))
            ax.plot(list(xs), r.per_token_ms, label=r.backend, linewidth=1.2)
    ax.set_xlabel("sequence length (prompt + generated tokens)")
    ax.set_ylabel("per-token latency (ms)")
    ax.set_title(title, fontsize=9)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".png")
    os.close(fd)
    fig.savefig(tmp, dpi=120, bbox_inches="tight")
    plt.close(fig)
    os.replace(tmp, target)
