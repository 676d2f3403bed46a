"""OPT on TensorRT: its task's engines (built from the ONNX export) with this family's export facts."""
from OPT.config import FAMILY
from OPT.export import EXPORT

BACKEND = FAMILY.task.backend("trt", EXPORT)
