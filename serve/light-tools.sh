#!/usr/bin/env bash
# Make sure .venv holds the light tools (serve controller, client, labs), then print its python.
# Usage: bash serve/light-tools.sh [test]   ("test" adds pytest and the test-only packages)
# Reinstalls only when pyproject.toml changed since the last install.
set -euo pipefail
cd "$(dirname "$0")/.."

extra="${1:-}"
venv=.venv
stamp="$venv/.kit-installed"
hash="$(sha256sum pyproject.toml | cut -d' ' -f1)"

if ! command -v python3 >/dev/null 2>&1; then
  echo "error: python3 is not installed; install Python 3.11 or newer (e.g. apt-get install python3 python3-venv)" >&2
  exit 2
fi
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "error: python3 is $(python3 -V 2>&1 | cut -d' ' -f2); the kit needs Python 3.11 or newer" >&2
  exit 2
fi

if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  fix="$(python3 serve/install/system.py)"  # apt-get or dnf, as for every other missing program (serve/install/system.py)
  echo "error: python3 cannot create virtual environments (its venv/ensurepip module is missing); install it with: $fix" >&2
  exit 2
fi

# Up to date when pyproject.toml is unchanged and the extras installed cover the ones asked for.
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] \
  && { grep -qxF -- "$hash test" "$stamp" || grep -qxF -- "$hash $extra" "$stamp"; }; then
  exit 0
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "Creating $venv for the light tools (client, labs, controller) ..." >&2
  python3 -m venv "$venv"
fi
spec="."
[ "$extra" = "test" ] && spec=".[test]"
echo "Installing the light tools into $venv (openai, httpx, rich, matplotlib ...) ..." >&2
# uv (pip installs it first) with your pip configuration handed over, or pip where uv cannot honour it all
python3 serve/install/pip_config.py "$venv/bin/python" -e "$spec" >&2
echo "$hash $extra" >"$stamp"
