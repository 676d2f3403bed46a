"""BLOOM on ONNX Runtime: the shared backend with this family's export facts."""
from BLOOM.export import EXPORT
from NNDF.backends.onnxrt import OnnxRuntimeBackend

BACKEND = OnnxRuntimeBackend(EXPORT)
