"""`generate` over the `triton` client backend (the session's one server, tests/triton_fixtures.py): a batch's
prompts go as one request each, and the served outputs equal the in-process onnxrt outputs of the same padded
batches, for decoders (GPT2; LLAMA, whose prompts go in its chat template), an encoder-decoder (T5) and an
image-to-text model (BLIP)."""
from __future__ import annotations

import pytest

from tests.test_generate import CASES, by_backend, generate

pytest.importorskip("tritonclient")


@pytest.mark.parametrize("family", ["GPT2", "LLAMA", "T5", "BLIP"])
def test_served_outputs_equal_in_process_batches(family, triton_server, workdir, tmp_path):
    flags, rows = CASES[family]
    results = generate(tmp_path, family, *flags, "--batch-size", "3", "--use-mask",
                       "--triton-url", triton_server.urls["http"], backends=("onnxrt", "triton"), workdir=workdir)
    table = by_backend(results)
    assert [r["batch_rows"] for r in table["onnxrt"]] == rows
    assert [r["batch_rows"] for r in table["triton"]] == [1] * len(rows)  # one request per prompt
    assert [r["prompt"] for r in table["triton"]] == [r["prompt"] for r in table["onnxrt"]]
    assert [r["output_ids"] for r in table["triton"]] == [r["output_ids"] for r in table["onnxrt"]]
    assert [r["text"] for r in table["triton"]] == [r["text"] for r in table["onnxrt"]]
