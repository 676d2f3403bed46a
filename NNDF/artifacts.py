"""Artifacts under the working directory: names, fingerprints, content digests, atomic writes, cleanup.

Layout: `<working-dir>/<FAMILY>/<variant>/<part>-<options>/` holds one artifact (e.g. `model.onnx` plus
external data), `fingerprint.json` and `digests.json`. An artifact is reused only if its recorded fingerprint
equals the one computed now (model config, weights identity, export options, library versions) and every file
still has the content digest recorded when it was built; otherwise it is rebuilt. A fingerprint that differs
is an ordinary rebuild (new options, new library versions); damage is a warning and a rebuild: a file whose
content no longer matches its digest (flipped bytes, truncation), a missing file, an edited, deleted or
unreadable `fingerprint.json` (its own digest is recorded too), or a missing or unreadable `digests.json` (an
artifact built before digests were recorded is rebuilt once). Digests are checked when an artifact is about to
be used, once per process per file (a file whose inode, size, modification and change times are those it had
when hashed is not hashed again). Cost: docs/PERFORMANCE.md ("Artifact digests").

Artifacts are built in a temporary sibling folder (a staging folder) and renamed into place, so an interrupted
build never leaves a partial artifact where a later run would find it. The building process holds a lock on its
staging folder; a staging folder whose lock is free (its process was killed, even by SIGKILL) is stale, and the
next build in the same folder removes it. Processes that share a working dir (two runs, parallel test workers)
build an artifact once: a builder holds the artifact's build lock and checks the artifact again under it
(`ArtifactStore.must_build`), so a process that waited there finds the artifact current and uses it, and no
artifact is replaced while another process that found it current reads it. Folders and files get the modes the
umask gives ordinary folders and files (`tempfile` would leave 0700 / 0600).

The working dir is written only when something must be built: a run whose artifacts are all current works in a
read-only working dir (a shared cache); a build there is refused in one line. A full disk during a build is one
line ("no space left in DIR, about N GB needed"), and the staging folder is removed. The folders a build made
(the working dir's included) are removed again when it fails and leaves them empty: a failed run leaves nothing.
"""
from __future__ import annotations

import errno
import fcntl
import glob
import hashlib
import itertools
import json
import logging
import os
import re
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from NNDF.errors import DiskFull, UsageError

log = logging.getLogger(__name__)

FINGERPRINT = "fingerprint.json"
DIGESTS = "digests.json"
DIGEST_ALGORITHM = "sha256"  # hashlib name; recorded in digests.json (measured choice: docs/PERFORMANCE.md)
DIGEST_BLOCK = 64 << 20  # files larger than this are hashed block by block, in parallel (recorded too)
_CHUNK = 1 << 22
_HASHED: dict[tuple, str] = {}  # (algorithm, device, inode, size, mtime_ns, ctime_ns) -> hex digest, this process
_SETTLE_NS = 2_000_000_000  # files changed more recently than this when hashed are hashed again next time
_STAGING_GRACE_S = 10  # a staging folder this young is never stale: its process may not have locked it yet


