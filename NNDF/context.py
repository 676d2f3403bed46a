"""Everything a backend needs to set itself up for one run, resolved once per action.

`RunContext` holds the family, options, resolved model source, device and dtype, the artifact store, and
loads the tokenizer and the PyTorch weights lazily (an ONNX Runtime run with a current ONNX file never loads
the weights). Device and precision are checked here: asking for CUDA without a GPU, or fp16 on the CPU, is an
error, never a silent switch.
"""
from __future__ import annotations

import errno
import gc
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from NNDF.artifacts import ArtifactStore
from NNDF.errors import BackendUnavailable, UsageError
from NNDF.family import Family
from NNDF.models import ModelSource, load_tokenizer, load_torch_model, model_architecture, resolve_source
from NNDF.options import ModelOptions, OptionGroup

log = logging.getLogger(__name__)


def resolve_device(options: ModelOptions) -> torch.device:
    name = "cpu" if options.cpu else options.device
    if name is None:
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise BackendUnavailable("--device cuda was asked for, but torch sees no CUDA GPU here; use --device cpu")
    if options.use_cuda_graph and name != "cuda":
        raise UsageError("--use-cuda-graph needs --device cuda (CUDA graphs are a GPU feature)")
    if options.fp16 and name != "cuda":
        raise UsageError("--fp16 needs --device cuda (fp16 on the CPU is slow or unsupported in these backends)")
    return torch.device(name)


@dataclass
class RunContext:
    family: Family
    options: ModelOptions
    source: ModelSource
    device: torch.device
    store: ArtifactStore
    backend_options: dict[type, OptionGroup] = field(default_factory=dict)  # groups owned by backends, by class
    bind: object = None  # name -> the family's bound backend (set by whoever opened the run: NNDF.session.open_run)
    _tokenizer: object = field(default=None, repr=False)
    _model: torch.nn.Module | None = field(default=None, repr=False)

    def options_of(self, group: type):
        """A backend-owned option group's values (its defaults when the run was opened without them)."""
        return self.backend_options.get(group) or group()

    @property
    def num_beams(self) -> int:
        """The beam width this run generates with: --num-beams, else the model's generation config (unless
        --ignore-generation-config), else 1 (NNDF/decoding.py; TensorRT profiles size their rows by it)."""
        from NNDF.decoding import effective_num_beams

        return effective_num_beams(self.options, self.source.generation)

    @property
    def dtype(self) -> torch.dtype:
        return torch.float16 if self.options.fp16 else torch.float32

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.source)
        return self._tokenizer

    def torch_model(self) -> torch.nn.Module:
        """The HF model on the run's device and dtype (loaded once, shared by backends of this run)."""
        if self._model is None:
            class_name = self.family.task.model_class(self.source, self.options)
            self._model = load_torch_model(self.source, self.dtype, self.device, class_name)
        return self._model

    def architecture(self) -> torch.nn.Module:
        """The HF model's structure on the meta device, without weights (`NNDF.models.model_architecture`)."""
        return model_architecture(self.source, self.family.task.model_class(self.source, self.options))

    def release_torch_model(self) -> None:
        """Drop the HF model, and hand its device memory back (another runtime, e.g. ONNX Runtime, allocates
        outside torch's cache)."""
        if self._model is not None:
            self._model = None
            gc.collect()
            if self.device.type == "cuda":
                torch.cuda.empty_cache()


def check_working_dir(name: str) -> Path:
    """--working-dir: a folder (created when something must first be built in it), refused in one line before
    anything is loaded when it cannot be one: a file, a symbolic link that leads nowhere or in a loop, a name the
    OS refuses. Whether it can be written is asked only when something must be built (NNDF/artifacts.py): a
    read-only working dir whose artifacts are all current serves as a shared cache."""
    if not name.strip():
        raise UsageError("--working-dir: give a folder path")
    path = Path(name)
    try:
        problem = _link_problem(path) or _not_a_folder(path)
    except (OSError, ValueError) as exc:  # a name the OS refuses (too long, NUL byte)
        problem = f"is not a usable path ({exc.__class__.__name__})"
    if problem:
        raise UsageError(f"--working-dir {name}: {problem}; give a folder in a writable place")
    return path


def _not_a_folder(path: Path) -> str | None:
    """`path`, or the nearest of its folders that exists, is a file."""
    if path.exists():
        return None if path.is_dir() else "is a file, not a folder"
    parent = next(p for p in path.parents if p.exists() or p == p.parent)
    return None if parent.is_dir() else f"{parent} is a file, not a folder"


def _link_problem(path: Path) -> str | None:
    """The first symbolic link on the way to `path` that leads nowhere, or in a loop."""
    for link in [p for p in reversed([path, *path.parents]) if p.is_symlink()]:
        what = "is" if link == path else f"{link} is"
        try:
            link.resolve(strict=True)
        except RuntimeError:  # Python < 3.13 reports a loop this way
            return f"{what} a symbolic link loop"
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return f"{what} a symbolic link loop"
            return f"{what} a symbolic link to {os.readlink(link)}, which does not exist"
    return None


def warn_threads(threads: int) -> None:
    """--threads above the cores this process may use runs, slower (threads take turns on a core): one warning."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if threads > cores:
        log.warning("--threads %d is more than the %d CPU cores this process can use: the threads share cores, "
                    "which is slower than --threads %d", threads, cores, cores)


def make_context(family: Family, options: ModelOptions, *backend_options: OptionGroup) -> RunContext:
    """Resolve a run: device and precision checks, the model's source, its artifact store. `backend_options`:
    option groups owned by backends (e.g. `TRTOptions`), given in any order."""
    refusal = family.task.static_cache_refusal
    if options.static_cache and refusal:
        raise UsageError(f"--static-cache is not implemented for {family.name} ({family.kind} models): {refusal}")
    device = resolve_device(options)
    if options.threads:
        warn_threads(options.threads)
        torch.set_num_threads(options.threads)
    working_dir = check_working_dir(options.working_dir)
    source = resolve_source(family, options.variant, options.torch_dir, working_dir, options.trust_remote_code)
    store = ArtifactStore(working_dir, family.name, source.variant)
    groups = {type(group): group for group in backend_options if group is not None}
    return RunContext(family, options, source, device, store, groups)
