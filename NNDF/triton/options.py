"""Option groups of serving: `deploy` (DeployOptions: the repository's own flags, and the generative models' request
limits) and `serve` (ServeOptions). The `triton` client backend's own flags are
`NNDF.backends.triton.options.TritonOptions`."""
from __future__ import annotations

from dataclasses import dataclass

from NNDF.errors import UsageError
from NNDF.options import CacheOptions, OptionGroup, _positive, flag


@dataclass(frozen=True)
class RepositoryOptions(OptionGroup):
    title = "deploy (Triton model repository)"
    owner = "deploy"
    repository: str | None = flag(None, "--repository", help="the Triton model repository folder to write the model into (created if missing; an existing one keeps its other models)")
    model_name: str | None = flag(None, "--model-name", help="the model's name in the repository (default: <family>-<variant>-<backend>, as the triton backend's --triton-model default)")
    max_batch_size: int = flag(8, "--max-batch-size", help="requests Triton's dynamic batcher hands the model at once (1: one request at a time, no dynamic batching)")
    preferred_batch_size: tuple = flag((), "--preferred-batch-size", nargs="+", type=int, metavar="N", help="dynamic batching: batch sizes the batcher waits for (default: none preferred)")
    batch_delay_us: int = flag(2000, "--batch-delay-us", help="dynamic batching: how long a request may wait for others (microseconds)")
    instances: int = flag(1, "--instances", help="model instances (each a python process with its own ONNX Runtime session)")
    force: bool = flag(False, "--force", help="replace a model of the same name in the repository")

    def check(self):
        _positive("--max-batch-size", self.max_batch_size)
        _positive("--instances", self.instances)
        _positive("--batch-delay-us", self.batch_delay_us, 0)
        for size in self.preferred_batch_size:
            if not 1 <= size <= self.max_batch_size:
                raise UsageError(f"--preferred-batch-size {size}: must be in 1..--max-batch-size "
                                 f"({self.max_batch_size})")


@dataclass(frozen=True)
class RequestLimitOptions(OptionGroup):
    title = "deploy: requests (generative models)"
    owner = "generative models"
    kind_scope = CacheOptions
    max_new_tokens_limit: int = flag(512, "--max-new-tokens-limit", help="the most new tokens a request may ask for (larger requests get an error)")
    num_beams_limit: int = flag(8, "--num-beams-limit", help="the widest beam search a request may ask for (wider requests get an error)")
    streaming: bool = flag(False, "--streaming", help="Triton's decoupled mode: each request's tokens are sent as they are chosen (greedy and sampling; beam search sends the result), over gRPC streams")
    cache_limit_mib: int = flag(2048, "--cache-limit-mib", help="the most KV cache one generation may hold, in MiB: rows x beams x (prompt + new tokens) x the model's cache bytes per token (a request over it alone gets an error; requests batched together stay under it)")

    def check(self):
        _positive("--max-new-tokens-limit", self.max_new_tokens_limit)
        _positive("--num-beams-limit", self.num_beams_limit)
        _positive("--cache-limit-mib", self.cache_limit_mib)


@dataclass(frozen=True)
class DeployOptions(RepositoryOptions, RequestLimitOptions):
    """What `deploy` reads of its own."""

    def required_repository(self) -> str:
        if not self.repository or not self.repository.strip():
            raise UsageError("deploy needs --repository DIR (the Triton model repository to write)")
        return self.repository


@dataclass(frozen=True)
class ServeOptions(OptionGroup):
    title = "serve"
    owner = "serve"
    http_port: int = flag(8000, "--http-port", help="HTTP port on 127.0.0.1")
    grpc_port: int = flag(8001, "--grpc-port", help="gRPC port on 127.0.0.1")
    metrics_port: int = flag(8002, "--metrics-port", help="Prometheus metrics port on 127.0.0.1")
    ready_timeout: float = flag(300.0, "--ready-timeout", help="seconds to wait until every model is ready")
    verbose: bool = flag(False, "--verbose", "-v", help="stream the server's log to stderr (it is kept in a file either way; serve says where)")

    def check(self):
        for name, port in (("--http-port", self.http_port), ("--grpc-port", self.grpc_port),
                           ("--metrics-port", self.metrics_port)):
            if not 0 < port < 65536:
                raise UsageError(f"{name} {port}: give a port in 1-65535")
        if self.ready_timeout <= 0:
            raise UsageError(f"--ready-timeout must be > 0, got {self.ready_timeout}")
