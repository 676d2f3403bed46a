# Sourced by the device scripts (tools/device/*_check.sh): repository root, the packages staged in /tmp/site
# (../shared/device/stage.sh, then tools/device/resplit.sh), the small wheels carried in .whl/, and $OUT.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
OUT=${OUT:-temp/device-out}
mkdir -p "$OUT/builds"
if [ -d .whl ]; then python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null; fi
