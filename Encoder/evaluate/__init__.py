"""The encoder kind's evaluators, named in `Encoder.task.TextEncoder.evaluators` (NNDF/evaluate/__init__.py says
what an evaluator answers): `predict` (embeddings / labels of texts), `benchmark` (one forward per call),
`accuracy` (labelled texts; embedding agreement), `run` / `compare` (checkpoint.toml samples), and `deploy`
(Encoder/triton/deploy.py). `chat` and `generate` have none.

`common.py` holds what they share: `forward_texts` (texts -> one output per text, in padded batches), label
names, timed forwards. `accuracy`'s default dataset is data/encoder_offline.jsonl (40 sentences labelled
"positive" / "negative"); checkpoint.toml's expected values come from tools/assets/make_encoder_checkpoints.py
(sentence-transformers and HF classifiers, never these backends)."""
