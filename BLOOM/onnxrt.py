"""BLOOM on ONNX Runtime: its task's onnxrt backend with this family's export facts."""
from BLOOM.config import FAMILY
from BLOOM.export import EXPORT

BACKEND = FAMILY.task.backend("onnxrt", EXPORT)
