"""BLOOM family: BigScience bloom-* and bloomz-* decoder-only causal LMs (ALiBi positions)."""
