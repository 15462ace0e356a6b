#!/usr/bin/env bash
# Installs attncheck's build and test dependencies from Debian's archive.
# Idempotent and quiet: does nothing when every package is there; fails loudly otherwise.
set -euo pipefail
packages=(build-essential pkg-config meson ninja-build libopenblas-dev libmpfr-dev libgmp-dev
          libcriterion-dev libcjson-dev gcovr python3 python3-matplotlib python3-numpy python3-scipy nettle-dev clang-format)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "install-deps: installing ${missing[*]}" >&2
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
if ! "${sudo_cmd[@]}" apt-get update -qq >/tmp/attncheck-apt.log 2>&1 ||
   ! "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >>/tmp/attncheck-apt.log 2>&1; then
  cat /tmp/attncheck-apt.log >&2
  echo "install-deps: FAILED to install: ${missing[*]}" >&2
  exit 1
fi
