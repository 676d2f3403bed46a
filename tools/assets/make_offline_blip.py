"""Build offline BLIP image-captioning assets: a BlipProcessor folder and two tiny test images.

The harness must run without the HuggingFace Hub, so its BLIP smoke tests cannot
download Salesforce/blip-image-captioning-base.  This script writes stand-ins that
load offline; none of it is a real pretrained asset:

* ``BLIP/offline/blip-processor``: a folder that ``BlipProcessor`` / ``AutoProcessor``
  / ``AutoTokenizer.from_pretrained(folder)`` load, holding

  - a BERT-style WordPiece tokenizer (BertNormalizer with lowercasing,
    BertPreTokenizer, "##" continuation prefix) trained from scratch with the
    ``tokenizers`` library on the training split of ``tools/assets/offline_corpus.py``.
    Layout as in BERT/BLIP: ``[PAD]``=0, ``[UNK]``=1, ``[CLS]``=2, ``[SEP]``=3,
    ``[MASK]``=4, WordPiece vocab, then BLIP's decoder bos ``[DEC]`` added as a
    special token at the last id (real BLIP: ``bos_token="[DEC]"``=30522).  It
    loads as ``BertTokenizer`` (= ``BertTokenizerFast`` on transformers 5.x, as
    the real checkpoint's ``tokenizer_class``) and wraps text as ``[CLS] ... [SEP]``.
  - a ``BlipImageProcessor`` with BLIP's (= OpenAI CLIP's) mean/std, bicubic
    resize to a small 32x32, rescale, normalise and RGB conversion.  transformers
    5.x ``BlipProcessor.save_pretrained`` nests it in ``processor_config.json``
    (which loaders read first); the same config is also written as the classic
    ``preprocessor_config.json`` that the Hub checkpoint has.

* ``BLIP/offline/images``: ``red-square.png`` (64x64, a red square on white) and
  ``blue-circle.jpg`` (48x48, a blue disc on yellow, JPEG quality fixed), drawn
  with Pillow.

Determinism: the ``tokenizers`` WordPiece/BPE trainer gives the "##x" continuation
symbols ids in Rust hash-map order, and merges of equal count are ranked by symbol
id, so an unseeded run picks different merges from run to run.  The complete set of
"##x" symbols is therefore computed here (sorted) and handed to the trainer as
leading special tokens, which fixes every id; they stay ordinary vocab entries in
the saved tokenizer (only [PAD] [UNK] [CLS] [SEP] [MASK] [DEC] are special).
Everything else is sorted or seeded, so a re-run rewrites byte-identical files.

Rebuild (a few seconds):
    .venv/bin/python tools/assets/make_offline_blip.py
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import sys
from pathlib import Path

# The whole point is to work without the Hub; fail loudly instead of downloading.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
from PIL import Image, ImageDraw
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
from transformers import AutoProcessor, AutoTokenizer, BertTokenizer, BlipProcessor
from transformers.image_utils import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, PILImageResampling
from transformers.models.blip.image_processing_pil_blip import BlipImageProcessorPil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from offline_corpus import eval_documents, paragraphs, train_documents

REPO_ROOT = Path(__file__).resolve().parents[2]
OFFLINE_DIR = Path("BLIP/offline")
PROCESSOR_DIR = OFFLINE_DIR / "blip-processor"
IMAGES_DIR = OFFLINE_DIR / "images"
COMMAND = ".venv/bin/python tools/assets/make_offline_blip.py"

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # ids 0..4
DEC_TOKEN = "[DEC]"  # BLIP's text-decoder bos, appended as the last id
CONTINUATION = "##"
IMAGE_SIZE = 32  # processor output (real BLIP: 384)
JPEG_QUALITY = 90
MODEL_MAX_LENGTH = 512  # as the real checkpoint's tokenizer_config
MAX_PROCESSOR_BYTES = 256 * 1024
MAX_IMAGE_BYTES = 8 * 1024
N_CHECK_SENTENCES = 30
PROMPT = "a picture of"
CAPTIONS = [  # caption-like text; must round-trip without [UNK]
    "A red square on a white background.",
    "a picture of a blue circle on a yellow background",
    "There is a small object in the middle of the image.",
    "Two shapes, one red and one blue, are shown side by side!",
    "an example of a simple image with 3 colours",
]
IMAGES = {
    # file name: (size, background, shape, box, fill, save options)
    "red-square.png": (64, (255, 255, 255), "rectangle", (16, 16, 47, 47), (255, 0, 0), {"format": "PNG"}),
    "blue-circle.jpg": (
        48,
        (255, 255, 0),
        "ellipse",
        (8, 8, 39, 39),
        (0, 0, 255),
        {"format": "JPEG", "quality": JPEG_QUALITY, "subsampling": 0, "optimize": False},
    ),
}
COLOUR_TOLERANCE = 0.15  # after bicubic resize (and JPEG), in [0, 1] colour units


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", type=Path, default=REPO_ROOT, help="folders are written below this directory")
    p.add_argument("--vocab", type=int, default=3000, help="total ids: specials + WordPiece vocab + [DEC]")
    return p.parse_args()


# --------------------------------------------------------------------------- text


def training_texts() -> list[str]:
    """Training documents of the shared offline corpus, in its (sorted) document order."""
    return [text for _, text in train_documents()]


def held_out_sentences(n: int = N_CHECK_SENTENCES) -> list[str]:
    """n ASCII prose sentences spread evenly over the held-out text (deterministic)."""
    sentences = []
    for _, text in eval_documents():
        for para in paragraphs(text):
            flat = " ".join(para.split())
            for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", flat):
                if 30 <= len(s) <= 200 and s[0].isupper() and ">>>" not in s and s.isascii():
                    sentences.append(s)
    assert len(sentences) >= n, f"only {len(sentences)} held-out sentences"
    step = len(sentences) / n
    return [sentences[int(i * step)] for i in range(n)]


# --------------------------------------------------------------------------- tokenizer


def bert_pipeline() -> Tokenizer:
    """Empty WordPiece tokenizer with BERT-uncased's normaliser and pre-tokeniser."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", continuing_subword_prefix=CONTINUATION))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return tok


