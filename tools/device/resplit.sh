#!/usr/bin/env bash
# Re-split the packages ../shared/device/stage.sh staged in .device/ into parts of at most 44 MB.
#
#   bash ../shared/device/stage.sh && bash tools/device/resplit.sh
#
# stage.sh makes 52 MB parts; with this repository's tracked files (~13 MB) a part no longer fits the device
# tool's 64 MiB carry limit. Same install.sh logic: each call `sh .device/part-K/install.sh` keeps its chunk in
# /tmp/w on the device; the call that brings the last chunk installs everything into /tmp/site.
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
cat .device/part-*/chunk.* > "$tmp/bundle.tar"
bash tools/device/write_parts.sh "$tmp/bundle.tar" .device 44M /tmp/w \
  'python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site /tmp/w/files/*.whl' \
  'into /tmp/site: export PYTHONPATH=/tmp/site'
rm -rf "$tmp"
