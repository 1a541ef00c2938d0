#!/usr/bin/env bash
# Stop what up.sh started for the configured port, and wait until the port is free. Safe to run twice.
set -euo pipefail
cd "$(dirname "$0")"

bash serve/light-tools.sh
exec .venv/bin/python -m serve down "$@"
