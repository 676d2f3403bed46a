"""OPT on PyTorch: its task's frameworks backend."""
from OPT.config import FAMILY

BACKEND = FAMILY.task.backend("frameworks")
