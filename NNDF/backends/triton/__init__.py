"""The `triton` client backend: a model served by Triton answers what an in-process backend would (`backend.py`),
over the Triton client (`client.py`); the served models' names (`names.py`) and its flags (`options.py`). Serving
models (repositories, the server) is NNDF/triton/."""
