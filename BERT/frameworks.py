"""BERT family on PyTorch: its task's frameworks backend with this family's export facts."""
from BERT.config import FAMILY
from BERT.export import EXPORT

BACKEND = FAMILY.task.backend("frameworks", EXPORT)
