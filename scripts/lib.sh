# Shared by scripts/run and scripts/test: install what is missing, build.
# Sourced, not executed.

# Debian packages the build, the tests and the fuzzers need.
STRATA_PACKAGES=(
  g++ cmake ninja-build pkg-config ccache
  libcli11-dev nlohmann-json3-dev libspdlog-dev libfmt-dev libxxhash-dev libutf8proc-dev
  libtomlplusplus-dev librocksdb-dev libfaiss-dev
  libcpp-httplib-dev libssl-dev zlib1g-dev libbrotli-dev libboost1.81-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libhiredis-dev redis-server
  clang clang-format libclang-rt-14-dev
)

# The client tests drive the server with the official npm SDKs: Node.js and
# npm, from Debian when the machine has no node of its own.
if ! command -v node >/dev/null 2>&1; then
  STRATA_PACKAGES+=(nodejs npm)
fi

strata_log() { printf '\033[1m[strata]\033[0m %s\n' "$*" >&2; }

# Installs the packages that are not installed yet (apt-get, as root or via sudo).
strata_ensure_packages() {
  local missing=()
  for p in "${STRATA_PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
      missing+=("$p")
    fi
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  strata_log "installing: ${missing[*]}"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { strata_log "need root or sudo to install packages"; return 1; }
    sudo="sudo"
  fi
  $sudo apt-get update -qq || return 1
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# strata_build PRESET [TARGET...]: configure (once) and build a CMake preset
# (all of it, or only the named targets).
strata_build() {
  local preset="$1"
  shift
  strata_log "building ($preset${*:+: $*})"
  if [ ! -f "build/$preset/build.ninja" ]; then
    cmake --preset "$preset" >/dev/null || return 1
  fi
  if [ $# -gt 0 ]; then
    cmake --build --preset "$preset" --target "$@"
  else
    cmake --build --preset "$preset"
  fi
}
