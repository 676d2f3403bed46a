"""OPT on PyTorch: the shared frameworks backend, unchanged."""
from NNDF.backends.frameworks import FrameworksBackend

BACKEND = FrameworksBackend()
