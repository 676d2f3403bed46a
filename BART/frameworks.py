"""BART on PyTorch: its task's frameworks backend."""
from BART.config import FAMILY

BACKEND = FAMILY.task.backend("frameworks")
