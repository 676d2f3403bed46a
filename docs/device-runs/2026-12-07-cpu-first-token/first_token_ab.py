"""The generation loop before and after a change to the first token's host work, alternated generation by generation
in one process on the same sessions (0.2 s idle before each, EOS suppressed as in `benchmark`): median time to the
first token and end to end per row and way, and the paired ratio of tokens/s. BEFORE names a copy of the modules as
they were (`git show <commit>:<path> > <file>`), each as module=file.
first_token_ab.py --before CausalLM.ort_fused=/tmp/ort_fused_before.py [...] --family LLAMA --variant llama-offline
--static-cache --rounds 20"""
import importlib.util
import os
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from NNDF.actions.common import generate_prompt  # noqa: E402
from NNDF.timing import GenerationClock  # noqa: E402
from tools.bench.quant_speed import open_rows, open_steps, paired_ratio, row_arguments  # noqa: E402

parser = row_arguments(__doc__.splitlines()[0])
parser.add_argument("--before", nargs="+", required=True, help="module=file of the code before")
args = parser.parse_args()
run, config = open_rows(args)


MISSING = object()


def before_state(pairs):
    """{(owner, name): value} of the code before: each module's functions and its classes' members as the files
    `pairs` (module -> file) define them."""
    state = {}
    for name, file in pairs.items():
        module = importlib.import_module(name)
        spec = importlib.util.spec_from_file_location(name + "_before", file)
        old = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(old)
        for attr, value in vars(old).items():
            current = getattr(module, attr, None)
            if isinstance(value, type) and isinstance(current, type) and value.__module__ == old.__name__:
                for key, member in vars(value).items():
                    if not key.startswith("__"):
                        state[current, key] = member
            elif callable(value) and getattr(value, "__module__", None) == old.__name__ and current is not None:
                state[module, attr] = value
    return state


def apply(state):
    for (owner, key), value in state.items():
        if value is MISSING:
            if key in vars(owner):
                delattr(owner, key)
        else:
            setattr(owner, key, value)


before = before_state(dict(pair.split("=", 1) for pair in args.before))
after = {key: vars(key[0]).get(key[1], MISSING) for key in before}
for owner in {owner for owner, _ in before if isinstance(owner, type)}:  # members only the code after has
    for key, member in vars(owner).items():
        if not key.startswith("__") and (owner, key) not in before:
            before[owner, key], after[owner, key] = MISSING, member
ttft, e2e = {}, {}
with ExitStack() as stack:
    opened = open_steps(run, stack)
    generator = torch.Generator().manual_seed(0)
    state, kept = "after", {}
    for round_ in range(args.rounds + 1):
        for name, steps in opened:
            for way in (("before", "after") if round_ % 2 else ("after", "before")):
                if way != state:
                    apply(before if way == "before" else after)
                    state = way
                time.sleep(args.gap)
                for slot in steps._slots._slots.values():  # each way keeps its own prompt bindings on the slots
                    slot.prompt_binding = kept.get((id(slot), way))
                prompt = run.family.task.random_prompt(run, 1, args.prompt, generator)
                clock = GenerationClock(run.device)
                generate_prompt(steps, prompt, config, clock)
                for slot in steps._slots._slots.values():
                    kept[id(slot), way] = slot.prompt_binding
                if round_:
                    seconds = clock.seconds()
                    ttft.setdefault((name, way), []).append(seconds["prefill"])
                    e2e.setdefault((name, way), []).append(seconds["e2e"])
print(f"{args.rounds} rounds, prompt {args.prompt}, {args.new} new, {args.gap} s idle before each, "
      f"load average {os.getloadavg()[0]:.1f}")
for name, _ in opened:
    low, mid, high = paired_ratio(e2e[name, "before"], e2e[name, "after"])
    print(f"{name}: time to the first token before {statistics.median(ttft[name, 'before']) * 1e3:.3f} ms, after "
          f"{statistics.median(ttft[name, 'after']) * 1e3:.3f}; tokens/s before "
          f"{args.new / statistics.median(e2e[name, 'before']):.0f}, after "
          f"{args.new / statistics.median(e2e[name, 'after']):.0f}; after over before, paired: {mid:.3f}x "
          f"[{low:.3f}-{high:.3f}]")
