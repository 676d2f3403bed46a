"""T5 family: T5 and flan-T5 encoder-decoders (facts only; the implementation is Seq2Seq/)."""
