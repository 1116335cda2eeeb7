# scripts/lib/common.sh — shared by scripts/test and scripts/demo: install missing Debian
# packages (idempotent: apt-get runs only when something is missing) and build into build/.
set -euo pipefail

NUMLA_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
NUMLA_JOBS=${NUMLA_JOBS:-$(nproc)}

# Everything the build, the tests and the demo need. No Python packages: only the scripts that
# generate reference data (scripts/make_*golden*.py) use PyPI, and their output is committed.
NUMLA_DEBS=(build-essential cmake pkg-config libopenmpi-dev openmpi-bin libhwloc-dev
            libnuma-dev libcunit1-dev libjansson-dev libpcre2-dev libopenblas-dev libutf8proc-dev
            clang libomp-dev libmicrohttpd-dev curl)

numla_install_deps() {
  local missing=()
  for p in "${NUMLA_DEBS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    return 0
  fi
  echo "numla: installing missing packages: ${missing[*]}" >&2
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >&2
}

# numla_build DIR [cmake args...]: configure (once) and build.
numla_build() {
  local dir=$1
  shift
  if [ ! -f "$dir/CMakeCache.txt" ]; then
    cmake -S "$NUMLA_ROOT" -B "$dir" "$@" >&2
  fi
  cmake --build "$dir" -j "$NUMLA_JOBS" >&2
}

# Open MPI refuses to run as root unless told; CI runs as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
