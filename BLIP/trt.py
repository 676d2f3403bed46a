"""BLIP on TensorRT: its task's engines (built from the ONNX export) with this family's export facts."""
from BLIP.config import FAMILY
from BLIP.export import EXPORT

BACKEND = FAMILY.task.backend("trt", EXPORT)
