"""T5 on TensorRT: its task's engines (built from the ONNX export) with this family's export facts."""
from T5.config import FAMILY
from T5.export import EXPORT

BACKEND = FAMILY.task.backend("trt", EXPORT)