def safe_name(text: str) -> str:
    """A path component from a user string: HF ids like 'EleutherAI/gpt-neo-125m' -> 'EleutherAI--gpt-neo-125m'."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", text.replace("/", "--")).strip(".-")
    return name or "unnamed"


def digest(obj) -> str:
    """Stable short hash of a JSON-serialisable object."""
    blob = json.dumps(obj, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _hash_range(path: Path, algorithm: str, offset: int, length: int):
    """The hash object of `length` bytes of the file from `offset` (its own file handle: threads share none)."""
    h = hashlib.new(algorithm)
    buffer = bytearray(min(_CHUNK, max(length, 1)))
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as f:
        f.seek(offset)
        while length > 0 and (n := f.readinto(view[:min(length, len(buffer))])):
            h.update(view[:n])
            length -= n
    return h


def file_digest(path: Path, algorithm: str = DIGEST_ALGORITHM, block: int = DIGEST_BLOCK) -> str:
    """Hex digest of a file's content: for a file of at most `block` bytes, the plain digest (what `sha256sum`
    prints); for a larger one, the digest of its blocks' digests (blocks of `block` bytes, the last shorter),
    hashed on up to 16 threads (hashlib releases the GIL: ~linear in cores, docs/PERFORMANCE.md).

    Remembered for this process while the file's inode, size, modification and change times stay the same (any
    write, chmod or `touch` sets the change time, which cannot be set back), so a file checked once is not
    hashed again by the same run. As in git's "racy clean" rule, a file changed within `_SETTLE_NS` of being
    hashed is not remembered: file times are coarse (a clock tick), so a second write in that tick would not
    show."""
    stat = os.stat(path)
    key = (algorithm, block, stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    if key in _HASHED:
        return _HASHED[key]
    if stat.st_size <= block:
        value = _hash_range(path, algorithm, 0, stat.st_size).hexdigest()
    else:
        offsets = range(0, stat.st_size, block)
        with ThreadPoolExecutor(min(len(offsets), os.cpu_count() or 1, 16)) as pool:
            blocks = pool.map(lambda offset: _hash_range(path, algorithm, offset, block).digest(), offsets)
            value = hashlib.new(algorithm, b"".join(blocks)).hexdigest()
    if time.time_ns() - max(stat.st_mtime_ns, stat.st_ctime_ns) > _SETTLE_NS:
        _HASHED[key] = value
    return value


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode the umask gives an ordinary new file (0644 under umask 022)."""
    return 0o666 & ~_umask()


def dir_mode() -> int:
    """The mode the umask gives an ordinary new folder (0755 under umask 022)."""
    return 0o777 & ~_umask()


def write_json_atomic(path: Path, data) -> None:
    """Write JSON through a temporary file renamed into place, with an ordinary file's mode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2, sort_keys=True, default=str)
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != DIGESTS)


def record_digests(folder: Path) -> None:
    """Write `digests.json`: the digest of every file in the folder (`fingerprint.json` included)."""
    files = {p.relative_to(folder).as_posix(): file_digest(p) for p in _files(folder)}
    write_json_atomic(folder / DIGESTS, {"algorithm": DIGEST_ALGORITHM, "block_bytes": DIGEST_BLOCK, "files": files})


def _read_json(path: Path):
    """The JSON in `path`; ValueError naming the file and what is wrong with it."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path.name} is missing") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path.name} is unreadable ({type(exc).__name__})") from None


def damage(folder: Path, expected_fingerprint: dict | None = None) -> str | None:
    """What is wrong with an artifact folder's content, or None if every file matches its recorded digest.
    With `expected_fingerprint`, a folder whose intact fingerprint differs returns "stale" before any file is
    hashed (an ordinary rebuild, not damage)."""
    try:
        record = _read_json(folder / DIGESTS)
        algorithm, block, files = record["algorithm"], int(record["block_bytes"]), dict(record["files"])
        hashlib.new(algorithm)
        if block <= 0:
            raise TypeError
    except ValueError as exc:  # missing, not JSON, or an algorithm this Python lacks
        return f"{exc}; its content cannot be checked" if DIGESTS in str(exc) else f"{DIGESTS}: {exc}"
    except (KeyError, TypeError):
        return f"{DIGESTS} is unreadable (not a digest record)"
    try:
        recorded = _read_json(folder / FINGERPRINT)
    except ValueError as exc:
        return str(exc)
    if files.get(FINGERPRINT) != file_digest(folder / FINGERPRINT, algorithm, block):
        return f"{FINGERPRINT} was edited after the build"
    if expected_fingerprint is not None and recorded != json.loads(json.dumps(expected_fingerprint, default=str)):
        return "stale"
    for name, expected in files.items():
        try:
            if file_digest(folder / name, algorithm, block) != expected:
                return f"{name} does not match the {algorithm} digest recorded when it was built"
        except FileNotFoundError:
            return f"{name} is missing"
        except OSError as exc:
            return f"{name} is unreadable ({exc.strerror or type(exc).__name__})"
    return None


def folder_bytes(folder: Path | None) -> int:
    """Bytes of the files under `folder` (0 for None or a folder that is gone)."""
    if folder is None or not Path(folder).is_dir():
        return 0
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file() and not p.is_symlink())


