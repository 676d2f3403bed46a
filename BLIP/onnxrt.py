"""BLIP on ONNX Runtime: its task's onnxrt backend with this family's export facts."""
from BLIP.config import FAMILY
from BLIP.export import EXPORT

BACKEND = FAMILY.task.backend("onnxrt", EXPORT)
