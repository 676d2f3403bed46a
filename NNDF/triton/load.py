"""Load on a served generative model: concurrent clients, every answer checked against the in-process answer.

`reference` runs each prompt alone in process (the onnxrt backend, the same generation settings) and times it:
the in-process side of the comparison (one request at a time, as one process serves them). `load` runs
`clients` threads, each with its own connection sending `requests` text requests one after another, and
records each request's latency (send to answer) and the whole run's requests/s. tools/bench/triton_load.py runs both
against a model deployed with dynamic batching and one deployed one-request-at-a-time.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LoadResult:
    name: str  # what ran: "in-process", or the served model
    clients: int
    requests: int  # in all
    errors: int
    mismatches: int  # answers whose tokens differ from the in-process answer
    p50_ms: float
    p99_ms: float
    requests_per_s: float
    wall_s: float

    def row(self) -> dict:
        return {"run": self.name, "clients": self.clients, "requests": self.requests, "errors": self.errors,
                "mismatches": self.mismatches, "p50 ms": self.p50_ms, "p99 ms": self.p99_ms,
                "requests/s": self.requests_per_s}


def _summary(name: str, clients: int, latencies: list[float], wall: float, errors: int, mismatches: int):
    ms = np.array(latencies) * 1e3 if latencies else np.array([float("nan")])
    count = len(latencies) + errors
    return LoadResult(name, clients, count, errors, mismatches, float(np.percentile(ms, 50)),
                      float(np.percentile(ms, 99)), len(latencies) / wall, wall)


def reference(family, backend, options, prompts: list[str], max_new_tokens: int):
    """(tokens per prompt, in-process LoadResult): each prompt generated alone on `backend` (the family's bound
    onnxrt backend; `family`: an `NNDF.family.Family`)."""
    from NNDF.options import SamplingOptions
    from NNDF.session import backend_steps, encode, generate_prompt, generation_config, open_run

    run = open_run(family, options, (backend,))
    config = generation_config(run, SamplingOptions(), max_new_tokens)
    answers, latencies = [], []
    with backend_steps(run, backend) as (_, steps):
        generate_prompt(steps, encode(run, [prompts[0]]), config)  # warm-up
        start = time.perf_counter()
        for text in prompts:
            begin = time.perf_counter()
            out = generate_prompt(steps, encode(run, [text]), config)
            latencies.append(time.perf_counter() - begin)
            answers.append(out.new_tokens(0, config.eos_token_id))
        wall = time.perf_counter() - start
    return answers, _summary("in-process onnxrt (one at a time)", 1, latencies, wall, 0, 0)


def load(url: str, model: str, prompts: list[str], expected: list[list[int]], clients: int, max_new_tokens: int,
         timeout: float = 600.0) -> LoadResult:
    """`clients` threads share the prompts round-robin (client c sends prompts c, c + clients, ...), each
    request with max_new_tokens; every answer is compared with `expected`."""
    from NNDF.backends.triton.client import Client

    def client_run(c: int) -> tuple[list[float], int, int]:
        latencies, errors, mismatches = [], 0, 0
        with Client(url, timeout) as client:
            for i in range(c, len(prompts), clients):
                arrays = {"text": np.array([[prompts[i].encode()]], dtype=np.object_),
                          "max_new_tokens": np.array([[max_new_tokens]], dtype=np.int32)}
                begin = time.perf_counter()
                try:
                    out = client.infer(model, arrays, ("output_ids",))
                except Exception:  # noqa: BLE001 - counted, the load goes on
                    errors += 1
                    continue
                latencies.append(time.perf_counter() - begin)
                mismatches += out["output_ids"].reshape(-1).tolist() != expected[i]
        return latencies, errors, mismatches

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        results = list(pool.map(client_run, range(clients)))
    wall = time.perf_counter() - start
    latencies = [t for r in results for t in r[0]]
    return _summary(model, clients, latencies, wall, sum(r[1] for r in results), sum(r[2] for r in results))


def prompts_from(path, count: int, words: int = 12) -> list[str]:
    """`count` prompts: the first `words` words of the lines of a JSONL file's `text` fields, cycled."""
    from NNDF.jsonl import read_jsonl

    texts = [" ".join(str(row.get("text", "")).split()[:words]) for _, row in read_jsonl(str(path))]
    texts = [t for t in texts if t]
    return [texts[i % len(texts)] for i in range(count)]
