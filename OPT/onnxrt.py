"""OPT on ONNX Runtime: its task's onnxrt backend with this family's export facts."""
from OPT.config import FAMILY
from OPT.export import EXPORT

BACKEND = FAMILY.task.backend("onnxrt", EXPORT)
