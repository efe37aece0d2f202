#!/usr/bin/env bash
# The prepared GPU run (one GPU, under 13 minutes on an H200, bench:long-grpo 5 of them): builds the addon against a
# CUDA libtorch, then bench/gpu-run.ts (a Qwen2.5-0.5B-shaped model in bf16: GRPO end to end on cuda, and training /
# generation tokens/s next to Hugging Face transformers with the GPU memory peaks) and the benches below. Prints
# tables and JSON lines.
#
#   bash bench/gpu-run.sh              on a GPU machine
#   bash bench/gpu-run.sh --dry-run    on the CPU with a tiny model, no CUDA build: exercises the script itself
#   bash bench/gpu-run.sh --graphs-only   the build, the CUDA-graph tests and bench:decode-step on cuda, nothing after
#   bash bench/gpu-run.sh --profile DIR   also Chrome traces and op tables of one more call of each side of the model
#                                         bench (ours: torch.profile, transformers: torch.profiler) into DIR
#
# CUDA torch: python3's own torch when it is a CUDA build (the GPU machines' image has one, with CUDA's compiler and
# headers), else the torch wheel (CUDA build) from the pip mirror's files folder, installed into .cache/gpu-venv:
#   TORCH_WHEELS   folder holding the wheels (default /opt/pypi-more/files)
#   TORCH_VERSION  the CUDA wheel's version (default 2.14.1, the plain PyPI build, which is the CUDA one)
# The addon is built into native/build with LIBTORCH=<that torch folder> (native/build.mjs links libtorch_cuda with
# --no-as-needed; with CUDA's runtime headers, from the toolkit or the nvidia-cuda-runtime and nvidia-cuda-crt wheels,
# it also builds CUDA graphs for captured decode steps); the transformers side runs in the same Python
# (TRINITY_BENCH_PYTHON), so both sides use the same CUDA libraries. A later CPU build (node native/build.mjs with no
# LIBTORCH) rebuilds against the CPU torch.
#
# After the build: bench/gpu-check.ts (ops on CUDA against the CPU), the CUDA-graph tests, bench/gpu-run.ts,
# bench:long-grpo on cuda (the Qwen3-0.6B shape against TRL's GRPOTrainer: tokens/s and MFU), then bench:decode-step
# on cuda (eager steps, op-by-op replays, CUDA graphs) and bench:train-capture on cuda (does capturing the training
# forward pay where the step waits on the host); each stage under its own time limit.
set -euo pipefail
cd "$(dirname "$0")/.."
# A machine without Node.js or node_modules: unpack the bundle of scripts/device-bundle.sh (carried as .device/),
# with python3's lzma and tarfile (no xz needed there).
if { ! command -v node >/dev/null || [ ! -d node_modules ]; } && [ -f .device/node.xz ]; then
  echo "== unpacking .device/ (node $(cat .device/node-version 2>/dev/null), node_modules)"
  python3 - <<'PY'
import lzma, os, shutil, tarfile
os.makedirs('.device/bin', exist_ok=True)
if shutil.which('node') is None:
    with lzma.open('.device/node.xz') as src, open('.device/bin/node', 'wb') as dst:
        shutil.copyfileobj(src, dst)
    os.chmod('.device/bin/node', 0o755)
if not os.path.isdir('node_modules'):
    with tarfile.open('.device/node_modules.tar.xz', 'r:xz') as tar:
        tar.extractall('node_modules')
PY
  export PATH="$PWD/.device/bin:$PATH"
fi
command -v node >/dev/null || { echo "no node on this machine: run bash scripts/device-bundle.sh where it is, and carry .device" >&2; exit 1; }
if [[ " $* " == *" --dry-run "* ]]; then
  # no CUDA build: the addon and the Python reference env this checkout already has
  exec node --import tsx bench/gpu-run.ts "$@"
fi
start=$(date +%s)
wheels=${TORCH_WHEELS:-/opt/pypi-more/files}
version=${TORCH_VERSION:-2.14.1}
command -v nvidia-smi >/dev/null && nvidia-smi -L || echo "warning: nvidia-smi not found"
cuda_torch() { "$1" -c "import torch, sys; sys.exit(0 if torch.version.cuda else 1)" 2>/dev/null; }
if cuda_torch python3 && python3 -c "import transformers" 2>/dev/null; then
  py=$(command -v python3)
