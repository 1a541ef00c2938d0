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
rm -f "$LOGS/phases.tsv" "$LOGS/install.log" "$LOGS/pytest.xml"
timed() {  # timed NAME COMMAND...: run it, append "NAME<TAB>seconds", keep its exit status
  local name="$1" start=$SECONDS status=0
  shift
  "$@" || status=$?
  printf '%s\t%s\n' "$name" $((SECONDS - start)) >>"$LOGS/phases.tsv"
  return $status
}
report() {
  if [ -x .venv/bin/python ]; then
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
# the native vLLM venv and prepared model, the llama.cpp venv and llama-server's GGUF, all in .kit/ (llama.cpp's
# wheel and llama-server are built portably, in one build, once per machine, and kept in ~/.cache/vllm-lab-kit/ for
# other clones; serve/install/README.md says how long); REPLICAS=2 adds the router's venv (.kit/router, vllm-router)
# that tests/serve/test_replicas.py starts.
# On a machine that never built llama.cpp that build is the longest step, and it needs the CPU where the vLLM install
# mostly waits on downloads: it starts first, in the background at the lowest priority, as the first up.sh starts it
# (serve/install/llamacpp_venv.py), and the llama.cpp install after the torch tests waits for it instead of building.
BUILD_LOG=.kit/logs/build-llamacpp-wheel.log
build_llamacpp_ahead() {
  rm -f "$LOGS/llamacpp-build-started"
  .venv/bin/python -c 'from serve.install.llamacpp_venv import start_background_build as start
said = start(with_server=True)
print("Meanwhile " + said if said else "llama.cpp: built already (the machine kit cache)")
said and open(".kit/logs/test-run/llamacpp-build-started", "w").close()'
}
install_vllm() {
  REPLICAS=2 ENGINES=vllm .venv/bin/python -m serve install 2>&1 | tee "$LOGS/install.log"
}
install_llamacpp() {
  ENGINES=llamacpp,llamaserver .venv/bin/python -m serve install 2>&1 | tee -a "$LOGS/install.log"
  if [ -f "$LOGS/llamacpp-build-started" ]; then  # the build's own steps, for the closing report
    grep -a '^✓' "$BUILD_LOG" | sed 's/^✓ /✓ (in the background) /' >>"$LOGS/install.log" || true
  fi
}
timed "llama.cpp's build started in the background" build_llamacpp_ahead
timed "install vLLM (python -m serve install: the venvs, the model)" install_vllm
# the teaching engine's tests need torch, which only the vLLM venv has: they run there, with their own conftest
torch_tests() {
  .kit/vllm/bin/python -c "import pytest, hypothesis" 2>/dev/null \
    || .kit/vllm/bin/python -m pip install -q "pytest>=8" "hypothesis>=6.100"
  .kit/vllm/bin/python -m pytest tests/labs/engine/needs_torch --confcutdir=tests/labs/engine/needs_torch -q -p no:cacheprovider
}
timed "the teaching engine's torch tests (.kit/vllm)" torch_tests
timed "install llama.cpp (waits for the build, then the venv and llama-server)" install_llamacpp
timed "pytest" .venv/bin/python -m pytest --junitxml="$LOGS/pytest.xml" "$@"
