"""BART on TensorRT: the shared encoder-decoder engines (encoder, decoder, cache generator) with BART's export facts."""
from BART.export import EXPORT
from Seq2Seq.trt import Seq2SeqTensorRTBackend

BACKEND = Seq2SeqTensorRTBackend(EXPORT)
