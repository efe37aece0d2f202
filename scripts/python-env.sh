#!/usr/bin/env bash
# Creates (once) .cache/python-ref: a Python environment with the reference implementations (torch 2.13 CPU,
# transformers, safetensors, TRL, datasets/pyarrow) from pip's local mirror. Only fixture scripts and side-by-side
# benchmarks use it; the framework itself never runs Python.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.cache/python-ref
if [[ -x $venv/bin/python ]] && "$venv/bin/python" -c 'import torch, transformers, safetensors, peft, trl, tensorboard, datasets, pyarrow' 2>/dev/null; then exit 0; fi
source scripts/pip-offline.sh
python3 -m venv "$venv"
PATH="$PWD/$venv/bin:$PATH" pip_offline install -q "torch==2.13.0+cpu" transformers safetensors tokenizers trl peft accelerate tensorboard datasets pyarrow
"$venv/bin/python" -c 'import torch, transformers; print("[python-env] torch", torch.__version__, "transformers", transformers.__version__)'
