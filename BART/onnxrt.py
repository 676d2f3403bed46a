"""BART on ONNX Runtime: the shared three-graph encoder-decoder backend with BART's export facts."""
from Seq2Seq.onnxrt import onnxrt_backend
from BART.export import EXPORT

BACKEND = onnxrt_backend(EXPORT)
