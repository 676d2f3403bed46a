"""Serving with NVIDIA Triton Inference Server: model repositories, the server, the served models. (The `triton`
client backend, which asks a served model, is NNDF/backends/triton/.)

- `config.py`: model configurations as Triton's own protobuf (`tritonclient.grpc.model_config_pb2.ModelConfig`):
  small builders, `write_config` (text format, atomic) and `read_config` (strict parse against the schema).
- `repository.py`: a whole repository written atomically (staged beside the target, then renamed), model names,
  the python-backend `model.py` stub, the repository README.
- `server.py`: finding `tritonserver` (PATH, else the nvidia-pytriton wheel's bundled binary), the python
  backend's environment (this venv, with numpy 1.x for the stub: see `stub_environment`), starting it on
  loopback ports, waiting until the models are READY, stopping it (a context manager).
- `options.py`: the option groups of `deploy` and `serve`.
- `generative.py`: the python-backend model of generative kinds (runs the project's generation loop over its
  ONNX Runtime steps inside the server, with request batching, optional token streaming and teacher forcing);
  `generative_deploy.py` writes it; `load.py` is concurrent load with every answer checked
  (tools/bench/triton_load.py).
"""
