"""`onnxrt --fused-decode` for the BLOOM family: the fused decode graph (GroupQueryAttention over heads widened to
carry ALiBi, SkipLayerNormalization, FastGelu; BLOOM/fused_onnx.py).

On the CPU (fp32): generation gives HF `generate`'s tokens, token for token, for bloom-offline and a tiny random
BLOOM with random layer norms and biases, 6 heads (not a power of two: HF's slopes take the interleaved extra
heads) of size 20 (widened to 32): greedy, 3 beams, EOS mid-way, a second generation on the same buffers, and a
left-padded batch (ALiBi from each row's own positions). A model with apply_residual_connection_post_layernorm
builds and passes the build's validation against PyTorch (a padded row included) and gives HF's greedy tokens. A
200-token prompt and one-token steps up to position 199 give HF's logits. A checkpoint with a weight the graph
leaves out is refused by message.

With HARNESS_TEST_DEVICE=cuda (fp16), the long prompt's logits are compared with HF's within fp16 noise, and the
CUDA-graph step must give the tokens of the same graph run uncaptured; the tokens of the plain fp16 static graph
are compared and the first difference reported (fp16 kernels differ: not asserted).
"""
import os
import shutil

import numpy as np
import pytest
import torch

from NNDF import registry
from NNDF.actions.common import backend_steps
from CausalLM.ort_fused import FusedDecodeOnnx
from NNDF.context import make_context
from NNDF.options import ModelOptions

from test_fused_decode_ort import _hf as hf_tokens, _tokens as fused_tokens

DEVICE = os.environ.get("HARNESS_TEST_DEVICE", "cpu")
FP16 = DEVICE == "cuda"
NEW, ROWS, PROMPT = 10, 3, 8
TINY = ["bloom-odd-heads", "bloom-post-norm"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, str]:
    """name -> model folder: 2 layers, 6 heads of size 20; every weight random (biases and norms too: HF
    initialises them to 0 and 1); the second with apply_residual_connection_post_layernorm."""
    from transformers import AutoTokenizer, BloomConfig, BloomForCausalLM

    from BLOOM.config import BPE_TOKENIZER_DIR
    from NNDF.offline import decoder_token_ids, redraw_weights

    tok = AutoTokenizer.from_pretrained(BPE_TOKENIZER_DIR, local_files_only=True)
    folders = {}
    for seed, name in enumerate(TINY):
        config = BloomConfig(n_layer=2, hidden_size=120, n_head=6, **decoder_token_ids(tok),
                             apply_residual_connection_post_layernorm=name == "bloom-post-norm")
        model = BloomForCausalLM(config)
        redraw_weights(model, seed, 0.2)
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for param in model.parameters():
                if param.dim() == 1:
                    param.add_(torch.randn(param.shape, generator=generator) * 0.2)
        folders[name] = str(tmp_path_factory.mktemp("models") / name)
        model.save_pretrained(folders[name])
        for path in BPE_TOKENIZER_DIR.glob("*.json"):
            shutil.copyfile(path, f"{folders[name]}/{path.name}")
    return folders


def _run(workdir, model: dict, **flags):
    options = dict(working_dir=str(workdir), use_cache=True, use_mask=True, device=DEVICE, fp16=FP16,
                   static_cache=True, fused_decode=True)
    return make_context(registry.family("BLOOM"), ModelOptions(**{**options, **flags, **model}))


def _model(name: str, tiny: dict) -> dict:
    return {"torch_dir": tiny[name]} if name in TINY else {"variant": name}


def _prompt(vocab: int):
    ids = torch.randint(0, vocab - 1, (ROWS, PROMPT), generator=torch.Generator().manual_seed(1))
    return ids, torch.ones_like(ids)


def _tokens(steps, ids, mask, beams: int, eos: int | None, pad: int) -> list[list[int]]:
    return fused_tokens(steps, ids, mask, beams, eos, pad, new=NEW)


def _hf(run, ids, mask, beams: int, eos: int | None, pad: int) -> list[list[int]]:
    return hf_tokens(run, ids, mask, beams, eos, pad, new=NEW)


@pytest.mark.skipif(DEVICE != "cpu", reason="fp32 parity with HF generate runs on the CPU (CUDA: fp16 only)")
@pytest.mark.parametrize("name", ["bloom-offline", "bloom-odd-heads"])
def test_fused_graph_gives_hf_generate_tokens(name, tiny, workdir):
    run = _run(workdir, _model(name, tiny))
    config = run.source.config
    ids, mask = _prompt(config.vocab_size)
    pad = run.tokenizer.pad_token_id
    with backend_steps(run, "onnxrt") as (backend, steps):
        assert isinstance(backend.onnx, FusedDecodeOnnx)
        assert backend.export_max_diff() < 1e-3  # validated against PyTorch when built
        nodes = backend.onnx.record["nodes"]
        assert nodes["GroupQueryAttention"] == config.n_layer
        # per layer: 4 products, 2 adds (the packed bias, the alibi columns), attention, 2 skip norms, FastGelu;
        # once: the tied head's gather and transpose, 2 layer norms, the alibi columns' 4 nodes, the head and the
        # Slice of the positions it reads (no other: the widened heads need none)
        assert not {"Reshape", "ScatterND"} & set(nodes) and nodes["Transpose"] == 1 and nodes["Slice"] == 1
        assert sum(nodes.values()) == 10 * config.n_layer + 10, nodes
        for beams in (1, 3):
            expected = _hf(run, ids, mask, beams, None, pad)
            assert _tokens(steps, ids, mask, beams, None, pad) == expected, f"beams={beams}"
        early = expected[0][2]  # a token the search emits early becomes the EOS: rows stop at different steps
        for beams in (1, 3):
            assert _tokens(steps, ids, mask, beams, early, pad) == _hf(run, ids, mask, beams, early, pad)
        padded = mask.clone()
        padded[0, :2], padded[2, :5] = 0, 0  # each row's keys at its own positions (HF: the mask's cumsum)
        for beams in (1, 3):
            assert _tokens(steps, ids, padded, beams, None, pad) == _hf(run, ids, padded, beams, None, pad), beams


