#!/usr/bin/env bash
# Puts CUDA's headers under DIR/nvidia/<library>/include (default DIR: .cache/cuda-headers), the layout the nvidia-*
# wheels have next to a CUDA torch wheel, taken from those wheels in pip's local mirror: only their include/
# folders are kept (~30 MB of ~1 GB of wheels). The libraries are the ones libtorch's CUDA headers and c10d's NCCL
# header include: the CUDA runtime and its crt/ and cccl headers, cuBLAS, cuSPARSE, cuSOLVER, NCCL.
# For `node native/build.mjs --check-cuda-sources DIR`, which compiles the sources only a CUDA libtorch builds
# (CUDA graphs, NCCL) on a machine without CUDA. Done once (DIR/complete lists the packages).
# Exit code 3: the mirror has not these wheels (said on stderr).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.cache/cuda-headers}
packages=(nvidia-cuda-runtime nvidia-cuda-crt nvidia-cuda-cccl nvidia-cublas nvidia-cusparse nvidia-cusolver nvidia-nccl-cu13)
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
        # nvidia/<library>/include/... (the runtime, crt and cccl wheels share nvidia/cu13/include)
        members = [m for m in wheel.namelist() if m.split('/')[0] == 'nvidia' and m.split('/')[2:3] == ['include']]
        wheel.extractall(out, members)
        print(f'[cuda-headers] {name}: {len(members)} files', file=sys.stderr)
EOF
echo "${packages[*]}" > "$dir/complete"
