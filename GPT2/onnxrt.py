"""GPT2 on ONNX Runtime: the shared backend with this family's export facts."""
from GPT2.export import EXPORT
from NNDF.backends.onnxrt import OnnxRuntimeBackend

BACKEND = OnnxRuntimeBackend(EXPORT)
