"""GPT2 on ONNX Runtime: its task's onnxrt backend with this family's export facts."""
from GPT2.config import FAMILY
from GPT2.export import EXPORT

BACKEND = FAMILY.task.backend("onnxrt", EXPORT)
