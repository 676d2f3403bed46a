"""Names in the interface of the graphs onnxrt builds from the weights, which their builders (`fused_graph`,
`Seq2Seq.fused_graph`) and their steps (`ort_fused`, `Seq2Seq.ort_fused`) share."""

# the decoder graphs' int64 [1] input: the first position whose logits the graph computes (`fused_graph.logits`;
# negative counts from the end)
LOGITS_START = "logits_start"
# inputs a kernel reads on the CPU (bound in host memory, frozen by a captured CUDA graph): the attention op's
# total length (`fused_graph`'s docstring) and the first position of the logits
HOST_INPUTS = frozenset({"total_sequence_length", LOGITS_START})
