#!/usr/bin/env bash
# Sets up whatever is missing, and nothing else when all is in place (fast to re-run):
#   1. npm packages (npm ci when node_modules is missing or older than package-lock.json);
#   2. libtorch: $LIBTORCH, else python3's torch, else torch==2.13.0+cpu installed from pip's local mirror into
#      .cache/torch-py (only the wheel: libtorch's headers and libraries, no Python environment changes);
#   3. gloo's headers (Debian's libgloo-dev) for the distributed bindings;
#   4. the native addon (native/build.mjs rebuilds only when its sources or libtorch changed).
# With --tests (the test command; benchmarks that need them), also what only the tests use:
#   5. PostgreSQL's server (Debian's postgresql) for the PostgreSQL buffer's tests;
#   6. Chromium (Debian's chromium) for the Studio's browser tests (playwright-core drives it).
# A run (npm run quickstart, trinity run) needs 1-4 only.
# In a copy installed as a dependency (npm install <tarball or git URL>: this folder is inside a node_modules folder,
# and scripts/postinstall.mjs runs this script), 1 is the installing project's and 3 only says what is missing: an
# npm install does not run apt-get.
set -euo pipefail
cd "$(dirname "$0")/.."
installed=false
if [[ $PWD == */node_modules/* ]]; then installed=true; fi

for_tests=false
for argument in "$@"; do
  case "$argument" in
    --tests) for_tests=true ;;
    *) echo "[setup] unknown argument '$argument' (usage: setup.sh [--tests])" >&2; exit 2 ;;
  esac
done

if [[ $installed == false ]] && [[ ! -d node_modules || package-lock.json -nt node_modules/.package-lock.json ]]; then
  echo "[setup] installing npm packages"
  npm ci --no-audit --no-fund --loglevel=error
fi

if [[ -z ${LIBTORCH:-} ]] && ! python3 -c 'import torch' 2>/dev/null && [[ ! -d .cache/torch-py/torch/lib ]]; then
  echo "[setup] installing torch==2.13.0+cpu (libtorch for the native addon) into .cache/torch-py"
  source scripts/pip-offline.sh
  if ! pip_offline install -q --no-deps --target .cache/torch-py "torch==2.13.0+cpu"; then
    echo "[setup] could not install torch from a local pip mirror; trying pip's configured index" >&2
    python3 -m pip install -q --no-deps --target .cache/torch-py "torch==2.13.0+cpu" || {
      echo "[setup] libtorch is missing. Install torch>=2.5 for python3 (pip install torch==2.13.0+cpu), or set" >&2
      echo "        LIBTORCH to an unpacked libtorch folder (with include/ and lib/), then re-run this script." >&2
      exit 1
    }
  fi
fi

# gloo's headers (libtorch ships gloo's code but not its headers; ProcessGroupGloo.hpp includes them): the
# distributed bindings compile against Debian's libgloo-dev and link only libtorch's own gloo
if [[ -z ${GLOO_INCLUDE:-} && ! -f /usr/include/gloo/config.h ]] && command -v apt-get >/dev/null; then
  if [[ $(id -u) -eq 0 && $installed == false ]]; then
    echo "[setup] installing gloo's headers (libgloo-dev) for the distributed bindings"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libgloo-dev
  else
    echo "[setup] gloo's headers are missing (the distributed bindings need them): install libgloo-dev" \
      "(sudo apt-get install libgloo-dev) or set GLOO_INCLUDE, then build again" >&2
  fi
fi

node native/build.mjs

if [[ $for_tests == true ]]; then
  # PostgreSQL's server binaries (Debian's postgresql package): the PostgreSQL buffer's tests start their own server
  # (test/helpers/postgres.ts: initdb + pg_ctl in a temporary folder, as an unprivileged user)
  if ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null && [[ -z ${PG_BIN_DIR:-} ]] && command -v apt-get >/dev/null; then
    echo "[setup] installing PostgreSQL (postgresql) for the PostgreSQL buffer's tests"
    if [[ $(id -u) -eq 0 ]]; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql
    else
      echo "[setup] not root: install postgresql (sudo apt-get install postgresql) or set PG_BIN_DIR" >&2
    fi
  fi

  # Chromium (Debian's chromium package): the Studio's tests drive it through playwright-core (test/studio/browser.ts
  # finds it on PATH or in $CHROMIUM_PATH)
  if [[ -z ${CHROMIUM_PATH:-} ]] && ! command -v chromium >/dev/null && command -v apt-get >/dev/null; then
    echo "[setup] installing Chromium (chromium) for the Studio's browser tests"
    if [[ $(id -u) -eq 0 ]]; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium
    else
      echo "[setup] not root: install chromium (sudo apt-get install chromium) or set CHROMIUM_PATH" >&2
    fi
  fi
fi
