"""T5 on ONNX Runtime: the shared three-graph encoder-decoder backend with T5's export facts."""
from Seq2Seq.onnxrt import onnxrt_backend
from T5.export import EXPORT

BACKEND = onnxrt_backend(EXPORT)
