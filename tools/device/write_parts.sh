#!/usr/bin/env bash
# Split a tar bundle into parts small enough for the device tool's 64 MiB carry, each with an install.sh that
# keeps its chunk in WORK on the device and, in the call that brings the last chunk, unpacks the bundle and
# runs FINISH there (the bundle's files are then in WORK/files). Used by resplit.sh and encoder_check.sh stage.
#
#   bash tools/device/write_parts.sh BUNDLE.tar DEST SIZE WORK 'FINISH COMMAND' 'WHAT IT INSTALLS'
# e.g. write_parts.sh /tmp/b.tar .device 44M /tmp/w 'pip install ... /tmp/w/files/*.whl' 'the wheels'
set -euo pipefail
bundle=$1 dest=$2 size=$3 work=$4 finish=$5 what=$6
tmp=$(mktemp -d)
(cd "$tmp" && split -b "$size" -d -a 2 "$(realpath "$bundle")" chunk.)
n=$(ls "$tmp" | wc -l)
rm -rf "$dest" && mkdir -p "$dest"
i=0
for chunk in "$tmp"/chunk.*; do
  i=$((i+1)); part=$(printf "%s/part-%02d" "$dest" "$i"); mkdir -p "$part"; mv "$chunk" "$part/"
  cat > "$part/install.sh" <<INSTALL
#!/bin/sh
# Runs on the device: keep this chunk in $work; once all $n chunks are there, unpack them and install $what.
set -e
mkdir -p $work && cp "\$(dirname "\$0")"/chunk.* $work/
if [ "\$(ls $work/chunk.* | wc -l)" -eq $n ] && [ ! -f $work/.done ]; then
  mkdir -p $work/files && cat $work/chunk.* | tar xf - -C $work/files
  $finish
  touch $work/.done && echo "installed $what"
fi
INSTALL
done
rm -rf "$tmp"
grep -qxF "/$dest/" .git/info/exclude 2>/dev/null || echo "/$dest/" >> .git/info/exclude
echo "$n parts in $dest/: run each with run(command='sh $dest/part-NN/install.sh', carry=['$dest/part-NN'])"
