"""BLOOM on TensorRT: the shared engine builder and runtime with this family's export facts."""
from BLOOM.export import EXPORT
from NNDF.backends.trt import TensorRTBackend

BACKEND = TensorRTBackend(EXPORT)
