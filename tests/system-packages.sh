#!/usr/bin/env bash
# Debian packages the test suite uses (offline validators, a headless browser, what the kit's native paths
# need from the system: patch for patches/apply.sh, g++ for torch.compile; a Docker engine with Compose v1,
# debootstrap for the Docker tests' local base image, tmux, the real terminal the client's chat is tested in, and
# prometheus with promtool, the kit's native Prometheus that PROMETHEUS=true starts),
# installed when missing.
# Called by tests/run.sh; needs root (as CI has) or the packages already present.
set -euo pipefail

packages=(shellcheck docker-compose chromium patch g++ docker.io debootstrap tmux prometheus)
# kubectl for `kubectl kustomize` (tests/serve/kube/test_main.py fails without it): any one on PATH will do, else Debian's
command -v kubectl >/dev/null 2>&1 || packages+=(kubernetes-client)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "error: the tests need these Debian packages: ${missing[*]}; install them (sudo apt-get install ${missing[*]})" >&2
  exit 2
fi
echo "Installing Debian packages for the tests: ${missing[*]} ..." >&2
apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
