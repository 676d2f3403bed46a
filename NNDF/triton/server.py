"""Running Triton Inference Server on loopback for a model repository: `TritonServer` (a context manager).

Which server: `tritonserver` on PATH (NVIDIA's container), else the binary bundled in the nvidia-pytriton wheel
(with its libraries and the python backend). The python backend's stub embeds CPython and ignores PYTHONPATH,
so the project's `model.py` stubs add the paths in `NNDF_TRITON_PATH` (set here: the stub's numpy, then this
process's PYTHONPATH, its site-packages and the project) to `sys.path` themselves.

Paths: the python backend starts each model's stub through `bash -c` with the model's path unquoted (a space
splits it: the stub then dies in `stol` and the server waits forever), and the stub's embedded Python encodes
paths as ASCII (a non-ASCII letter is a UnicodeEncodeError). A repository whose path is not plain
(`PLAIN_PATH`) is therefore served through a plain symlink to it in the server's scratch folder; the scratch
folder, the project and the venv must be plain themselves (one line otherwise).

The server's log is a file in the temporary folder: `serve` keeps it and says where it is, `--verbose` streams
it; when a model fails to load, the error names the failing models with their own lines from the log (the
status table's row: the exception and traceback from the model's `initialize`) and where the whole log is.

numpy: the bundled stub's pybind11 was built against numpy 1.x and reads numpy's dtype struct at numpy 1's
offsets; under numpy 2 every input tensor it copies gets element size 0 (stride 0), so each input arrives as
its first element repeated (BYTES inputs then fail in `deserialize_bytes_tensor`; INT64 / FP32 inputs are
silently wrong) and BYTES outputs come back empty. The stub therefore runs with numpy 1.26 from a separate
folder placed first on its `sys.path` (`STUB_SITE`, installed with `pip install --target`); torch, ONNX
Runtime and transformers of this venv run unchanged on it (they are built to run on numpy 1.x and 2.x).
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import shlex
import signal
import site
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from NNDF.errors import BackendUnavailable, HarnessError, UsageError

ROOT = Path(__file__).resolve().parents[2]  # the project root: the stubs import NNDF and the families from it
STUB_SITE = Path(sys.prefix) / "triton-stub"  # numpy 1.x for the python backend's stub (see the docstring)
STUB_NUMPY = "numpy==1.26.4"
_PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent thread ends
PATH_VARIABLE = "NNDF_TRITON_PATH"  # os.pathsep-separated folders the model.py stubs put first on sys.path
LOG_TAIL = 12  # server log lines shown when it fails and no model says why
PLAIN_PATH = re.compile(r"[A-Za-z0-9_./+,:@%=-]+")  # survives `bash -c` unquoted and an ASCII-only Python
_LOG_HEADER = re.compile(r"[IWEF]\d{4} ")  # glog: level, month and day
_NOISE = ("NVML", "DCGM", "CudaDriverHelper", "pinned memory", "failed to load all models")  # CPU-only machines


@dataclass(frozen=True)
class Ports:
    http: int = 8000
    grpc: int = 8001
    metrics: int = 8002

    def urls(self) -> dict[str, str]:
        return {"http": f"http://127.0.0.1:{self.http}", "grpc": f"grpc://127.0.0.1:{self.grpc}",
                "metrics": f"http://127.0.0.1:{self.metrics}/metrics"}


@dataclass(frozen=True)
class Installation:
    binary: Path
    libraries: Path | None  # the wheel's bundled libraries (None: a system install finds its own)
    python_backend: Path | None  # the wheel's backends/python (None: the server's default backends)
    stub: Path | None  # the wheel's python backend stub for this interpreter


def _wheel_installation() -> Installation | None:
    spec = importlib.util.find_spec("pytriton")  # locating the package does not import it
    if spec is None or not spec.submodule_search_locations:
        return None
    dist = Path(list(spec.submodule_search_locations)[0]) / "tritonserver"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = dist / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not (dist / "bin" / "tritonserver").is_file():
        return None
    return Installation(dist / "bin" / "tritonserver", dist.parent.parent / "nvidia_pytriton.libs",
                        dist / "backends" / "python", stub)


def find_server() -> Installation:
    """tritonserver on PATH, else the nvidia-pytriton wheel's; BackendUnavailable naming both otherwise."""
    on_path = shutil.which("tritonserver")
    if on_path:
        return Installation(Path(on_path), None, None, None)
    wheel = _wheel_installation()
    if wheel is None:
        raise BackendUnavailable("no Triton Inference Server found: tritonserver is not on PATH and the "
                                 "nvidia-pytriton wheel is not installed (pip install --no-deps "
                                 "nvidia-pytriton==0.7.0; see requirements-triton-server.txt)")
    if not wheel.stub.is_file():
        raise BackendUnavailable(f"nvidia-pytriton has no python backend stub for Python "
                                 f"{sys.version_info.major}.{sys.version_info.minor} ({wheel.stub.parent.parent})")
    return wheel


