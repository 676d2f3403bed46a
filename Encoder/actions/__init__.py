"""Encoder models' implementations of the actions, named in `Encoder.task.TextEncoder.actions`: `predict`
(embeddings / labels of texts), `benchmark` (one forward per call), `accuracy` (labelled texts; embedding
agreement), `run` / `compare` (checkpoint.toml samples).

Each is a library function with the shared action's signature (`(family, backends, *option groups in ACTIONS
order, *backend option groups) -> Report`). `common.py` holds what they share: JSONL texts, `forward_texts`
(texts -> one output per text, in padded batches), label names, timed forwards. `accuracy`'s default dataset is
data/encoder_offline.jsonl (40 sentences labelled "positive" / "negative"); checkpoint.toml's expected values
come from tools/assets/make_encoder_checkpoints.py (sentence-transformers and HF classifiers, never these backends)."""
