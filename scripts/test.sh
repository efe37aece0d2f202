#!/usr/bin/env bash
# The whole check: type-check (tsc --noEmit, strict), lint + format check (biome), then every test file with
# node's test runner (TypeScript through tsx). Assumes scripts/setup.sh --tests ran (npm test does both). Interop
# tests check our files against the Python reference packages, so the reference environment is set up first (once).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/python-env.sh
echo "[test] tsc --noEmit"
npx tsc --noEmit -p .
echo "[test] biome check"
npx biome check --reporter=summary .
mapfile -t files < <(find test -name '*.test.ts' | sort)
echo "[test] ${#files[@]} test files"
# the tests' temporary folders (models, jobs, datasets) go under one folder, removed when the run ends
TMPDIR="$(mktemp -d -t trinity-test-XXXXXX)"
export TMPDIR
trap 'rm -rf "$TMPDIR"' EXIT
node --import tsx --test --test-reporter=spec --test-timeout=600000 "${files[@]}"
