"""GPT2 export facts: the shared decoder export (NNDF.backends.onnx_export) needs nothing family-specific."""
from NNDF.backends.onnx_export import ExportSpec

EXPORT = ExportSpec()