def continuation_symbols(tok: Tokenizer, texts: list[str]) -> list[str]:
    """Sorted "##x" for every character x that occurs inside (not at the start of) a pre-tokenised word."""
    chars: set[str] = set()
    for text in texts:
        for word, _ in tok.pre_tokenizer.pre_tokenize_str(tok.normalizer.normalize_str(text)):
            chars.update(word[1:])
    return [CONTINUATION + c for c in sorted(chars)]


def train_wordpiece(texts: list[str], vocab_size: int) -> dict[str, int]:
    """Train the WordPiece vocab (specials included, [DEC] not); ids fixed by seeding the "##x" symbols."""
    tok = bert_pipeline()
    seeded = continuation_symbols(tok, texts)
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIALS + seeded,  # see the module docstring: fixes the ids of the "##x" symbols
        continuing_subword_prefix=CONTINUATION,
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    vocab = tok.get_vocab(with_added_tokens=True)
    if len(vocab) != vocab_size or [vocab[t] for t in SPECIALS] != list(range(len(SPECIALS))):
        raise RuntimeError(
            f"trained {len(vocab)} tokens (wanted {vocab_size}); specials at {[vocab.get(t) for t in SPECIALS]}"
        )
    if sorted(vocab.values()) != list(range(vocab_size)):
        raise RuntimeError("trained vocab ids are not contiguous")
    return dict(sorted(vocab.items(), key=lambda kv: kv[1]))


def build_tokenizer(vocab: dict[str, int]) -> BertTokenizer:
    """BertTokenizer over the trained vocab; [DEC] becomes the bos token at id len(vocab)."""
    return BertTokenizer(
        vocab=vocab,
        do_lower_case=True,
        bos_token=DEC_TOKEN,  # not in the vocab, so it is added as a special token with the next id
        model_max_length=MODEL_MAX_LENGTH,
    )


# --------------------------------------------------------------------------- images


def build_image_processor() -> BlipImageProcessorPil:
    """BLIP's image processor settings at IMAGE_SIZE (saved as image_processor_type "BlipImageProcessor")."""
    # The Pil backend is used directly because torchvision is not installed here; both backends
    # save the same config, and a loader picks torchvision's BlipImageProcessor where it exists.
    return BlipImageProcessorPil(
        size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        resample=PILImageResampling.BICUBIC,
        image_mean=list(OPENAI_CLIP_MEAN),
        image_std=list(OPENAI_CLIP_STD),
        do_resize=True,
        do_rescale=True,
        rescale_factor=1 / 255,
        do_normalize=True,
        do_convert_rgb=True,
    )


