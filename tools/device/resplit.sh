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
(cd "$tmp" && split -b 44M -d -a 2 bundle.tar chunk. && rm bundle.tar)
n=$(ls "$tmp" | wc -l)
rm -rf .device && mkdir .device
i=0
for chunk in "$tmp"/chunk.*; do
  i=$((i+1)); part=$(printf ".device/part-%02d" "$i"); mkdir -p "$part"; mv "$chunk" "$part/"
  cat > "$part/install.sh" <<INSTALL
#!/bin/sh
# Runs on the device: keep this chunk in /tmp/w; once all $n chunks are there, install into /tmp/site.
set -e
mkdir -p /tmp/w && cp "\$(dirname "\$0")"/chunk.* /tmp/w/
if [ "\$(ls /tmp/w/chunk.* | wc -l)" -eq $n ] && [ ! -f /tmp/site/.done ]; then
  cat /tmp/w/chunk.* > /tmp/w/bundle.tar && mkdir -p /tmp/w/whl && tar xf /tmp/w/bundle.tar -C /tmp/w/whl
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site /tmp/w/whl/*.whl
  touch /tmp/site/.done && echo "installed into /tmp/site: export PYTHONPATH=/tmp/site"
fi
INSTALL
done
rm -rf "$tmp"
echo "$n parts in .device/: run each with run(command='sh .device/part-NN/install.sh', carry=['.device/part-NN'])"
