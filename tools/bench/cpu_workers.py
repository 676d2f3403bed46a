#!/usr/bin/env python3
"""The other CPU engines `cpu_compare.py` measures beside ours, one per process, each in the Python environment that
has it (CTranslate2 and Optimum pin other transformers versions than the harness: give their interpreter with
`cpu_compare.py --other-python`). Nothing here imports the harness.

A worker loads one model, then answers JSON lines on stdin with JSON lines on stdout:
`{"call": {...}}` runs one timed call (a generation, or `repeat` encoder forwards) and answers `{"seconds": s,
...}`; `{"quit": true}` ends it. Inputs are random ids drawn from the request's seed, outside the timer.

    ct2 MODEL_DIR COMPUTE_TYPE THREADS        CTranslate2 Generator (a converted folder): greedy, exactly `new` tokens
    convert MODEL_DIR OUT_DIR TYPE...         CTranslate2 folders OUT_DIR/gpt2-TYPE of a GPT-2 checkpoint (once)
    optimum MODEL_DIR THREADS [SPINNING [QUANTIZE]]  Optimum's ORTModelForFeatureExtraction (export=True) + mean
                                              pooling; SPINNING 0 turns ONNX Runtime's thread spinning off (default:
                                              on); QUANTIZE int8: that export quantized by Optimum's ORTQuantizer
                                              (dynamic, AutoQuantizationConfig.avx512_vnni, per channel), its least
                                              embedding cosine to the float export's given when ready

By hand, with the interpreter of the separate venv that has CTranslate2 and Optimum (`cpu_compare.py
--other-python`; it starts these itself):

    OTHER/bin/python tools/bench/cpu_workers.py convert temp/shapes/gpt2 temp/ct2 int8 float32
    echo '{"call": {"seed": 0, "prompt": 32, "new": 64}}' | \
        OTHER/bin/python tools/bench/cpu_workers.py ct2 temp/ct2/gpt2-int8 int8 2
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np


class Ct2:
    """`ctranslate2.Generator.generate_batch` on token strings: greedy (`sampling_topk` 1), the end token
    suppressed until `new` tokens exist (`min_length` = `max_length` = new, prompt not counted)."""

    def __init__(self, model_dir: str, compute_type: str, threads: str):
        import ctranslate2
        from transformers import AutoTokenizer

        self.generator = ctranslate2.Generator(model_dir, device="cpu", compute_type=compute_type,
                                               intra_threads=int(threads), inter_threads=1)
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.vocab = len(self.tokenizer)

    def call(self, request: dict) -> dict:
        rng = np.random.default_rng(request["seed"])
        ids = rng.integers(0, self.vocab, request["prompt"]).tolist()
        tokens = self.tokenizer.convert_ids_to_tokens(ids)
        new = request["new"]
        start = time.perf_counter()
        result = self.generator.generate_batch([tokens], max_length=new, min_length=new, sampling_topk=1,
                                               beam_size=1, include_prompt_in_result=False)
        seconds = time.perf_counter() - start
        return {"seconds": seconds, "new_tokens": len(result[0].sequences_ids[0])}


class Optimum:
    """Optimum's exported model (its own ONNX export of the checkpoint, ONNX Runtime's default session), mean
    pooling and L2 normalisation as sentence-transformers does them (what our graph's output holds)."""

    def __init__(self, model_dir: str, threads: str, spinning: str = "1", quantize: str = "none"):
        import tempfile

        import onnxruntime as ort
        from optimum.onnxruntime import ORTModelForFeatureExtraction

        if quantize not in ("none", "int8"):
            raise SystemExit(f"cpu_workers.py optimum: quantize {quantize!r}; valid: none, int8")
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(threads)
        options.add_session_config_entry("session.intra_op.allow_spinning", spinning)
        self.model = ORTModelForFeatureExtraction.from_pretrained(model_dir, export=True, session_options=options,
                                                                  provider="CPUExecutionProvider")
        self.vocab = self.model.config.vocab_size
        self.ready = {}
        if quantize == "int8":
            from optimum.onnxruntime import ORTQuantizer
            from optimum.onnxruntime.configuration import AutoQuantizationConfig

            self._folder = tempfile.TemporaryDirectory(prefix="optimum-int8-")
            self.model.save_pretrained(self._folder.name)
            config = AutoQuantizationConfig.avx512_vnni(is_static=False, per_channel=True)
            ORTQuantizer.from_pretrained(self._folder.name).quantize(config, save_dir=self._folder.name)
            quantized = ORTModelForFeatureExtraction.from_pretrained(
                self._folder.name, file_name="model_quantized.onnx", session_options=options,
                provider="CPUExecutionProvider")
            self.ready = {"cosine_to_fp32": self._least_cosine(quantized), "quantization": str(config)}
            self.model = quantized

    def _embed(self, model, inputs: dict):
        import torch

        hidden = model(**inputs).last_hidden_state
        mask = inputs["attention_mask"][:, :, None].to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, dim=-1)

    def _inputs(self, seed: int, batch: int, length: int) -> dict:
        import torch

        generator = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, self.vocab, (batch, length), generator=generator)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}

    def _least_cosine(self, quantized) -> float:
        """The least cosine between the float export's and `quantized`'s embeddings of 16 random sequences."""
        inputs = self._inputs(0, 16, 64)
        return float((self._embed(self.model, inputs) * self._embed(quantized, inputs)).sum(-1).min())

    def call(self, request: dict) -> dict:
        inputs = self._inputs(request["seed"], request["batch"], request["length"])
        start = time.perf_counter()
        for _ in range(request["repeat"]):
            self._embed(self.model, inputs)
        return {"seconds": (time.perf_counter() - start) / request["repeat"]}


