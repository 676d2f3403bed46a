"""Encoder models on Triton Inference Server: the deployment's configs (`configs.py`: tokenizer + model +
ensemble, transformer-deploy's layout, plus a python flavour of the model), what runs inside the python backend
(`serving.py`), and the `triton` client backend of encoder models (`client.py`). The deploy
evaluator is `Encoder/triton/deploy.py`; the shared serving layer is NNDF/triton/."""
