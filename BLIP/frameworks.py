"""BLIP on PyTorch: the shared image-to-text frameworks backend."""
from Vision2Seq.backends import ImageTextFrameworksBackend

BACKEND = ImageTextFrameworksBackend()
