"""Every damaged artifact detected: cached artifacts carry content digests (damage -> a warning and a
rebuild), damaged model folders are one-line errors naming the file, the user's graphs and engines are checked
against the model before use, and artifacts and outputs get the modes the umask gives."""
import dataclasses
import json
import logging
import os
import shutil
import stat
from pathlib import Path
from types import SimpleNamespace

import onnx
import pytest

from NNDF import registry
from NNDF.artifacts import DIGESTS, FINGERPRINT, ArtifactStore, damage, file_digest, write_json_atomic
from NNDF.errors import ArtifactError, ModelLoadError
from NNDF.options import ModelOptions

from conftest import ROOT, cli_in_process, run_cli

COMMITTED = ROOT / "GPT2" / "offline" / "gpt2-offline"
RUN = ("--iterations", "1", "--warmup", "0")


def _one_line_error(proc, start: str) -> str:
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: {start}"), proc.stderr[-3000:]
    return line


def _context(family: str, workdir, **options):
    from NNDF.context import make_context

    return make_context(registry.family(family), ModelOptions(working_dir=str(workdir), device="cpu", **options))


def _export(family: str, workdir, **options) -> Path:
    """The family's decoder export in the session working dir (made once, shared with other tests)."""
    from CausalLM.onnxrt import DecoderOnnx

    run = _context(family, workdir, **options)
    return DecoderOnnx(registry.backend(run.family, "onnxrt").onnx.spec, run.family.task).path(run)[0]


def _flip(path: Path, at: float = 0.5) -> None:
    """Invert 8 bytes in place: same size, other content."""
    data = bytearray(path.read_bytes())
    i = int(len(data) * at)
    data[i:i + 8] = bytes(b ^ 0xFF for b in data[i:i + 8])
    path.write_bytes(bytes(data))


# --- model folders: the user's --torch-dir and the committed offline model ---------------------------------

def test_truncated_torch_dir_weights_is_one_line(tmp_path, capsys):
    """In process: --torch-dir refusals of the whole program are test_errors.py's (through run.py)."""
    folder = tmp_path / "mine"
    shutil.copytree(COMMITTED, folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:4_000_000])
    proc = cli_in_process(capsys, "run", "GPT2", "frameworks", "--torch-dir", str(folder), "-wd", str(tmp_path / "w"),
                          *RUN)
    line = _one_line_error(proc, f"cannot read model weights: {weights} is damaged (truncated")
    assert "replace it with an intact copy" in line


def test_garbage_config_and_committed_folder_name_the_file(tmp_path):
    from NNDF.family import Variant
    from NNDF.models import load_torch_model, resolve_source

    family = registry.family("GPT2")
    folder = tmp_path / "mine"
    shutil.copytree(COMMITTED, folder)
    (folder / "config.json").write_text("}{ not json")
    with pytest.raises(ModelLoadError, match=r"cannot read the model config: .*config\.json is damaged \(not valid "
                                             r"JSON.*replace it with an intact copy") as err:
        resolve_source(family, "gpt2-offline", str(folder), tmp_path)
    assert err.value.__cause__ is not None and "\n" not in str(err.value)
    # the committed offline folder (here a copy declared as one): its own repair hint
    shutil.copy(COMMITTED / "config.json", folder / "config.json")
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    committed = dataclasses.replace(family, variants=(Variant("gpt2-offline", local_dir=folder),))
    source = resolve_source(committed, "gpt2-offline", None, tmp_path)
    import torch

    with pytest.raises(ModelLoadError, match=r"model\.safetensors is damaged \(truncated.*restore the committed "
                                             r"offline model \(git checkout -- "):
        load_torch_model(source, torch.float32, torch.device("cpu"))


# --- cached artifacts: digests checked at load, damage -> warning + rebuild -------------------------------

def _damage_offline(folder: Path, how: str) -> None:
    if how == "truncated weights":
        weights = folder / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    elif how == "garbage config":
        (folder / "config.json").write_text("garbage")
    elif how == "fingerprint deleted":
        (folder / FINGERPRINT).unlink()
    elif how == "fingerprint edited":
        record = json.loads((folder / FINGERPRINT).read_text())
        (folder / FINGERPRINT).write_text(json.dumps({**record, "offline_recipe": "edited"}))
    elif how == "digests deleted":
        (folder / DIGESTS).unlink()


