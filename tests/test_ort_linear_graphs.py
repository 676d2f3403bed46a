"""The decoder graphs onnxrt builds from the weights, with their products as this project's Linear op
(`--ort-products linear`, the default on CUDA; NNDF/backends/onnxrt/custom_ops.py), on the CPU in fp32 (the op's
CPU build): every decoder family's offline variant gives HF `generate`'s tokens (greedy and 3 beams; Mistral's with
a window shorter than prompt + new tokens; OPT's ReLU and the q/k/v biases inside the op; BLOOM's ALiBi columns as
the op's addend, `BLOOM.fused_onnx.ALIBI_IN_PRODUCT`), the graph has no MatMul left and, with every family's norms
inside the products (`fused_graph.NORMS_IN_PRODUCTS`; by default as each builder declares), its norms and residual
adds run inside the products (and the LLAMA family's SwiGLU gate inside its product), and the library sits in the
artifact folder. `--ort-products` where no graph is built is refused."""
import pytest
import torch

from CausalLM.ort_fused import FusedDecodeOnnx
from NNDF import registry
from NNDF.actions.common import backend_steps
from NNDF.backends.onnxrt import custom_ops
from NNDF.backends.onnxrt.options import ORTOptions
from NNDF.context import make_context
from NNDF.errors import UsageError
from NNDF.options import ModelOptions

from test_fused_decode_ort import _hf as hf_tokens, _tokens as fused_tokens

VARIANTS = [("OPT", "opt-offline"), ("BLOOM", "bloom-offline"), ("LLAMA", "mistral-offline"),
            ("LLAMA", "qwen2-offline"), ("LLAMA", "phi3-offline"), ("GPT2", "gptj-offline"),
            ("GPT2", "gpt-neox-offline"), ("GPT2", "gpt-neo-offline")]
NEW, ROWS, PROMPT = 10, 2, 7


def _run(workdir, family: str, variant: str, **flags):
    options = ModelOptions(variant=variant, working_dir=str(workdir), use_cache=True, use_mask=True, device="cpu",
                           fp16=False, static_cache=True, **flags)
    return make_context(registry.family(family), options, ORTOptions(ort_products="linear"))


@pytest.mark.parametrize("family, variant", VARIANTS, ids=[v for _, v in VARIANTS])
def test_graphs_of_linear_ops_give_hf_generate_tokens(family, variant, workdir, monkeypatch):
    from CausalLM import fused_graph

    monkeypatch.setattr(fused_graph, "NORMS_IN_PRODUCTS", True)  # every family's (by default: as declared)
    monkeypatch.setattr(fused_graph, "OWN_ATTENTION", True)
    run = _run(workdir, family, variant)
    config = run.source.config
    ids = torch.randint(0, config.vocab_size - 1, (ROWS, PROMPT), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    pad = run.tokenizer.pad_token_id if run.tokenizer.pad_token_id is not None else config.eos_token_id
    with backend_steps(run, "onnxrt") as (backend, steps):
        assert isinstance(backend.onnx, FusedDecodeOnnx)
        assert "products: the Linear op" in backend.choice
        nodes = backend.onnx.record["nodes"]
        assert nodes["Linear"] >= 3 * config.num_hidden_layers and "MatMul" not in nodes, nodes
        # the norms inside the products and the residual adds inside the products before them: at most the
        # embeddings' own norm is left
        assert sum(count for op, count in nodes.items() if "Normalization" in op) <= 1, nodes
        assert "Sigmoid" not in nodes and "Split" not in nodes, nodes  # SwiGLU's gate inside its product
        # this project's Attention op wherever the op rotates no keys (the LLAMA family, GPT-J and GPT-NeoX do)
        rotary = family == "LLAMA" or variant in ("gptj-offline", "gpt-neox-offline")
        assert nodes.get("Attention", 0) == (0 if rotary else config.num_hidden_layers), nodes
        assert (backend.paths["decoder"].parent / custom_ops.FILE).is_file()
        assert backend.export_max_diff() < 1e-3
        for beams in (1, 3):
            expected = hf_tokens(run, ids, mask, beams, None, pad, new=NEW)
            assert fused_tokens(steps, ids, mask, beams, None, pad, new=NEW) == expected, f"beams={beams}"


@pytest.mark.parametrize("family, variant, folded", [("OPT", "opt-offline", False), ("BLOOM", "bloom-offline", True)],
                         ids=["opt-offline", "bloom-offline"])
def test_norms_run_inside_the_products_where_the_family_declares_it(family, variant, folded, workdir):
    """By default a family's norms are their own kernels unless its builder declares `norms_in_products` (measured
    faster there): OPT's skip norms stay, BLOOM's run inside the products; both attend with this project's op."""
    run = _run(workdir, family, variant)
    with backend_steps(run, "onnxrt") as (backend, _):
        nodes = backend.onnx.record["nodes"]
    norms = sum(count for op, count in nodes.items() if "Normalization" in op)
    assert (norms <= 1) == folded and (norms > 2 * run.source.config.num_hidden_layers) != folded, nodes
    # both builders declare `own_attention` (measured faster on an H100): this project's Attention op
    assert nodes.get("Attention") == run.source.config.num_hidden_layers and "GroupQueryAttention" not in nodes


def test_ort_products_without_a_built_graph_is_refused(workdir):
    from NNDF.backends.onnxrt.backend import OnnxRuntimeBackend  # noqa: F401 (the backend the registry makes)

    run = make_context(registry.family("OPT"), ModelOptions(variant="opt-offline", working_dir=str(workdir),
                                                             use_cache=True, device="cpu"),
                       ORTOptions(ort_products="matmul"))
    with pytest.raises(UsageError, match="--ort-products applies to the graphs onnxrt builds from the weights, "
                                         "which only --static-cache runs take"):
        with backend_steps(run, "onnxrt"):
            pass


def test_cli_refuses_ort_products_without_a_built_graph(workdir, capsys):
    from conftest import cli_in_process

    proc = cli_in_process(capsys, "generate", "OPT", "onnxrt", "--use-cache", "--ort-products", "linear", "--prompt",
                          "Hello", "-wd", str(workdir))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "--ort-products applies to the graphs onnxrt builds from the weights" in lines[0]
    proc = cli_in_process(capsys, "generate", "OPT", "onnxrt", "--use-cache", "--ort-products", "fused", "--prompt",
                          "Hello")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "--ort-products: invalid choice: 'fused'" in lines[0]
    assert "linear" in lines[0] and "matmul" in lines[0]
