"""The image-to-text kind's adapters for the three in-process backends, built on Seq2Seq's: the same steps, export
and engines over the `ImageTextAdapter`, with the vision encoder reading `pixel_values` instead of token ids."""
from __future__ import annotations

import torch

from NNDF.backends.trt.profiles import EngineShapes, Range, seq_range
from NNDF.context import RunContext
from Seq2Seq.export import EncoderInputs
from Seq2Seq.frameworks import Seq2SeqTorch
from Seq2Seq.onnxrt import Seq2SeqOnnx
from Seq2Seq.trt import Seq2SeqTrt
from Seq2Seq.trt_steps import Seq2SeqTrtSteps
from Vision2Seq.model import ImageTextAdapter


def _pixels_example(model, gen) -> dict:
    """Random pixels at the vision encoder's resolution (the HF config's `vision_config`)."""
    size = model.config.vision_config.image_size
    param = next(model.parameters())
    return {"pixel_values": torch.randn(2, 3, size, size, generator=gen).to(param.device, param.dtype)}


# pixel_values [batch, 3, H, W]: only the batch is dynamic (the encoder's patch count follows from H and W)
IMAGE_ENCODER = EncoderInputs(("pixel_values",), (("batch", None, None, None),), _pixels_example)


class ImageTextTorch(Seq2SeqTorch):
    def model(self, run: RunContext):
        return ImageTextAdapter(run.torch_model())


class ImageTextOnnx(Seq2SeqOnnx):
    """`vision2seq-<precision>-<kv|nokv>/`: encoder.onnx (the vision encoder), decoder.onnx, cache_generator.onnx."""

    prefix = "vision2seq"
    encoder_inputs = IMAGE_ENCODER

    def module(self, model):
        return ImageTextAdapter(model)

    def validation_encoder(self, run: RunContext) -> dict:
        """Two random images at the vision encoder's resolution (fixed seed)."""
        size = run.source.config.vision_config.image_size
        pixels = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(0))
        return {"pixel_values": pixels.to(torch.float16 if run.options.fp16 else torch.float32)}

    def validation_outputs(self, run: RunContext, steps) -> torch.Tensor:
        """Captions have no text passages to teacher-force (`--quantize` compares graphs on these instead): the
        decoder's log-probabilities [2 * 16, V] for two random images and random 16-token prompts (fixed seed)."""
        from NNDF.steps import position_ids_from_mask

        prompt = self.task.random_prompt(run, 2, 16, torch.Generator().manual_seed(0))
        cache = steps.start(prompt.encoder, prompt.input_ids.shape[1])
        mask = prompt.attention_mask
        logits, _ = steps.forward(prompt.input_ids, mask, position_ids_from_mask(mask), cache)
        return torch.log_softmax(logits.float(), dim=-1).reshape(-1, logits.shape[-1]).cpu()


class ImageTextTrt(Seq2SeqTrt):
    """Vision-encoder, decoder and cache-generator engines; the first decoder step takes the text prompt."""

    artifact = ImageTextOnnx

    def first(self, shapes: EngineShapes) -> Range:
        return seq_range(1, min(shapes.max_input, shapes.max_total - 1))

    def make_steps(self, run: RunContext, ios: dict, shapes: EngineShapes) -> Seq2SeqTrtSteps:
        if run.options.static_cache:
            return super().make_steps(run, ios, shapes)
        return Seq2SeqTrtSteps(ios, run.device, run.options.use_cache, shapes.rows.max, shapes.max_input,
                               shapes.max_total)

