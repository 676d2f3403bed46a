"""T5 on PyTorch: its task's frameworks backend."""
from T5.config import FAMILY

BACKEND = FAMILY.task.backend("frameworks")
