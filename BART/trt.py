"""BART on TensorRT: its task's engines (built from the ONNX export) with this family's export facts."""
from BART.config import FAMILY
from BART.export import EXPORT

BACKEND = FAMILY.task.backend("trt", EXPORT)
