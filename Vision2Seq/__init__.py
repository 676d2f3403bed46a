"""What image-to-text families (BLIP) share: the task (images and an optional text prompt in, captions out), an
adapter that presents an HF captioning model in the encoder-decoder shape Seq2Seq/ exports and runs (vision
encoder -> image embeddings; text decoder with self-attention KV cache and cross-attention to the image), and
the backends built on Seq2Seq's. BLIP/ holds only facts."""
