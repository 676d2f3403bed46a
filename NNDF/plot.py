"""`benchmark --plot PATH`: per-token decode latency against sequence length, one line per backend.

The file's extension names its format (`.png`, `.svg`, `.pdf`; anything else is refused before the run), and it
is written through a temporary file renamed into place, with the mode the umask gives an ordinary file.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from NNDF.artifacts import file_mode
from NNDF.errors import UsageError

FORMATS = ("png", "svg", "pdf")


def plot_format(path: str) -> str:
    """The format `path`'s extension names; UsageError listing the formats written when it names none of them."""
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        named = f"its extension .{suffix} names no format written here" if suffix else "it has no extension"
        raise UsageError(f"--plot {path}: {named}; end it with {', '.join('.' + f for f in FORMATS)}")
    return suffix


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
    fmt = plot_format(path)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        fig.savefig(tmp, format=fmt, dpi=120, bbox_inches="tight")
        os.chmod(tmp, file_mode())  # mkstemp made it 0600
        os.replace(tmp, target)
    finally:
        plt.close(fig)
        Path(tmp).unlink(missing_ok=True)