def _disk_full(exc: BaseException | None) -> bool:
    """`exc`, or an error it was raised from (an exporter wraps the OS's), is a full disk or an exhausted quota."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def no_space(folder: Path, needed: int) -> DiskFull:
    """The one line for a full disk (or exhausted quota) while writing under `folder` (`needed`: bytes, 0 when
    not known)."""
    gb = needed / 1e9
    amount = f", about {gb:.0f} GB needed" if gb >= 10 else f", about {gb:.2g} GB needed" if needed > 0 else ""
    return DiskFull(f"no space left in {folder}{amount}; free some space or give another folder")


@contextmanager
def space_needed(folder: Path, needed: Callable[[], int]) -> Iterator[None]:
    """A full disk while writing under `folder` becomes `no_space` (`needed()`: bytes, asked only then)."""
    try:
        yield
    except Exception as exc:
        if isinstance(exc, DiskFull) or not _disk_full(exc):  # DiskFull: a build inside already said it
            raise
        raise no_space(folder, needed()) from exc


@contextmanager
def staging_folder(parent: Path, prefix: str, suffix: str = "") -> Iterator[Path]:
    """A new folder `<parent>/<prefix>XXXX<suffix>` with the umask's mode, locked while in use and removed after.
    First, earlier folders of the same pattern whose lock is free (their process died) are removed."""
    for stale in parent.glob(f"{glob.escape(prefix)}*{glob.escape(suffix)}"):
        if stale.is_dir() and not stale.is_symlink() and _unlocked(stale):
            log.info("removing %s, left by an interrupted build", stale)
            shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(dir=parent, prefix=prefix, suffix=suffix))
    lock = os.open(tmp, os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released by the kernel however this process ends
        os.chmod(tmp, dir_mode())
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        os.close(lock)


def _unlocked(folder: Path) -> bool:
    """No live process holds `folder`'s lock, and it is older than the grace period."""
    try:
        if time.time() - folder.stat().st_mtime < _STAGING_GRACE_S:
            return False
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing releases the lock we may have taken


def _lock_file(path: Path) -> int:
    """An open descriptor of `path` (created if missing) holding its exclusive `flock`: retried when the file
    was removed (released by its last holder) while this process waited for it."""
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, file_mode())
        except FileNotFoundError:  # its last holder's build failed and removed the folder it had made: make it again
            path.parent.mkdir(parents=True, exist_ok=True)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.path.samestat(os.fstat(fd), os.stat(path)):
                return fd
        except FileNotFoundError:
            pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


