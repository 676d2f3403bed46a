"""BERT family on TensorRT: its task's trt backend with this family's export facts."""
from BERT.config import FAMILY
from BERT.export import EXPORT

BACKEND = FAMILY.task.backend("trt", EXPORT)