@pytest.mark.skipif(DEVICE != "cpu", reason="fp32 parity with HF generate runs on the CPU (CUDA: fp16 only)")
def test_post_layernorm_residual(tiny, workdir):
    run = _run(workdir, _model("bloom-post-norm", tiny))
    ids, mask = _prompt(run.source.config.vocab_size)
    pad = run.tokenizer.pad_token_id
    with backend_steps(run, "onnxrt") as (backend, steps):
        assert backend.export_max_diff() < 1e-3
        assert _tokens(steps, ids, mask, 1, None, pad) == _hf(run, ids, mask, 1, None, pad)


def test_widened_heads_and_refusals(tiny):
    from transformers import AutoConfig, BloomForCausalLM

    from BLOOM.fused_onnx import build, refusal, slopes, widened
    from CausalLM import fused_graph as fg
    from NNDF.errors import ArtifactError

    assert [widened(d) for d in (16, 20, 64, 96, 128)] == [32, 32, 80, 112, 144]
    assert slopes(6).tolist() == pytest.approx([2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1, 2 ** -3])
    assert refusal(AutoConfig.from_pretrained(tiny["bloom-odd-heads"])) is None
    model = BloomForCausalLM.from_pretrained(tiny["bloom-odd-heads"])
    graph = build(model, fg.StateDict.of_model(model, "BLOOM"), fg.GraphBuilder(np.float32))
    past = next(i for i in graph.graph.input if i.name == "past.0.key")
    assert [d.dim_value or d.dim_param for d in past.type.tensor_type.shape.dim] == ["batch", 6, "max_length", 32]
    model.transformer.h[0].self_attention.q_norm = torch.nn.Parameter(torch.ones(20))  # a part the graph lacks
    with pytest.raises(ArtifactError, match=r"does not use 1 weights of this checkpoint "
                                            r"\(transformer.h.0.self_attention.q_norm...\)"):
        build(model, fg.StateDict.of_model(model, "BLOOM"), fg.GraphBuilder(np.float32))
    assert registry.backend(registry.family("BLOOM"), "onnxrt").fused_decode_types() == ("bloom",)


def test_long_prompt_logits(tiny, workdir):
    """A 200-token prompt (ALiBi biases far from 0): the prompt pass, and the one-token steps after a shorter
    prompt, give HF's logits (no cache) at every position."""
    run = _run(workdir, _model("bloom-odd-heads", tiny))
    model = run.torch_model()
    ids = torch.randint(0, run.source.config.vocab_size - 1, (1, 200), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = model(input_ids=ids.to(model.device)).logits.float()
    tolerance = 0.25 if FP16 else 1e-3
    with backend_steps(run, "onnxrt") as (_, steps):
        ids, positions = ids.to(steps.device), torch.arange(200, device=steps.device)[None]
        whole, _ = steps.forward(ids, torch.ones_like(ids), positions, steps.new_cache(1, 256))
        assert (whole.float() - expected).abs().max() < tolerance
        logits, cache = steps.forward(ids[:, :150], torch.ones_like(ids[:, :150]), positions[:, :150],
                                      steps.new_cache(1, 256))
        stepped = [logits.float().clone()]
        for t in range(150, 200):
            logits, cache = steps.forward(ids[:, t:t + 1], torch.ones_like(ids[:, :t + 1]), positions[:, t:t + 1],
                                          cache)
            stepped.append(logits.float().clone())
        assert (torch.cat(stepped, 1) - expected).abs().max() < tolerance


@pytest.mark.skipif(DEVICE != "cuda", reason="the CUDA graph of the fused step needs HARNESS_TEST_DEVICE=cuda")
def test_cuda_graph_step_matches_uncaptured(workdir, capsys):
    model = {"variant": "bloom-offline"}
    fused = _run(workdir, model, use_cuda_graph=True)
    ids, mask = _prompt(fused.source.config.vocab_size)
    pad, results = fused.tokenizer.pad_token_id, {}
    for label, run in (("graph", fused), ("uncaptured", _run(workdir, model)),
                       ("plain static", _run(workdir, model, fused_decode=False))):
        with backend_steps(run, "onnxrt") as (_, steps):
            results[label] = [_tokens(steps, ids, mask, beams, None, pad) for beams in (1, 3)]
    assert results["graph"] == results["uncaptured"]
    with capsys.disabled():  # fp16 kernels differ from the export's: reported, not asserted
        for beams, fused_rows, plain_rows in zip((1, 3), results["graph"], results["plain static"]):
            diffs = [(r, next((i for i, (a, b) in enumerate(zip(f, p)) if a != b), min(len(f), len(p))))
                     for r, (f, p) in enumerate(zip(fused_rows, plain_rows)) if f != p]
            print(f"\nbloom-offline fused vs plain static fp16, beams={beams}: "
                  + (f"first differences (row, token): {diffs}" if diffs else "same tokens"))
