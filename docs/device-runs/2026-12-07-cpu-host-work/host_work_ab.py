#!/usr/bin/env python3
"""The generation loop's host work before and after (2026-12-07), alternated generation by generation in one process
on the same sessions: `before` patches back the code as it was (logits processors built for every generation, every
input bound by pointer, a token's column written by torch's indexing, EOS tracked by HF's criteria in torch, a
prompt pass binding five inputs anew), `after` is the code as installed. Each
generation: 0.2 s idle, a fresh random prompt, exactly --new tokens (EOS suppressed), as tools/bench/quant_speed.py.

    python docs/device-runs/2026-12-07-cpu-host-work/host_work_ab.py --family LLAMA --variant llama-offline \
        --static-cache --rounds 20

Prints per row and side: the time before the prompt pass starts, the pass, from its end to the first token, the
time to the first token and end to end (medians), tokens/s. `--eos-live`: EOS allowed from the first token, so the
loop checks every token for it, as `generate` and `chat` do (the tokens a generation makes are counted).
"""
from __future__ import annotations

import dataclasses
import os
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

import NNDF.generation as gen  # noqa: E402
from CausalLM.ort_fused import OrtFusedSteps  # noqa: E402
from NNDF.backends.onnxrt import steps as ort_steps  # noqa: E402
from NNDF.sampling import logits_processors  # noqa: E402
from tools.bench.quant_speed import open_rows, open_steps, row_arguments  # noqa: E402


def processors_before(config, attention_mask, rows=None):
    padding = None
    if not bool(attention_mask.all()):
        padding = (attention_mask != 0).int().argmax(dim=1)
        padding = padding if rows is None else padding[rows]
    return logits_processors(config, attention_mask.shape[1], padding, attention_mask.device)


def bind_before(self, feeds, outputs, binding=None):
    binding = binding or self.session.io_binding()
    place, index = self.device.type, self.device.index or 0
    for name, tensor in feeds.items():
        where = ("cpu", 0) if name in self.host_inputs else (place, index)
        binding.bind_input(name, *where, ort_steps._NP[self.inputs[name].type], tuple(tensor.shape),
                           tensor.data_ptr())
    for name, tensor in outputs.items():
        binding.bind_output(name, place, index, ort_steps._NP[self.outputs[name].type], tuple(tensor.shape),
                            tensor.data_ptr())
    return binding


def push_before(self, tokens):
    self._ids[:, self.length] = tokens
    self.length += 1


def greedy_or_sample_before(steps, input_ids, attention_mask, config, observer, encoder):
    from transformers.generation.stopping_criteria import EosTokenCriteria

    prompt_length = input_ids.shape[1]
    max_new = config.new_tokens(prompt_length)
    processors = gen._processors(config, attention_mask)
    ids = gen.eos_ids(config.eos_token_id)
    eos_hit = EosTokenCriteria(list(ids)) if ids else None
    decoder = gen._RunningBatch(steps, input_ids, attention_mask, max_new, encoder, observer)
    generator = None
    if config.sampling.do_sample:
        generator = torch.Generator(device=steps.device).manual_seed(config.seed)
    finished = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=steps.device)
    logits = decoder.prefill()
    min_new = config.eos_allowed_from(prompt_length)
    in_step = gen._greedy_in_step(steps, decoder.cache, config, processors)
    eos, vocab, chosen = gen.eos_ids(config.eos_token_id), logits.shape[-1], None
    for step in range(max_new):
        if chosen is None:
            tokens = gen.pick_tokens(processors(decoder.ids, logits), config.sampling.do_sample, generator)
        else:
            tokens = chosen
        changed = False
        if eos_hit is not None and step >= min_new:
            tokens, changed = torch.where(finished, config.pad_token_id, tokens), True
        if step == 0:
            observer.first_token()
        observer.token(step)
        observer.chosen(step, tokens)
        last = step == max_new - 1
        if eos_hit is not None and step + 1 >= min_new:
            finished |= eos_hit(tokens[:, None], None)
            last = last or bool(finished.all())
        if last:
            decoder.push(tokens)
            break
        if in_step:
            chosen = decoder.append_greedy(tokens, changed, eos, bool(processors) and step + 1 < min_new, vocab)
        else:
            logits = decoder.append(tokens)
    observer.finished()
    return gen.GenerationOutput(decoder.ids, prompt_length)


