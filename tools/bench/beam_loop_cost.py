#!/usr/bin/env python3
"""What the shared generation loop itself costs per beam step on the host: torch ops dispatched, host syncs and
milliseconds per step, with a model step that costs nothing.

The steps are the real `Seq2Seq.torch_steps.Seq2SeqStaticSteps` (its forward, slot pool and in-place beam
reordering of the static cache) over a fake fused step: `one_token` returns one fixed random logits buffer [rows,
1, vocab] at once, and the slot has the self- and cross-attention buffers of the given shapes (default BART-large:
12 decoder layers, 16 heads of 64, 32 encoder positions). The fixed logits rank the end-of-sequence token second,
so finished hypotheses are collected every step and the search runs all `--steps` steps. Ops and syncs are counted
in a first run with a `TorchDispatchMode` (a sync: `item`/`bool` (`_local_scalar_dense`), `nonzero`, `equal`); a
step is the interval between two `Observer.token` calls (advance, reorder, one model step), timed in a second run
(without the counter's overhead) as wall and as this thread's CPU time (torch runs one thread here, so a shared
machine disturbs it less). The slots reorder as on CUDA (stacked buffers moved at once) on every device, so the CPU
counts are CUDA's. On CPU the times include the loop's own arithmetic (log-softmax and top-k over beams x vocab,
the cache copies); `--vocab 512 --layers 2` leaves mostly the per-op overhead. On CUDA, `--gpu-us` makes each model
step keep the GPU busy that long (`torch.cuda._sleep`), so the wall time per step shows whether the host waits for
the GPU (a sync) or runs ahead of it.

    python tools/bench/beam_loop_cost.py                       # CPU, batch 1 and 3, 4 beams, 64 steps
    python tools/bench/beam_loop_cost.py --device cuda --gpu-us 700
    python tools/bench/beam_loop_cost.py --beams 1             # greedy, for comparison
    python tools/bench/beam_loop_cost.py --min-new-tokens 64   # as the benchmark decodes (no EOS, min-length)
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from NNDF import slots  # noqa: E402
from NNDF.generation import GenerationConfig, Observer, generate  # noqa: E402
from Seq2Seq.fused_step import seq2seq_slot  # noqa: E402
from Seq2Seq.torch_steps import Seq2SeqStaticSteps  # noqa: E402

SYNC_OPS = ("_local_scalar_dense", "nonzero", "equal", "is_nonzero")
EOS = 2


class _Counter(TorchDispatchMode):
    """Counts every aten op dispatched, those that are not views (each a kernel launch on CUDA) and those that make
    the host wait for the device."""

    def __init__(self):
        super().__init__()
        self.ops = self.kernels = self.syncs = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        self.kernels += not func.is_view
        if func.__name__.split(".")[0] in SYNC_OPS:
            self.syncs += 1
        return func(*args, **(kwargs or {}))


class _StepTimes(Observer):
    """Host time and op counts at each token."""

    def __init__(self, counter: _Counter):
        self.counter, self.marks = counter, []

    def token(self, step: int) -> None:
        c = self.counter
        self.marks.append((time.perf_counter(), time.thread_time(), c.ops, c.kernels, c.syncs))


class _Encoder(torch.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.width = torch.nn.Parameter(torch.zeros(width))

    def forward(self, input_ids, attention_mask=None):
        hidden = self.width.expand(*input_ids.shape, -1)  # [B, S, D]: never read by the fake step
        return type("Out", (), {"last_hidden_state": hidden})()


class _Model(torch.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.encoder = _Encoder(width)

    def get_encoder(self):
        return self.encoder


class _FixedStep:
    """A `FusedSeq2SeqStep` whose logits are one fixed buffer: the loop's cost alone."""

    def __init__(self, args, device):
        self.args, self.device = args, device
        generator = torch.Generator().manual_seed(0)
        logits = torch.randn(args.vocab, generator=generator)
        top = logits.topk(8).indices
        logits[top] += 6.0
        logits[EOS] = logits[top[0]] - 0.3  # second best: a hypothesis finishes every step
        self.logits = logits.to(device)
        self.sleep_cycles = int(args.gpu_us * 1980)  # ~1.98 GHz SM clock (H100)

    def new_slot(self, rows, max_length, encoder_length):
        a = self.args
        dtype = torch.float16 if self.device.type == "cuda" else torch.float32  # CPU half copies are slow
        slot = seq2seq_slot(rows, max_length, encoder_length, a.layers, a.heads, a.head_dim, dtype, self.device)
        slot.logits = self.logits.expand(rows, 1, -1).clone()  # [rows, 1, V]
        return slot

    def cross(self, hidden, slot):
        pass

    def prefill(self, input_ids, slot, last_only):
        return self.logits.expand(input_ids.shape[0], 1, -1)

    def one_token(self, slot):
        if self.sleep_cycles:
            torch.cuda._sleep(self.sleep_cycles)
        return slot.logits


