#!/usr/bin/env bash
# The prepared GPU run (one GPU, under 8 minutes on an H200): builds the addon against a CUDA libtorch, then
# bench/gpu-run.ts (a Qwen2.5-0.5B-shaped model in bf16: GRPO end to end on cuda, and training / generation tokens/s
# next to Hugging Face transformers with the GPU memory peaks). Prints a table and ends with one JSON line.
#
#   bash bench/gpu-run.sh              on a GPU machine
#   bash bench/gpu-run.sh --dry-run    on the CPU with a tiny model, no CUDA build: exercises the script itself
#
# CUDA torch: the torch wheel (CUDA build) from the pip mirror's files folder, installed into .cache/gpu-venv:
#   TORCH_WHEELS   folder holding the wheels (default /opt/pypi-more/files)
#   TORCH_VERSION  the CUDA wheel's version (default 2.14.1, the plain PyPI build, which is the CUDA one)
# The addon is built into native/build with LIBTORCH=<venv>/site-packages/torch (native/build.mjs links libtorch_cuda
# with --no-as-needed); the transformers side runs in the same venv (TRINITY_BENCH_PYTHON), so both sides use the
# same CUDA libraries. A later CPU build (node native/build.mjs with no LIBTORCH) rebuilds against the CPU torch.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ " $* " == *" --dry-run "* ]]; then
  # no CUDA build: the addon and the Python reference env this checkout already has
  exec node --import tsx bench/gpu-run.ts "$@"
fi
start=$(date +%s)
wheels=${TORCH_WHEELS:-/opt/pypi-more/files}
version=${TORCH_VERSION:-2.14.1}
venv=.cache/gpu-venv
command -v nvidia-smi >/dev/null && nvidia-smi -L || echo "warning: nvidia-smi not found"
if [ ! -x "$venv/bin/python" ]; then python3 -m venv "$venv"; fi
if ! "$venv/bin/python" -c "import torch, sys; sys.exit(0 if torch.version.cuda else 1)" 2>/dev/null; then
  [ -d "$wheels" ] || { echo "no wheel folder $wheels: set TORCH_WHEELS to the folder with torch-$version*.whl and its nvidia-* wheels" >&2; exit 1; }
  echo "== installing torch==$version (CUDA) from $wheels"
  "$venv/bin/pip" install --no-index --find-links "$wheels" "torch==$version"
fi
if ! "$venv/bin/python" -c "import transformers" 2>/dev/null; then
  # transformers and its pure-Python dependencies from the configured indexes (torch is already there)
  "$venv/bin/pip" install --find-links "$wheels" transformers safetensors
fi
torch_dir=$("$venv/bin/python" -c "import torch, os; print(os.path.dirname(torch.__file__))")
"$venv/bin/python" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())"
echo "== building the addon against $torch_dir"
LIBTORCH="$torch_dir" node native/build.mjs
node -e "const b=JSON.parse(require('fs').readFileSync('native/build/build.json','utf8'));console.log(b);if(!b.cuda)process.exit(1)" 2>/dev/null ||
  echo "note: native/build/build.json not found or not CUDA; bench/gpu-check.ts below says whether CUDA works"
node --import tsx bench/gpu-check.ts
echo "== setup took $(( $(date +%s) - start )) s"
TRINITY_BENCH_PYTHON="$PWD/$venv/bin/python" node --import tsx bench/gpu-run.ts "$@"
echo "== gpu-run.sh took $(( $(date +%s) - start )) s"
