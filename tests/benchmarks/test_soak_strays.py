"""What the soak counts as a stray: the kit's programs left outside its servers' groups, not a shell someone runs in
the checkout meanwhile (one failed a soak that was otherwise clean)."""

from __future__ import annotations

from benchmarks.soak import kit_program
from serve.config.paths import ROOT


def test_the_kits_programs_count_and_a_shell_in_the_checkout_does_not() -> None:
    for command_line in (
        f"{ROOT}/.kit/vllm/bin/python -m vllm.entrypoints.openai.api_server --port 8010",
        f"{ROOT}/.venv/bin/python -m serve.processes.supervisor --label vLLM -- x",
        "VLLM::EngineCore",
        "VLLM::Worker",
        f"{ROOT}/.kit/router/bin/python -m vllm_router.launch_router --port 8009",
    ):
        assert kit_program(command_line), command_line
    for command_line in ("bash /dev/fd/3", "sleep 60", "/usr/bin/python3 -c pass"):
        assert not kit_program(command_line), command_line
