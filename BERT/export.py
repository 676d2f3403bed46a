"""BERT family export facts: the shared encoder export (Encoder/export.py) needs nothing family-specific."""
from NNDF.backends.onnxrt.export import ExportSpec

EXPORT = ExportSpec()
