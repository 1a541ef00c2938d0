#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs what the tests need, then runs pytest.
# Extra arguments go to pytest (e.g. bash tests/run.sh -k settings).
set -euo pipefail
cd "$(dirname "$0")/.."

bash tests/system-packages.sh
bash serve/light-tools.sh test
.venv/bin/python -m serve install   # the native vLLM venv and the prepared model (cached in .kit/)
exec .venv/bin/python -m pytest "$@"
