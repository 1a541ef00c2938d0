#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs what the tests need, checks lint, formatting, types and the
# import floors (ruff, mypy, import-linter), then runs pytest.
# Extra arguments go to pytest (e.g. bash tests/run.sh -k settings).
set -euo pipefail
cd "$(dirname "$0")/.."

# Each phase is timed into $LOGS/phases.tsv; at the end, whatever the outcome, tests/support/run_report.py says where
# the time went (the phases, the install's slowest steps, the slowest tests) and whether the run kept its budget.
LOGS=.kit/logs/test-run
mkdir -p "$LOGS"
rm -f "$LOGS/phases.tsv" "$LOGS/install.log" "$LOGS/install-llamacpp.log" "$LOGS/pytest.xml"
timed() {  # timed NAME COMMAND...: run it, append "NAME<TAB>seconds", keep its exit status
  local name="$1" start=$SECONDS status=0
  shift
  "$@" || status=$?
  printf '%s\t%s\n' "$name" $((SECONDS - start)) >>"$LOGS/phases.tsv"
  return $status
}
report() {
  if [ -x .venv/bin/python ]; then
    cat "$LOGS/install-llamacpp.log" >>"$LOGS/install.log" 2>/dev/null || true  # the background install's steps
    .venv/bin/python -m tests.support.run_report "$LOGS/phases.tsv" "$LOGS/install.log" "$LOGS/pytest.xml" >&2 || true
  fi
}
trap report EXIT

timed "Debian packages (tests/system-packages.sh)" bash tests/system-packages.sh
timed "light tools (.venv)" bash serve/light-tools.sh test
# lint, formatting, types and import floors first (seconds; [tool.ruff], [tool.mypy] and [tool.importlinter] in
# pyproject.toml): a finding stops the run before the installs and the tests
check() {  # check WHAT FIX COMMAND...: one line before, and on failure one that says what failed and what to do
  local what="$1" fix="$2"
  shift 2
  echo "checking $what ..." >&2
  "$@" || { echo "error: $what failed (above): $fix" >&2; exit 1; }
}
checks() {
  check "lint (ruff check)" "fix what it names; .venv/bin/ruff check --fix . fixes those marked [*]" .venv/bin/ruff check .
  check "formatting (ruff format --check)" "run .venv/bin/ruff format ." .venv/bin/ruff format --check .
  check "types (mypy: serve, client, labs, benchmarks)" "fix the errors it names" .venv/bin/mypy
  check "import floors (lint-imports: [tool.importlinter])" \
    "import only from the floors below (README, Where things are); move what both sides need down a floor" \
    .venv/bin/lint-imports
}
timed "lint, formatting, types, import floors" checks
# the native vLLM venv and prepared model in .kit/; REPLICAS=2 adds the router's venv (.kit/router, vllm-router) that
# tests/serve/test_replicas.py starts
install_kit() {
  REPLICAS=2 ENGINES=vllm .venv/bin/python -m serve install 2>&1 | tee "$LOGS/install.log"
}
timed "install (python -m serve install: the venvs, the model)" install_kit
# The llama.cpp venv and llama-server's GGUF, then Open WebUI's venv (OPEN_WEBUI=true: ~90 packages and torch's CPU
# build, tests/serve/test_open_webui.py), install in the background, at the lowest CPU priority, while the tests
# run: on a bare machine that means llama.cpp's build (minutes of a compiler, once per machine: its wheel and
# llama-server are kept in ~/.cache/vllm-lab-kit/ for other clones), which takes the CPU the engine tests leave idle
# (their starts import on one core). tests/conftest.py runs the tests that need either last; one that comes
# sooner waits for the install (the kit's installs take a lock: serve/install/venv.py). Its steps join the report.
setsid nice -n 19 env ENGINES=llamacpp,llamaserver OPEN_WEBUI=true .venv/bin/python -m serve install \
  >"$LOGS/install-llamacpp.log" 2>&1 &
LLAMACPP_INSTALL=$!
trap 'kill -TERM -- "-$LLAMACPP_INSTALL" 2>/dev/null || true; report' EXIT
# the teaching engine's tests need torch, which only the vLLM venv has: they run there, with their own conftest
torch_tests() {
  .kit/vllm/bin/python -c "import pytest, hypothesis" 2>/dev/null \
    || .kit/vllm/bin/python -m pip install -q "pytest>=8" "hypothesis>=6.100"
  .kit/vllm/bin/python -m pytest tests/labs/engine/needs_torch --confcutdir=tests/labs/engine/needs_torch -q -p no:cacheprovider
}
timed "the teaching engine's torch tests (.kit/vllm)" torch_tests
timed "pytest" .venv/bin/python -m pytest --junitxml="$LOGS/pytest.xml" "$@"
