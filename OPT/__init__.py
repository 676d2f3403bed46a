"""OPT family: Meta's facebook/opt-* decoder-only causal LMs."""