def stub_numpy_problem() -> str | None:
    """Why the python backend's stub cannot run the project here (None: it can)."""
    if not any(STUB_SITE.glob("numpy-1.*.dist-info")):
        return (f"the Triton python backend needs numpy 1.x in {STUB_SITE} (its stub was built against numpy 1; "
                "numpy 2 corrupts its tensors): " + shlex.join([sys.executable, "-m", "pip", "install", "--no-deps",
                                                                "--target", str(STUB_SITE), STUB_NUMPY]))
    return None


def stub_paths() -> list[str]:
    """What the model.py stubs put first on sys.path: numpy 1.x, the folders on this process's PYTHONPATH (the
    stub would not see them otherwise), this venv's packages, the project."""
    python_path = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return [str(STUB_SITE), *python_path, *site.getsitepackages(), str(ROOT)]


def plain_path_problem(paths: list[str]) -> str | None:
    """Why the python backend cannot run from these folders (None: it can): see the module docstring."""
    odd = [p for p in paths if not PLAIN_PATH.fullmatch(p)]
    if odd:
        return (f"{odd[0]}: the Triton python backend runs from here only with a plain path (ASCII letters, digits "
                "and _ . / + , : @ % = -; its stub is started by an unquoted shell command and encodes paths as "
                "ASCII)")
    return None


def model_failures(log: str) -> list[str]:
    """The rows of the server log's model table whose status is not READY, each with its continuation lines
    (the model's own error and traceback), as 'NAME: status' lines."""
    rows, table = [], False
    for line in log.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if cells[:3] == ["Model", "Version", "Status"]:
            table, rows = True, []
        elif table and len(cells) == 3 and cells[0]:
            rows.append([cells[0], cells[2]])
        elif table and len(cells) == 3 and rows:
            rows[-1].append(cells[2])
        elif table and not line.startswith("+"):
            table = False
    return ["\n".join([f"{name}: {status}", *(f"  {more}" for more in rest if more)])
            for name, status, *rest in rows if not status.startswith("READY")]


def log_lines(log: str, lines: int = LOG_TAIL) -> list[str]:
    """The log's last meaningful lines: errors and what child processes printed (a crashed stub's `what():`),
    without tables, informational lines and the monitoring noise of a machine without a GPU."""
    kept = [line for line in log.splitlines() if line.strip() and not line.startswith(("+", "|"))
            and (not _LOG_HEADER.match(line) or line[0] in "EF") and not any(n in line for n in _NOISE)]
    return kept[-lines:]


def _backend_dir(install: Installation, into: Path) -> Path:
    """A backends folder whose python backend uses the stub of this interpreter's Python version."""
    python = into / "python"
    python.mkdir(parents=True)
    for item in install.python_backend.iterdir():
        if item.is_file():
            (python / item.name).symlink_to(item)
    shutil.copy2(install.stub, python / "triton_python_backend_stub")
    return into


def port_problem(port: int) -> str | None:
    """Why `port` cannot be listened on at 127.0.0.1 (None: it can)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do: a closed port's TIME_WAIT is free
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def free_ports(count: int) -> list[int]:
    """`count` distinct ports free on 127.0.0.1 now (the OS picks them; tests and tools use them)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def check_ports(ports: Ports) -> None:
    named = {"--http-port": ports.http, "--grpc-port": ports.grpc, "--metrics-port": ports.metrics}
    if len(set(named.values())) < len(named):
        raise UsageError(f"the ports must differ: {', '.join(f'{k} {v}' for k, v in named.items())}")
    for flag, port in named.items():
        if not 0 < port < 65536:
            raise UsageError(f"{flag} {port}: give a port in 1-65535")
        problem = port_problem(port)
        if problem:
            raise UsageError(f"{flag} {port}: 127.0.0.1:{port} is busy ({problem}); give a free port")


