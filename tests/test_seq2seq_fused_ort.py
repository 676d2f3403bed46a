"""The encoder-decoder graphs built from the weights for ONNX Runtime (`Seq2Seq.fused_graph`, T5/fused_onnx.py,
BART/fused_onnx.py), run by plain ONNX Runtime sessions on the CPU (fp32) against HF: the encoder's output for a
right-padded batch, every decoder layer's cross-attention keys and values, and the decoder's logits at every
position of HF's greedy sequence (a prompt pass over its first two tokens, then one-token steps writing the shared
past/present buffers in place, as the steps bind them), whose arg-max is HF `generate`'s next token; checkpoints
with a weight the graphs leave out and models the graphs cannot run are refused by message.
"""
import numpy as np
import pytest
import torch

from CausalLM import fused_graph as fg
from NNDF import registry
from NNDF.context import make_context
from NNDF.errors import ArtifactError
from NNDF.options import ModelOptions

VARIANTS = [("T5", "t5-offline"), ("T5", "flan-t5-offline"), ("BART", "bart-offline"), ("BART", "mbart-offline")]
PROMPTS = ["translate English to German: The house is wonderful.", "summarize: A"]  # row 1 right-padded
NEW, MAX_LENGTH = 10, 16


def _builder(family: str, model_type: str):
    return registry.load(registry.facts(registry.family(family), "onnxrt").fused[model_type])


def _build(builder, model, folder, weights=None) -> dict:
    """part -> an InferenceSession of that graph, built from `model`'s weights into `folder`."""
    import onnxruntime as ort

    from transformers import AutoConfig

    with torch.device("meta"):
        arch = type(model)(AutoConfig.for_model(**model.config.to_dict()))
    folder.mkdir(parents=True, exist_ok=True)
    made = {}

    def make_graph(part):
        made[part] = fg.GraphBuilder(np.float32, data=folder / f"{part}.onnx.data")
        return made[part]

    graphs = builder.build(arch, weights or fg.StateDict.of_model(model, "test"), make_graph)
    sessions = {}
    for part, proto in graphs.items():
        fg.save(proto, folder / f"{part}.onnx")
        sessions[part] = ort.InferenceSession(str(folder / f"{part}.onnx"), providers=["CPUExecutionProvider"])
    return sessions


@pytest.fixture(scope="module", params=VARIANTS, ids=[v for _, v in VARIANTS])
def built(request, tmp_path_factory):
    family, variant = request.param
    run = make_context(registry.family(family), ModelOptions(variant=variant, device="cpu", use_cache=True,
                                                             working_dir=str(tmp_path_factory.mktemp("work"))))
    model = _perturbed(run.torch_model().eval())
    builder = _builder(family, model.config.model_type)
    sessions = _build(builder, model, tmp_path_factory.mktemp("graphs"))
    encoded = run.tokenizer(PROMPTS, padding=True, return_tensors="pt")
    assert encoded["attention_mask"][1, -1] == 0  # a right-padded row
    return model, sessions, encoded


def _perturbed(model, std: float = 0.2):
    """`model` with every vector (norms, biases: 1 and 0 in the offline variants) and BART's final_logits_bias moved
    by N(0, std), so a graph that leaves one out cannot give HF's outputs."""
    rng = np.random.default_rng(5)
    with torch.no_grad():
        for tensor in [p for p in model.parameters() if p.dim() == 1] + [getattr(model, "final_logits_bias", None)]:
            if tensor is not None:
                tensor += torch.from_numpy(rng.standard_normal(tuple(tensor.shape), dtype=np.float32) * std)
    return model


def _cross_projections(model, layer: int, hidden):
    """HF's cross-attention key and value of decoder layer `layer` [B, H, T, D]."""
    if model.config.model_type == "t5":
        attn = model.decoder.block[layer].layer[1].EncDecAttention
        heads, size, k, v = attn.n_heads, attn.key_value_proj_dim, attn.k, attn.v
    else:
        attn = model.model.decoder.layers[layer].encoder_attn
        heads, size, k, v = attn.num_heads, attn.head_dim, attn.k_proj, attn.v_proj
    rows, length = hidden.shape[:2]
    return [p(hidden).view(rows, length, heads, size).transpose(1, 2) for p in (k, v)]


def _decode(decoder, tokens, mask, cross: list, layers: int, heads: int, head_dim: int) -> np.ndarray:
    """The decoder graph's logits [B, N, V] at every position of `tokens` [B, N]: a prompt pass over the first two,
    then one-token steps, past and present bound to the same buffers (written in place)."""
    rows, count = tokens.shape
    past = [torch.zeros(rows, heads, MAX_LENGTH, head_dim) for _ in range(2 * layers)]
    names = [f"{kind}.{i}.{kv}" for i in range(layers) for kv in ("key", "value") for kind in ("past",)]
    logits = []
    for start, stop in [(0, 2)] + [(t, t + 1) for t in range(2, count)]:
        feeds = {"input_ids": tokens[:, start:stop].contiguous(),
                 "position_ids": torch.arange(start, stop).expand(rows, -1).contiguous(),
                 "seqlens_k": torch.full((rows,), stop - 1, dtype=torch.int32),
                 "total_sequence_length": torch.tensor(stop - start if start == 0 else MAX_LENGTH, dtype=torch.int32),
                 "encoder_attention_mask": mask, **dict(zip(names, past)),
                 **{f"cross.{i}.{kv}": cross[2 * i + j] for i in range(layers) for j, kv in enumerate(("key", "value"))}}
        out = torch.empty(rows, stop - start, decoder.get_outputs()[0].shape[-1])
        binding = decoder.io_binding()
        for name, tensor in feeds.items():
            binding.bind_input(name, "cpu", 0, tensor.numpy().dtype, tuple(tensor.shape), tensor.data_ptr())
        binding.bind_output("logits", "cpu", 0, np.float32, tuple(out.shape), out.data_ptr())
        for name, tensor in zip(names, past):
            binding.bind_output(name.replace("past", "present"), "cpu", 0, np.float32, tuple(tensor.shape),
                                tensor.data_ptr())
        decoder.run_with_iobinding(binding)
        logits.append(out.numpy().copy())
    return np.concatenate(logits, axis=1)


