"""The encoder-decoder task: the prompt goes to the encoder; the decoder starts from the model's start token.

Encoder inputs are right padded (learned absolute positions would shift under left padding) and their mask travels with the encoder's output to every cross-attention. Teacher-forced
scoring feeds the context to the encoder (with the tokenizer's special tokens) and the target to the decoder.
"""
from __future__ import annotations

import torch

from NNDF.evaluate.table import GENERATIVE_EVALUATORS
from NNDF.steps import position_ids_from_mask
from NNDF.tasks import GenerativeTask, Prompt, TextItems, special_affixes, tokenize


class Seq2SeqLM(TextItems, GenerativeTask):
    """Text in, text out through an encoder and a decoder."""

    kind = "seq2seq"
    auto_class = "AutoModelForSeq2SeqLM"
    padding_side = "right"
    one_stream = False  # the context is read by the encoder: a different split is a different computation
    step_parts = ("decoder",)
    adapters = {"frameworks": "Seq2Seq.frameworks:Seq2SeqTorch",
                "onnxrt": "Seq2Seq.onnxrt:Seq2SeqOnnx",
                "trt": "Seq2Seq.trt:Seq2SeqTrt",
                "triton": "NNDF.backends.triton.backend:GenerativeTriton"}
    evaluators = GENERATIVE_EVALUATORS  # shared by the generative kinds (NNDF/evaluate/)

    def once_per_input(self, model) -> list:
        return [model.get_encoder()]

    def length_problem(self, run, prompt: int, new: int) -> str | None:
        """The prompt goes to the encoder, the new tokens (after the start token) to the decoder: with learned
        positions each has its own table (of one size); relative positions have none."""
        limit = run.source.dims.positions
        if limit and prompt > limit:
            return f"--input-seq-len {prompt} exceeds {run.source.variant}'s {limit} encoder positions; shorten it"
        if limit and new + 1 > limit:
            return (f"--output-seq-len {new} (after the decoder's start token) exceeds {run.source.variant}'s "
                    f"{limit} decoder positions; shorten it")
        return None

    def hf_generate_inputs(self, run, prompt: Prompt) -> dict:
        return {**prompt.encoder, "pad_token_id": self.special_ids(run)[1]}

    def parts(self, use_cache: bool) -> tuple[str, ...]:
        return ("encoder", "decoder", "cache_generator") if use_cache else ("encoder", "decoder")

    @staticmethod
    def decoder_start(run) -> int:
        start = run.source.generation.decoder_start_token_id
        return start if start is not None else run.source.config.decoder_start_token_id

    def _with_start(self, run, encoder: dict) -> Prompt:
        rows = encoder["input_ids"].shape[0]
        ids = torch.full((rows, 1), self.decoder_start(run), dtype=torch.long, device=encoder["input_ids"].device)
        return Prompt(ids, torch.ones_like(ids), encoder)

    def prompts(self, run, texts: list[str]) -> Prompt:
        ids, mask = tokenize(run, texts)
        return self._with_start(run, {"input_ids": ids, "attention_mask": mask})

    def random_prompt(self, run, batch: int, length: int, generator: torch.Generator) -> Prompt:
        ids = torch.randint(0, run.source.dims.vocab, (batch, length), generator=generator).to(run.device)
        return self._with_start(run, {"input_ids": ids, "attention_mask": torch.ones_like(ids)})

    def passage_ids(self, tokenizer, text: str) -> list[int]:
        """The text's own ids; the encoder's special tokens are added when it is fed (`teacher_force`)."""
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    def split_passage(self, ids: list[int], k: int, eos: int | None) -> tuple[list[int], list[int], slice]:
        """The encoder reads all but the last k tokens; the decoder is scored on those k tokens and the EOS
        that ends them (so `seq_perplexity` covers the whole decoded sequence)."""
        return ids[:-k], ids[-k:] + ([eos] if eos is not None else []), slice(0, k)

    def teacher_force(self, run, steps, context: list[int], target: list[int]) -> torch.Tensor:
        """log-softmax rows predicting each target token [len(target), V]: encoder(context), then one decoder
        pass over the start token (and the forced first token, e.g. mBART's target language) + target."""
        prefix, suffix = special_affixes(run.tokenizer)
        enc = torch.tensor([prefix + context + suffix], device=steps.device)
        forced = run.source.generation.forced_bos_token_id
        lead = [self.decoder_start(run)] + ([forced] if forced is not None else [])
        dec = torch.tensor([lead + target[:-1]], device=steps.device)
        cache = steps.start({"input_ids": enc, "attention_mask": torch.ones_like(enc)}, dec.shape[1])
        mask = torch.ones_like(dec)
        logits, _ = steps.forward(dec, mask, position_ids_from_mask(mask), cache)
        return torch.log_softmax(logits[0, len(lead) - 1:].float(), dim=-1)


SEQ2SEQ_LM = Seq2SeqLM()
