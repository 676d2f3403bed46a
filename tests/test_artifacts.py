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
    assert list(tmp_path.iterdir()) == []  # no temporary folder, nor the empty folders made for it


def test_failed_build_removes_only_the_empty_folders_it_made(tmp_path):
    """A build that fails under its build lock (a model that cannot be read) removes the folders it made, the
    working dir's included, when they are empty; a folder holding earlier artifacts stays."""
    work = tmp_path / "work"
    store = ArtifactStore(work, "GPT2", "local:model-1234")
    with pytest.raises(RuntimeError):
        with store.must_build("decoder", {"a": 1}) as needed, store.build("decoder", {"a": 1}):
            assert needed
            raise RuntimeError("the weights cannot be read")
    assert not work.exists()
    earlier = ArtifactStore(work, "GPT2", "gpt2-offline")
    with earlier.build("decoder", {"a": 1}) as tmp:
        (tmp / "model.onnx").write_text("v1")
    with pytest.raises(RuntimeError):
        with store.build_lock("decoder"):
            raise RuntimeError("the weights cannot be read")
    assert sorted(p.name for p in (work / "GPT2").iterdir()) == ["gpt2-offline"]
    assert earlier.is_current("decoder", {"a": 1})
    with pytest.raises(RuntimeError):
        with earlier.build_lock("encoder"):
            raise RuntimeError("the weights cannot be read")
    assert sorted(p.name for p in earlier.root.iterdir()) == ["decoder"]  # not made by that build: kept


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


def test_digests_are_recorded_and_checked(tmp_path, caplog):
    import json
    import logging

    from NNDF.artifacts import DIGESTS, damage

    store = ArtifactStore(tmp_path, "GPT2", "v")
    with store.build("decoder", {"a": 1}) as tmp:
        (tmp / "model.onnx").write_bytes(b"graph v1")
        (tmp / "sub").mkdir()
        (tmp / "sub" / "model.onnx.data").write_bytes(b"weights")
    folder = store.path("decoder")
    record = json.loads((folder / DIGESTS).read_text())
    assert record["algorithm"] == "sha256"
    assert sorted(record["files"]) == ["fingerprint.json", "model.onnx", "sub/model.onnx.data"]
    with caplog.at_level(logging.WARNING):
        assert store.is_current("decoder", {"a": 1})
        assert not store.is_current("decoder", {"a": 2})  # another fingerprint: an ordinary rebuild, silent
        assert not store.is_current("other", {"a": 1})  # never built: silent
    assert not caplog.records
    (folder / "sub" / "model.onnx.data").write_bytes(b"WEIGHTS")  # same size, other bytes
    with caplog.at_level(logging.WARNING):
        assert not store.is_current("decoder", {"a": 1}, rebuild="re-exporting")
    assert caplog.messages == [f"cached artifact {folder} is damaged (sub/model.onnx.data does not match the sha256 "
                               "digest recorded when it was built); re-exporting"]
    (folder / "model.onnx").unlink()
    assert damage(folder) == "model.onnx is missing"
    (folder / DIGESTS).write_text("{")
    assert damage(folder) == "digests.json is unreadable (JSONDecodeError); its content cannot be checked"


def test_digest_of_a_rewritten_file_is_recomputed(tmp_path):
    """The per-process memo keys on inode, size, mtime and ctime: restoring the mtime does not hide a rewrite."""
    import os

    from NNDF.artifacts import file_digest

    path = tmp_path / "f"
    path.write_bytes(b"aaaa")
    first, stat = file_digest(path), path.stat()
    path.write_bytes(b"bbbb")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert file_digest(path) != first


def test_large_files_are_digested_block_by_block(tmp_path):
    """Up to a block: the plain digest (sha256sum's); beyond: the digest of the blocks' digests, in order."""
    import hashlib

    from NNDF.artifacts import file_digest

    path = tmp_path / "f"
    path.write_bytes(b"0123456789")
    assert file_digest(path, block=10) == hashlib.sha256(b"0123456789").hexdigest()
    blocks = b"".join(hashlib.sha256(part).digest() for part in (b"0123", b"4567", b"89"))
    assert file_digest(path, block=4) == hashlib.sha256(blocks).hexdigest()
    path.write_bytes(b"012345678")  # truncated by one byte: another digest
    assert file_digest(path, block=4) != hashlib.sha256(blocks).hexdigest()


MATERIALIZE = """
import sys
from pathlib import Path
from NNDF import registry
from NNDF.offline import materialize
family = registry.family("GPT2")
variant = next(v for v in family.variants if v.name == "gpt-neo-offline")
print("started", flush=True)
print((materialize(family, variant, Path(sys.argv[1])) / "model.safetensors").stat().st_ino, flush=True)
"""


def test_a_process_that_waited_for_a_build_uses_it(tmp_path):
    """Two processes on one working dir (two runs, two test workers): one finds the offline model missing while the
    other builds it, waits on its build lock, and then uses that build instead of building and replacing it."""
    import subprocess
    import sys
    import time

    from conftest import ROOT
    from NNDF import offline, registry

    family = registry.family("GPT2")
    variant = next(v for v in family.variants if v.name == "gpt-neo-offline")
    store = ArtifactStore(tmp_path, family.name, variant.name)
    fingerprint = {"offline_recipe": offline.digest(offline._recipe(variant))}
    with store.build_lock("hf-model"):
        proc = subprocess.Popen([sys.executable, "-c", MATERIALIZE, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                                text=True)
        assert proc.stdout.readline() == "started\n"
        time.sleep(1)  # the other process finds the model missing and waits for this lock
        with store.build("hf-model", fingerprint) as tmp:
            offline._build_random(family, variant.random, tmp)
        built = (store.path("hf-model") / "model.safetensors").stat().st_ino
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0 and int(out) == built  # the model built here, not a second build
    assert sorted(p.name for p in store.root.iterdir()) == ["hf-model"]  # no lock file or staging folder left
