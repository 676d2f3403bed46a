"""Artifact store: sanitised names, fingerprint-gated reuse, atomic builds, cleanup."""
import pytest

from NNDF.artifacts import ArtifactStore, safe_name


@pytest.mark.parametrize("raw,expected", [("EleutherAI/gpt-neo-125m", "EleutherAI--gpt-neo-125m"),
                                          ("../../etc/passwd", "--..--etc--passwd"), ("a b;c", "a-b-c")])
def test_safe_name(raw, expected):
    name = safe_name(raw)
    assert name == expected.strip(".-") and "/" not in name and not name.startswith(".")


def test_reuse_only_with_same_fingerprint(tmp_path):
    store = ArtifactStore(tmp_path, "GPT2", "../x")
    assert store.root.parent.parent == tmp_path  # no escape from the working dir
    with store.build("decoder", {"a": 1}) as tmp:
        (tmp / "model.onnx").write_text("v1")
    assert store.is_current("decoder", {"a": 1})
    assert not store.is_current("decoder", {"a": 2})
    with store.build("decoder", {"a": 2}) as tmp:
        (tmp / "model.onnx").write_text("v2")
    assert (store.path("decoder") / "model.onnx").read_text() == "v2"


def test_failed_build_leaves_nothing(tmp_path):
    store = ArtifactStore(tmp_path, "GPT2", "v")
    with pytest.raises(RuntimeError):
        with store.build("decoder", {"a": 1}) as tmp:
            (tmp / "model.onnx").write_text("partial")
            raise RuntimeError("export crashed")
    assert not store.path("decoder").exists()
    assert list(store.root.iterdir()) == []  # no temporary folder left behind either


def test_failed_rebuild_keeps_nothing_stale_current(tmp_path):
    store = ArtifactStore(tmp_path, "GPT2", "v")
    with store.build("decoder", {"a": 1}) as tmp:
        (tmp / "model.onnx").write_text("v1")
    with pytest.raises(RuntimeError):
        with store.build("decoder", {"a": 2}):
            raise RuntimeError("crash")
    assert not store.is_current("decoder", {"a": 2})  # never mistaken for the new build


def test_cleanup(tmp_path):
    store = ArtifactStore(tmp_path, "GPT2", "v")
    with store.build("decoder", {}) as tmp:
        (tmp / "f").write_text("x")
    assert store.cleanup() and not store.root.exists()
