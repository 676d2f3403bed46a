# Sourced by the shell scripts in tools/bench: works from the repository root, offline (HF_HUB_OFFLINE=1), with
# unbuffered Python, $OUT (default temp/bench) for logs and results and $SHAPES (default temp/shapes) for the
# random-weight shapes models, each made once by `make_shapes NAME`. `python3` is the one on PATH: activate the
# environment that has the requirements (plus onnxruntime-gpu / TensorRT where a script says so) first.
# `-h` or `--help` as a script's first argument prints that script's header comment and exits.
BENCH_SCRIPT=$(realpath "${BASH_SOURCE[1]}")
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  sed -n '2,/^[^#]/{/^#/!q;s/^# \{0,1\}//;p}' "$BENCH_SCRIPT"
  exit 0
fi
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
OUT=${OUT:-temp/bench}
SHAPES=${SHAPES:-temp/shapes}
mkdir -p "$OUT"
make_shapes() {  # make_shapes NAME: $SHAPES/NAME (tools/assets/make_shapes_model.py), unless it is there
  [ -f "$SHAPES/$1/config.json" ] || python3 tools/assets/make_shapes_model.py "$1" "$SHAPES/$1" >/dev/null
}
