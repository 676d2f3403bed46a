"""BLIP on ONNX Runtime: vision encoder, text decoder and cross-attention cache generator graphs."""
from BLIP.export import EXPORT
from Vision2Seq.backends import onnxrt_backend

BACKEND = onnxrt_backend(EXPORT)
