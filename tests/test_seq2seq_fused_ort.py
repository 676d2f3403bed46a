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

VARIANTS = [("T5", "t5-offline"), ("T5", "flan-t5-offline"), ("BART", "bart-offline"), ("BART", "mbart-offline"),
            ("T5", "t5-gelu"), ("BART", "bart-relu")]
PROMPTS = ["translate English to German: The house is wonderful.", "summarize: A"]  # row 1 right-padded
NEW, MAX_LENGTH = 10, 16


def _builder(family: str, model_type: str):
    return registry.load(registry.facts(registry.family(family), "onnxrt").fused[model_type])


def _build(builder, model, folder, weights=None, dtype=np.float32, device: str = "cpu", linear=None) -> dict:
    """part -> an InferenceSession of that graph on `device` ("cpu" or "cuda"), built from `model`'s weights into
    `folder` (graphs in `dtype`); `linear`: the Linear op's library, which the decoder's products then use (as the
    onnxrt backend builds it)."""
    import onnxruntime as ort

    from transformers import AutoConfig

    with torch.device("meta"):
        arch = type(model)(AutoConfig.for_model(**model.config.to_dict()))
    folder.mkdir(parents=True, exist_ok=True)
    made = {}

    def make_graph(part):
        made[part] = fg.GraphBuilder(dtype, data=folder / f"{part}.onnx.data", linear=bool(linear) and part == "decoder",
                                     norms_in_products=fg.folds_norms(builder.norms_in_products),
                                     own_attention=fg.owns_attention(builder.own_attention))
        return made[part]

    graphs = builder.build(arch, weights or fg.StateDict.of_model(model, "test", dtype), make_graph)
    sessions = {}
    for part, proto in graphs.items():
        fg.save(proto, folder / f"{part}.onnx")
        provider = "CUDAExecutionProvider" if device == "cuda" else "CPUExecutionProvider"
        options = ort.SessionOptions()
        if linear:
            options.register_custom_ops_library(str(linear))
        sessions[part] = ort.InferenceSession(str(folder / f"{part}.onnx"), options, providers=[provider])
    return sessions


