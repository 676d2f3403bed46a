"""Encoder models' implementations of the actions, named in `Encoder.task.TextEncoder.actions`: `predict`
(embeddings / labels of texts), `benchmark` (one forward per call), `accuracy` (labelled texts; embedding
agreement), `run` / `compare` (checkpoint.toml samples)."""