class ArtifactStore:
    """Artifacts of one model variant: `root = <working-dir>/<FAMILY>/<variant>`."""

    def __init__(self, working_dir: Path, family: str, variant: str):
        self.working_dir = Path(working_dir)
        self.root = self.working_dir / safe_name(family) / safe_name(variant)

    def path(self, name: str) -> Path:
        return self.root / safe_name(name)

    def problem(self, name: str, fingerprint: dict) -> str | None:
        """Why artifact `name` cannot be reused, or None when it can: "missing", "stale" (built with another
        fingerprint), or what is damaged (a file's content, the fingerprint or the digest record)."""
        folder = self.path(name)
        if not folder.is_dir():
            return "missing"
        return damage(folder, fingerprint)

    def is_current(self, name: str, fingerprint: dict, rebuild: str = "rebuilding it") -> bool:
        """True if artifact `name` exists, was built with exactly this fingerprint and is undamaged. Damage is
        logged as a warning (`rebuild` says what happens next); "missing" and "stale" are silent."""
        why = self.problem(name, fingerprint)
        if why not in (None, "missing", "stale"):
            log.warning("cached artifact %s is damaged (%s); %s", self.path(name), why, rebuild)
        return why is None

    @contextmanager
    def build_lock(self, name: str) -> Iterator[None]:
        """Hold artifact `name`'s build lock: `flock` on `.<name>.lock` beside it, removed on release (a killed
        holder's lock is free at once; its file is taken over). Taken only to build, with the artifact checked
        again under it (another process may have built it while this one waited): a current artifact in a
        read-only working dir takes no lock. Not reentrant: one build of `name` per process at a time."""
        final = self.path(name)
        with self._folder(name, 0):
            path = final.parent / f".{final.name}.lock"
            fd = _lock_file(path)
            try:
                yield
            finally:
                path.unlink(missing_ok=True)  # before the release: a waiter on this file sees it gone and opens anew
                os.close(fd)

    @contextmanager
    def must_build(self, name: str, fingerprint: dict, rebuild: str = "rebuilding it", force: bool = False,
                   incomplete=None) -> Iterator[bool]:
        """Whether artifact `name` must be built now: `force`, or not current (`is_current`), or `incomplete()`
        says so. When it may have to be, the build lock is held for the block and the answer is checked again under
        it (another process may have built it meanwhile); a current artifact takes no lock."""
        def needed(under_lock: bool) -> bool:
            current = (self.problem(name, fingerprint) is None if under_lock
                       else self.is_current(name, fingerprint, rebuild=rebuild))
            return force or not current or (incomplete is not None and incomplete())

        if not needed(under_lock=False):
            yield False
            return
        with self.build_lock(name):
            yield needed(under_lock=True)

    @contextmanager
    def build(self, name: str, fingerprint: dict, needs: int = 0) -> Iterator[Path]:
        """Yield a temporary folder to build into; on success it replaces artifact `name` atomically, with its
        fingerprint and the digest of every file. `needs`: about how many bytes the artifact takes (said when
        the disk fills up; else what was written until then)."""
        final = self.path(name)
        with self._folder(name, needs), staging_folder(final.parent, f".{final.name}.building-") as tmp:
            try:
                yield tmp
                write_json_atomic(tmp / FINGERPRINT, fingerprint)
                files, folders = file_mode(), dir_mode()
                for path in [tmp, *tmp.rglob("*")]:  # before hashing: chmod changes a file's change time
                    if not path.is_symlink():
                        os.chmod(path, folders if path.is_dir() else files)
                record_digests(tmp)
            except Exception as exc:
                if _disk_full(exc) and not isinstance(exc, DiskFull):  # also under an exporter's own error
                    raise no_space(self.working_dir, needs or folder_bytes(tmp)) from exc
                raise
            if final.exists():  # moved aside first: the rename below must not merge folders
                with staging_folder(final.parent, f".{final.name}.stale-") as aside:
                    os.replace(final, aside / "old")
                    os.replace(tmp, final)
            else:
                os.replace(tmp, final)

    @contextmanager
    def _folder(self, name: str, needs: int) -> Iterator[None]:
        """Artifact `name`'s parent folder (and the working dir) made where missing for the block; those made here
        and left empty after it (a build that failed) are removed: a failed run leaves no empty folders behind."""
        folder = self.path(name).parent
        made = list(itertools.takewhile(lambda path: not path.exists(), [folder, *folder.parents]))  # deepest first
        self._make_folder(folder, name, needs)
        try:
            yield
        finally:
            for path in made:
                try:
                    path.rmdir()
                except OSError:  # not empty (an artifact, another process's lock or build): nor are its parents
                    break

    def _make_folder(self, folder: Path, name: str, needs: int) -> None:
        """Create `folder` (and the working dir); a place that cannot be written is one line: only now, when
        artifact `name` must be built, is the working dir written at all."""
        try:
            folder.mkdir(parents=True, exist_ok=True)
            probe = tempfile.TemporaryFile(dir=folder)
        except OSError as exc:
            if _disk_full(exc):
                raise no_space(self.working_dir, needs) from exc
            built = self.path(name).relative_to(self.working_dir)
            raise UsageError(f"--working-dir {self.working_dir}: cannot write {folder} ({exc.strerror or exc}), and "
                             f"{built} must be built there (missing or out of date): give a writable --working-dir") \
                from exc
        probe.close()

    def cleanup(self) -> list[Path]:
        """Remove every artifact of this variant; returns what was removed."""
        if not self.root.exists():
            return []
        removed = sorted(self.root.iterdir())
        shutil.rmtree(self.root)
        return removed


def weights_identity(model_dir: Path | None, model_id: str) -> dict:
    """What identifies the weights: file names, sizes and modification times of a local folder (cheap and
    changes whenever the files are rewritten), or the hub id and resolved commit for a hub model."""
    if model_dir is None:
        return {"hub_id": model_id}
    files = sorted(p for p in Path(model_dir).iterdir() if p.suffix in {".safetensors", ".bin", ".json"})
    return {p.name: [p.stat().st_size, p.stat().st_mtime_ns] for p in files}
