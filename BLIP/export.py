"""BLIP export facts: nothing family-specific (fp16 islands, if the vision encoder needs them, go here)."""
from NNDF.backends.onnxrt.export import ExportSpec

EXPORT = ExportSpec()
