"""T5 on ONNX Runtime: its task's onnxrt backend with this family's export facts."""
from T5.config import FAMILY
from T5.export import EXPORT

BACKEND = FAMILY.task.backend("onnxrt", EXPORT)
