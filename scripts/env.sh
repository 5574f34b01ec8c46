# Sourced by the other scripts: the pinned Python and the build directory.
FA3_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FA3_BUILD_DIR="${FA3_BUILD_DIR:-$FA3_ROOT/build}"
if [ -z "${FA3_PYTHON:-}" ]; then
  if [ -x /root/.pyenv/versions/3.11.7/bin/python3 ]; then
    FA3_PYTHON=/root/.pyenv/versions/3.11.7/bin/python3
  else
    FA3_PYTHON="$(command -v python3)"
  fi
fi
export FA3_ROOT FA3_BUILD_DIR FA3_PYTHON
export PATH="/usr/lib/llvm-22/bin:$PATH"
