"""BLOOM on TensorRT: its task's engines (built from the ONNX export) with this family's export facts."""
from BLOOM.config import FAMILY
from BLOOM.export import EXPORT

BACKEND = FAMILY.task.backend("trt", EXPORT)
