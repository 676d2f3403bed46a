"""LLAMA export facts: the decoder-only kind's export (CausalLM/export.py) needs nothing family-specific."""
from NNDF.backends.onnxrt.export import ExportSpec

EXPORT = ExportSpec()
