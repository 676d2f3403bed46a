"""Builders of the committed offline assets (models, tokenizers, golden checkpoints, the LAMBADA-style dataset) and
of random-weight models with published shapes for benchmarks. Each script is run by hand: tools/README.md."""
