"""BART export facts: the shared encoder-decoder export needs nothing family-specific (fp16 runs as is)."""
from NNDF.backends.onnx_export import ExportSpec

EXPORT = ExportSpec()
