"""GPT2 on TensorRT: its task's engines (built from the ONNX export) with this family's export facts."""
from GPT2.config import FAMILY
from GPT2.export import EXPORT

BACKEND = FAMILY.task.backend("trt", EXPORT)
