"""GPT2 on TensorRT: the shared engine builder and runtime with this family's export facts."""
from GPT2.export import EXPORT
from NNDF.backends.trt import TensorRTBackend

BACKEND = TensorRTBackend(EXPORT)
