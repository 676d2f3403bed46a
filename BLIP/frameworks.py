"""BLIP on PyTorch: its task's frameworks backend."""
from BLIP.config import FAMILY

BACKEND = FAMILY.task.backend("frameworks")