def test_graphs_give_hf_outputs_and_greedy_tokens(built):
    model, sessions, encoded = built
    ids, mask = encoded["input_ids"], encoded["attention_mask"]
    with torch.no_grad():
        hidden = model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        tokens = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, num_beams=1,
                                max_new_tokens=NEW)
        expected = model(input_ids=ids, attention_mask=mask, decoder_input_ids=tokens).logits.numpy()
    encoder = sessions["encoder"].run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
    np.testing.assert_allclose(encoder, hidden.numpy(), atol=1e-4, rtol=1e-4)
    cross = sessions["cross"].run(None, {"encoder_hidden_states": hidden.numpy()})
    layers = len(cross) // 2
    with torch.no_grad():
        for i in range(layers):
            for ours, theirs in zip(cross[2 * i:2 * i + 2], _cross_projections(model, i, hidden)):
                np.testing.assert_allclose(ours, theirs.numpy(), atol=1e-5, rtol=1e-5)
    heads, head_dim = cross[0].shape[1], cross[0].shape[3]
    logits = _decode(sessions["decoder"], tokens, mask, [torch.from_numpy(c) for c in cross], layers, heads, head_dim)
    np.testing.assert_allclose(logits, expected, atol=1e-4, rtol=1e-4)
    forced = 2 if model.config.model_type == "mbart" else 1  # mBART's second token is forced (its language)
    for row, chosen in zip(logits.argmax(-1), tokens.numpy()):
        ends = np.flatnonzero(chosen[1:] == model.config.eos_token_id)
        stop = ends[0] + 1 if len(ends) else len(chosen) - 1  # up to EOS (HF pads the row after it)
        assert stop > forced and (row[forced - 1:stop] == chosen[forced:stop + 1]).all()


def test_a_weight_the_graphs_leave_out_is_refused(built, tmp_path):
    model = built[0]
    tensors = dict(model.state_dict())
    layer = "decoder.block.0" if model.config.model_type == "t5" else "model.decoder.layers.0"
    tensors[f"{layer}.adapter.weight"] = torch.ones(4, 4)
    weights = fg.StateDict(tensors.__getitem__, tensors, "test")
    with pytest.raises(ArtifactError, match=rf"does not use 1 weights of this checkpoint \({layer}\.adapter\.weight"):
        _build(_builder(*_family(model)), model, tmp_path, weights)


def test_weights_of_a_part_built_elsewhere_are_skipped(built):
    """A builder that leaves the encoder to the plain export names its prefix: those weights are not required."""
    from Seq2Seq.fused_graph import check_all_used

    model = built[0]
    with torch.device("meta"):
        arch = type(model)(model.config)
    encoder = "encoder." if model.config.model_type == "t5" else "model.encoder."
    tied = {"shared.weight", "model.shared.weight"}  # the decoder's embedding under its other name
    def read_all_but_the_encoder():
        weights = fg.StateDict.of_model(model, "test")
        for name in weights.names - tied:
            if not name.startswith(encoder):
                weights(name)
        return weights

    check_all_used(read_all_but_the_encoder(), arch, skip=(encoder,))
    with pytest.raises(ArtifactError, match=f"does not use .* weights of this checkpoint \\({encoder}"):
        check_all_used(read_all_but_the_encoder(), arch)


def _family(model) -> tuple[str, str]:
    return ("T5" if model.config.model_type == "t5" else "BART"), model.config.model_type


def test_models_the_graphs_cannot_run_are_refused_by_message():
    from transformers import BartConfig, MBartConfig, T5Config

    t5, bart = _builder("T5", "t5"), _builder("BART", "bart")
    assert t5.refusal(T5Config(d_model=64, d_kv=16, num_heads=4)) is None
    assert t5.refusal(T5Config(d_model=64, d_kv=16, num_heads=4, feed_forward_proj="gated-gelu")) is None
    assert "head size that is a multiple of 8" in t5.refusal(T5Config(d_model=48, d_kv=12, num_heads=4))
    assert "activation 'silu'" in t5.refusal(T5Config(feed_forward_proj="gated-silu"))
    assert bart.refusal(BartConfig(d_model=64, encoder_attention_heads=4, decoder_attention_heads=4)) is None
    assert bart.refusal(MBartConfig(d_model=1024, encoder_attention_heads=16, decoder_attention_heads=16)) is None
    assert "decoder has 64 / 16 heads" in bart.refusal(BartConfig(d_model=64, decoder_attention_heads=16,
                                                                 encoder_attention_heads=8))
    assert "activation 'swish'" in bart.refusal(BartConfig(activation_function="swish"))
