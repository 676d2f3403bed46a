"""Actions: one module per CLI action, each a library function that returns a `Report`.

benchmark.py (fixed-length random inputs), accuracy.py (LAMBADA), chat.py (interactive / --prompt),
checkpoint.py (`run` and `compare` over a family's checkpoint.toml), listing.py (`list`). `common.py` holds
what they share: opening a run, setting backends up one at a time, tokenising prompts.
"""
