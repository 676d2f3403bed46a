"""Build small offline T5, BART and mBART-50 style tokenizers, trained from scratch on local text.

The harness must run without the HuggingFace Hub, so its seq2seq smoke tests need
tokenizers that ship in the repository.  This script trains three small ones on
the training split of ``tools/assets/offline_corpus.py`` (CPython's pydoc topics minus
the held-out ones, plus ``/usr/share/common-licenses``) and writes regular
HuggingFace folders (``tokenizer.json`` + ``tokenizer_config.json`` + README.md)
that ``AutoTokenizer.from_pretrained(folder)`` loads offline:

* ``T5/offline/t5-tokenizer``: SentencePiece *unigram* model laid out like T5
  (``<pad>``=0, ``</s>``=1, ``<unk>``=2, no bos), plus T5's 100 ``<extra_id_N>``
  sentinels at the top of the vocab in T5's reversed order; loads as T5TokenizerFast.
* ``BART/offline/bart-tokenizer``: byte-level BPE like BART/RoBERTa (``<s>``=0,
  ``<pad>``=1, ``</s>``=2, ``<unk>``=3, ``<mask>`` = last id, no prefix space);
  loads as BartTokenizerFast (an alias of RobertaTokenizer on transformers 5.x).
* ``BART/offline/mbart-tokenizer``: SentencePiece *unigram* model in mBART-50's
  fairseq layout (``<s>``=0, ``<pad>``=1, ``</s>``=2, ``<unk>``=3, spm piece i >= 3
  at id i + 1, then the 52 mBART-50 language codes in fairseq order, then ``<mask>``);
  loads as MBart50TokenizerFast with src_lang=en_XX, tgt_lang=de_DE.

Why unigram, and why some pieces are dropped: on transformers 5.x the T5 and
MBart50 tokenizer classes rebuild their backend as a ``tokenizers`` *Unigram*
model from the vocab (only the vocab scores and the precompiled normalisation
charsmap are taken from ``tokenizer.json``).  A SentencePiece *BPE* model's scores
are merge ranks, not log-probabilities, so a Unigram Viterbi over them segments
differently from SentencePiece (e.g. "The" -> "▁T" "he").  With a unigram model
the two agree, except where two segmentations tie exactly: pieces that are powers
of a shorter string ("--", "000", "ll", "====") let a run be split as "-" +
"--------" or "--------" + "-", and SentencePiece and ``tokenizers`` break that
tie differently.  Such non-primitive pieces are removed from the trained models
(training is repeated with a vocab raised by the number removed, so the requested
size is met exactly), after which HF and SentencePiece ids agree on every held-out
paragraph; ``verify_t5`` / ``verify_mbart`` assert that.  Remaining known
difference (transformers' MBart50 pipeline, not this vocab): text with *trailing*
whitespace gets an extra "▁" token from HF, which SentencePiece strips; T5's
pipeline (WhitespaceSplit first) has no such gap.

Deterministic: fixed seed, corpus in sorted document order, SentencePiece with one
thread, ``tokenizers`` without parallelism.  A re-run rewrites byte-identical files.

Rebuild (a few seconds; needs ``sentencepiece``, see requirements.txt):
    .venv/bin/python tools/assets/make_offline_seq2seq_tokenizers.py
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import sys
from pathlib import Path

# The whole point is to work without the Hub; fail loudly instead of downloading.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

try:
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2  # needs protobuf (installed with onnx)
except ImportError as exc:  # pragma: no cover - environment problem, not a code path
    raise SystemExit(f"{exc}: run `.venv/bin/pip install -r requirements.txt` (sentencepiece is pinned there)")
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, BartTokenizerFast, MBart50TokenizerFast, T5TokenizerFast
from transformers.models.mbart50.tokenization_mbart50 import FAIRSEQ_LANGUAGE_CODES

sys.path.insert(0, str(Path(__file__).resolve().parent))
from offline_corpus import SEED, eval_documents, paragraphs, train_documents

REPO_ROOT = Path(__file__).resolve().parents[2]
T5_DIR = Path("T5/offline/t5-tokenizer")
BART_DIR = Path("BART/offline/bart-tokenizer")
MBART_DIR = Path("BART/offline/mbart-tokenizer")
COMMAND = ".venv/bin/python tools/assets/make_offline_seq2seq_tokenizers.py"
KEEP_FILES = {"tokenizer.json", "tokenizer_config.json", "README.md"}
MAX_FOLDER_BYTES = 1024 * 1024
T5_EXTRA_IDS = 100
BART_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]  # ids 0..3, as in fairseq/BART
MBART_SRC_LANG, MBART_TGT_LANG = "en_XX", "de_DE"
N_CHECK_SENTENCES = 50
T5_EXAMPLE = "translate English to German: The house is wonderful."


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", type=Path, default=REPO_ROOT, help="folders are written below this directory")
    p.add_argument("--t5-vocab", type=int, default=2000, help="SentencePiece pieces, specials included")
    p.add_argument("--bart-vocab", type=int, default=4000, help="total BPE vocab, including <mask>")
    p.add_argument("--mbart-vocab", type=int, default=4000, help="SentencePiece pieces, specials included")
    return p.parse_args()


# --------------------------------------------------------------------------- text


def training_lines() -> list[str]:
    """Non-empty stripped lines of the training documents, in document order (for SentencePiece)."""
    return [line.strip() for _, text in train_documents() for line in text.splitlines() if line.strip()]


def held_out_paragraphs() -> list[str]:
    """Held-out paragraphs with surrounding whitespace stripped (inner newlines/indentation kept)."""
    return [p.strip() for _, text in eval_documents() for p in paragraphs(text)]


def held_out_sentences(n: int = N_CHECK_SENTENCES) -> list[str]:
    """n prose sentences spread evenly over the held-out text (deterministic)."""
    sentences = []
    for para in held_out_paragraphs():
        flat = " ".join(para.split())
        for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", flat):
            if 30 <= len(s) <= 200 and s[0].isupper() and ">>>" not in s:
                sentences.append(s)
    assert len(sentences) >= n, f"only {len(sentences)} held-out sentences"
    step = len(sentences) / n
    return [sentences[int(i * step)] for i in range(n)]


# --------------------------------------------------------------------------- sentencepiece


def is_primitive(piece: str) -> bool:
    """False for strings that are a power of a shorter string ("--", "000", "abab")."""
    return (piece + piece).find(piece, 1) == len(piece)


def train_sentencepiece(lines: list[str], vocab_size: int, **special_ids: int):
    """Train a SentencePiece unigram model and drop its non-primitive pieces; return the ModelProto."""
    spm.set_random_generator_seed(SEED)
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=buf,
        model_type="unigram",
        vocab_size=vocab_size,
        character_coverage=1.0,  # every training character is a piece; the rest is <unk>
        byte_fallback=False,  # like T5 / mBART
        normalization_rule_name="nmt_nfkc",  # SentencePiece's default, as in T5 / mBART
        num_threads=1,
        minloglevel=2,
        **special_ids,
    )
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(buf.getvalue())
    # Pieces that are powers of a shorter string make exact Viterbi ties, which
    # SentencePiece and `tokenizers` break differently (see the module docstring).
    kept = [p for p in proto.pieces if p.type != p.NORMAL or is_primitive(p.piece)]
    del proto.pieces[:]
    proto.pieces.extend(kept)
    proto.trainer_spec.vocab_size = len(kept)
    return proto


def train_exact_sentencepiece(lines: list[str], n_pieces: int, **special_ids: int):
    """Train with a vocab raised by the number of pruned pieces until exactly n_pieces remain."""
    vocab_size = n_pieces
    for _ in range(10):
        proto = train_sentencepiece(lines, vocab_size, **special_ids)
        if len(proto.pieces) == n_pieces:
            return proto
        vocab_size += n_pieces - len(proto.pieces)
    raise RuntimeError(f"could not train exactly {n_pieces} primitive pieces (last try: {len(proto.pieces)})")


def processor(proto) -> spm.SentencePieceProcessor:
    return spm.SentencePieceProcessor(model_proto=proto.SerializeToString())


# --------------------------------------------------------------------------- builders


def build_t5(proto) -> T5TokenizerFast:
    """T5 layout: spm ids unchanged (<pad>=0, </s>=1, <unk>=2), then <extra_id_99> ... <extra_id_0>."""
    pieces = [(p.piece, p.score) for p in proto.pieces]
    assert [p for p, _ in pieces[:3]] == ["<pad>", "</s>", "<unk>"], pieces[:3]
    sentinels = [(f"<extra_id_{i}>", 0.0) for i in reversed(range(T5_EXTRA_IDS))]  # real T5: <extra_id_0> is last
    return T5TokenizerFast(
        vocab=pieces + sentinels,
        _spm_precompiled_charsmap=proto.normalizer_spec.precompiled_charsmap,
        extra_ids=T5_EXTRA_IDS,
        model_max_length=512,  # as t5-small / t5-base
    )


def build_bart(texts: list[str], vocab_size: int) -> BartTokenizerFast:
    """Byte-level BPE like BART's: <s>, <pad>, </s>, <unk> first, <mask> last, no prefix space."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - 1,  # the last id is <mask>, as in BART (50264)
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte encodable -> exact round-trip
        special_tokens=BART_SPECIALS,
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    model = json.loads(tok.to_str())["model"]
    vocab = dict(model["vocab"])
    assert len(vocab) == vocab_size - 1 and [vocab[t] for t in BART_SPECIALS] == [0, 1, 2, 3]
    vocab["<mask>"] = len(vocab)
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return BartTokenizerFast(
        vocab=vocab,
        merges=merges,
        mask_token=AddedToken("<mask>", lstrip=True, rstrip=False, special=True),  # as facebook/bart-*
        add_prefix_space=False,
        model_max_length=1024,  # as facebook/bart-base / -large
    )


