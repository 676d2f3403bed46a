"""GPT2 on PyTorch: its task's frameworks backend."""
from GPT2.config import FAMILY

BACKEND = FAMILY.task.backend("frameworks")
