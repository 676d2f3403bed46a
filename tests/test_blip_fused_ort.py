"""BLIP's captioning graphs built from the weights for ONNX Runtime (BLIP/fused_onnx.py: "encoder", "cross" and
"decoder"), run by plain ONNX Runtime sessions on the CPU (fp32) against HF: the image encoder's output (HF's
`vision_model(...).last_hidden_state`) for two random images and for the processor's two test images, every layer's
cross-attention keys and values of the image embeddings, and the decoder's logits at every position (a prompt pass
over [DEC] + a text prompt, then one-token steps writing the shared past/present buffers in place, as the steps bind
them), on blip-offline and on the tiny random BLIP of tests/test_blip_fused.py (vision width unlike the text width,
tanh-GELU, every norm and bias moved off HF's ones and zeros); one row's image tokens partly masked out in one case
(HF's logits without those tokens); greedy decoding through the graphs, from the built encoder's image embeddings,
gives HF `generate`'s caption. A checkpoint with a weight the graphs leave out (text decoder or vision encoder), and
models the graphs cannot run, are refused by message."""
import numpy as np
import pytest
import torch

from CausalLM import fused_graph as fg
from NNDF.errors import ArtifactError

from test_blip_fused import (DEVICE, IMAGES, STEPS, TEXT, _inputs, _run, check_static_cache_captions,  # noqa: F401
                             models, runs)  # (the module's fixtures)

from BLIP.fused_onnx import BUILDER
from NNDF.actions.common import backend_steps, encode
from Vision2Seq.task import ImagePrompt

MAX_LENGTH = 24


def _build(model, folder, weights=None) -> dict:
    """part -> an InferenceSession of that graph, built from `model`'s weights into `folder`."""
    import onnxruntime as ort

    with torch.device("meta"):
        arch = type(model)(model.config)
    folder.mkdir(parents=True, exist_ok=True)
    graphs = BUILDER.build(arch, weights or fg.StateDict.of_model(model, "test"),
                           lambda part: fg.GraphBuilder(np.float32, data=folder / f"{part}.onnx.data"))
    sessions = {}
    for part, proto in graphs.items():
        fg.save(proto, folder / f"{part}.onnx")
        sessions[part] = ort.InferenceSession(str(folder / f"{part}.onnx"), providers=["CPUExecutionProvider"])
    return sessions


@pytest.fixture(scope="module")
def built(runs, tmp_path_factory):  # noqa: F811
    """Model name -> (the HF model, its graphs' sessions)."""
    out = {}
    for name, run in runs.items():
        model = run.torch_model().eval()
        out[name] = model, _build(model, tmp_path_factory.mktemp(f"graphs-{name}"))
    return out


class _Decoder:
    """The decoder graph over fixed past buffers [R, H, MAX_LENGTH, D], past and present bound to the same memory."""

    def __init__(self, session, cross: list[np.ndarray], mask):
        self.session, self.mask = session, mask
        self.layers, rows, self.heads, _, self.head_dim = len(cross) // 2, *cross[0].shape
        self.past = [torch.zeros(rows, self.heads, MAX_LENGTH, self.head_dim) for _ in range(2 * self.layers)]
        self.cross = {f"cross.{i // 2}.{('key', 'value')[i % 2]}": torch.from_numpy(c) for i, c in enumerate(cross)}

    def run(self, ids, start: int) -> torch.Tensor:
        """Logits [R, S, V] of ids [R, S] at decoder columns start...; a prompt pass when start is 0."""
        rows, length = ids.shape
        stop = start + length
        names = [f"past.{i // 2}.{('key', 'value')[i % 2]}" for i in range(2 * self.layers)]
        feeds = {"input_ids": ids.contiguous(), "position_ids": torch.arange(start, stop).expand(rows, -1).contiguous(),
                 "seqlens_k": torch.full((rows,), stop - 1, dtype=torch.int32),
                 "total_sequence_length": torch.tensor(length if start == 0 else MAX_LENGTH, dtype=torch.int32),
                 "encoder_attention_mask": self.mask, **dict(zip(names, self.past)), **self.cross}
        out = torch.empty(rows, length, self.session.get_outputs()[0].shape[-1])
        binding = self.session.io_binding()
        for name, tensor in feeds.items():
            binding.bind_input(name, "cpu", 0, tensor.numpy().dtype, tuple(tensor.shape), tensor.data_ptr())
        binding.bind_output("logits", "cpu", 0, np.float32, tuple(out.shape), out.data_ptr())
        for name, tensor in zip(names, self.past):
            binding.bind_output(name.replace("past", "present"), "cpu", 0, np.float32, tuple(tensor.shape),
                                tensor.data_ptr())
        self.session.run_with_iobinding(binding)
        return out