def build_mbart50(proto) -> MBart50TokenizerFast:
    """mBART-50 layout: <s>, <pad>, </s>, <unk>, spm pieces 3.. shifted by one, 52 language codes, <mask>."""
    pieces = [(p.piece, p.score) for p in proto.pieces]
    assert [p for p, _ in pieces[:3]] == ["<unk>", "<s>", "</s>"], pieces[:3]  # fairseq's spm layout
    return MBart50TokenizerFast(
        vocab=pieces,  # MBart50Tokenizer reorders it into the fairseq layout and appends codes + <mask>
        _spm_precompiled_charsmap=proto.normalizer_spec.precompiled_charsmap,
        bos_token="<s>",  # MBart50Tokenizer only sets cls_token=<s>; facebook/mbart-large-50 also has bos
        src_lang=MBART_SRC_LANG,
        tgt_lang=MBART_TGT_LANG,
        model_max_length=1024,  # as facebook/mbart-large-50
    )


def mbart_ids_from_spm(spm_ids: list[int]) -> list[int]:
    """fairseq's mapping of spm ids to mBART ids: <unk> 0 -> 3, <s> 1 -> 0, </s> 2 -> 2, piece i -> i + 1."""
    return [i + 1 if i >= 3 else (3, 0, 2)[i] for i in spm_ids]


