"""BLIP on TensorRT: vision-encoder, decoder and cache-generator engines with BLIP's export facts."""
from BLIP.export import EXPORT
from Vision2Seq.backends import ImageTextTensorRTBackend

BACKEND = ImageTextTensorRTBackend(EXPORT)
