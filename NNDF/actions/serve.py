"""`serve DIR`: Triton Inference Server for a model repository on 127.0.0.1, until Ctrl-C.

The server is the `tritonserver` on PATH, else the nvidia-pytriton wheel's (NNDF/triton/server.py). Every
model's config.pbtxt is checked against Triton's schema first; a busy port is one line (exit 2) before anything
starts. Once every model is READY the endpoints and the server's log file are printed (`--verbose` also streams
the log); a model that fails to load is named with its own error lines from the log. Ctrl-C (or SIGTERM) stops
the server cleanly (SIGINT to it, SIGKILL after 20 s) and the report lists what was served.
"""
from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path

from NNDF.errors import HarnessError, UsageError
from NNDF.results import Report, environment
from NNDF.triton.options import ServeOptions


@dataclass(frozen=True)
class ServedModel:
    model: str
    runs_on: str
    max_batch_size: int
    http: str
    grpc: str

    def row(self) -> dict:
        return {"model": self.model, "runs on": self.runs_on, "max batch": self.max_batch_size,
                "http": self.http, "grpc": self.grpc}


def _check_repository(directory: str) -> dict[str, object]:
    """{model name: its config} of a repository; UsageError when it is not one or holds no model."""
    from NNDF.triton.config import CONFIG, read_config
    from NNDF.triton.repository import command, models, repository_problem

    path = Path(directory)
    writes = command("deploy", "MODEL", "onnxrt", "--repository", "DIR")
    if not path.is_dir():
        raise UsageError(f"serve {directory}: no such folder; give a Triton model repository ({writes} writes one)")
    problem = repository_problem(path)
    names = models(path) if problem is None else []
    if problem or not names:
        raise UsageError(f"serve {directory}: {problem or 'not a Triton model repository (no <model>/config.pbtxt)'}; "
                         f"give a folder {writes} wrote")
    return {name: read_config(path / name / CONFIG) for name in names}


class _Terminated(KeyboardInterrupt):
    """SIGTERM, stopping the server as Ctrl-C does (a service manager's stop, `kill`)."""


def _stop_on_term(*_):
    raise _Terminated


def serve(directory: str | None, options: ServeOptions) -> Report:
    from NNDF.triton.server import Ports, TritonServer

    if not directory:
        raise UsageError("serve needs the repository folder: python run.py serve DIR")
    configs = _check_repository(directory)
    ports = Ports(options.http_port, options.grpc_port, options.metrics_port)
    urls = ports.urls()
    report = Report("serve", "triton", directory, {"http": urls["http"], "grpc": urls["grpc"],
                                                   "metrics": urls["metrics"]}, environment=environment())
    server = TritonServer(Path(directory), ports, ready_timeout=options.ready_timeout, keep_log=True,
                          echo=options.verbose)
    previous = signal.signal(signal.SIGTERM, _stop_on_term)
    # SIGINT too where the shell started us ignoring it (a background job of a script)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        server.start()
        for name in server.served:
            config = configs[name]
            report.results.append(ServedModel(name, config.platform or config.backend, config.max_batch_size,
                                              f"{urls['http']}/v2/models/{name}", urls["grpc"]))
        for name, why in server.skipped.items():
            report.notes.append(f"not served here: {name} ({why})")
            print(f"not served here: {name} ({why})", flush=True)
        report.after_lines = True
        print(f"serving {', '.join(server.served)}: HTTP {urls['http']}, gRPC {urls['grpc']}, "
              f"metrics {urls['metrics']}; log {server.log_path}; Ctrl-C stops", flush=True)
        report.notes.append(f"the server's log: {server.log_path}")
        code = server.process.wait()
        raise HarnessError(f"tritonserver stopped by itself (code {code}):\n{server.why()}")
    except KeyboardInterrupt as stop:
        code = server.stop()
        how = "SIGTERM" if isinstance(stop, _Terminated) else "Ctrl-C"
        report.notes.append(f"stopped on {how} (tritonserver exit code {code})")
    finally:
        server.stop()
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
    return report