# --------------------------------------------------------------------------- output


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def save(tokenizer, out: Path, readme: str) -> None:
    # Start from an empty folder so a re-run never leaves stale files behind.
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    tokenizer.save_pretrained(out)
    (out / "README.md").write_text(readme)
    for path in out.iterdir():  # anything else (e.g. special_tokens_map.json) is not needed to load
        if path.name not in KEEP_FILES:
            path.unlink()


def readme_t5(tok) -> str:
    n_spm = len(tok) - T5_EXTRA_IDS
    return f"""# t5-tokenizer (offline; NOT a pretrained T5 tokenizer)

T5-style SentencePiece unigram tokenizer (T5TokenizerFast), {len(tok)} ids: `<pad>`=0 (also the decoder start),
`</s>`=1, `<unk>`=2, no bos; {n_spm} spm pieces, then `<extra_id_99>`={n_spm} ... `<extra_id_0>`={len(tok) - 1}.
Trained from scratch on local English text (`tools/assets/offline_corpus.py` training split), not google-t5's vocab.
Rebuilt (with `BART/offline/*-tokenizer`) by: `{COMMAND}`
"""


def readme_bart(tok) -> str:
    return f"""# bart-tokenizer (offline; NOT a pretrained BART tokenizer)

BART-style byte-level BPE (BartTokenizerFast = RobertaTokenizer on transformers 5.x), {len(tok)} ids:
`<s>`=0, `<pad>`=1, `</s>`=2 (also the decoder start), `<unk>`=3, `<mask>`={tok.mask_token_id}; no prefix space.
Trained from scratch on local English text (`tools/assets/offline_corpus.py` training split), not facebook/bart's vocab.
Rebuilt (with `T5/offline/t5-tokenizer`, `BART/offline/mbart-tokenizer`) by: `{COMMAND}`
"""


