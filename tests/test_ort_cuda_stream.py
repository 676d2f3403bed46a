"""ONNX Runtime on CUDA reads what torch wrote before it: `OrtGraph` runs every session on a stream of its own,
ordered after torch's current stream (NNDF/backends/onnxrt/steps.py). A session given torch's legacy default
stream (a null handle) would run on a non-blocking stream of ONNX Runtime's own, which nothing orders against
torch's queued work: on a busy GPU a step then reads inputs torch has not written yet.

Runs with HARNESS_TEST_DEVICE=cuda and onnxruntime-gpu: torch's stream is kept busy with products, then an input
is overwritten behind them, and the session must see the new values (uncaptured and CUDA-graph sessions); a CUDA
session is refused a null stream. Skipped on the CPU, where ONNX Runtime and torch share no stream."""
import os

import numpy as np
import pytest
import torch

from NNDF.backends.onnxrt.steps import OrtGraph, make_session

DEVICE = os.environ.get("HARNESS_TEST_DEVICE", "cpu")
N = 1 << 20


@pytest.fixture(scope="module")
def add_one(tmp_path_factory):
    """An ONNX graph y = x + 1 over N floats."""
    import onnx
    from onnx import TensorProto, helper

    one = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
    graph = helper.make_graph([helper.make_node("Add", ["x", "one"], ["y"])], "add_one",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [N])], [one])
    path = tmp_path_factory.mktemp("ort-stream") / "add_one.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    return path


def _cuda_onnxruntime():
    if DEVICE != "cuda":
        pytest.skip("runs with HARNESS_TEST_DEVICE=cuda")
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("needs onnxruntime-gpu")


def test_a_cuda_session_needs_a_stream_of_its_own(add_one):
    _cuda_onnxruntime()
    with pytest.raises(ValueError, match="needs a torch.cuda.Stream of its own"):
        make_session(add_one, torch.device("cuda", 0))
    with pytest.raises(ValueError, match="needs a torch.cuda.Stream of its own"):
        make_session(add_one, torch.device("cuda", 0), stream=torch.cuda.default_stream())


@pytest.mark.parametrize("cuda_graph", [False, True], ids=["uncaptured", "cuda-graph"])
def test_session_reads_what_torch_wrote_behind_busy_work(add_one, cuda_graph):
    _cuda_onnxruntime()
    device = torch.device("cuda", 0)
    graph = OrtGraph(add_one, device, cuda_graph=cuda_graph)
    x, y = torch.zeros(N, device=device), torch.zeros(N, device=device)
    busy = torch.randn(4096, 4096, device=device)
    graph_id = 0 if cuda_graph else -1
    graph.run({"x": x}, outputs={"y": y}, graph_id=graph_id)  # a CUDA-graph session captures here
    torch.cuda.synchronize()
    for value in range(1, 6):
        for _ in range(20):  # some milliseconds of queued work on torch's stream
            busy = busy @ busy / 64
        x.fill_(value)  # queued behind it
        graph.run({"x": x}, outputs={"y": y}, graph_id=graph_id)
        got = y.cpu().numpy()
        assert np.all(got == value + 1), f"the session read x before torch wrote {value}: {np.unique(got)[:4]}"
