"""The encoder kind on the `triton` client backend: `predict`, `benchmark`, `accuracy`, `run` and `compare` against a
model served by Triton, with the same tables and JSON as the in-process backends.

The steps' `forward(named inputs)` is ONE infer of the served model with the token ids the task made in process
(`TextEncoder.encode`: the same tokenizer, right padding and truncation), so served and in-process outputs are
compared on identical inputs. The model is `--triton-model`, by default the python flavour `deploy BERT onnxrt`
writes (`<name>_model_python`: it runs on every Triton server, the pytriton wheel's included); in NVIDIA's
container `--triton-model <name>_model` queries the `onnxruntime_onnx` / `tensorrt_plan` flavour. A served model
that does not take the task's token ids (a text ensemble) or does not return the head's output is refused in
one line that names what it takes and what to use instead.
"""
from __future__ import annotations

import numpy as np
import torch

from NNDF.errors import UsageError
from NNDF.backends.triton.backend import TritonAdapter
from NNDF.backends.triton.options import TritonOptions


class TritonEncoderSteps:
    """`ForwardSteps` over a served model: named int64 inputs [B, T] in, the head's output [B, ...] out."""

    name = "triton"

    def __init__(self, client, model: str, names: tuple[str, ...], output: str, device: torch.device):
        self.client, self.model, self.names, self.output = client, model, names, output
        self.device = torch.device(device)

    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        arrays = {name: np.ascontiguousarray(inputs[name].cpu().numpy(), dtype=np.int64) for name in self.names}
        out = self.client.infer(self.model, arrays, (self.output,))[self.output]
        return torch.from_numpy(np.array(out)).to(self.device)

    def close(self) -> None:
        self.client.close()


class EncoderTriton(TritonAdapter):
    """An encoder model served by Triton (see the module docstring)."""

    served: str | None = None  # which server and model the last `steps` uses (for the action's notes)

    def notes(self) -> tuple[str, ...]:
        if self.served is None:
            return ()
        return (f"served by {self.served}: a forward is one request (client, protocol, the server's queue and "
                "model); memory is this client process's",)

    def default_name(self, run) -> str:
        from Encoder.triton.names import Names

        return Names(super().default_name(run)).model_python

    def steps(self, run) -> TritonEncoderSteps:
        from NNDF.backends.triton.client import Client

        opts = run.options_of(TritonOptions)
        name = self.model_name(run)
        names = run.family.task.input_names(run)
        output = run.family.task.head(run.source, run.options).output
        client = Client(opts.triton_url, timeout=opts.triton_timeout)
        try:
            client.require_ready(name)
            config = client.model_config(name)
            self.check_serves(run, name, config)
            inputs, outputs = [i.name for i in config.input], [o.name for o in config.output]
            if sorted(inputs) != sorted(names) or output not in outputs:
                raise UsageError(f"--triton-model {name} takes {', '.join(inputs)} and returns {', '.join(outputs)}; "
                                 f"the triton backend sends {', '.join(names)} and reads {output}: give the model "
                                 f"deploy writes as <name>_model_python (or <name>_model in NVIDIA's container)")
        except BaseException:
            client.close()
            raise
        self.served = f"Triton at {client.endpoint}, model {name}"
        return TritonEncoderSteps(client, name, names, output, run.device)