def readme_mbart(tok) -> str:
    src, tgt = (f"{code}={tok.lang_code_to_id[code]}" for code in (MBART_SRC_LANG, MBART_TGT_LANG))
    return f"""# mbart-tokenizer (offline; NOT a pretrained mBART-50 tokenizer)

mBART-50-style SentencePiece unigram tokenizer (MBart50TokenizerFast), {len(tok)} ids: `<s>`=0, `<pad>`=1, `</s>`=2,
`<unk>`=3, {len(tok) - 54} spm pieces, the 52 mBART-50 language codes ({src}, {tgt}), `<mask>`={tok.mask_token_id}.
Defaults src_lang={MBART_SRC_LANG}, tgt_lang={MBART_TGT_LANG}; decoder start `</s>`=2, forced_bos = target code.
English-only training text (`tools/assets/offline_corpus.py` training split); ids = SentencePiece's + fairseq offset.
Rebuilt (with `T5/offline/t5-tokenizer`, `BART/offline/bart-tokenizer`) by: `{COMMAND}`
"""


# --------------------------------------------------------------------------- checks


def load(folder: Path):
    return AutoTokenizer.from_pretrained(folder, local_files_only=True)


def check_spm_agreement(name: str, hf_ids, spm_ids, texts: list[str]) -> None:
    bad = [t for t, a, b in zip(texts, hf_ids, spm_ids) if a != b]
    if bad:
        raise AssertionError(f"{name}: {len(bad)}/{len(texts)} texts differ from SentencePiece, e.g. {bad[0][:120]!r}")


def verify_t5(folder: Path, sp: spm.SentencePieceProcessor, sentences: list[str], paras: list[str]) -> dict:
    tok = load(folder)
    assert isinstance(tok, T5TokenizerFast), type(tok)
    n_spm = sp.get_piece_size()
    assert (tok.pad_token_id, tok.eos_token_id, tok.unk_token_id, tok.bos_token_id) == (0, 1, 2, None)
    assert len(tok) == n_spm + T5_EXTRA_IDS
    assert tok.convert_tokens_to_ids("<extra_id_0>") == len(tok) - 1
    assert tok.convert_tokens_to_ids("<extra_id_99>") == n_spm
    ids = tok(T5_EXAMPLE).input_ids
    assert ids[-1] == 1 and ids.count(1) == 1, ids
    assert tok.decode(ids, skip_special_tokens=True) == T5_EXAMPLE
    masked = tok("The <extra_id_0> walks in <extra_id_1> park").input_ids
    assert [len(tok) - 1, len(tok) - 2] == [i for i in masked if i >= n_spm], masked
    # ids == SentencePiece's own ids + </s>; raw paragraphs too (newlines, indentation, runs of spaces).
    for texts in (sentences, paras):
        check_spm_agreement("t5", tok(texts, verbose=False).input_ids, [ids + [1] for ids in sp.encode(texts)], texts)
    for s in sentences:
        assert tok.decode(tok(s).input_ids, skip_special_tokens=True) == s, s
    return {"vocab": len(tok), "spm_pieces": n_spm, "pad": 0, "eos": 1, "unk": 2, "bos": None,
            "extra_id_0": len(tok) - 1, "extra_id_99": n_spm, "decoder_start": "pad=0", "example_ids": ids}


def verify_bart(folder: Path, sentences: list[str]) -> dict:
    tok = load(folder)
    assert isinstance(tok, BartTokenizerFast), type(tok)
    assert (tok.bos_token_id, tok.pad_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2, 3)
    assert tok.mask_token_id == len(tok) - 1
    assert tok.add_prefix_space is False
    ids = tok("Hello world").input_ids
    assert ids[0] == 0 and ids[-1] == 2 and 0 not in ids[1:-1] and 2 not in ids[1:-1], ids
    assert tok("Hello").input_ids != tok(" Hello").input_ids  # no prefix space: a leading space is a token
    masked = tok("The house is <mask>.").input_ids
    assert masked.count(tok.mask_token_id) == 1, masked
    for s in sentences + ["naïve café — “quoted” ✓ 東京\n\ttab  two  spaces "]:
        assert tok.decode(tok(s).input_ids, skip_special_tokens=True) == s, s
    return {"vocab": len(tok), "bos": 0, "pad": 1, "eos": 2, "unk": 3, "mask": tok.mask_token_id,
            "decoder_start": "eos=2", "example_ids": ids}


