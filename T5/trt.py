"""T5 on TensorRT: the shared encoder-decoder engines (encoder, decoder, cache generator) with T5's export facts."""
from T5.export import EXPORT
from Seq2Seq.trt import Seq2SeqTensorRTBackend

BACKEND = Seq2SeqTensorRTBackend(EXPORT)
