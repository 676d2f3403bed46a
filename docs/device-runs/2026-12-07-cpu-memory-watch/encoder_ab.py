"""`benchmark BERT onnxrt` (all-MiniLM-L6-v2) through the CLI in one process, the peak memory read from the kernel's
high-water mark (`mark`) or sampled by a thread every 2 ms (`sampled`, as before), alternated action by action:
each way's mean / p50 / p99 ms per forward. encoder_ab.py ROUNDS BxT [BxT ...]"""
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import NNDF.timing as timing  # noqa: E402
from NNDF.cli import main  # noqa: E402

rounds, shapes = int(sys.argv[1]), sys.argv[2:]
real = timing._CLEAR_REFS
seen: dict = {}
with tempfile.TemporaryDirectory() as tmp:
    for round_ in range(rounds):
        for shape in shapes:
            batch, length = shape.split("x")
            for way in (("mark", "sampled") if round_ % 2 else ("sampled", "mark")):
                timing._CLEAR_REFS = real if way == "mark" else "/nonexistent/clear_refs"
                out = Path(tmp) / "r.json"
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    main(["benchmark", "BERT", "onnxrt", "--cpu", "--batch-size", batch, "--input-seq-len", length,
                          "--iterations", "300" if batch == "1" else "20", "--json", str(out)])
                row = json.loads(out.read_text())["results"][0]
                assert (row["memory_kind"] == timing.MemoryWatch.SAMPLED) == (way == "sampled")
                seen.setdefault((shape, way), []).append(row["latency_ms"])
print(f"{rounds} rounds alternated, load average {os.getloadavg()[0]:.1f}; medians over the rounds of each action's")
for (shape, way), rows in seen.items():
    print(f"{shape} {way}: " + ", ".join(f"{k} {statistics.median(r[k] for r in rows):.3f} ms"
                                         for k in ("mean", "p50", "p99")))
