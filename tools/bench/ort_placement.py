#!/usr/bin/env python3
"""Which nodes of an ONNX graph ONNX Runtime's CUDA EP leaves on the CPU and where it inserts Memcpy nodes
(either rules out its CUDA-graph mode). Saves the session's optimised graph and lists each Memcpy with the
node feeding it and the nodes it feeds.

    python3 tools/bench/ort_placement.py decoder.onnx
"""
import argparse
import collections
import tempfile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="an ONNX graph (model.onnx in a working dir)")
    path = parser.parse_args().model
    import onnx
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        options = ort.SessionOptions()
        options.optimized_model_filepath = f"{tmp}/optimized.onnx"
        ort.InferenceSession(path, options, providers=["CUDAExecutionProvider"])
        graph = onnx.load(f"{tmp}/optimized.onnx", load_external_data=False).graph
    producers = {out: node for node in graph.node for out in node.output}
    consumers = collections.defaultdict(list)
    for node in graph.node:
        for name in node.input:
            consumers[name].append(node)
    print(f"{path}: {len(graph.node)} nodes after optimisation; ops:",
          dict(collections.Counter(n.op_type for n in graph.node).most_common()))
    for node in graph.node:
        if node.op_type.startswith("Memcpy"):
            source = producers.get(node.input[0])
            origin = f"{source.op_type} {source.name}" if source else f"graph input {node.input[0]}"
            print(f"{node.op_type}: from {origin} -> {[c.op_type + ' ' + c.name for c in consumers[node.output[0]]]}")


if __name__ == "__main__":
    main()