def draw_image(size: int, background, shape: str, box, fill) -> Image.Image:
    image = Image.new("RGB", (size, size), background)
    getattr(ImageDraw.Draw(image), shape)(box, fill=fill)
    return image


def write_images(folder: Path) -> None:
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for name, (size, background, shape, box, fill, options) in IMAGES.items():
        draw_image(size, background, shape, box, fill).save(folder / name, **options)


# --------------------------------------------------------------------------- output


def save_processor(processor: BlipProcessor, folder: Path) -> None:
    # Start from an empty folder so a re-run never leaves stale files behind.
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    processor.save_pretrained(folder)  # tokenizer.json, tokenizer_config.json, processor_config.json
    processor.image_processor.save_pretrained(folder)  # preprocessor_config.json, as on the Hub


def readme(tok: BertTokenizer) -> str:
    ids = " ".join(f"{t}={tok.convert_tokens_to_ids(t)}" for t in SPECIALS)
    return f"""# Offline BLIP assets (NOT pretrained; nothing here comes from Salesforce/blip-image-captioning-base)

`blip-processor/`: BlipProcessor folder: BERT-style WordPiece tokenizer ({len(tok)} ids: {ids}, bos {DEC_TOKEN}={tok.bos_token_id}) trained from scratch on the `tools/assets/offline_corpus.py` training split, and a BlipImageProcessor at {IMAGE_SIZE}x{IMAGE_SIZE} with BLIP's mean/std.
`images/`: {", ".join(IMAGES)}, drawn with Pillow (synthetic shapes, not photos).
Rebuilt, byte-identical, by: `{COMMAND}`
"""


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def folder_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(f.relative_to(folder).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


# --------------------------------------------------------------------------- checks


def check(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def squash(text: str) -> str:
    return "".join(text.split())


def verify_tokenizer(folder: Path, n_vocab: int, sentences: list[str]) -> dict:
    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    check(isinstance(tok, BertTokenizer), f"AutoTokenizer gave {type(tok).__name__}")
    ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIALS + [DEC_TOKEN]}
    check(list(ids.values()) == list(range(len(SPECIALS))) + [n_vocab], f"special ids {ids}")
    check(len(tok) == n_vocab + 1 and tok.bos_token == DEC_TOKEN and tok.bos_token_id == n_vocab, "[DEC] is not bos")
    check(
        (tok.pad_token_id, tok.unk_token_id, tok.cls_token_id, tok.sep_token_id, tok.mask_token_id) == (0, 1, 2, 3, 4),
        "special token attributes",
    )
    check(set(tok.all_special_tokens) == set(SPECIALS + [DEC_TOKEN]), f"special tokens {tok.all_special_tokens}")
    prompt = tok(PROMPT).input_ids
    check(prompt[0] == tok.cls_token_id and prompt[-1] == tok.sep_token_id, f"{PROMPT!r} -> {prompt}")
    check(tok.unk_token_id not in prompt and len(prompt) > 3, f"{PROMPT!r} -> {prompt}")
    check(tok.decode(prompt, skip_special_tokens=True) == PROMPT, tok.decode(prompt))
    # Round trip: lowercased text back, modulo spacing (BERT decoding re-spaces punctuation).
    for s in CAPTIONS + sentences:
        enc = tok(s).input_ids
        check(tok.unk_token_id not in enc, f"[UNK] in {s!r}")
        check(squash(tok.decode(enc, skip_special_tokens=True)) == squash(s.lower()), f"round trip {s!r}")
    check(tok(DEC_TOKEN, add_special_tokens=False).input_ids == [n_vocab], "[DEC] is not a single special token")
    return {"vocab": len(tok), **ids, "prompt_ids": prompt, "class": type(tok).__name__}


def verify_processor(folder: Path, images: Path, n_vocab: int) -> dict:
    processor = BlipProcessor.from_pretrained(folder, local_files_only=True)
    auto = AutoProcessor.from_pretrained(folder, local_files_only=True)
    check(type(auto) is BlipProcessor, f"AutoProcessor gave {type(auto).__name__}")
    check(processor.tokenizer.bos_token_id == n_vocab, "processor tokenizer lost [DEC]")
    nested = json.loads((folder / "processor_config.json").read_text())
    legacy = json.loads((folder / "preprocessor_config.json").read_text())
    check(nested["processor_class"] == "BlipProcessor", "processor_class")
    check(nested["image_processor"] == legacy, "processor_config.json and preprocessor_config.json disagree")
    check(legacy["image_processor_type"] == "BlipImageProcessor", legacy["image_processor_type"])
    check(legacy["size"] == {"height": IMAGE_SIZE, "width": IMAGE_SIZE}, f"size {legacy['size']}")
    check(all(legacy[k] for k in ("do_resize", "do_rescale", "do_normalize", "do_convert_rgb")), "do_* flags")
    check(
        np.allclose(legacy["image_mean"], OPENAI_CLIP_MEAN) and np.allclose(legacy["image_std"], OPENAI_CLIP_STD),
        "mean/std",
    )
    mean, std = np.array(OPENAI_CLIP_MEAN)[:, None, None], np.array(OPENAI_CLIP_STD)[:, None, None]
    shapes = {}
    for name, (size, background, _, box, fill, options) in IMAGES.items():
        with Image.open(images / name) as image:
            check(
                image.format == options["format"] and image.size == (size, size), f"{name}: {image.format} {image.size}"
            )
            image = image.convert("RGB")
        inputs = processor(images=image, text=PROMPT, return_tensors="pt")
        check(sorted(inputs) == ["attention_mask", "input_ids", "pixel_values"], f"processor outputs {sorted(inputs)}")
        pixels = inputs["pixel_values"]
        check(tuple(pixels.shape) == (1, 3, IMAGE_SIZE, IMAGE_SIZE), f"{name}: pixel_values {tuple(pixels.shape)}")
        check(
            inputs["input_ids"][0, 0].item() == 2 and inputs["input_ids"][0, -1].item() == 3, "prompt not [CLS]...[SEP]"
        )
        rgb = pixels[0].numpy() * std + mean  # undo the normalisation: back to [0, 1] colours
        centre = rgb[:, IMAGE_SIZE // 2, IMAGE_SIZE // 2]
        corner = rgb[:, 0, 0]
        check(np.abs(centre - np.array(fill) / 255).max() < COLOUR_TOLERANCE, f"{name}: centre colour {centre}")
        check(np.abs(corner - np.array(background) / 255).max() < COLOUR_TOLERANCE, f"{name}: corner colour {corner}")
        only_image = processor(images=image, return_tensors="pt")
        check(tuple(only_image["pixel_values"].shape) == (1, 3, IMAGE_SIZE, IMAGE_SIZE), "image-only call")
        shapes[name] = tuple(pixels.shape)
    return {"image_processor": type(processor.image_processor).__name__, "pixel_values": shapes}


def main() -> None:
    args = parse_args()
    n_vocab = args.vocab - 1  # the last id is [DEC]
    texts = training_texts()

    tok = build_tokenizer(train_wordpiece(texts, n_vocab))
    processor = BlipProcessor(image_processor=build_image_processor(), tokenizer=tok)
    processor_dir, images_dir = args.root / PROCESSOR_DIR, args.root / IMAGES_DIR
    save_processor(processor, processor_dir)
    write_images(images_dir)
    (args.root / OFFLINE_DIR / "README.md").write_text(readme(tok))

    report = {
        "tokenizer": verify_tokenizer(processor_dir, n_vocab, held_out_sentences()),
        "processor": verify_processor(processor_dir, images_dir, n_vocab),
    }
    check(folder_bytes(processor_dir) <= MAX_PROCESSOR_BYTES, f"{processor_dir} too large")
    for image in images_dir.iterdir():
        check(image.stat().st_size <= MAX_IMAGE_BYTES, f"{image} too large")
    for folder in (processor_dir, images_dir):
        files = {f.name: f.stat().st_size for f in sorted(folder.iterdir())}
        report[str(folder.relative_to(args.root))] = {
            "bytes": folder_bytes(folder),
            "sha256": folder_digest(folder),
            "files": files,
        }
    for name, info in report.items():
        print(f"{name}: {json.dumps(info)}")
    print(f"checks passed ({len(CAPTIONS)} captions + {N_CHECK_SENTENCES} held-out sentences round-tripped)")


if __name__ == "__main__":
    main()
