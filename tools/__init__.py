"""Scripts beside the harness: `tools.assets` builds the committed offline assets, `tools.bench` measures and
checks the harness on a GPU. Neither is imported by the harness itself."""