def convert(model_dir: str, out_dir: str, *compute_types: str) -> None:
    """`ct2-transformers-converter` for each compute type. The converter needs a tokenizer whose vocabulary has the
    model's size (a shapes model's small tokenizer does not): the source is a folder of links to the weights and
    config with a word-level tokenizer of `vocab_size` tokens (`t0`, `t1`, ...; the last one the end token), which
    CTranslate2 only uses to map ids to token strings."""
    import os
    from pathlib import Path

    from tokenizers import Tokenizer, models, pre_tokenizers

    model, out = Path(model_dir).resolve(), Path(out_dir)
    source = out / "source"
    source.mkdir(parents=True, exist_ok=True)
    config = json.loads((model / "config.json").read_text())
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        if (model / name).exists() and not (source / name).exists():
            os.symlink(model / name, source / name)
    end = "<|endoftext|>"
    vocab = {f"t{i}": i for i in range(config["vocab_size"] - 1)} | {end: config["vocab_size"] - 1}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=end))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(source / "tokenizer.json"))
    (source / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": end, "eos_token": end, "unk_token": end}))
    converter = Path(sys.executable).with_name("ct2-transformers-converter")
    for compute in compute_types:
        import subprocess

        subprocess.run([str(converter), "--model", str(source), "--output_dir", str(out / f"gpt2-{compute}"),
                        "--quantization", compute, "--copy_files", "tokenizer.json", "tokenizer_config.json",
                        "--force"], check=True)


def main() -> None:
    kind, *args = sys.argv[1:] or [""]
    if kind not in ("ct2", "convert", "optimum"):
        raise SystemExit(f"cpu_workers.py: first argument {kind!r} is not a worker; valid: ct2, convert, optimum")
    if kind == "convert":
        convert(*args)
        return
    if kind == "optimum":
        import torch

        torch.set_num_threads(1)  # pooling only: ONNX Runtime's pool runs the model
    worker = {"ct2": Ct2, "optimum": Optimum}[kind](*args)
    print(json.dumps({"ready": True, **getattr(worker, "ready", {})}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("quit"):
            break
        print(json.dumps(worker.call(request["call"])), flush=True)


if __name__ == "__main__":
    main()
