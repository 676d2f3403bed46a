"""The decoder-only task: the prompt is the decoder's input; prompt and generation share its positions.

Prompts are left padded (new tokens follow the last real token of every row); teacher-forced scoring is one
forward pass over context + target. `adapters` names what this kind runs on each backend (this package's
modules; the Triton client serves it as every generative kind).
"""
from __future__ import annotations

import torch

from NNDF.chat_template import ChatTemplateOptions
from NNDF.evaluate.table import GENERATIVE_EVALUATORS
from NNDF.steps import position_ids_from_mask
from NNDF.tasks import GenerativeTask, Prompt, TextItems, shared_positions_problem, tokenize


class CausalLM(TextItems, GenerativeTask):
    """Decoder-only language models: the prompt is the decoder's input."""

    kind = "decoder"
    auto_class = "AutoModelForCausalLM"
    padding_side = "left"  # new tokens follow the last real token of every row
    one_stream = True
    adapters = {"frameworks": "CausalLM.frameworks:DecoderTorch",
                "onnxrt": "CausalLM.onnxrt:DecoderOnnx",
                "trt": "CausalLM.trt:DecoderTrt",
                "triton": "NNDF.backends.triton.backend:GenerativeTriton"}
    evaluators = GENERATIVE_EVALUATORS  # shared by the generative kinds (NNDF/evaluate/)
    option_groups = (*GenerativeTask.option_groups, ChatTemplateOptions)  # prompts in the tokenizer's chat template

    def parts(self, use_cache: bool) -> tuple[str, ...]:
        return ("decoder",)

    def hf_generate_inputs(self, run, prompt: Prompt) -> dict:
        return {"input_ids": prompt.input_ids, "attention_mask": prompt.attention_mask,
                "pad_token_id": self.special_ids(run)[1]}

    def prompts(self, run, texts: list[str]) -> Prompt:
        """Left-padded ids and mask; padding requires --use-mask (without a mask it would be wrong)."""
        ids, mask = tokenize(run, texts)
        return Prompt(ids, mask)

    def length_problem(self, run, prompt: int, new: int) -> str | None:
        """Prompt and generation share the decoder's positions."""
        return shared_positions_problem(run, prompt, new)

    def random_prompt(self, run, batch: int, length: int, generator: torch.Generator) -> Prompt:
        ids = torch.randint(0, run.source.dims.vocab, (batch, length), generator=generator).to(run.device)
        return Prompt(ids, torch.ones_like(ids))

    def passage_ids(self, tokenizer, text: str) -> list[int]:
        """A text's ids as the model reads a context (with the tokenizer's specials, e.g. a leading BOS)."""
        return tokenizer(text)["input_ids"]

    def split_passage(self, ids: list[int], k: int, eos: int | None) -> tuple[list[int], list[int], slice]:
        """One pass scores every token after the first."""
        return ids[:1], ids[1:], slice(len(ids) - 1 - k, None)

    def teacher_force(self, run, steps, context: list[int], target: list[int]) -> torch.Tensor:
        """One forward pass over context + target, no sampling."""
        x = torch.tensor([context + target], device=steps.device)
        mask = torch.ones_like(x)
        logits, _ = steps.forward(x, mask, position_ids_from_mask(mask), steps.new_cache(1, x.shape[1]))
        return torch.log_softmax(logits[0, len(context) - 1: -1].float(), dim=-1)


CAUSAL_LM = CausalLM()
