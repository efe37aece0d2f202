#!/usr/bin/env bash
# Packs what a GPU machine needs to run this checkout's GPU scripts when it has no Node.js of its own: this machine's
# node binary and the runtime packages of node_modules (not the linters, the type checker or the browser driver), xz
# compressed into .device/ (git-ignored; ~45 MB, so that it travels with the working tree within a 64 MiB limit).
# bench/gpu-run.sh unpacks it when `node` or node_modules is missing there.
#
#   bash scripts/device-bundle.sh        (after scripts/setup.sh: node_modules must be installed)
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d node_modules ] || { echo "node_modules is missing: run bash scripts/setup.sh first" >&2; exit 1; }
mkdir -p .device
node_bin=$(readlink -f "$(command -v node)")
echo "== $node_bin ($(node --version)) -> .device/node.xz"
xz -T0 -6 -c "$node_bin" > .device/node.xz.tmp && mv .device/node.xz.tmp .device/node.xz
echo "== node_modules (runtime packages) -> .device/node_modules.tar.xz"
tar -C node_modules -cf - --exclude=./@biomejs --exclude=./typescript --exclude=./playwright-core --exclude=./@types . |
  xz -T0 -6 > .device/node_modules.tar.xz.tmp && mv .device/node_modules.tar.xz.tmp .device/node_modules.tar.xz
node --version > .device/node-version
du -sh .device/*
