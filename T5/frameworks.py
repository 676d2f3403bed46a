"""T5 on PyTorch: the shared encoder-decoder frameworks backend."""
from Seq2Seq.frameworks import Seq2SeqFrameworksBackend

BACKEND = Seq2SeqFrameworksBackend()
