"""BLOOM on PyTorch: its task's frameworks backend."""
from BLOOM.config import FAMILY

BACKEND = FAMILY.task.backend("frameworks")
