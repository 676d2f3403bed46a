"""NNDF: the shared core of the harness.

Families (GPT2/, OPT/, BLOOM/, ...) declare facts; everything that runs lives here: option dataclasses
(`options`), the family registry (`registry`), model loading and offline models (`models`, `offline`),
artifact management (`artifacts`), the generation loop over backend step functions (`generation`,
`sampling`), the backends (`backends/`), measurement (`timing`), results (`results`) and the actions
(`actions/`). `run.py` is a thin adapter over `NNDF.cli`.
"""
