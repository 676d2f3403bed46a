"""The image-to-text task: images (and an optional text prompt) in, captions out.

Items are `ImagePrompt(image path, text)`. The image goes through the model's HF image processor to
`pixel_values` (the encoder's input); the decoder prompt follows the captioner's convention (BLIP's): the text's
ids with [CLS] replaced by the decoder BOS ([DEC]) and the closing [SEP] dropped, so an empty text is [DEC] alone and generation stops at [SEP].
Images are captioned one at a time (prompts of different lengths would need padding, which absolute
positions do not support). `accuracy` (LAMBADA) is not defined for captioning.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

from NNDF.errors import UsageError
from NNDF.family import ROOT
from NNDF.options import ImageOptions
from NNDF.tasks import Prompt, shared_positions_problem
from Seq2Seq.task import Seq2SeqLM
from Vision2Seq.model import ImageTextAdapter


@dataclass(frozen=True)
class ImagePrompt:
    image: str  # path to a PNG or JPEG
    text: str = ""  # conditional captioning prefix ("a picture of"), or empty

    def __str__(self) -> str:  # the `prompt` of reports: the image path, and the text if any ("+": no table's "|")
        return f"{self.image} + {self.text}" if self.text else self.image


def _text_config(run):
    """The text decoder's config (HF's standard accessor for a composite config)."""
    return run.source.config.get_text_config(decoder=True)


@lru_cache(maxsize=4)
def _image_processor(location: str, local: bool):
    from transformers import AutoImageProcessor

    return AutoImageProcessor.from_pretrained(location, local_files_only=local)


def _check_file(path: str, what: str) -> None:
    if not Path(path).is_file():
        kind = "a folder" if Path(path).is_dir() else "no such file"
        raise UsageError(f"{what} {path}: {kind}; give a PNG or JPEG file")


def load_image(path: str):
    """A PIL image in RGB; a missing or unreadable file is one line (UsageError)."""
    from PIL import Image, UnidentifiedImageError

    _check_file(path, "--image")
    try:
        with Image.open(path) as image:
            return image.convert("RGB")
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as exc:
        raise UsageError(f"{path}: not a readable image ({exc.__class__.__name__}); give a PNG or JPEG file") \
            from exc


class ImageToText(Seq2SeqLM):
    """An encoder-decoder task whose encoder reads an image: the same parts (the "encoder" of --encoder-onnx /
    --encoder-engine is the vision encoder), steps and exports; what differs is how items become inputs."""

    kind = "vision2seq"
    auto_class = "AutoModelForImageTextToText"
    # transformers 5.17-5.23: BLIP's generate sizes a static cache one position short of what it writes
    hf_static_refusal = "transformers' captioning generate overruns its own static cache (index_copy_ out of bounds)"

    def once_per_input(self, model) -> list:
        return [ImageTextAdapter(model).get_encoder()]
    accuracy_refusal = ("accuracy (LAMBADA-style text scoring) is not defined for image captioning; use run, "
                        "compare, chat --image or benchmark")
    option_groups = (*Seq2SeqLM.option_groups, ImageOptions)
    adapters = {"frameworks": "Vision2Seq.backends:ImageTextTorch",
                "onnxrt": "Vision2Seq.backends:ImageTextOnnx",
                "trt": "Vision2Seq.backends:ImageTextTrt",
                "triton": "NNDF.backends.triton.backend:GenerativeTriton"}

    def items(self, options, texts: tuple, images_from: str = "--image") -> list[ImagePrompt]:
        """--image files (checked here, before anything loads) with each --prompt text."""
        if not options.image:
            raise UsageError("image captioning needs images: give --image PATH (repeatable; PNG or JPEG)")
        for image in options.image:
            _check_file(image, images_from)
        return [ImagePrompt(image, text) for image in options.image for text in (texts or ("",))]

    def shown(self, item: ImagePrompt) -> str:  # the image file's name, not its whole path
        return str(ImagePrompt(Path(item.image).name, item.text))

    def sample_item(self, sample: dict) -> ImagePrompt:
        """checkpoint.toml: `image` (relative to the repository root) and an optional text `input`."""
        image = Path(sample["image"])
        return ImagePrompt(str(image if image.is_absolute() else ROOT / image), sample.get("input", ""))

    def special_ids(self, run) -> tuple[int, int]:
        """(EOS, pad) of generation: the text decoder stops at [SEP]."""
        text = _text_config(run)
        return text.sep_token_id, text.pad_token_id

    def length_problem(self, run, prompt: int, new: int) -> str | None:
        """The decoder prompt and the caption share the text decoder's positions."""
        return shared_positions_problem(run, prompt, new)

    def passage_ids(self, tokenizer, text: str) -> list[int]:
        raise UsageError(self.accuracy_refusal)

    def split_passage(self, ids: list[int], k: int, eos: int | None):
        raise UsageError(self.accuracy_refusal)

    def teacher_force(self, run, steps, context: list[int], target: list[int]):
        raise UsageError(self.accuracy_refusal)

    def item_from_line(self, line: str) -> ImagePrompt:
        """Interactive chat: each line is an image path (a missing file is refused: one message, the chat goes on)."""
        path = line.strip()
        _check_file(path, "image")
        return ImagePrompt(path)

    def _processor(self, run):
        return _image_processor(run.source.location, run.source.files_only)

    def _decoder_ids(self, run, text: str) -> list[int]:
        ids = run.tokenizer(text)["input_ids"]  # [CLS] ... [SEP]
        return [_text_config(run).bos_token_id] + ids[1:-1]

    def prompts(self, run, items: list[ImagePrompt]) -> Prompt:
        if len({item.text for item in items}) > 1:
            raise UsageError("caption images with one text prompt at a time (text prompts of different lengths would need padding, which the decoder's absolute positions do not allow)")
        images = [load_image(item.image) for item in items]
        pixels = self._processor(run)(images=images, return_tensors="pt")["pixel_values"]
        ids = torch.tensor([self._decoder_ids(run, items[0].text)] * len(items))
        return Prompt(ids, torch.ones_like(ids), {"pixel_values": pixels.to(run.dtype)})

    def random_prompt(self, run, batch: int, length: int, generator: torch.Generator) -> Prompt:
        """Random pixels at the model's resolution, and a decoder prompt of [DEC] + length - 1 random tokens."""
        text, size = _text_config(run), run.source.config.vision_config.image_size
        pixels = torch.randn(batch, 3, size, size, generator=generator).to(run.device, run.dtype)
        ids = torch.randint(0, run.source.dims.vocab, (batch, length), generator=generator)
        ids[:, 0] = text.bos_token_id
        ids = ids.to(run.device)
        return Prompt(ids, torch.ones_like(ids), {"pixel_values": pixels})

    def hf_generate_inputs(self, run, prompt: Prompt) -> dict:
        """What the model's `generate` needs for the same decoder prompt (it drops the last id, as for [SEP], and
        sets EOS and pad itself)."""
        ids = torch.cat([prompt.input_ids, prompt.input_ids[:, :1]], dim=1)
        return {"pixel_values": prompt.encoder["pixel_values"], "input_ids": ids}

    def score_item(self, run, steps, item: ImagePrompt, target: list[int]) -> torch.Tensor:
        """log-softmax rows predicting each target token [len(target), V] given the image and the prompt."""
        prompt = self.prompts(run, [item])
        lead = prompt.input_ids[0].tolist()
        dec = torch.tensor([lead + target[:-1]], device=steps.device)
        cache = steps.start({k: v.to(steps.device) for k, v in prompt.encoder.items()}, dec.shape[1])
        ones = torch.ones_like(dec)
        logits, _ = steps.forward(dec, ones, ones, cache)
        return torch.log_softmax(logits[0, len(lead) - 1:].float(), dim=-1)


IMAGE_TO_TEXT = ImageToText()
