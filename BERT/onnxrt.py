"""BERT family on ONNX Runtime: its task's onnxrt backend with this family's export facts."""
from BERT.config import FAMILY
from BERT.export import EXPORT

BACKEND = FAMILY.task.backend("onnxrt", EXPORT)
