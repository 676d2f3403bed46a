"""Benchmarks and GPU checks of the harness: each runs on any CUDA machine with one shell command
(tools/README.md); most have a CPU smoke mode."""