def rows_before(self, input_ids, position_ids, slot, rows, last_only):
    from CausalLM.graph_io import LOGITS_START

    seq = input_ids.shape[1]
    seqlens = slot.inputs["seqlens_k"][rows]
    seqlens.fill_(seq - 1)
    feeds = {"input_ids": input_ids.contiguous(), "position_ids": position_ids.contiguous(), "seqlens_k": seqlens,
             "total_sequence_length": torch.tensor(seq, dtype=torch.int32),
             LOGITS_START: torch.tensor([-1 if last_only else 0])}
    binding = getattr(slot, "binding_before", None)  # the caches bound once (the installed code's binding differs)
    if binding is None:
        binding = slot.binding_before = self.graph.bind(dict(zip(self.past_names, slot.past)),
                                                        dict(zip(self.present_names, slot.past)))
    logits = torch.empty(slot.rows, 1 if last_only else seq, slot.logits.shape[-1], dtype=slot.logits.dtype,
                         device=self.device)
    self.graph.bind(feeds, {"logits": logits}, binding)
    self.graph.run_bound(binding, None)
    return logits


BEFORE = [(gen, "_processors", processors_before), (ort_steps.OrtGraph, "bind", bind_before),
          (gen._RunningBatch, "push", push_before), (gen, "_greedy_or_sample", greedy_or_sample_before),
          (OrtFusedSteps, "_rows", rows_before)]
AFTER = [(owner, name, getattr(owner, name)) for owner, name, _ in BEFORE]


def main() -> None:
    from NNDF.actions.common import generate_prompt
    from NNDF.timing import GenerationClock

    parser = row_arguments(__doc__.splitlines()[0])
    parser.add_argument("--eos-live", action="store_true",
                        help="EOS allowed from the first token (checked every token, as in `generate`), not suppressed")
    args = parser.parse_args()
    run, config = open_rows(args)
    if args.eos_live:
        config = dataclasses.replace(config, min_new_tokens=0)
    marks: list[float] = []
    results: dict[tuple[str, str], list[tuple[float, ...]]] = {}
    with ExitStack() as stack:
        opened = open_steps(run, stack)
        for _, steps in opened:
            session = steps.graph.session
            call = session.run_with_iobinding

            def timed(*a, _call=call, **k):
                marks.append(time.perf_counter())
                out = _call(*a, **k)
                marks.append(time.perf_counter())
                return out

            session.run_with_iobinding = timed
        generator = torch.Generator().manual_seed(0)
        for round_ in range(args.rounds + 1):
            for name, steps in opened:
                for side in (("before", "after") if round_ % 2 else ("after", "before")):
                    for owner, attr, function in (BEFORE if side == "before" else AFTER):
                        setattr(owner, attr, function)
                    time.sleep(args.gap)
                    prompt = run.family.task.random_prompt(run, 1, args.prompt, generator)
                    marks.clear()
                    clock = GenerationClock(run.device)
                    out = generate_prompt(steps, prompt, config, clock)
                    if round_:
                        t = clock.seconds()
                        results.setdefault((name, side), []).append(
                            (marks[0] - clock.start, marks[1] - marks[0], clock.first - marks[1], t["prefill"],
                             t["e2e"], out.sequences.shape[1] - prompt.input_ids.shape[1]))
    print(f"{args.rounds} rounds, {args.gap} s idle before each generation, prompt {args.prompt}, at most {args.new} "
          f"new, EOS {'checked every token' if args.eos_live else 'suppressed'}; ms")
    print("| row | side | before the prompt pass | the pass | to the first token | time to the first token | "
          "end to end | new tokens | tokens/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (name, side), values in results.items():
        before, pass_, after, ttft, e2e = (statistics.median(v[i] for v in values) * 1e3 for i in range(5))
        new = statistics.median(v[5] for v in values)
        print(f"| {name} | {side} | {before:.3f} | {pass_:.3f} | {after:.3f} | {ttft:.3f} | {e2e:.2f} | {new:.0f} | "
              f"{new / e2e * 1e3:.0f} |")


if __name__ == "__main__":
    main()
