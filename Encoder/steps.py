"""The encoder kind's steps contract is `NNDF.steps.ForwardSteps` (one family with the generative steps); this
is the name the encoder's backend adapters import."""
from NNDF.steps import ForwardSteps as EncoderSteps

__all__ = ["EncoderSteps"]