def measure(args, batch: int) -> dict:
    device = torch.device(args.device)
    slots.STACKED_DEVICES = (device.type,)  # CUDA's reordering, here too
    steps = Seq2SeqStaticSteps(_Model(8).to(device), _FixedStep(args, device))
    encoder = {"input_ids": torch.ones(batch, args.encoder_length, dtype=torch.long),
               "attention_mask": torch.ones(batch, args.encoder_length, dtype=torch.long)}
    config = GenerationConfig(max_new_tokens=args.steps, num_beams=args.beams, eos_token_id=EOS,
                              early_stopping=args.early_stopping, min_new_tokens=args.min_new_tokens)
    prompt = torch.zeros(batch, 1, dtype=torch.long)
    mask = torch.ones(batch, 1, dtype=torch.long)
    runs = []
    for counting in (True, False):  # ops counted (also the warm-up: slots pooled), then timed without the counter
        counter = _Counter()
        observer = _StepTimes(counter)
        if counting:
            counter.__enter__()
        out = generate(steps, prompt, mask, config, observer, encoder)
        if counting:
            counter.__exit__(None, None, None)
        if device.type == "cuda":
            torch.cuda.synchronize()
        marks = observer.marks
        runs.append(list(zip(*[[y - x for x, y in zip(a, b)] for a, b in zip(marks, marks[1:])])))  # field, step
    _, _, ops, kernels, syncs = (statistics.median(g) for g in runs[0])
    wall, cpu = (statistics.median(g) for g in runs[1][:2])
    return {"batch": batch, "steps": len(marks), "new_tokens": out.sequences.shape[1] - 1,
            "wall_ms": 1e3 * wall, "cpu_ms": 1e3 * cpu, "ops": ops, "kernels": kernels, "syncs": syncs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--beams", type=int, default=4)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=50265)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--encoder-length", type=int, default=32)
    parser.add_argument("--early-stopping", default="false", choices=["false", "true", "never"])
    parser.add_argument("--min-new-tokens", type=int, default=0,
                        help="EOS forbidden until then (the benchmark's runs: = --steps); its processors run each step")
    parser.add_argument("--gpu-us", type=float, default=0.0, help="CUDA only: GPU time of each fake model step")
    args = parser.parse_args()
    torch.set_num_threads(1)  # host CPU time = this thread's (the machine may be shared)
    args.early_stopping = {"false": False, "true": True, "never": "never"}[args.early_stopping]
    if args.gpu_us and not args.device.startswith("cuda"):
        parser.error("--gpu-us needs --device cuda")
    print(f"device {args.device}, {args.beams} beams, vocab {args.vocab}, {args.layers} layers; per step (median):")
    for batch in args.batch:
        r = measure(args, batch)
        print(f"  batch {r['batch']}: {r['wall_ms']:.3f} ms wall  {r['cpu_ms']:.3f} ms host CPU  "
              f"{r['ops']:.0f} ops ({r['kernels']:.0f} not views)  {r['syncs']:.0f} syncs  "
              f"({r['steps']} steps, {r['new_tokens']} columns out)")


if __name__ == "__main__":
    main()
