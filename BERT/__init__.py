"""BERT family: encoder-only models for sentence embeddings and classification (BERT, RoBERTa, DistilBERT, MiniLM, ...)."""