@pytest.mark.parametrize("how,says", [
    ("truncated weights", "model.safetensors does not match the sha256 digest recorded when it was built"),
    ("garbage config", "config.json does not match"),
    ("fingerprint deleted", "fingerprint.json is missing"),
    ("fingerprint edited", "fingerprint.json was edited after the build"),
    ("digests deleted", "digests.json is missing"),
])
def test_damaged_offline_random_model_is_rebuilt(how, says, tmp_path, caplog):
    from NNDF.offline import materialize

    family = registry.family("GPT2")
    variant = family.variant("gpt-neo-offline")
    folder = materialize(family, variant, tmp_path)
    before = {p.name: file_digest(p) for p in folder.iterdir() if p.name != DIGESTS}
    _damage_offline(folder, how)
    with caplog.at_level(logging.WARNING):
        assert materialize(family, variant, tmp_path) == folder
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and f"cached artifact {folder} is damaged ({says}" in warnings[0], warnings
    assert warnings[0].endswith("; rebuilding it")
    assert damage(folder) is None and {p.name: file_digest(p) for p in folder.iterdir() if p.name != DIGESTS} == before
    caplog.clear()
    materialize(family, variant, tmp_path)  # intact now: reused, silently
    assert not caplog.records


def test_flipped_bytes_in_cached_onnx_are_reexported(workdir, tmp_path, capsys):
    """Same size, other bytes: the fingerprint cannot see it, the digest does (a warning, then a new export). In
    process: a re-export through run.py is test_cli.py's test_stale_and_corrupt_exports_are_rebuilt."""
    exported = _export("GPT2", workdir, use_cache=True)
    folder = tmp_path / "w" / "GPT2" / "gpt2-offline" / exported.parent.name
    shutil.copytree(exported.parent, folder)
    _flip(folder / "model.onnx")
    assert damage(folder) == "model.onnx does not match the sha256 digest recorded when it was built"
    proc = cli_in_process(capsys, "run", "GPT2", "onnxrt", "--use-cache", "-wd", str(tmp_path / "w"), *RUN)
    assert proc.returncode == 0, proc.stderr[-3000:]
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning: ")]
    assert warnings == [f"warning: cached artifact {folder} is damaged (model.onnx does not match the sha256 digest "
                        "recorded when it was built); re-exporting"], proc.stderr[-3000:]
    assert damage(folder) is None and "validated at export" in proc.stdout


# --- the user's graphs and engines, checked against the model ---------------------------------------------

def test_other_models_decoder_onnx_is_one_line(workdir, tmp_path):
    opt = _export("OPT", workdir, use_cache=True)
    proc = run_cli("run", "GPT2", "onnxrt", "--use-cache", "--decoder-onnx", str(opt), "-wd", str(tmp_path), *RUN)
    _one_line_error(proc, f"--decoder-onnx {opt} does not fit GPT2 gpt2-offline: it has 2 layers "
                          "(past.*.key/value inputs), GPT2 gpt2-offline has 4")


def _graph(path: Path, inputs, outputs, matrices=()) -> Path:
    """An ONNX file with this signature only (its one node is never run: the check reads the signature)."""
    from onnx import TensorProto, helper

    def value(name, elem, shape):
        return helper.make_tensor_value_info(name, elem, shape)

    inits = [helper.make_tensor(f"w{i}", TensorProto.FLOAT, list(m), [0.0] * (m[0] * m[1]))
             for i, m in enumerate(matrices)]
    node = helper.make_node("Identity", [inputs[0][0]], [outputs[0][0]])
    graph = helper.make_graph([node], "g", [value(*i) for i in inputs], [value(*o) for o in outputs], inits)
    onnx.save(helper.make_model(graph), str(path))
    return path


def test_other_models_graph_without_cache_is_caught_by_its_width(workdir, tmp_path):
    """Without a KV cache only the weights tell the models apart (both offline vocabularies are 4096)."""
    from NNDF.integrity import check_user_onnx
    from onnx import TensorProto

    run = _context("GPT2", workdir, use_cache=False)
    ids = [("input_ids", TensorProto.INT64, ["batch", "seq"]), ("attention_mask", TensorProto.INT64, ["batch", "t"])]
    logits = [("logits", TensorProto.FLOAT, ["batch", "seq", 4096])]
    narrow = _graph(tmp_path / "narrow.onnx", ids, logits, matrices=[(4096, 64), (64, 64)])
    with pytest.raises(ArtifactError, match=r"^--decoder-onnx .*narrow\.onnx does not fit GPT2 gpt2-offline: its "
                                            r"vocabulary-sized weight is 4096 x 64, GPT2 gpt2-offline's hidden size "
                                            r"is 192$"):
        check_user_onnx(run, "decoder", narrow)
    check_user_onnx(run, "decoder", _graph(tmp_path / "fits.onnx", ids, logits, matrices=[(4096, 192)]))
    wide = _graph(tmp_path / "vocab.onnx", ids, [("logits", TensorProto.FLOAT, ["batch", "seq", 50257])])
    with pytest.raises(ArtifactError, match="its logits have 50257 entries \\(vocabulary size\\), GPT2 gpt2-offline "
                                            "has 4096$"):
        check_user_onnx(run, "decoder", wide)


