"""What every encoder-decoder family (T5, BART/mBART) shares: the task (how prompts reach the encoder, how the
decoder is scored), the step functions for each backend, the three-part ONNX export (encoder, decoder with
self-attention KV cache, cross-attention cache generator) and the engines built from it. Family folders hold
only facts."""
