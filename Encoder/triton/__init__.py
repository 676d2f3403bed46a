"""Encoder models on Triton Inference Server: the deployment's configs (`configs.py`: tokenizer + model +
ensemble, seed 002's layout, plus a python flavour of the model), what runs inside the python backend
(`serving.py`), and the `triton` client backend of encoder models (`client.py`). The action is
`Encoder/actions/deploy.py`; the shared serving layer is NNDF/triton/."""
