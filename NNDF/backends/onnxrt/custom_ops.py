"""This project's ONNX Runtime custom ops (domain `nndf`, sources in `ops/`), a shared library built with the
machine's compilers and registered on the sessions whose graphs use them.

`Linear(X [..., k], W [n, k], B [n], A [..., n])`: a checkpoint's nn.Linear with its weight as stored. On CUDA one
or two rows of X (a one-token step) go to this library's kernel: blocks of 128 threads over 4 weight rows, one
16-byte load of each row a thread a pass, fp32 sums, its first loads issued before it waits on the kernel before it
(programmatic dependent launch, Hopper and later; `NNDF_ORT_LINEAR_PDL=0` launches it plainly, for measurements);
3-16 rows in float16 (beams, batches) to its tensor-core kernel: blocks of 8 warps over 16 weight rows where all
blocks are resident at once with 8, else 4 (`NNDF_ORT_LINEAR_DOT_WARPS=4|8|16` takes that many everywhere, 16 up to
8 rows, for measurements), the same 16-byte loads (8 steps of 32 features of weights and
x in flight a warp) fed to mma.sync's 16 x 8 x 16 products, the warps' sums met in shared memory, the same epilogue
and programmatic launch (`NNDF_ORT_LINEAR_DOT=0` sends these rows to cuBLAS, for measurements); more rows (a prompt
pass), float32 past 2 rows and widths not a multiple of 8 go to cuBLAS through ONNX Runtime's own handle, then an
epilogue kernel where there is a bias, an addend or ReLU. Optional: a bias [n], an addend of the
output's shape (a residual), a scale (`alpha`) and ReLU (`activation=1`), all in the same kernel, and a norm of X
before the product (`norm=1` LayerNorm with scale G and bias H, `norm=2` RMSNorm with scale G; `epsilon`): each
block of the few-row kernel normalises X's rows into its shared memory after its wait, so the norm has no kernel of
its own, and the normalised rows are the op's second output N (written by the blocks between them); the
tensor-core kernel takes an RMSNorm inside its product (gamma scales the weights' chunks as they arrive, each row's
sum of squares gathers from the product's own loads of X, the epilogue scales by its 1 / rms;
`NNDF_ORT_LINEAR_RMS_IN_DOT=0`: a kernel of its own, for measurements); otherwise a kernel of
their own for more rows and where the rows do not fit 48 KB; `NNDF_ORT_LINEAR_NORM_AHEAD=4` has such a block
start 4 loads of each weight row before it normalises, for measurements), and a gated activation (`activation=2` SiLU, `3` GELU's tanh form: W's rows are gate
and up pairs, Y has n / 2 columns, cuBLAS's product of many rows goes to the third output P first). The CPU
kernel is a plain loop: it lets the CPU tests run a graph that uses the op against ONNX Runtime's own ops.

`Attention(Q, K?, V?, past_key, past_value, seqlens_k?, bias?, key_bias?)`: the decode graphs' attention over
their full-length cache (the inputs GroupQueryAttention takes, past and present one buffer): each row's new tokens
attend to its columns up to their own (a window where `local_window_size` says), their keys and values written
into the cache; optionally a position bias by clipped key-minus-query distance [2R + 1, heads] (T5's relative
table, read by the op, so no bias tensor is gathered per step) and a key bias [B, L]; `causal=0` reads every
column of a cache it does not write (cross-attention over the encoder's buffers, padded columns hidden by the key
bias). On CUDA (float16; ops/attention.cu) two kernels: blocks over ranges of at least 64 columns a (head, token)
score, weigh and sum their columns into a float32 workspace (the fourth output), a second kernel merges the
ranges and writes the new keys and values; both launch as programmatic dependents (`NNDF_ORT_ATTENTION_PDL=0`
launches them plainly, for measurements). The first kernel's registers are capped so that 4 of its blocks fit a
multiprocessor (`NNDF_ORT_ATTENTION_BLOCKS=1`: uncapped); `NNDF_ORT_ATTENTION_EARLY=1` has it load its first columns
of a cache it only reads (causal=0) before it waits on the kernel before, which the graph must then never have
written just before (both for measurements). On the CPU (float32) a plain loop.

`build(folder, arch)` puts the library into `folder`, compiled with `nvcc` for a CUDA compute capability (`arch`,
e.g. (9, 0)) or with the C++ compiler for the CPU-only build (`arch` None), unless a library of the same sources
and target is already there; a compiled library is kept in a cache folder by its digest (`$NNDF_OPS_CACHE`, else
~/.cache/nndf/ort-ops), so the next artifact's copy takes no compile; the library declares the few pieces of ONNX Runtime's C ABI it calls itself
(`ops/ort_abi.h`), so no ONNX Runtime headers are needed, and needs ONNX Runtime 1.16 or later.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from NNDF.errors import BackendUnavailable

DOMAIN = "nndf"
FILE = "libnndf_ort_ops.so"
SOURCES = Path(__file__).with_name("ops")
CPU_SOURCES = ("ops.cc",)
CUDA_SOURCES = ("ops.cc", "linear.cu", "attention.cu")
DEFAULT_CUDA_HOME = "/usr/local/cuda"


def sources_digest(arch: tuple[int, int] | None) -> str:
    """The digest of the sources (and headers) and the target a library is built for."""
    h = hashlib.sha256(repr(arch).encode())
    for path in sorted(SOURCES.iterdir()):
        if path.suffix in (".cc", ".cu", ".h"):
            h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def _nvcc() -> str:
    found = shutil.which("nvcc")
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), DEFAULT_CUDA_HOME):
        if not found and home and (Path(home) / "bin" / "nvcc").is_file():
            found = str(Path(home) / "bin" / "nvcc")
    if not found:
        raise BackendUnavailable("the onnxrt graphs' Linear op is compiled with nvcc, which is not on PATH (nor in "
                                 "$CUDA_HOME/bin); install the CUDA toolkit, or build the graph with --ort-products "
                                 "matmul (ONNX Runtime's MatMul)")
    return found


def _command(arch: tuple[int, int] | None, out: Path) -> list[str]:
    if arch is None:
        compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
        if not compiler:
            raise BackendUnavailable("the CPU build of the onnxrt Linear op needs a C++ compiler (c++ or g++ on PATH)")
        return [compiler, "-O2", "-std=c++17", "-shared", "-fPIC", *(str(SOURCES / s) for s in CPU_SOURCES),
                "-o", str(out)]
    sm = f"{arch[0]}{arch[1]}"
    return [_nvcc(), "-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-DNNDF_CUDA",
            f"-gencode=arch=compute_{sm},code=[sm_{sm},compute_{sm}]",
            *(str(SOURCES / s) for s in CUDA_SOURCES), "-o", str(out)]


def cache_folder() -> Path:
    """Where compiled libraries are kept by digest: $NNDF_OPS_CACHE, else ~/.cache/nndf/ort-ops."""
    return Path(os.environ.get("NNDF_OPS_CACHE") or Path.home() / ".cache" / "nndf" / "ort-ops")


def build(folder: Path, arch: tuple[int, int] | None = None) -> Path:
    """The ops library in `folder` for `arch` (a CUDA compute capability; None: the CPU-only build), unless the
    one there was built from the same sources for the same target: copied from the cache folder, compiled into
    it first where it has none. Written atomically."""
    folder.mkdir(parents=True, exist_ok=True)
    library, stamp = folder / FILE, folder / (FILE + ".sources")
    digest = sources_digest(arch)
    if library.is_file() and stamp.is_file() and stamp.read_text().strip() == digest:
        return library
    cached = cache_folder() / digest / FILE
    if not cached.is_file():
        cached.parent.mkdir(parents=True, exist_ok=True)
        _compile(arch, cached)
    partial = folder / f".{FILE}.{os.getpid()}"
    try:
        shutil.copyfile(cached, partial)
        os.replace(partial, library)
    finally:
        partial.unlink(missing_ok=True)
    stamp.write_text(digest + "\n")
    return library


def _compile(arch: tuple[int, int] | None, library: Path) -> None:
    """Compile the library for `arch` into `library` (atomically)."""
    partial = library.with_name(f".{FILE}.{os.getpid()}")
    try:
        done = subprocess.run(_command(arch, partial), capture_output=True, text=True)
        if done.returncode != 0:
            lines = [line for line in (done.stderr or done.stdout).splitlines() if "error" in line.lower()]
            raise BackendUnavailable(f"compiling the onnxrt Linear op failed: "
                                     f"{(lines or (done.stderr or 'no output').splitlines() or [''])[0][:300]}")
        os.replace(partial, library)
    finally:
        partial.unlink(missing_ok=True)


def register(options, library: Path) -> None:
    """Register the library on an onnxruntime.SessionOptions."""
    options.register_custom_ops_library(str(library))
