"""BLIP's static-cache caption decoder step (BLIP/fused_decode.py) gives HF's text decoder's logits and `generate`'s
captions, in fp32 on the CPU, driven directly through the step contract (`Seq2Seq.fused_step`): the image encoder
runs as HF's module, `cross` fills the image's cross-attention buffers, `prefill` runs the decoder prompt ([DEC] +
a text prompt, as conditional captioning does), then one token per step with `slot.ids` / `slot.write` set as the
kind sets them. Models: blip-offline, and a tiny random BLIP whose vision width differs from the text width (the
cross-attention key/value projections take `encoder_hidden_size`), with a tanh-GELU, and with every layer norm and
bias moved off HF's ones and zeros (a norm or bias left out or misplaced changes the logits). One row's image
tokens are partly masked out in one case (the step honours `slot.encoder_mask`: HF's logits without those tokens). The
compiled step (inductor, fixed shapes) gives the eager step's logits. Configs the step does not reproduce are
refused in one line. End to end (`frameworks --static-cache`, the kind's steps over this step): HF's captions,
greedy and 3 beams, with and without a text prompt, EOS mid-way (`check_static_cache_captions`, which
tests/test_blip_fused_ort.py runs on onnxrt's built graphs); with HARNESS_TEST_DEVICE=cuda also replayed from a CUDA
graph, eager and compiled."""
import copy
import os
import shutil

import pytest
import torch

from CausalLM.fused_step import FusedSettings

from NNDF import registry
from NNDF.actions.common import backend_steps, encode
from NNDF.context import make_context
from NNDF.errors import UsageError
from NNDF.options import ModelOptions
from Vision2Seq.model import ImageTextAdapter
from Vision2Seq.task import ImagePrompt

from conftest import ROOT, counted_kernels, generate_twice
from test_fused_decode import MODES, _mode_id

from BLIP.config import PROCESSOR_DIR
from BLIP.fused_decode import FusedBlipStep

IMAGES = [str(ROOT / "BLIP" / "offline" / "images" / name) for name in ("red-square.png", "blue-circle.jpg")]
TEXT = "a picture of"
STEPS = 8  # one-token steps after the prompt
NEW = 10  # new tokens in the end-to-end cases
DEVICE = os.environ.get("HARNESS_TEST_DEVICE", "cpu")  # the end-to-end cases also run on CUDA (graph, compiled)
CASES = [[ImagePrompt(IMAGES[0])], [ImagePrompt(i, TEXT) for i in IMAGES]]  # [DEC] alone; [DEC] + TEXT, 2 rows


