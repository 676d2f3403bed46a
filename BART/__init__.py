"""BART family: BART and mBART encoder-decoders (facts only; the implementation is Seq2Seq/)."""