def servable(repository: Path, backends: set[str] | None) -> tuple[list[str], dict[str, str]]:
    """(models to load, {model: why not}) for a server whose backends are `backends` (None: every backend, as
    in NVIDIA's container). The wheel's server has only the python backend: `onnxruntime_onnx` and
    `tensorrt_plan` models, and ensembles over them, are left out instead of failing the whole server."""
    from NNDF.triton.config import CONFIG, read_config

    configs = {p.name: read_config(p / CONFIG) for p in sorted(repository.iterdir()) if (p / CONFIG).is_file()}
    skipped = {} if backends is None else {
        name: f"needs Triton's {c.platform or c.backend} backend, which this tritonserver lacks (NVIDIA's "
              "container has it)" for name, c in configs.items()
        if c.platform != "ensemble" and c.backend not in backends}
    grown = True
    while grown:  # ensembles over a model left out (or absent) are left out too
        grown = False
        for name, c in configs.items():
            over = [s.model_name for s in c.ensemble_scheduling.step if s.model_name in skipped]
            if name not in skipped and over:
                skipped[name], grown = f"an ensemble over {', '.join(over)}, which is left out", True
    return [name for name in configs if name not in skipped], skipped


def _ends_with(parent: int):
    """What the server's process runs before it becomes the server: on Linux, SIGTERM (a clean stop, bounded by
    --exit-timeout-secs) when the thread that started it ends, which includes this process dying by SIGKILL, whose
    `stop` never runs; a parent already gone by then ends it before it starts. Elsewhere nothing: a server whose
    parent was killed outright keeps running there. The libc function is looked up here, before the fork."""
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # no prctl (not Linux)
        return None

    def in_child() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before prctl: never become its orphan server
            os._exit(1)
    return in_child