def _hf_cross(model, image) -> list[torch.Tensor]:
    """HF's cross-attention key and value of every layer [R, H, T, D]."""
    rows, length = image.shape[:2]
    out = []
    for layer in model.text_decoder.bert.encoder.layer:
        attn = layer.crossattention.self
        out += [p(image).view(rows, length, attn.num_attention_heads, -1).transpose(1, 2)
                for p in (attn.key, attn.value)]
    return out


@pytest.mark.parametrize("mask_tail", [0, 5], ids=["all-image", "masked-image"])
@pytest.mark.parametrize("name", ["blip-offline", "tiny"])
def test_graphs_give_hf_logits(name, mask_tail, runs, built):  # noqa: F811
    model, sessions = built[name]
    _, image, mask, prompt = _inputs(runs[name], mask_tail)
    generator = torch.Generator().manual_seed(1)
    later = torch.randint(3, model.config.text_config.vocab_size, (2, STEPS), generator=generator)
    ids = torch.cat([prompt, later], dim=1)
    cross = sessions["cross"].run(None, {"encoder_hidden_states": image.numpy()})
    with torch.no_grad():
        for ours, theirs in zip(cross, _hf_cross(model, image)):
            np.testing.assert_allclose(ours, theirs.numpy(), atol=1e-5, rtol=1e-5)
        expected = torch.cat([model.text_decoder(input_ids=ids[r:r + 1], encoder_hidden_states=image[r:r + 1, kept])
                              .logits for r, kept in enumerate(mask.bool())])
    decoder = _Decoder(sessions["decoder"], cross, mask)
    length = prompt.shape[1]
    logits = torch.cat([decoder.run(ids[:, :length], 0)] +
                       [decoder.run(ids[:, t:t + 1], t) for t in range(length, ids.shape[1])], dim=1)
    torch.testing.assert_close(logits, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", ["blip-offline", "tiny"])
def test_encoder_gives_hf_vision_output(name, built):
    """The encoder graph on two random images (fixed seed): HF's `vision_model(pixel_values).last_hidden_state`
    [2, 1 + patches, vision width]; the graph takes pixel_values as the torch.onnx export did ([B, 3, size, size]
    in the graph's float type) and gives `encoder_hidden_states`."""
    model, sessions = built[name]
    vision = model.config.vision_config
    pixels = torch.randn(2, 3, vision.image_size, vision.image_size, generator=torch.Generator().manual_seed(3))
    (out,) = sessions["encoder"].run(["encoder_hidden_states"], {"pixel_values": pixels.numpy()})
    with torch.no_grad():
        expected = model.vision_model(pixel_values=pixels).last_hidden_state
    assert [i.name for i in sessions["encoder"].get_inputs()] == ["pixel_values"]
    assert out.shape == (2, (vision.image_size // vision.patch_size) ** 2 + 1, vision.hidden_size) == expected.shape
    np.testing.assert_allclose(out, expected.numpy(), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", ["blip-offline", "tiny"])
def test_greedy_captions_match_hf_generate(name, runs, built):  # noqa: F811
    run = runs[name]
    model, sessions = built[name]
    _, image, mask, prompt = _inputs(run)
    eos, new = model.config.text_config.sep_token_id, 10
    inputs = run.family.task.hf_generate_inputs(run, encode(run, [ImagePrompt(i, TEXT) for i in IMAGES]))
    with torch.no_grad():
        expected = model.generate(**inputs, max_new_tokens=new, do_sample=False, num_beams=1)[:, prompt.shape[1]:]
    pixels = inputs["pixel_values"].numpy()
    ours = sessions["encoder"].run(None, {"pixel_values": pixels})[0]  # the built encoder's image embeddings
    np.testing.assert_allclose(ours, image.numpy(), atol=1e-4, rtol=1e-4)
    decoder = _Decoder(sessions["decoder"], sessions["cross"].run(None, {"encoder_hidden_states": ours}), mask)
    token = decoder.run(prompt, 0)[:, -1].argmax(-1)
    tokens = [token]
    for position in range(prompt.shape[1], prompt.shape[1] + new - 1):
        token = decoder.run(token[:, None], position)[:, -1].argmax(-1)
        tokens.append(token)
    for row, hf in zip(torch.stack(tokens, dim=1).tolist(), expected.tolist()):
        hf = hf[: hf.index(eos) + 1] if eos in hf else hf
        assert row[:len(hf)] == hf and len(set(hf)) > 1, (row, hf)


def test_leftover_weight_and_unsupported_models_are_refused(runs, tmp_path):  # noqa: F811
    model = runs["tiny"].torch_model()
    tensors = dict(model.state_dict())
    tensors["text_decoder.bert.encoder.layer.0.extra.weight"] = torch.zeros(2)
    weights = fg.StateDict(tensors.__getitem__, tensors, "test")
    with pytest.raises(ArtifactError, match=r"text_decoder\.bert\.encoder\.layer\.0\.extra\.weight"):
        _build(model, tmp_path, weights)
    tensors = {**model.state_dict(), "vision_model.encoder.layers.0.extra.weight": torch.zeros(2)}
    weights = fg.StateDict(tensors.__getitem__, tensors, "test")
    with pytest.raises(ArtifactError, match=r"vision_model\.encoder\.layers\.0\.extra\.weight"):
        _build(model, tmp_path / "vision", weights)
    text = type(model.config.text_config)(**{**model.config.text_config.to_dict(), "hidden_act": "silu"})
    config = type(model.config)(text_config=text.to_dict(), vision_config=model.config.vision_config.to_dict())
    assert BUILDER.refusal(config) == ("onnxrt's built BLIP graphs have no op for activation 'silu' (they have gelu, "
                                       "gelu_new, gelu_pytorch_tanh, gelu_fast, relu)")
    text = type(text)(**{**text.to_dict(), "hidden_act": "gelu", "hidden_size": 36, "num_attention_heads": 6})
    config = type(config)(text_config=text.to_dict(), vision_config=config.vision_config.to_dict())
    assert "head size that is a multiple of 8" in BUILDER.refusal(config)
    vision = type(config.vision_config)(**{**config.vision_config.to_dict(), "hidden_act": "silu"})
    config = type(config)(text_config=model.config.text_config.to_dict(), vision_config=vision.to_dict())
    assert "no op for activation 'silu'" in BUILDER.refusal(config)
    assert BUILDER.refusal(model.config) is None and BUILDER.parts == ("encoder", "cross", "decoder")


@pytest.mark.parametrize("name", ["blip-offline", "tiny"])
def test_static_cache_gives_hf_captions(name, models, tmp_path):  # noqa: F811
    """Through the harness (`onnxrt --static-cache`: all three graphs built from the checkpoint's files and validated
    against PyTorch, no encoder exported, the kind's steps binding the pooled buffers): HF's captions, greedy and
    beams. On CUDA these graphs run in fp16 only (GroupQueryAttention), against HF's fp16 model, and the early-EOS
    case is greedy only: with 3 beams, blip-offline's second row keeps its third beam by a logit gap of 0.0039,
    one fp16 step at that size, which the text decoder's fp16 rounding decides (on the CPU, HF's own fp16 text
    decoder keeps another beam there than its fp32 one, whichever fp16 or fp32 image encoder feeds it)."""
    fp16 = DEVICE == "cuda"
    run = _run(models[name], tmp_path, static_cache=True, fp16=fp16)
    with backend_steps(run, "onnxrt") as (backend, steps):
        assert backend.choice.startswith("the fused decode graph built from the weights")
        record = backend.onnx.record
        assert record["encoder"] == "built" and record["built_from"] == "checkpoint files", record
        assert record["nodes"]["encoder"]["MultiHeadAttention"] == run.source.config.vision_config.num_hidden_layers
        check_static_cache_captions(run, steps, early_eos_beams=(1,) if fp16 else (1, 3))
