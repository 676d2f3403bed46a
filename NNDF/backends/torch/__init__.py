"""The `frameworks` backend: PyTorch through HF transformers (`backend.py`) and the decoder steps over an HF model
(`steps.py`: dynamic or static cache, CUDA graphs, torch.compile, a family's fused step)."""
