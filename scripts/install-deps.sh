#!/usr/bin/env bash
# Installs the Debian packages kvasir builds and tests with; fast when all are present.
set -euo pipefail
pkgs=(cmake ninja-build g++ clang libclang-rt-14-dev pkg-config libgtest-dev libgmock-dev libbenchmark-dev
      libcli11-dev nlohmann-json3-dev libpcre2-dev python3 python3-venv libcpp-httplib-dev libboost1.81-dev chromium chromium-driver
      json-schema-test-suite libucx-dev libhiredis-dev redis-server)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