class TritonServer:
    """`with TritonServer(repo, ports) as server:` starts tritonserver on 127.0.0.1, waits until every model of
    the repository is READY (or fails naming the failing models' own errors and the log file), and stops it on
    exit (SIGINT, then SIGKILL). The log file is removed after a clean stop unless `keep_log`; `echo` copies it
    to stderr as it grows. On Linux the server also stops when the thread that started it ends (`_ends_with`): start
    it from a thread that outlives it (the main thread, as `serve` does)."""

    def __init__(self, repository: Path, ports: Ports = Ports(), ready_timeout: float = 180.0,
                 log_verbose: int = 0, keep_log: bool = False, echo: bool = False):
        self.repository, self.ports, self.ready_timeout = Path(repository).resolve(), ports, ready_timeout
        self.log_verbose, self.keep_log, self.echo = log_verbose, keep_log, echo
        self.process: subprocess.Popen | None = None
        self.served: list[str] = []  # the repository's models this server loads
        self.skipped: dict[str, str] = {}  # model -> why this server cannot load it (a backend it lacks)
        self._scratch: Path | None = None
        self.log_path: Path | None = None
        self.failed = False  # the server failed: its log is kept

    def served_path(self) -> Path:
        """The repository as the server sees it: itself when its path is plain, else a plain symlink to it."""
        if PLAIN_PATH.fullmatch(str(self.repository)):
            return self.repository
        link = self._scratch / "repository"
        link.symlink_to(self.repository, target_is_directory=True)
        return link

    def command(self, install: Installation, backends: Path | None) -> list[str]:
        p = self.ports
        cmd = [str(install.binary), f"--model-repository={self.served_path()}", "--http-address=127.0.0.1",
               "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1", f"--http-port={p.http}",
               f"--grpc-port={p.grpc}", f"--metrics-port={p.metrics}", "--exit-timeout-secs=5",
               "--disable-auto-complete-config", f"--log-verbose={self.log_verbose}"]
        if backends is not None:
            cmd.append(f"--backend-directory={backends}")
        if self.skipped:  # explicit mode: the models this server can run, and none it cannot
            cmd += ["--model-control-mode=explicit", *(f"--load-model={name}" for name in self.served)]
        if install.libraries is not None:
            cmd.append(f"--cache-directory={install.binary.parent.parent / 'caches'}")
        return cmd

    def environment(self, install: Installation) -> dict[str, str]:
        env = dict(os.environ)
        libs = [sysconfig.get_config_var("LIBDIR")]  # the stub embeds this interpreter's libpython first
        if install.libraries is not None:
            libs.append(str(install.libraries))
        env["LD_LIBRARY_PATH"] = os.pathsep.join([*libs, *filter(None, [env.get("LD_LIBRARY_PATH")])])
        env[PATH_VARIABLE] = os.pathsep.join(stub_paths())
        return env

    def start(self) -> "TritonServer":
        check_ports(self.ports)
        install = find_server()
        problem = stub_numpy_problem()
        if problem:
            raise BackendUnavailable(problem)
        self.served, self.skipped = servable(self.repository, {"python"} if install.stub else None)
        if not self.served:
            raise UsageError(f"{self.repository}: no model this server can load (" + "; ".join(
                f"{name}: {why}" for name, why in self.skipped.items()) + ")")
        self._scratch = Path(tempfile.mkdtemp(prefix="nndf-triton-"))
        problem = plain_path_problem([str(self._scratch), *stub_paths()]) if install.stub else None
        if problem:
            self.stop()
            raise UsageError(f"{problem}: give TMPDIR and the project such a path")
        backends = _backend_dir(install, self._scratch / "backends") if install.stub else None
        handle, name = tempfile.mkstemp(prefix="tritonserver-", suffix=".log")
        self.log_path = Path(name)
        with os.fdopen(handle, "wb") as log:
            self.process = subprocess.Popen(self.command(install, backends), stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env=self.environment(install),
                                            start_new_session=True,  # Ctrl-C reaches us, and we stop it
                                            preexec_fn=_ends_with(os.getpid()))
        if self.echo:
            threading.Thread(target=self._echo, daemon=True).start()
        try:
            self.wait_ready()
        except BaseException:
            self.failed = True
            self.stop()
            raise
        return self

    def _echo(self) -> None:
        """Copy the log to stderr as the server writes it, until the server has exited."""
        with open(self.log_path, errors="replace") as log:
            while True:
                line = log.readline()
                if line:
                    sys.stderr.write(line)
                elif self.process.poll() is not None:
                    return
                else:
                    time.sleep(0.2)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.is_file() else ""

    def why(self) -> str:
        """The failing models' own errors (else the log's last meaningful lines) and where the whole log is."""
        self.failed = True
        text = self.log_text()
        lines = model_failures(text) or log_lines(text)
        return "\n".join([*lines, f"the whole server log: {self.log_path} (serve --verbose streams it)"])

    def wait_ready(self) -> None:
        """Until the server says every model is ready; HarnessError with `why` if it exits, a model's stub dies
        (the server would wait for it forever) or the time is up."""
        deadline = time.monotonic() + self.ready_timeout
        url = f"{self.ports.urls()['http']}/v2/health/ready"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise HarnessError(f"tritonserver exited (code {self.process.returncode}) before its models were "
                                   f"ready:\n{self.why()}")
            if "terminate called after throwing" in self.log_text():
                raise HarnessError(f"a python model's stub process died while loading:\n{self.why()}")
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.25)
        raise HarnessError(f"tritonserver's models were not ready after {self.ready_timeout:.0f}s:\n{self.why()}")

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGINT (Triton finishes in-flight requests and unloads), SIGKILL after `timeout`; then SIGKILL to what
        is left of its process group (a python model's stub the server did not take down with it keeps its
        memory otherwise); the exit code."""
        code = None
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                code = self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                code = self.process.wait()
        elif self.process is not None:
            code = self.process.returncode
        if self.process is not None:
            try:  # its own process group (start_new_session): its pid is the group's id
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):  # nothing left
                pass
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
        if self.log_path is not None and not (self.keep_log or self.failed):
            self.log_path.unlink(missing_ok=True)
        return code

    def __enter__(self) -> "TritonServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
