# ensure_debian_package COMMAND PACKAGE: installs PACKAGE from Debian's archive when COMMAND is missing
# and apt and root allow it (a fresh CI machine); otherwise leaves it to the tests, which say it is missing.
ensure_debian_package() {
  command -v "$1" >/dev/null && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get install -y -qq --no-install-recommends "$2" >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends "$2" >/dev/null 2>&1; } \
      || true
  fi
  command -v "$1" >/dev/null || echo "note: $1 not found (apt-get install $2)" >&2
}