def _tiny(name: str, folder) -> str:
    """A random model with what the offline variants lack, saved in `folder` with its family's offline tokenizer.
    t5-gelu: the plain exact-GELU feed-forward, heads x head size (32) unlike d_model (48), more buckets;
    bart-relu: ReLU, scaled embeddings, an untied head, encoder and decoder with their own heads (head sizes 32 and
    8), feed-forward sizes and depths."""
    import shutil
    from pathlib import Path

    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, BartConfig, T5Config

    from BART.config import BART_TOKENIZER_DIR
    from NNDF.offline import redraw_weights
    from T5.config import TOKENIZER_DIR

    source = TOKENIZER_DIR if name == "t5-gelu" else BART_TOKENIZER_DIR
    tok = AutoTokenizer.from_pretrained(source, local_files_only=True)
    ids = dict(vocab_size=len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    if name == "t5-gelu":
        config = T5Config(**ids, d_model=48, d_kv=8, d_ff=80, num_layers=2, num_decoder_layers=2, num_heads=4,
                          relative_attention_num_buckets=16, relative_attention_max_distance=20,
                          feed_forward_proj="gelu", tie_word_embeddings=False, decoder_start_token_id=tok.pad_token_id)
    else:
        config = BartConfig(**ids, bos_token_id=tok.bos_token_id, decoder_start_token_id=tok.eos_token_id,
                            forced_eos_token_id=None, d_model=64, encoder_layers=1, decoder_layers=2,
                            encoder_attention_heads=2, decoder_attention_heads=8, encoder_ffn_dim=96,
                            decoder_ffn_dim=160, activation_function="relu", scale_embedding=True,
                            tie_word_embeddings=False, max_position_embeddings=64)
    model = AutoModelForSeq2SeqLM.from_config(config)
    redraw_weights(model, 3, 0.2)
    model.save_pretrained(folder)
    for path in Path(source).glob("*.json"):
        shutil.copyfile(path, Path(folder) / path.name)
    return str(folder)


@pytest.fixture(scope="module", params=VARIANTS, ids=[v for _, v in VARIANTS])
def built(request, tmp_path_factory):
    family, variant = request.param
    model = ({"variant": variant} if variant.endswith("-offline") else
             {"torch_dir": _tiny(variant, tmp_path_factory.mktemp(variant))})
    run = make_context(registry.family(family), ModelOptions(**model, device="cpu", use_cache=True,
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


def _decode(decoder, tokens, mask, cross: list, layers: int, heads: int, head_dim: int,
            dtype=torch.float32, device: str = "cpu") -> np.ndarray:
    """The decoder graph's logits [B, N, V] at every position of `tokens` [B, N]: a prompt pass over the first two,
    then one-token steps, past and present bound to the same buffers (written in place) on `device`."""
    rows, count = tokens.shape
    tokens, mask, cross = tokens.to(device), mask.to(device), [c.to(device) for c in cross]
    past = [torch.zeros(rows, heads, MAX_LENGTH, head_dim, dtype=dtype, device=device) for _ in range(2 * layers)]
    names = [f"past.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    logits = []
    for start, stop in [(0, 2)] + [(t, t + 1) for t in range(2, count)]:
        feeds = {"input_ids": tokens[:, start:stop].contiguous(),
                 "position_ids": torch.arange(start, stop, device=device).expand(rows, -1).contiguous(),
                 "seqlens_k": torch.full((rows,), stop - 1, dtype=torch.int32, device=device),
                 "encoder_attention_mask": mask, **dict(zip(names, past)),
                 **{f"cross.{i}.{kv}": cross[2 * i + j] for i in range(layers)
                    for j, kv in enumerate(("key", "value"))}}
        total = torch.tensor(stop - start if start == 0 else MAX_LENGTH, dtype=torch.int32)  # a host scalar
        out = torch.empty(rows, stop - start, decoder.get_outputs()[0].shape[-1], dtype=dtype, device=device)
        binding = decoder.io_binding()
        binding.bind_input("total_sequence_length", "cpu", 0, np.int32, (), total.data_ptr())
        for name, tensor in feeds.items():
            binding.bind_input(name, device, 0, _numpy_type(tensor), tuple(tensor.shape), tensor.data_ptr())
        binding.bind_output("logits", device, 0, _numpy_type(out), tuple(out.shape), out.data_ptr())
        for name, tensor in zip(names, past):
            binding.bind_output(name.replace("past", "present"), device, 0, _numpy_type(out), tuple(tensor.shape),
                                tensor.data_ptr())
        decoder.run_with_iobinding(binding)
        logits.append(out.float().cpu().numpy())
    return np.concatenate(logits, axis=1)


def _numpy_type(tensor: torch.Tensor):
    return torch.empty(0, dtype=tensor.dtype).numpy().dtype


def _graph_logits(sessions: dict, ids, mask, tokens, dtype=torch.float32, device: str = "cpu") -> np.ndarray:
    """The built graphs' decoder logits at every position of `tokens` [B, N] for the encoder input (ids, mask): the
    encoder, the cross graph, then `_decode`."""
    hidden = sessions["encoder"].run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
    cross = [torch.from_numpy(c) for c in sessions["cross"].run(None, {"encoder_hidden_states": hidden})]
    return _decode(sessions["decoder"], tokens, mask, cross, len(cross) // 2, cross[0].shape[1], cross[0].shape[3],
                   dtype, device)


def test_graphs_give_hf_outputs_and_greedy_tokens(built):
    _check_hf_outputs(*built)


@pytest.mark.parametrize("built", [("T5", "flan-t5-offline"), ("T5", "t5-gelu")], indirect=True,
                         ids=["flan-t5-offline", "t5-gelu"])
def test_t5_residual_stream_at_a_scale_gives_hf_outputs(built, tmp_path, monkeypatch):
    """fp16 graphs hold T5's residual stream at a power-of-two scale (products into it scaled by FusedMatMul's
    alpha, the norms' epsilon by its square); in fp32 the same scaled graphs still give HF's outputs."""
    from T5 import fused_onnx

    model, _, encoded = built
    monkeypatch.setattr(fused_onnx, "residual_scale", lambda dtype: fused_onnx.RESIDUAL_SCALE)
    import onnx

    sessions = _build(_builder("T5", "t5"), model, tmp_path)
    for part in sessions:  # every graph adds products into its stream at the scale
        graph = onnx.load(str(tmp_path / f"{part}.onnx"), load_external_data=False).graph
        assert part == "cross" or any(n.op_type == "FusedMatMul" for n in graph.node), part
    _check_hf_outputs(model, sessions, encoded)


@pytest.mark.parametrize("built", [("T5", "flan-t5-offline"), ("BART", "bart-offline")], indirect=True,
                         ids=["flan-t5-offline", "bart-offline"])
def test_a_decoder_of_linear_ops_gives_hf_outputs(built, tmp_path, tmp_path_factory, monkeypatch):
    """The decoder's products as this project's Linear op (NNDF/backends/onnxrt/custom_ops.py, its CPU build; on
    CUDA the graphs' default), T5's at the residual stream's scale (the op's alpha), and its self- and
    cross-attention as this project's Attention op: still HF's outputs and tokens."""
    import onnx

    from NNDF.backends.onnxrt import custom_ops
    from T5 import fused_onnx

    from CausalLM import fused_graph

    model, _, encoded = built
    monkeypatch.setattr(fused_onnx, "residual_scale", lambda dtype: fused_onnx.RESIDUAL_SCALE)
    monkeypatch.setattr(fused_graph, "NORMS_IN_PRODUCTS", True)  # BART's too (T5's builder declares them)
    monkeypatch.setattr(fused_graph, "OWN_ATTENTION", True)
    library = custom_ops.build(tmp_path_factory.mktemp("ops"))
    sessions = _build(_builder(*_family(model)), model, tmp_path, linear=library)
    nodes = [n for n in onnx.load(str(tmp_path / "decoder.onnx"), load_external_data=False).graph.node]
    assert not {"MatMul", "FusedMatMul"} & {n.op_type for n in nodes}
    scaled = [n for n in nodes if n.op_type == "Linear" and any(a.name == "alpha" for a in n.attribute)]
    assert len(scaled) == (3 * model.config.num_decoder_layers if _family(model)[0] == "T5" else 0)
    # the norms inside the products: T5's every one, BART's (post-norm) those whose output is not also the
    # residual stream
    normed = [n for n in nodes if n.op_type == "Linear" and any(a.name == "norm" for a in n.attribute)]
    norms = [n for n in nodes if "Normalization" in n.op_type]
    if _family(model)[0] == "T5":  # flan-T5's gated GELU inside its product too
        assert not norms and len(normed) == 3 * model.config.num_decoder_layers + 1
        assert not {"Split", "FastGelu"} & {n.op_type for n in nodes}
    else:
        assert normed
    # self- and cross-attention as this project's Attention op (T5's with its relative position table)
    layers = getattr(model.config, "num_decoder_layers", None) or model.config.decoder_layers
    assert [n.op_type for n in nodes].count("Attention") == 2 * layers
    assert not {"GroupQueryAttention", "MultiHeadAttention"} & {n.op_type for n in nodes}
    _check_hf_outputs(model, sessions, encoded)


@pytest.mark.parametrize("built", [("T5", "flan-t5-offline")], indirect=True, ids=["flan-t5-offline"])
def test_t5_fp16_wo_output_past_the_fp16_range_stays_finite(built, tmp_path):
    """HF keeps T5's `wo` in fp32 because its outputs can pass fp16's largest value (65504); the fp16 graphs read
    `wo` in half precision and store its product at the residual stream's scale, so such an output stays finite
    and the logits stay near HF's fp32 ones. CUDA only (HARNESS_TEST_DEVICE=cuda): ONNX Runtime's CPU provider runs
    fp16 products in fp32 behind inserted casts, where no fp16 store can overflow."""
    import copy
    import os

    device = os.environ.get("HARNESS_TEST_DEVICE", "cpu")
    if device != "cuda":
        pytest.skip("an fp16 product's overflow shows on CUDA only (HARNESS_TEST_DEVICE=cuda)")

    model, _, encoded = built
    model = copy.deepcopy(model)
    wo = model.decoder.block[-1].layer[2].DenseReluDense.wo
    largest = {}
    wo.register_forward_hook(lambda m, i, out: largest.update(value=out.abs().max().item()))
    with torch.no_grad():
        wo.weight.mul_(4e4 / wo.weight.abs().max())
    ids, mask = encoded["input_ids"], encoded["attention_mask"]
    tokens = torch.tensor([[model.config.decoder_start_token_id, 5, 6, 7]] * ids.shape[0])
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask, decoder_input_ids=tokens).logits.numpy()
    assert largest["value"] > 2 * 65504  # the last block's feed-forward output is past fp16's range in HF
    sessions = _build(_builder("T5", "t5"), model, tmp_path, dtype=np.float16, device=device)
    logits = _graph_logits(sessions, ids, mask, tokens, torch.float16, device)
    assert np.isfinite(logits).all()
    assert np.abs(logits - expected).max() < 0.08 * np.abs(expected).max()


def _check_hf_outputs(model, sessions, encoded):
    """The graphs' encoder output, cross keys and values and decoder logits are HF's; the logits' arg-max is HF
    `generate`'s greedy sequence."""
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
    def read_all_but_the_encoder():
        weights = fg.StateDict.of_model(model, "test")
        for name in weights.names:
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


def _check_fp16_logits(model, sessions, encoded):
    """The fp16 graphs' decoder logits over a 4-token decoder input are within fp16 noise of HF's fp32 ones: HF's own
    fp16 model differs from its fp32 one by 1-3% of the logits' scale on these random models."""
    ids, mask = encoded["input_ids"], encoded["attention_mask"]
    tokens = torch.tensor([[model.config.decoder_start_token_id, 5, 6, 7]] * ids.shape[0])
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask, decoder_input_ids=tokens).logits.numpy()
    logits = _graph_logits(sessions, ids, mask, tokens, torch.float16)
    largest = np.abs(logits - expected).max()
    assert largest < 0.08 * np.abs(expected).max(), (largest, np.abs(expected).max())


def test_fp16_graphs_run_near_hf(built, tmp_path):
    """The fp16 graphs (what CUDA runs; here on ONNX Runtime's CPU kernels) are well typed (T5's residual stream at
    its scale, BART's clamps) and within fp16 noise of HF's fp32 logits (`_check_fp16_logits`)."""
    model, _, encoded = built
    sessions = _build(_builder(*_family(model)), model, tmp_path, dtype=np.float16)
    _check_fp16_logits(model, sessions, encoded)


@pytest.mark.parametrize("built", [("T5", "flan-t5-offline")], indirect=True, ids=["flan-t5-offline"])
@pytest.mark.parametrize("wide", [False, True], ids=["fp16-stream", "fp32-stream"])
def test_t5_fp16_graphs_hold_the_stream_in_fp16_or_fp32(built, wide, tmp_path, monkeypatch):
    """T5's fp16 graphs hold the residual stream in fp16 (the default: nothing is cast to fp32) or, with
    `WIDE_STREAM`, in fp32 (a cast on each side of every norm, as HF's stream is once its fp32 `wo` has run); both
    within fp16 noise of HF's fp32 logits."""
    from onnx import TensorProto

    from T5 import fused_onnx

    monkeypatch.setattr(fused_onnx, "WIDE_STREAM", wide)
    model, _, encoded = built
    sessions = _build(_builder("T5", "t5"), model, tmp_path, dtype=np.float16)
    for part in ("encoder", "decoder"):
        graph = fg.onnx.load(str(tmp_path / f"{part}.onnx"), load_external_data=False).graph
        to_fp32 = [n for n in graph.node if n.op_type == "Cast" and n.attribute[0].i == TensorProto.FLOAT]
        norms = sum(n.op_type.endswith("SimplifiedLayerNormalization") for n in graph.node)
        assert len(to_fp32) == (norms if wide else 0), (part, len(to_fp32), norms)
    _check_fp16_logits(model, sessions, encoded)


@pytest.mark.parametrize("built", [("BART", "bart-relu")], indirect=True, ids=["bart-relu"])
def test_a_checkpoint_without_final_logits_bias_builds_as_hf_loads_it(built, tmp_path):
    """HF loads a BART checkpoint without final_logits_bias (a buffer) with zeros; the graph leaves the add out."""
    import copy

    model = copy.deepcopy(built[0])
    tensors = {k: v for k, v in model.state_dict().items() if k != "final_logits_bias"}
    sessions = _build(_builder("BART", "bart"), model, tmp_path, fg.StateDict(tensors.__getitem__, tensors, "test"))
    model.final_logits_bias.zero_()
    ids, mask = built[2]["input_ids"], built[2]["attention_mask"]
    tokens = torch.tensor([[model.config.decoder_start_token_id, 5, 6]] * ids.shape[0])
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask, decoder_input_ids=tokens).logits.numpy()
    logits = _graph_logits(sessions, ids, mask, tokens)
    np.testing.assert_allclose(logits, expected, atol=1e-4, rtol=1e-4)
    assert "final_logits_bias" not in {i.name for i in fg.onnx.load(str(tmp_path / "decoder.onnx"),
                                                                    load_external_data=False).graph.initializer}
