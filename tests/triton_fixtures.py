"""The test session's one Triton server (starting one is slow): a session fixture that deploys the offline
defaults the Triton tests need into ONE temporary repository and serves it on free loopback ports.

Generative (tests/test_triton.py): GPT2 (dynamic batching, a one-request-at-a-time copy with small request
limits for the load and limit tests, and a streaming one), T5 (encoder-decoder) and BLIP (image-to-text), all onnxrt with the KV cache;
LLAMA also quantized (`--quantize int4`); LLAMA and T5 also with `--static-cache` (the graphs built from the
weights). Encoder
(tests/test_triton_encoder.py): all-MiniLM-L6-v2 and a classifier, as Encoder/triton/deploy.py writes them.
The repository's path has a space and a non-ASCII letter (served through a plain symlink: NNDF/triton/server.py).
The server is the wheel's when tritonserver is not on PATH; the tests skip when neither is installed.
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest

GENERATIVE = {"GPT2": "gpt2-offline-onnxrt", "LLAMA": "llama-offline-onnxrt", "T5": "t5-offline-onnxrt",
              "BLIP": "blip-offline-onnxrt"}
SINGLE = "gpt2-offline-onnxrt-single"  # GPT2 with --max-batch-size 1 (no dynamic batching)
INT4 = "llama-offline-onnxrt-int4"  # LLAMA's int4 graphs (deploy's default name for --quantize int4)
STREAM = "gpt2-offline-onnxrt-stream"  # GPT2 with --streaming (decoupled)
STATIC = {"LLAMA": "llama-offline-onnxrt-static", "T5": "t5-offline-onnxrt-static"}  # --static-cache: built graphs
ENCODERS = ("all-MiniLM-L6-v2", "roberta-classifier-offline")


def _deploy_generative(repository, workdir) -> dict[str, str]:
    from dataclasses import replace

    from NNDF.actions.deploy import deploy
    from NNDF.backends.onnxrt.options import ORTOptions
    from NNDF.options import ModelOptions
    from NNDF.triton.options import DeployOptions

    options = ModelOptions(use_cache=True, working_dir=str(workdir), device="cpu")
    onnxrt = ("onnxrt",)
    for family in GENERATIVE:
        deploy(family, onnxrt, options, DeployOptions(repository=str(repository), max_batch_size=8))
    deploy("GPT2", onnxrt, options, DeployOptions(repository=str(repository), model_name=SINGLE, max_batch_size=1,
                                                  max_new_tokens_limit=64, num_beams_limit=4, cache_limit_mib=1))
    deploy("GPT2", onnxrt, options, DeployOptions(repository=str(repository), model_name=STREAM, streaming=True))
    report = deploy("LLAMA", onnxrt, options, DeployOptions(repository=str(repository), max_batch_size=8),
                    ORTOptions(quantize=("int4",)))
    assert (repository / INT4).is_dir()  # named after the row's label
    assert any(f"triton --quantize int4 --quant-block-size 128 --no-quant-symmetric --triton-model {INT4}" in note
               for note in report.notes), report.notes  # its query command runs the same graphs in process
    for family, name in STATIC.items():
        report = deploy(family, onnxrt, replace(options, static_cache=True),
                        DeployOptions(repository=str(repository), model_name=name, max_batch_size=8))
        assert any(f"triton --static-cache --triton-model {name}" in note for note in report.notes), report.notes
        assert "served graphs: the fused decode graph built from the weights (default" in " ".join(report.notes)
    return dict(GENERATIVE)


def _deploy_encoders(repository, workdir) -> dict[str, str]:
    from NNDF.actions.deploy import deploy
    from NNDF.options import ModelOptions
    from NNDF.triton.options import DeployOptions

    bases = {}
    for variant in ENCODERS:
        deploy("BERT", ("onnxrt",), ModelOptions(variant=variant, working_dir=str(workdir)),
               DeployOptions(repository=str(repository), preferred_batch_size=(4, 8)))
        bases[variant] = f"bert-{variant.lower()}-onnxrt"
    return bases


@pytest.fixture(scope="session")
def triton_server(workdir, tmp_path_factory):
    """SimpleNamespace(repository, urls {http, grpc, metrics}, ports, served, skipped, generative {family: model},
    single, stream, int4, encoders {variant: base name})."""
    pytest.importorskip("tritonclient")
    from NNDF.errors import BackendUnavailable
    from NNDF.triton.server import Ports, TritonServer, find_server, free_ports, stub_numpy_problem

    try:
        find_server()
    except BackendUnavailable as exc:
        pytest.skip(str(exc))
    if stub_numpy_problem():
        pytest.skip(stub_numpy_problem())
    repository = tmp_path_factory.mktemp("triton") / "model répo"  # a space and a non-ASCII letter serve too
    generative = _deploy_generative(repository, workdir)
    encoders = _deploy_encoders(repository, workdir)
    ports = Ports(*free_ports(3))
    with TritonServer(repository, ports) as server:
        yield SimpleNamespace(repository=repository, urls=ports.urls(), ports=ports, served=server.served,
                              skipped=server.skipped, generative=generative, single=SINGLE, stream=STREAM,
                              int4=INT4, encoders=encoders)
