"""Encoder-only models (BERT, RoBERTa, DistilBERT, MiniLM, XLM-R, ALBERT, ELECTRA): texts in, one forward pass,
sentence embeddings or class scores out. `task.py` is the kind's `Task` (heads chosen per checkpoint); `model.py`
the module every backend runs (the HF encoder plus its head's pooling); `frameworks.py` / `onnxrt.py` / `trt.py`
the backends; `actions/` this kind's implementations of the actions (predict, benchmark, accuracy, run,
compare)."""
