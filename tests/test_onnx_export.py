"""The exported graph itself: named dimensions, tied weights stored once, external data, --decoder-onnx."""
import json

import onnx
import pytest
import torch

from NNDF.backends.onnxrt import export as onnx_export
from CausalLM.export import export_decoder, validate
from NNDF.backends.onnxrt.export import ExportSpec
from CausalLM.ort_steps import OrtSteps
from NNDF.offline import redraw_weights

from conftest import cli_in_process, run_cli


@pytest.fixture(scope="module")
def tiny():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=97, n_positions=64,
                                       bos_token_id=0, eos_token_id=0, pad_token_id=0)).eval()
    redraw_weights(model, 0, 0.2)
    return model


def test_names_and_tied_weights(tiny, tmp_path):
    path = export_decoder(tiny, tmp_path, use_cache=True, spec=ExportSpec())
    model = onnx.load(str(path))
    dims = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in list(model.graph.input) + list(model.graph.output)}
    assert dims["input_ids"] == ["batch", "seq"] and dims["attention_mask"] == ["batch", "total"]
    assert dims["past.1.value"] == ["batch", 2, "past", 16] and dims["present.1.value"] == ["batch", 2, "total", 16]
    assert dims["logits"] == ["batch", "seq", 97]
    embeddings = [i for i in model.graph.initializer if sorted(i.dims) == [32, 97]]
    assert len(embeddings) == 1, "tied input/output embeddings must be stored once"
    diff = validate(tiny, lambda: OrtSteps(path, torch.device("cpu"), True), True, ExportSpec(), False)
    assert diff < 1e-4


def test_external_data_for_large_models(tiny, tmp_path, monkeypatch):
    monkeypatch.setattr(onnx_export, "EXTERNAL_DATA_BYTES", 0)  # treat the tiny model as "over 2 GB"
    path = export_decoder(tiny, tmp_path, use_cache=True, spec=ExportSpec())
    data = tmp_path / "model.onnx.data"
    graph = onnx.load(str(path), load_external_data=False)
    weights = [i for i in graph.graph.initializer if i.data_location == onnx.TensorProto.EXTERNAL]
    assert weights and data.stat().st_size >= sum(p.numel() * 4 for p in tiny.parameters()) * 0.9
    diff = validate(tiny, lambda: OrtSteps(path, torch.device("cpu"), True), True, ExportSpec(), False)
    assert diff < 1e-4


def test_validation_reports_mismatch(tiny, tmp_path):
    path = export_decoder(tiny, tmp_path, use_cache=False, spec=ExportSpec())
    other = type(tiny)(tiny.config).eval()
    redraw_weights(other, 1, 0.2)  # a different model: the graph must be rejected
    from NNDF.errors import ArtifactError

    with pytest.raises(ArtifactError, match="prompt pass: logits differ by"):
        validate(other, lambda: OrtSteps(path, torch.device("cpu"), False), False, ExportSpec(), False)


def test_decoder_onnx_flag_uses_the_given_file(tmp_path, workdir, capsys):
    from CausalLM.onnxrt import DecoderOnnx
    from NNDF import registry
    from NNDF.context import make_context
    from NNDF.options import ModelOptions

    args = ("run", "BLOOM", "onnxrt", "--use-cache", "--iterations", "1", "--warmup", "0")
    run = make_context(registry.family("BLOOM"), ModelOptions(working_dir=str(workdir), device="cpu", use_cache=True))
    exported = DecoderOnnx(registry.backend(run.family, "onnxrt").onnx.spec, run.family.task).path(run)[0]  # the
    # session's export, made once for the suite
    given = tmp_path / "mine.onnx"
    given.write_bytes(exported.read_bytes())
    out = tmp_path / "r.json"
    proc = run_cli("compare", "BLOOM", "--compare", "onnxrt", "--use-cache", "--decoder-onnx", str(given),
                   "--iterations", "1", "--warmup", "0", "-wd", str(tmp_path / "w2"), "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["results"][0]["accuracy"] == 1.0
    assert not (tmp_path / "w2" / "BLOOM" / "bloom-offline" / "decoder-fp32-kv").exists()  # nothing exported
    # a kv graph, refused in process: --decoder-onnx refusals through run.py are test_artifact_integrity.py's
    wrong = cli_in_process(capsys, *args[:3], "--no-use-cache", "--decoder-onnx", str(given), "-wd",
                           str(tmp_path / "w3"))
    assert wrong.returncode == 2 and "not a decoder graph without KV cache" in wrong.stderr
    assert "drop --no-use-cache" in wrong.stderr


def test_fp32_islands_in_fp16_export(tiny, tmp_path):
    """A declared island (here GPT-2's final layer norm) is fp32 in the fp16 graph; the rest stays fp16, and
    the PyTorch model is unchanged afterwards."""
    import copy

    half = copy.deepcopy(tiny).half()
    path = export_decoder(half, tmp_path, use_cache=True, spec=ExportSpec(fp32_modules=("ln_f",)))
    graph = onnx.load(str(path))
    types = {i.name: i.data_type for i in graph.graph.initializer}
    assert {t for n, t in types.items() if "ln_f" in n} == {onnx.TensorProto.FLOAT}
    assert onnx.TensorProto.FLOAT16 in {t for n, t in types.items() if "ln_f" not in n}
    assert {p.dtype for p in half.parameters()} == {torch.float16}
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in half.modules())
