"""`generate` over the `triton` client backend (the session's one server, tests/triton_fixtures.py): a batch's
prompts go as one request each, and the served outputs equal the in-process onnxrt outputs of the same padded
batches, for decoders (GPT2; LLAMA, whose prompts go in its chat template), an encoder-decoder (T5) and an
image-to-text model (BLIP); a quantized deployment's (LLAMA's int4 graphs) equal the onnxrt-int4 row's, and a
static-cache deployment's (the graphs built from the weights: LLAMA's fused graph, T5's encoder, cross and decoder
graphs) the onnxrt --static-cache row's."""
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


def test_served_int4_graphs_equal_the_in_process_int4_row(triton_server, workdir, tmp_path):
    """`deploy LLAMA onnxrt --quantize int4` serves the graphs the onnxrt-int4 row runs: the same tokens, and
    serving.json names the quantization."""
    import json

    flags, rows = CASES["LLAMA"]
    results = generate(tmp_path, "LLAMA", *flags, "--batch-size", "3", "--use-mask", "--quantize", "int4",
                       "--triton-url", triton_server.urls["http"], "--triton-model", triton_server.int4,
                       backends=("onnxrt", "triton"), workdir=workdir)
    table = by_backend(results)
    assert set(table) == {"onnxrt-int4", "triton"} and [r["batch_rows"] for r in table["onnxrt-int4"]] == rows
    assert [r["output_ids"] for r in table["triton"]] == [r["output_ids"] for r in table["onnxrt-int4"]]
    record = json.loads((triton_server.repository / triton_server.int4 / "1" / "serving.json").read_text())
    assert record["quantization"]["kind"] == "int4" and record["quantization"]["block_size"] == 128


@pytest.mark.parametrize("family", ["LLAMA", "T5"])
def test_served_built_graphs_equal_the_in_process_static_cache_row(family, triton_server, workdir, tmp_path):
    """`deploy ... onnxrt --static-cache` serves the graphs built from the weights that the in-process
    --static-cache row runs (serving.json says so), padded batches included."""
    import json

    from tests.triton_fixtures import STATIC

    flags, rows = CASES[family]
    results = generate(tmp_path, family, *flags, "--batch-size", "3", "--use-mask", "--static-cache",
                       "--triton-url", triton_server.urls["http"], "--triton-model", STATIC[family],
                       backends=("onnxrt", "triton"), workdir=workdir)
    table = by_backend(results)
    assert [r["batch_rows"] for r in table["onnxrt"]] == rows
    assert [r["output_ids"] for r in table["triton"]] == [r["output_ids"] for r in table["onnxrt"]]
    record = json.loads((triton_server.repository / STATIC[family] / "1" / "serving.json").read_text())
    assert record["graphs"] == "built" and record["options"]["static_cache"]
