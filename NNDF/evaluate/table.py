"""The generative kinds' evaluators, one table for the decoder-only, encoder-decoder and image-to-text kinds
(their `Task.evaluators`): the actions over the shared generation loop (this package), and `deploy`, which writes
a served generation loop (NNDF/triton/generative_deploy.py). Kept in a module of its own, with no imports, so a
kind's task names it without importing the evaluators (they import the kinds' shared code)."""

GENERATIVE_EVALUATORS = {
    "accuracy": "NNDF.evaluate.accuracy:Accuracy", "benchmark": "NNDF.evaluate.benchmark:Benchmark",
    "chat": "NNDF.evaluate.chat:Chat", "run": "NNDF.evaluate.checkpoint:Checkpoint",
    "compare": "NNDF.evaluate.checkpoint:Checkpoint", "generate": "NNDF.evaluate.generate:Generate",
    "deploy": "NNDF.triton.generative_deploy:GenerativeDeploy",
}
