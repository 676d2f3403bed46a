"""Thin helpers over tritonclient.http / tritonclient.grpc: one `Client` for either protocol, chosen by the URL.

URLs: `http://HOST:PORT` (default port 8000), `grpc://HOST:PORT` (default 8001), or a bare `HOST:PORT` (HTTP).
`infer` takes and returns named numpy arrays; the library's errors become one-line `InferenceError`s that keep
the server's message, and an unreachable server is `BackendUnavailable` naming the URL.
"""
from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

import numpy as np

from NNDF.errors import BackendUnavailable, InferenceError, UsageError

DEFAULT_PORTS = {"http": 8000, "grpc": 8001}


@dataclass(frozen=True)
class Endpoint:
    protocol: str  # "http" or "grpc"
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def __str__(self) -> str:
        return f"{self.protocol}://{self.address}"


def parse_url(url: str) -> Endpoint:
    """http://host:port, grpc://host:port or host:port (HTTP); UsageError naming the forms otherwise."""
    text = url.strip()
    parts = urlsplit(text if "://" in text else f"http://{text}")
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname or parts.path not in ("", "/") or parts.query:
        raise UsageError(f"--triton-url {url!r}: give http://HOST:PORT or grpc://HOST:PORT")
    try:
        port = parts.port or DEFAULT_PORTS[parts.scheme]
    except ValueError:
        raise UsageError(f"--triton-url {url!r}: the port is not a number in 1-65535") from None
    return Endpoint(parts.scheme, parts.hostname, port)


def _module(protocol: str):
    if protocol == "grpc":
        import tritonclient.grpc as module
    else:
        import tritonclient.http as module
    return module


def wire_type(array: np.ndarray) -> str:
    """The inference protocol's datatype of `array` (tritonclient's own mapping: INT64, FP32, BYTES, ...)."""
    from tritonclient.utils import np_to_triton_dtype

    wire = np_to_triton_dtype(array.dtype)
    if wire is None:
        raise UsageError(f"a {array.dtype} array cannot be sent to Triton")
    return wire


class Client:
    """One connection to a server; `infer(model, {name: array}, outputs)` -> {name: array}."""

    def __init__(self, url: str, timeout: float = 600.0, concurrency: int = 1):
        self.endpoint = parse_url(url)
        self.module = _module(self.endpoint.protocol)
        self.timeout = timeout
        kwargs = {"concurrency": concurrency, "network_timeout": timeout, "connection_timeout": timeout} \
            if self.endpoint.protocol == "http" else {}
        self.client = self.module.InferenceServerClient(self.endpoint.address, **kwargs)

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def model_ready(self, model: str) -> bool:
        try:
            return bool(self.client.is_model_ready(model))
        except Exception:  # noqa: BLE001 - unreachable, refused, ...: not ready
            return False

    def require_ready(self, model: str) -> None:
        """BackendUnavailable unless the server answers and `model` is ready, listing what it serves."""
        try:
            live = self.client.is_server_live()
        except Exception as exc:  # noqa: BLE001 - connection refused, DNS, timeouts: one line
            raise BackendUnavailable(f"no Triton server answers at {self.endpoint} ({_first_line(exc)}); start "
                                     "one with `python run.py serve DIR`") from exc
        if not live or not self.model_ready(model):
            raise BackendUnavailable(f"the Triton server at {self.endpoint} has no ready model {model!r}; it serves: "
                                     f"{', '.join(self.ready_models()) or 'nothing ready'}")

    def ready_models(self) -> list[str]:
        index = self.client.get_model_repository_index()  # HTTP: a list of dicts; gRPC: a protobuf message
        rows = index if isinstance(index, list) else [{"name": m.name, "state": m.state} for m in index.models]
        return sorted(r["name"] for r in rows if r.get("state") == "READY")

    def inputs(self, arrays: dict[str, np.ndarray]) -> list:
        made = []
        for name, array in arrays.items():
            item = self.module.InferInput(name, list(array.shape), wire_type(array))
            item.set_data_from_numpy(array)
            made.append(item)
        return made

    def infer(self, model: str, arrays: dict[str, np.ndarray], outputs: tuple[str, ...]) -> dict[str, np.ndarray]:
        requested = [self.module.InferRequestedOutput(name) for name in outputs]
        try:
            result = self.client.infer(model, self.inputs(arrays), outputs=requested,
                                       **({"client_timeout": self.timeout} if self.endpoint.protocol == "grpc"
                                          else {}))
        except Exception as exc:  # noqa: BLE001 - InferenceServerException and transport errors: one line
            raise InferenceError(f"Triton {self.endpoint} model {model!r}: {_first_line(exc)}") from exc
        return {name: result.as_numpy(name) for name in outputs}


    def model_config(self, model: str):
        """The served model's configuration as Triton's ModelConfig protobuf (either protocol)."""
        from google.protobuf import json_format
        from tritonclient.grpc import model_config_pb2

        if self.endpoint.protocol == "grpc":
            return self.client.get_model_config(model).config
        return json_format.ParseDict(self.client.get_model_config(model), model_config_pb2.ModelConfig(),
                                     ignore_unknown_fields=True)

    def stream(self, model: str, arrays: dict[str, np.ndarray], outputs: tuple[str, ...], on_partial=None) -> dict:
        """One request to a decoupled (streaming) model over a gRPC stream: `on_partial(result arrays)` for each
        response before the last one that carries `outputs[-1]`; returns that one's arrays."""
        import queue

        if self.endpoint.protocol != "grpc":
            raise UsageError(f"a streaming (decoupled) model answers over gRPC streams: give --triton-url "
                             f"grpc://{self.endpoint.address.rsplit(':', 1)[0]}:PORT (Triton's gRPC port)")
        answers: queue.Queue = queue.Queue()
        self.client.start_stream(callback=lambda result, error: answers.put((result, error)),
                                 stream_timeout=self.timeout)
        final = None
        try:
            try:
                self.client.async_stream_infer(model, self.inputs(arrays), enable_empty_final_response=True)
            except Exception as exc:  # noqa: BLE001 - the stream broke (the detail went to the callback)
                _, error = answers.get_nowait() if not answers.empty() else (None, exc)
                raise InferenceError(f"Triton {self.endpoint} model {model!r}: {_first_line(error)}") from exc
            while True:
                result, error = answers.get(timeout=self.timeout)
                if error is not None:
                    raise InferenceError(f"Triton {self.endpoint} model {model!r}: {_first_line(error)}")
                got = {name: result.as_numpy(name) for name in outputs}
                if got[outputs[-1]] is not None:
                    final = got
                elif got[outputs[0]] is not None and on_partial is not None:
                    on_partial(got)
                if result.get_response().parameters["triton_final_response"].bool_param:
                    break
        except queue.Empty:
            raise InferenceError(f"Triton {self.endpoint} model {model!r}: no answer within {self.timeout:.0f}s") \
                from None
        finally:
            self.client.stop_stream()
        if final is None:
            raise InferenceError(f"Triton {self.endpoint} model {model!r}: the stream ended without an answer")
        return final


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else exc.__class__.__name__