def _tiny_dir(root) -> str:
    """A random BLIP (vision width 48, text width 32, tanh-GELU) with std-0.1 weights and every 1-D parameter (layer
    norm gains and biases, product biases, the LM head's bias) drawn away from HF's ones and zeros."""
    from transformers import AutoTokenizer, BlipConfig, BlipForConditionalGeneration

    tok = AutoTokenizer.from_pretrained(PROCESSOR_DIR, local_files_only=True)
    text = dict(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                max_position_embeddings=40, bos_token_id=tok.bos_token_id, pad_token_id=tok.pad_token_id,
                sep_token_id=tok.sep_token_id, eos_token_id=tok.sep_token_id, hidden_act="gelu_pytorch_tanh",
                layer_norm_eps=1e-6)
    vision = dict(hidden_size=48, num_hidden_layers=1, num_attention_heads=4, intermediate_size=96, image_size=32,
                  patch_size=8)
    torch.manual_seed(0)
    model = BlipForConditionalGeneration(BlipConfig(text_config=text, vision_config=vision))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() >= 2:
                param.normal_(0.0, 0.1)
            else:
                param.add_(torch.randn_like(param) * 0.3)
    model.save_pretrained(root)
    for path in PROCESSOR_DIR.glob("*.json"):
        shutil.copyfile(path, root / path.name)
    return str(root)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Model name -> its --torch-dir (None: the variant's own)."""
    return {"blip-offline": None, "tiny": _tiny_dir(tmp_path_factory.mktemp("tiny-blip"))}


def _run(path, workdir, **options):
    options = {"device": DEVICE, **options}
    return make_context(registry.family("BLIP"), ModelOptions(torch_dir=path, working_dir=str(workdir), use_cache=True,
                                                              **options))


@pytest.fixture(scope="module")
def runs(models, tmp_path_factory):
    """The two models' runs (HF model loaded once each), by name."""
    work = tmp_path_factory.mktemp("work")
    return {name: _run(path, work, device="cpu") for name, path in models.items()}


def _inputs(run, mask_tail: int = 0):
    """The model, the image embeddings [2, tokens, vision width], their mask (row 1's last `mask_tail` tokens
    masked out) and the decoder prompt [2, S] ([DEC] + TEXT)."""
    model = run.torch_model()
    prompt = encode(run, [ImagePrompt(IMAGES[0], TEXT), ImagePrompt(IMAGES[1], TEXT)])
    with torch.no_grad():
        image = model.vision_model(pixel_values=prompt.encoder["pixel_values"]).last_hidden_state
    mask = torch.ones(image.shape[:2], dtype=torch.long)
    if mask_tail:
        mask[1, -mask_tail:] = 0
    return model, image, mask, prompt.input_ids


def _start(step, image, mask, length: int):
    slot = step.new_slot(image.shape[0], length, image.shape[1])
    slot.encoder_mask.copy_(mask)
    step.cross(image, slot)
    return slot


def _step_logits(step, image, mask, ids, prompt_length: int):
    """The step's logits [R, S, V] for ids [R, S]: prefill over the first `prompt_length`, then one token each."""
    slot = _start(step, image, mask, ids.shape[1] + 2)
    out = [step.prefill(ids[:, :prompt_length], slot, last_only=False)]
    for position in range(prompt_length, ids.shape[1]):
        slot.ids.copy_(ids[:, position:position + 1])
        slot.write.fill_(position)
        out.append(step.one_token(slot))
    return torch.cat(out, dim=1)


@pytest.mark.parametrize("mask_tail", [0, 5], ids=["all-image", "masked-image"])
@pytest.mark.parametrize("name", ["blip-offline", "tiny"])
def test_logits_match_hf(name, mask_tail, runs):
    """HF's text decoder over the whole sequence at once, row by row over the image tokens the mask keeps (HF's
    BLIP text cross-attention does not apply `encoder_attention_mask`: the image tokens are dropped instead)."""
    model, image, mask, prompt = _inputs(runs[name], mask_tail)
    generator = torch.Generator().manual_seed(1)
    later = torch.randint(3, model.config.text_config.vocab_size, (2, STEPS), generator=generator)
    ids = torch.cat([prompt, later], dim=1)
    with torch.no_grad():
        expected = torch.cat([model.text_decoder(input_ids=ids[r:r + 1], encoder_hidden_states=image[r:r + 1, kept])
                              .logits for r, kept in enumerate(mask.bool())])
        ours = _step_logits(FusedBlipStep(model, None), image, mask, ids, prompt.shape[1])
        last = FusedBlipStep(model, None).prefill(prompt, _start(FusedBlipStep(model, None), image, mask, 20), True)
    assert prompt.shape[1] > 2 and ours.shape == expected.shape
    assert name != "tiny" or image.shape[-1] != model.config.text_config.hidden_size  # encoder_hidden_size differs
    torch.testing.assert_close(ours, expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(last, expected[:, prompt.shape[1] - 1:prompt.shape[1]], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", ["blip-offline", "tiny"])
def test_greedy_captions_match_hf_generate(name, runs):
    """Greedy decoding through the step, stopping at [SEP], gives HF generate's caption (which drops the prompt's
    last id as for a trailing [SEP]: `hf_generate_inputs` appends one). The step is given the model inside the
    kind's `ImageTextAdapter`."""
    run = runs[name]
    model, image, mask, prompt = _inputs(run)
    eos, new = model.config.text_config.sep_token_id, 10
    inputs = run.family.task.hf_generate_inputs(run, encode(run, [ImagePrompt(i, TEXT) for i in IMAGES]))
    with torch.no_grad():
        expected = model.generate(**inputs, max_new_tokens=new, do_sample=False, num_beams=1)[:, prompt.shape[1]:]
        step = FusedBlipStep(ImageTextAdapter(model), None)  # the kind's wrapper is unwrapped
        slot = _start(step, image, mask, prompt.shape[1] + new)
        token = step.prefill(prompt, slot, last_only=True)[:, -1].argmax(-1)
        tokens = [token]
        for position in range(prompt.shape[1], prompt.shape[1] + new - 1):
            slot.ids.copy_(token[:, None])
            slot.write.fill_(position)
            token = step.one_token(slot)[:, -1].argmax(-1)
            tokens.append(token)
    ours = torch.stack(tokens, dim=1).tolist()
    for row, hf in zip(ours, expected.tolist()):
        hf = hf[: hf.index(eos) + 1] if eos in hf else hf
        assert row[:len(hf)] == hf and len(set(hf)) > 1, (row, hf)


@pytest.mark.parametrize("attention", ["kernel", "split"])
def test_step_on_our_kernels(attention, runs, monkeypatch):
    """The step on our Triton kernels (on the CPU under Triton's interpreter), on the tiny model with row 1's last
    image tokens masked: every product of its two rows through our GEMV (the head's two included), the self- and
    the cross-attention through our attention kernel, one program per head or split over column chunks; the
    plain-op step's logits at every position. With HARNESS_TEST_DEVICE=cuda on the GPU (the kernels compiled for
    it)."""
    model, image, mask, prompt = _inputs(runs["tiny"], mask_tail=3)
    if DEVICE == "cuda":
        model, image, mask = copy.deepcopy(model).to(DEVICE), image.to(DEVICE), mask.to(DEVICE)
    ids = torch.cat([prompt, torch.arange(5, 5 + STEPS).repeat(2, 1)], dim=1).to(DEVICE)
    calls = counted_kernels(monkeypatch)
    # the split case also writes each layer's new K and V at once (`paired_kv_write`)
    settings = FusedSettings(gemv_above=0, gemv_rows=2, attention=attention, kernels_everywhere=True,
                             paired_kv_write=attention == "split")
    with torch.no_grad():
        ours = _step_logits(FusedBlipStep(model, None, settings), image, mask, ids, prompt.shape[1])
        plain = _step_logits(FusedBlipStep(model, None, FusedSettings()), image, mask, ids, prompt.shape[1])
    torch.testing.assert_close(ours, plain, atol=1e-4, rtol=1e-4)
    layers = len(model.text_decoder.bert.encoder.layer)
    assert calls["gemv"] == STEPS * (6 * layers + 2), calls
    assert calls["decode_attention" if attention == "kernel" else "decode_attention_split"] == STEPS * 2 * layers


def test_compiled_step_matches_eager(runs):
    """torch.compile of the step's three functions (2 rows: the reduction form of the products) on the tiny model:
    the eager step's logits at every position, the layer function compiled once for both layers."""
    model, image, mask, prompt = _inputs(runs["tiny"], mask_tail=3)
    ids = torch.cat([prompt, torch.arange(5, 5 + STEPS).repeat(2, 1)], dim=1)
    compiled = FusedBlipStep(model, {}, FusedSettings(reduction_rows=2))  # reduction form at 2 rows
    assert compiled.compiled and compiled.settings.reduces(2, True, compiled.width)
    with torch.no_grad():
        ours = _step_logits(compiled, image, mask, ids, prompt.shape[1])
        eager = _step_logits(FusedBlipStep(model, None), image, mask, ids, prompt.shape[1])
    torch.testing.assert_close(ours, eager, atol=1e-4, rtol=1e-4)


def test_refusals(runs):
    from transformers import BlipConfig

    model = runs["blip-offline"].torch_model()
    config = BlipConfig.from_dict(model.config.to_dict())
    config.text_config.hidden_act = "gelu_new"
    with pytest.raises(UsageError, match=r"^--static-cache: BLIP text activation 'gelu_new' is not one the "
                                         r"static-cache step implements \(gelu, relu, gelu_pytorch_tanh, silu\); "
                                         r"drop --static-cache$"):
        FusedBlipStep(_WithConfig(model, config))
    config.model_type = "t5"
    with pytest.raises(UsageError, match=r"model type 't5' has no BLIP static-cache step \(model types it runs: "
                                         r"blip\)"):
        FusedBlipStep(_WithConfig(model, config))
    limit = model.config.text_config.max_position_embeddings
    with pytest.raises(UsageError, match=rf"{limit + 1} decoder positions exceed the BLIP text decoder's {limit} "):
        FusedBlipStep(model).new_slot(1, limit + 1, 17)


class _WithConfig:
    """A model stand-in with another config (refused before any weight is read)."""

    def __init__(self, model, config):
        self.config = config


def _hf_captions(model, prompt, beams: int, eos: int, pad: int) -> list[list[int]]:
    """HF's captions (new ids per row up to `eos`): its text decoder's `generate` over the image embeddings, as
    `BlipForConditionalGeneration.generate` runs it (whose own EOS is always [SEP]; this one takes any)."""
    pixels = prompt.encoder["pixel_values"].to(model.device)
    with torch.no_grad():
        image = model.vision_model(pixel_values=pixels).last_hidden_state
        out = model.text_decoder.generate(
            input_ids=prompt.input_ids.to(model.device), encoder_hidden_states=image,
            encoder_attention_mask=torch.ones(image.shape[:2], dtype=torch.long, device=model.device),
            eos_token_id=eos, pad_token_id=pad, max_new_tokens=NEW, num_beams=beams, do_sample=False)
    rows = [row[prompt.input_ids.shape[1]:] for row in out.tolist()]
    return [row[: row.index(eos) + 1] if eos in row else row for row in rows]


def check_static_cache_captions(run, steps, early_eos_beams: tuple[int, ...] = (1, 3)):
    """Greedy and 3 beams, one image with no text prompt and two images with one; then with a token greedy emits
    early as the EOS (captions that end mid-way), greedy and with `early_eos_beams`; each a second time on the same
    pooled buffers."""
    eos, pad = run.family.task.special_ids(run)
    model = run.torch_model()
    for items in CASES:
        prompt = encode(run, items)
        for beams in (1, 3):
            expected = _hf_captions(model, prompt, beams, eos, pad)
            assert generate_twice(run, steps, prompt, NEW, beams, eos) == expected, (items, beams)
    row = _hf_captions(model, prompt, 1, eos, pad)[1]
    cut = min(i for i in range(1, len(row)) if row[i] not in row[:i])  # row 1's first token not seen before...
    for beams in early_eos_beams:
        expected = _hf_captions(model, prompt, beams, row[cut], pad)  # ...ends the captions
        assert beams > 1 or len(expected[1]) == cut + 1 < NEW
        assert generate_twice(run, steps, prompt, NEW, beams, row[cut]) == expected, ("EOS", beams)


@pytest.mark.parametrize("mode", MODES, ids=_mode_id)
def test_static_cache_gives_hf_captions(mode, models, tmp_path):
    """Through the harness (`frameworks --static-cache`: the kind's steps over this step, pooled slots, beam
    reordering) on the tiny model: HF's captions (`check_static_cache_captions`)."""
    run = _run(models["tiny"], tmp_path, static_cache=True, use_cuda_graph=mode[0], torch_compile=mode[1])
    with backend_steps(run, "frameworks") as (_, steps):
        assert type(steps.fused).__name__ == "FusedBlipStep"
        check_static_cache_captions(run, steps)
