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
rm -f "$LOGS/phases.tsv" "$LOGS/install.log" "$LOGS/install-webui.log" "$LOGS/install-standin.log" "$LOGS/pytest.xml"
timed() {  # timed NAME COMMAND...: run it, append "NAME<TAB>seconds" (+ "<TAB>beside" under beside), keep its status
  local name="$1" start=$SECONDS status=0
  shift
  "$@" || status=$?
  printf '%s\t%s%s\n' "$name" $((SECONDS - start)) "${PHASE_BESIDE:+$'\t'$PHASE_BESIDE}" >>"$LOGS/phases.tsv"
  return "$status"
}
beside() {  # beside NAME COMMAND...: timed, for a phase run beside others (the report leaves it out of the total)
  PHASE_BESIDE=beside timed "$@"
}
# what runs in the background, each in a process group of its own: stopped when the run ends, however it ends
background_groups=()
stop_background() {
  local group
  for group in "${background_groups[@]}"; do
    kill -TERM -- "-$group" 2>/dev/null || true
  done
}
report() {
  if [ -x .venv/bin/python ]; then
    # the background installs' steps
    cat "$LOGS/install-webui.log" "$LOGS/install-standin.log" >>"$LOGS/install.log" 2>/dev/null || true
    .venv/bin/python -m tests.support.run_report "$LOGS/phases.tsv" "$LOGS/install.log" "$LOGS/pytest.xml" >&2 || true
  fi
}
trap 'stop_background; report' EXIT

timed "Debian packages (tests/system-packages.sh)" bash tests/system-packages.sh
# The Docker stand-in's root file system (tests/support/docker/standin.sh: debootstrap, a download and an unpack of
# about a minute, once per clone) in the background at the lowest CPU and disk priorities, while the installs run:
# tests/serve/engines/test_docker_cpu.py then finds it made (or waits for it: the script takes a lock). Its step joins the
# report.
standin_rootfs() {
  local started=$SECONDS
  nice -n 19 ionice -c 3 bash tests/support/docker/standin.sh --rootfs-only &&
    echo "✓ the root file system of the Docker stand-in, in the background ($((SECONDS - started)) s)"
}
export -f standin_rootfs
setsid bash -c standin_rootfs >"$LOGS/install-standin.log" 2>&1 &
background_groups+=($!)
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
# the native vLLM venv and prepared model in .kit/, llama.cpp's venv (PyPI's prebuilt xllamacpp and the GGUF: seconds,
# nothing compiled); REPLICAS=2 adds the router's venv (.kit/router, vllm-router) that tests/serve/engines/test_replicas.py
# starts
install_kit() {
  REPLICAS=2 ENGINES=vllm,llamacpp,llamaserver .venv/bin/python -m serve install 2>&1 | tee "$LOGS/install.log"
}
timed "install (python -m serve install: the venvs, the model)" install_kit
# Open WebUI's venv (OPEN_WEBUI=true: open-webui's pins and torch's CPU build, tests/serve/webui/test_open_webui.py) installs in
# the background, niced in a session of its own, while the tests run; tests/conftest.py runs the test that needs it
# last, and one that comes sooner waits for the install (the kit's installs take a lock: serve/install/venv.py). Its
# steps join the report.
setsid nice -n 19 env OPEN_WEBUI=true .venv/bin/python -m serve install >"$LOGS/install-webui.log" 2>&1 &
background_groups+=($!)
# The teaching engine's tests need torch, which only the vLLM venv has: they run there, with their own conftest, in
# the background beside pytest's first minutes (its tests that start no server, on one core; the session's vLLM
# starting beside them). Their output is shown when pytest is done, and a failure fails the run.
torch_tests() {
  .kit/vllm/bin/python -c "import pytest, hypothesis" 2>/dev/null \
    || .kit/vllm/bin/python -m pip install -q "pytest>=8" "hypothesis>=6.100"
  .kit/vllm/bin/python -m pytest tests/labs/engine/needs_torch --confcutdir=tests/labs/engine/needs_torch -q -p no:cacheprovider
}
export LOGS
export -f timed beside torch_tests
setsid bash -c 'beside "the teaching engine tests that need torch (.kit/vllm), beside pytest" torch_tests' \
  >"$LOGS/torch-tests.log" 2>&1 &
TORCH_TESTS=$!
background_groups+=("$TORCH_TESTS")
status=0
timed "pytest" .venv/bin/python -m pytest --junitxml="$LOGS/pytest.xml" "$@" || status=$?
torch_status=0
wait "$TORCH_TESTS" || torch_status=$?
echo "--- the teaching engine tests that need torch (.kit/vllm, beside pytest): $LOGS/torch-tests.log ---"
if [ "$torch_status" -eq 0 ]; then tail -n 1 "$LOGS/torch-tests.log"; else cat "$LOGS/torch-tests.log"; fi
if [ "$status" -eq 0 ]; then status=$torch_status; fi
(exit "$status")  # the run's status, its last command's: pytest's failure first, else the torch tests'
