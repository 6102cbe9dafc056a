# ensure_debian_package COMMAND PACKAGE: installs PACKAGE from Debian's archive when COMMAND is missing
# and apt and root allow it (a fresh CI machine); otherwise leaves it to the tests, which say it is missing.
ensure_debian_package() {
  command -v "$1" >/dev/null && return 0
  _debian_install "$2"
  command -v "$1" >/dev/null || echo "note: $1 not found (apt-get install $2)" >&2
}

# ensure_debian_file FILE PACKAGE: the same for a file rather than a command (a header a build needs).
ensure_debian_file() {
  [ -e "$1" ] && return 0
  _debian_install "$2"
  [ -e "$1" ] || echo "note: $1 not found (apt-get install $2)" >&2
}

_debian_install() {
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get install -y -qq --no-install-recommends "$1" >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends "$1" >/dev/null 2>&1; } \
      || true
  fi
}