def test_fp16_graph_for_fp32_run_is_one_line(workdir, tmp_path, capsys):
    """In process: a --decoder-onnx refusal through run.py is test_other_models_decoder_onnx_is_one_line's."""
    from onnx import TensorProto

    model = onnx.load(str(_export("GPT2", workdir, use_cache=True)))
    for value in [*model.graph.input, *model.graph.output]:
        if value.type.tensor_type.elem_type == TensorProto.FLOAT:
            value.type.tensor_type.elem_type = TensorProto.FLOAT16
    half = tmp_path / "half.onnx"
    onnx.save(model, str(half))
    proc = cli_in_process(capsys, "run", "GPT2", "onnxrt", "--use-cache", "--decoder-onnx", str(half), "-wd",
                          str(tmp_path), *RUN)
    _one_line_error(proc, f"--decoder-onnx {half} does not fit GPT2 gpt2-offline: it is a float16 graph "
                          "(past.0.key is float16), this run is float32 (without --fp16): give a float32 graph, or "
                          "add --fp16")


class _Engine:
    """What `check_user_engine` reads of a deserialized TensorRT engine (TensorRT 10's names), built from an
    ONNX graph's signature: the mimic the engine check is tested on (TensorRT cannot be installed here)."""

    def __init__(self, trt, path: Path):
        from NNDF.integrity import onnx_signature

        sig = onnx_signature(path)
        self.trt, self.tensors = trt, {**{n: (t, True) for n, t in sig.inputs.items()},
                                       **{n: (t, False) for n, t in sig.outputs.items()}}
        self.num_io_tensors = len(self.tensors)

    def get_tensor_name(self, i):
        return list(self.tensors)[i]

    def get_tensor_mode(self, name):
        return self.trt.TensorIOMode.INPUT if self.tensors[name][1] else self.trt.TensorIOMode.OUTPUT

    def get_tensor_shape(self, name):
        return [-1 if d is None else d for d in self.tensors[name][0].shape]

    def get_tensor_dtype(self, name):
        return getattr(self.trt, self.tensors[name][0].dtype)


def test_user_engine_check_on_a_mimic(workdir):
    from NNDF.integrity import check_user_engine

    trt = SimpleNamespace(float32=object(), float16=object(), int64=object(),
                          TensorIOMode=SimpleNamespace(INPUT="in", OUTPUT="out"))
    run = _context("GPT2", workdir, use_cache=True)
    check_user_engine(trt, _Engine(trt, _export("GPT2", workdir, use_cache=True)), run, "decoder", Path("g.engine"))
    with pytest.raises(ArtifactError, match=r"^--decoder-engine o\.engine does not fit GPT2 gpt2-offline: it has 2 "
                                            r"layers \(past\.\*\.key/value inputs\), GPT2 gpt2-offline has 4$"):
        check_user_engine(trt, _Engine(trt, _export("OPT", workdir, use_cache=True)), run, "decoder", Path("o.engine"))
    nokv = _context("GPT2", workdir, use_cache=False)
    with pytest.raises(ArtifactError, match="is not a decoder engine without KV cache"):
        check_user_engine(trt, _Engine(trt, _export("GPT2", workdir, use_cache=True)), nokv, "decoder",
                          Path("g.engine"))


# --- modes: what the umask gives ordinary files and folders -----------------------------------------------

@pytest.mark.parametrize("umask,file_mode,dir_mode", [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700)])
def test_artifact_and_output_modes_follow_the_umask(umask, file_mode, dir_mode, tmp_path):
    from NNDF.offline import materialize
    from NNDF.results import Report

    old = os.umask(umask)
    try:
        store = ArtifactStore(tmp_path, "GPT2", "v")
        with store.build("decoder", {"a": 1}) as tmp:
            (tmp / "model.onnx").write_bytes(b"graph")
        write_json_atomic(tmp_path / "plain.json", {"a": 1})
        Report("run", "GPT2", "v", {}).write_json(str(tmp_path / "report.json"))
        family = registry.family("GPT2")
        model = materialize(family, family.variant("gpt-neo-offline"), tmp_path)
    finally:
        os.umask(old)
    mode = lambda p: stat.S_IMODE(p.stat().st_mode)  # noqa: E731
    folders = [store.path("decoder"), model, store.root]
    files = [*store.path("decoder").iterdir(), *model.iterdir(), tmp_path / "plain.json", tmp_path / "report.json"]
    assert {str(p): oct(mode(p)) for p in folders} == {str(p): oct(dir_mode) for p in folders}
    assert {str(p): oct(mode(p)) for p in files} == {str(p): oct(file_mode) for p in files}