def verify_mbart(folder: Path, sp: spm.SentencePieceProcessor, sentences: list[str], paras: list[str]) -> dict:
    tok = load(folder)
    assert isinstance(tok, MBart50TokenizerFast), type(tok)
    n_spm = sp.get_piece_size()
    assert (tok.bos_token_id, tok.pad_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2, 3)
    assert (tok.src_lang, tok.tgt_lang) == (MBART_SRC_LANG, MBART_TGT_LANG)
    # Language codes right after the pieces, in fairseq order (real mBART-50: ar_AR=250001 ... sl_SI=250052).
    assert len(FAIRSEQ_LANGUAGE_CODES) == 52
    assert [tok.lang_code_to_id[c] for c in FAIRSEQ_LANGUAGE_CODES] == list(range(n_spm + 1, n_spm + 53))
    assert tok.mask_token_id == n_spm + 53 == len(tok) - 1
    en, de = tok.lang_code_to_id[MBART_SRC_LANG], tok.lang_code_to_id[MBART_TGT_LANG]
    ids = tok("Hello world").input_ids
    assert ids[0] == en and ids[-1] == 2, ids
    target = tok(text_target="Hallo Welt").input_ids
    assert target[0] == de and target[-1] == 2, target
    assert tok("Hello world").input_ids == ids  # back in source mode after text_target
    # ids == [src lang] + SentencePiece's ids through fairseq's offset + [</s>].
    for texts in (sentences, paras):
        expected = [[en] + mbart_ids_from_spm(ids) + [2] for ids in sp.encode(texts)]
        check_spm_agreement("mbart", tok(texts, verbose=False).input_ids, expected, texts)
    for s in sentences:
        assert tok.decode(tok(s).input_ids, skip_special_tokens=True) == sp.decode(sp.encode(s)) == s, s
    return {"vocab": len(tok), "spm_pieces": n_spm, "bos": 0, "pad": 1, "eos": 2, "unk": 3,
            "mask": tok.mask_token_id, "en_XX": en, "de_DE": de,
            "decoder_start": "eos=2, forced_bos=target language id", "example_ids": ids, "target_ids": target}


def main() -> None:
    if not __debug__:
        raise SystemExit("run without -O: the checks below are assert statements")
    args = parse_args()
    lines = training_lines()
    texts = [text for _, text in train_documents()]
    sentences = held_out_sentences()
    paras = held_out_paragraphs()

    t5_proto = train_exact_sentencepiece(lines, args.t5_vocab, pad_id=0, eos_id=1, unk_id=2, bos_id=-1)
    mbart_proto = train_exact_sentencepiece(lines, args.mbart_vocab, unk_id=0, bos_id=1, eos_id=2, pad_id=-1)

    folders = {"t5": args.root / T5_DIR, "bart": args.root / BART_DIR, "mbart": args.root / MBART_DIR}
    t5 = build_t5(t5_proto)
    save(t5, folders["t5"], readme_t5(t5))
    bart = build_bart(texts, args.bart_vocab)
    save(bart, folders["bart"], readme_bart(bart))
    mbart = build_mbart50(mbart_proto)
    save(mbart, folders["mbart"], readme_mbart(mbart))

    report = {
        "t5": verify_t5(folders["t5"], processor(t5_proto), sentences, paras),
        "bart": verify_bart(folders["bart"], sentences),
        "mbart": verify_mbart(folders["mbart"], processor(mbart_proto), sentences, paras),
    }
    for name, folder in folders.items():
        size = folder_bytes(folder)
        assert size <= MAX_FOLDER_BYTES, f"{folder} is {size} bytes"
        report[name] = {"folder": str(folder.relative_to(args.root)), "bytes": size, **report[name]}
    for name, info in report.items():
        print(f"{name}: {json.dumps(info)}")
    print(f"checks passed ({len(sentences)} held-out sentences, {len(paras)} held-out paragraphs vs SentencePiece)")


if __name__ == "__main__":
    main()