else
  venv=.cache/gpu-venv
  if [ ! -x "$venv/bin/python" ]; then python3 -m venv "$venv"; fi
  # pip from local folders only, TORCH_WHEELS and those this machine's pip configuration names: nothing outside a GPU
  # machine may be reachable, and pip would wait on a network index
  source scripts/pip-offline.sh
  mapfile -t links < <(pip_local_links)
  pip_local() { "$venv/bin/pip" install --no-index --find-links "$wheels" "${links[@]}" "$@"; }
  if ! cuda_torch "$venv/bin/python"; then
    [ -d "$wheels" ] || { echo "no CUDA torch in python3 and no wheel folder $wheels: set TORCH_WHEELS to the folder with torch-$version*.whl and its nvidia-* wheels" >&2; exit 1; }
    echo "== installing torch==$version (CUDA) from $wheels"
    # torch, then its requirements but cuda-bindings and triton (Python's CUDA bindings and torch.compile's compiler:
    # neither the addon nor `import torch` needs them, and a local mirror may not hold them)
    pip_local --no-deps "torch==$version"
    "$venv/bin/python" -c "import importlib.metadata as m; print('\n'.join(r for r in m.requires('torch') if 'extra ==' not in r and not r.startswith(('cuda-bindings', 'triton'))))" > "$venv/torch-requirements.txt"
    pip_local -r "$venv/torch-requirements.txt"
  fi
  # CUDA's crt/ headers (the CUDA-graph part of the addon needs them; torch's own dependencies lack them)
  pip_local nvidia-cuda-crt || echo "note: nvidia-cuda-crt not installed: the addon builds without CUDA graphs"
  if ! "$venv/bin/python" -c "import transformers" 2>/dev/null; then
    # transformers and its pure-Python dependencies (torch is already there)
    pip_local transformers safetensors
  fi
  # TRL's GRPOTrainer for bench:long-grpo's TRL side (optional: without it that bench runs ours only)
  "$venv/bin/python" -c "import trl, datasets" 2>/dev/null || pip_local trl datasets ||
    echo "note: trl not installed: bench:long-grpo runs ours only"
  py="$PWD/$venv/bin/python"
fi
torch_dir=$("$py" -c "import torch, os; print(os.path.dirname(torch.__file__))")
"$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())"
echo "== building the addon against $torch_dir"
LIBTORCH="$torch_dir" TRINITY_BUILD_JOBS=${TRINITY_BUILD_JOBS:-8} node native/build.mjs
node -e "const b=JSON.parse(require('fs').readFileSync('native/build/build.json','utf8'));console.log(b);if(!b.cuda)process.exit(1)" 2>/dev/null ||
  echo "note: native/build/build.json not found or not CUDA; bench/gpu-check.ts below says whether CUDA works"
# each stage below has its own time limit (seconds; GNU timeout stops its whole process group), so that one that
# hangs costs its own share of a lease, not the stages after it
stage() {
  local limit=$1 what=$2
  shift 2
  timeout "$limit" "$@" || echo "== $what FAILED (exit $?; 124: over its ${limit} s)"
}
stage 120 "bench/gpu-check.ts" node --import tsx bench/gpu-check.ts
echo "== setup took $(( $(date +%s) - start )) s"
echo "== CUDA graphs of captured steps: tests (bit-identical to eager steps) and attention kernels"
stage 180 "the CUDA-graph and attention tests" node --import tsx --test test/torch/cuda-graph.test.ts \
  test/torch/capture.test.ts test/engine/decode-capture.test.ts test/model/attention.test.ts
decode_steps() {
  echo "== decode steps on cuda: eager / replayed op by op / CUDA graphs"
  stage 120 "bench:decode-step on cuda" node --import tsx bench/decode-step.bench.ts --device cuda --dtype bfloat16 \
    --batches 1,8,32 --large-batches 1,8,32 --rounds 3
}
if [[ " $* " == *" --graphs-only "* ]]; then
  decode_steps
  echo "== gpu-run.sh --graphs-only took $(( $(date +%s) - start )) s"
  exit 0
fi
# the issue's figures first (GRPO on cuda, the model bench next to transformers), then the decode-step and
# training-capture benches
stage 330 "bench/gpu-run.ts" env TRINITY_BENCH_PYTHON="$py" node --import tsx bench/gpu-run.ts "$@"
# bench:long-grpo: the Qwen3-0.6B shape in bf16, GRPO steps on long-tail math rollouts, ours packed and padded next to
# TRL's GRPOTrainer on the same rows (ours only where this Python has no trl): device, tokens/s and MFU
long_grpo_flags=()
"$py" -c "import trl, datasets" 2>/dev/null || long_grpo_flags=(--skip-trl)
stage 300 "bench:long-grpo on cuda" env TRINITY_BENCH_PYTHON="$py" node --import tsx bench/long-grpo.bench.ts --device cuda \
  ${long_grpo_flags[@]+"${long_grpo_flags[@]}"}
decode_steps
echo "== training micro-step, eager forward vs captured forward (replayed with gradients) on cuda"
stage 120 "bench:train-capture on cuda" node --import tsx bench/train-capture.bench.ts --device cuda
echo "== gpu-run.sh took $(( $(date +%s) - start )) s"
