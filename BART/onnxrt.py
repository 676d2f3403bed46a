"""BART on ONNX Runtime: its task's onnxrt backend with this family's export facts."""
from BART.config import FAMILY
from BART.export import EXPORT

BACKEND = FAMILY.task.backend("onnxrt", EXPORT)
