#!/usr/bin/env bash
# Puts the headers of a CUDA torch wheel and of the CUDA libraries it includes under DIR (default .cache/cuda-headers)
# as site-packages has them: DIR/torch/include and DIR/nvidia/<library>/include, taken from the wheels in pip's
# local mirror, of which only the include/ folders are kept (~90 MB of ~1.5 GB of wheels). The torch is the one
# bench/gpu-run.sh builds the GPU addon with (TORCH_VERSION, default 2.14.1: PyPI's plain build is the CUDA one);
# the libraries are those its CUDA headers and c10d's NCCL header include: the CUDA runtime with its crt/ and cccl
# headers, cuBLAS, cuSPARSE, cuSOLVER, NCCL.
# For `node native/build.mjs --check-cuda-sources DIR`, which compiles the sources as a CUDA build does (CUDA graphs,
# NCCL) on a machine without CUDA. Done once (DIR/complete lists the packages).
# Exit code 3: the mirror has not these wheels (said on stderr).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.cache/cuda-headers}
packages=("torch==${TORCH_VERSION:-2.14.1}" nvidia-cuda-runtime nvidia-cuda-crt nvidia-cuda-cccl nvidia-cublas nvidia-cusparse nvidia-cusolver nvidia-nccl-cu13)
if [[ -f $dir/complete && "$(cat "$dir/complete")" == "${packages[*]}" ]]; then exit 0; fi
source scripts/pip-offline.sh
wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
if ! pip_offline download -q --no-deps --only-binary :all: -d "$wheels" "${packages[@]}" >&2; then
  echo "[cuda-headers] pip's local mirror has not all of ${packages[*]} (or no local folder is configured)" >&2
  exit 3
fi
rm -rf "$dir"
python3 - "$wheels" "$dir" <<'EOF'
import os, sys, zipfile
wheels, out = sys.argv[1], sys.argv[2]
for name in sorted(os.listdir(wheels)):
    with zipfile.ZipFile(os.path.join(wheels, name)) as wheel:
        # torch/include/... and nvidia/<library>/include/... (the runtime, crt and cccl wheels share nvidia/cu13/)
        parts = lambda m: m.split('/')
        members = [
            m for m in wheel.namelist()
            if parts(m)[:2] == ['torch', 'include'] or (parts(m)[0] == 'nvidia' and parts(m)[2:3] == ['include'])
        ]
        wheel.extractall(out, members)
        print(f'[cuda-headers] {name}: {len(members)} files', file=sys.stderr)
EOF
echo "${packages[*]}" > "$dir/complete"
