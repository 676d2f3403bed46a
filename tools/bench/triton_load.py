"""Load on the served GPT2 offline default: 16 concurrent clients x 8 requests (by default), every answer checked
against the in-process onnxrt answer, p50/p99 latency and requests/s, with dynamic batching on and with one
request at a time; the same requests one at a time in process for comparison (NNDF/triton/load.py).

    .venv/bin/python tools/bench/triton_load.py [--clients 16] [--requests 8] [--max-new-tokens 16] [--json PATH]

Deploys `gpt2-offline` twice into a temporary repository (`--max-batch-size 16` with dynamic batching, and
`--max-batch-size 1`), serves it on free loopback ports, and exits 1 if any request failed or differed.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from NNDF.options import ModelOptions  # noqa: E402
from NNDF import registry  # noqa: E402
from NNDF.actions.deploy import deploy as deploy_action  # noqa: E402
from NNDF.triton.load import load, prompts_from, reference  # noqa: E402
from NNDF.triton.options import DeployOptions  # noqa: E402
from NNDF.triton.server import Ports, TritonServer, free_ports  # noqa: E402

FAMILY = "GPT2"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=8, help="requests per client")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--working-dir", default=str(ROOT / "temp"))
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    options = ModelOptions(use_cache=True, working_dir=args.working_dir)
    prompts = prompts_from(ROOT / "data" / "lambada_offline.jsonl", args.clients * args.requests)
    family = registry.family(FAMILY)
    expected, in_process = reference(family, registry.backend(family, "onnxrt"), options, prompts, args.max_new_tokens)
    results = [in_process]
    with tempfile.TemporaryDirectory() as folder:
        repository = Path(folder) / "repository"
        runs = {"batched": DeployOptions(repository=str(repository), model_name="gpt2-batched", max_batch_size=16,
                                         batch_delay_us=5000),
                "single": DeployOptions(repository=str(repository), model_name="gpt2-single", max_batch_size=1)}
        for deploy in runs.values():
            deploy_action(FAMILY, ("onnxrt",), options, deploy)
        with TritonServer(repository, Ports(*free_ports(3))) as server:
            url = server.ports.urls()["http"]
            for deploy in runs.values():
                results.append(load(url, deploy.model_name, prompts, expected, args.clients, args.max_new_tokens))
    for r in results:
        print(json.dumps(r.row()))
    if args.json:
        Path(args.json).write_text(json.dumps([r.__dict__ for r in results], indent=2))
    return 1 if any(r.errors or r.mismatches for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
