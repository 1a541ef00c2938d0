"""The preflight refuses what vLLM could not start with, names the variable, and its suggested values work."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from serve.config.machine import Machine
from serve.config.model import bundled_model_facts
from serve.config.plan import RuntimeLimits, native_limits, resolve
from serve.config.preflight import GPU_RUNTIMES, Verdict, block_size_for, check
from serve.config.settings import KNOBS, Settings
from serve.config.sizing import V1_CPU_BLOCK_SIZE, GiB, ModelFacts, load_model_facts
from serve.engines.tracks import GPU, plan_for_container
from serve.processes.local_server import LOG_DIR, RUN_DIR
from tests.conftest import ROOT, free_port, kit_env, run_script
from ui.values import SettingsError

SMOL = bundled_model_facts()
LLAMA_8B = load_model_facts(ROOT / "labs" / "sizing" / "examples" / "llama-3.1-8b-config.json")
MODELS = {"smol": SMOL, "llama8b": LLAMA_8B}
SUGGESTION = re.compile(r"(?:[Ss]et |or )([A-Z_]+)=(\w+)((?: or \d+)*)")


EXPLICIT = {"VLLM_CPU_KVCACHE_SPACE": "1", "MAX_NUM_SEQS": "16"}  # set by hand: the preflight judges them as set


def settings(**overrides: str) -> Settings:
    return Settings.from_env({**{knob.env: knob.default for knob in KNOBS}, **overrides})


def judge(
    config: Settings, facts: ModelFacts | None, runtime: str, available_bytes: int, block_size: int = V1_CPU_BLOCK_SIZE
) -> Verdict:
    """What up.sh does on a 2-core machine with this much RAM free: resolve every `auto`, then check."""
    machine = Machine(2, frozenset({"avx512_bf16"}), available_bytes)
    if runtime in GPU_RUNTIMES:
        resolved = plan_for_container(config, machine, GPU)
    else:
        native = native_limits(machine)
        cap = config.memory_limit.num_bytes if runtime == "docker" else native.memory_bytes
        limits = RuntimeLimits(cores=2, memory_bytes=cap, engine_block_size=block_size, where="the test's")
        resolved = resolve(config, machine, facts, limits)
    return check(config, resolved, facts, runtime, available_bytes)


def suggestions(message: str) -> list[tuple[str, str]]:
    """Every `set VAR=value` (and `or VAR=value`, `... or N`) the message proposes."""
    found = []
    for var, value, more in SUGGESTION.findall(message):
        found.append((var, value))
        found += [(var, extra) for extra in re.findall(r"\d+", more)]
    return found


@dataclass(frozen=True)
class Bad:
    env: dict[str, str]
    model: str = "smol"
    dtype: str = "bfloat16"
    runtime: str = "native"
    available_gib: float = 20
    variable: str = "VLLM_CPU_KVCACHE_SPACE"
    says: tuple[str, ...] = ()
    auto: bool = False  # MAX_NUM_SEQS and VLLM_CPU_KVCACHE_SPACE left auto, else EXPLICIT

    def verdict(self, **changes: str) -> Verdict:
        base = {} if self.auto else EXPLICIT
        config = settings(**{**base, "DTYPE": self.dtype, **self.env, **changes})
        return judge(config, MODELS[self.model], self.runtime, int(self.available_gib * GiB))


BAD = {
    "auto-ram-2.5": Bad(
        {}, auto=True, available_gib=2.5, says=("VLLM_CPU_KVCACHE_SPACE=auto (1 GiB) is too large", "Free memory")
    ),
    "auto-cap-2g": Bad(
        {"MEMORY_LIMIT": "2g"}, auto=True, runtime="docker", variable="MEMORY_LIMIT", says=("MEMORY_LIMIT=4g",)
    ),
    "auto-llama-cap-16g": Bad(
        {"MAX_MODEL_LEN": "8192", "MEMORY_LIMIT": "16g"},
        auto=True,
        model="llama8b",
        runtime="docker",
        variable="MEMORY_LIMIT",
        says=("MEMORY_LIMIT=16g is too small",),
    ),
    "len-beyond-context": Bad(
        {"MAX_MODEL_LEN": "16384"}, variable="MAX_MODEL_LEN", says=("context of 8192", "MAX_MODEL_LEN=8192 or less")
    ),
    "len-one-past-context": Bad({"MAX_MODEL_LEN": "8193"}, variable="MAX_MODEL_LEN"),
    "len-beyond-llama-context": Bad(
        {"MAX_MODEL_LEN": "200000"},
        model="llama8b",
        available_gib=64,
        variable="MAX_MODEL_LEN",
        says=("context of 131072", "MAX_MODEL_LEN=8192 or less"),
    ),
    "len-beyond-context-gpu": Bad({"MAX_MODEL_LEN": "9000"}, runtime="docker-gpu", variable="MAX_MODEL_LEN"),
    "one-seq-no-fit-bf16": Bad(
        {"MAX_MODEL_LEN": "16384"},
        model="llama8b",
        available_gib=40,
        says=("holds 8,192 tokens", "VLLM_CPU_KVCACHE_SPACE=2", "MAX_MODEL_LEN=8192"),
    ),
    "one-seq-no-fit-fp32": Bad(
        {"MAX_MODEL_LEN": "8192", "DTYPE": "float32"},
        model="llama8b",
        dtype="float32",
        available_gib=64,
        says=("holds 4,096 tokens",),
    ),
    "one-seq-no-fit-32k": Bad(
        {"MAX_MODEL_LEN": "32768", "VLLM_CPU_KVCACHE_SPACE": "2"},
        model="llama8b",
        available_gib=40,
        says=("VLLM_CPU_KVCACHE_SPACE=4",),
    ),
    "one-seq-no-fit-128k": Bad(
        {"MAX_MODEL_LEN": "131072", "VLLM_CPU_KVCACHE_SPACE": "3"},
        model="llama8b",
        available_gib=64,
        says=("VLLM_CPU_KVCACHE_SPACE=16",),
    ),
    "ram-kv-4-of-3": Bad(
        {"VLLM_CPU_KVCACHE_SPACE": "4"}, available_gib=3, says=("available RAM (3.00 GiB)", "Free memory")
    ),
    "ram-kv-1-of-2": Bad({}, available_gib=2, says=("available RAM (2.00 GiB) cannot hold", "Free memory")),
    "ram-kv-8-of-6": Bad({"VLLM_CPU_KVCACHE_SPACE": "8"}, available_gib=6, says=("VLLM_CPU_KVCACHE_SPACE=3",)),
    "ram-llama-kv-4-of-20": Bad(
        {"VLLM_CPU_KVCACHE_SPACE": "4", "MAX_MODEL_LEN": "8192"},
        model="llama8b",
        says=("weights 14.96 GiB", "VLLM_CPU_KVCACHE_SPACE=3"),
    ),
    "cap-1g": Bad({"MEMORY_LIMIT": "1g"}, runtime="docker", variable="MEMORY_LIMIT", says=("MEMORY_LIMIT=4g",)),
    "cap-5g-llama-crash-loop": Bad(
        {"MAX_MODEL_LEN": "4096"},
        model="llama8b",
        runtime="docker",
        variable="MEMORY_LIMIT",
        says=("MEMORY_LIMIT=5g is too small", "MEMORY_LIMIT=18g"),
    ),
    "cap-5g-kv-4": Bad(
        {"VLLM_CPU_KVCACHE_SPACE": "4"},
        runtime="docker",
        variable="MEMORY_LIMIT",
        says=("VLLM_CPU_KVCACHE_SPACE=2", "MEMORY_LIMIT=7g"),
    ),
    "cap-512m": Bad({"MEMORY_LIMIT": "512m"}, runtime="docker", variable="MEMORY_LIMIT"),
    "cap-3g-fp32": Bad(
        {"MEMORY_LIMIT": "3g", "DTYPE": "float32"},
        dtype="float32",
        runtime="docker",
        variable="MEMORY_LIMIT",
        says=("weights 0.50 GiB",),
    ),
    "cap-16g-llama-fp16": Bad(
        {"MEMORY_LIMIT": "16g"},
        model="llama8b",
        dtype="float16",
        runtime="docker",
        variable="MEMORY_LIMIT",
        says=("MEMORY_LIMIT=18g",),
    ),
}


@pytest.mark.parametrize("raw", ["five gigs", "5x"])
def test_a_memory_limit_that_is_no_size_is_refused_where_the_settings_are_read(raw: str) -> None:
    """MEMORY_LIMIT is parsed once, by its setting: the preflight, the Docker track and Kubernetes get its bytes."""
    with pytest.raises(SettingsError, match=f"^MEMORY_LIMIT='{raw}' is invalid: .*such as 5g"):
        settings(MEMORY_LIMIT=raw)
    assert settings(MEMORY_LIMIT="5g").memory_limit.num_bytes == 5 * GiB and str(settings().memory_limit) == "5g"


@pytest.mark.parametrize("name", BAD)
def test_bad_configuration_is_refused_with_the_variable_and_a_working_value(name: str) -> None:
    bad = BAD[name]
    refusals = bad.verdict().refusals
    assert refusals, f"{name} was not refused"
    refusal = refusals[0]
    assert refusal.variable == bad.variable, refusal
    for text in bad.says:
        assert text in refusal.message, refusal.message
    for var, value in suggestions(refusal.message):
        after = bad.verdict(**{var: value})
        assert not after.refusals, f"{name}: the suggested {var}={value} is refused too: {after.refusals}"


def test_every_bad_configuration_is_refused_for_a_reason_of_its_own() -> None:
    """Twenty-odd configurations only test twenty things if no two are refused with the same words."""
    messages = {name: bad.verdict().refusals[0].message for name, bad in BAD.items()}
    repeated = {message for message in messages.values() if list(messages.values()).count(message) > 1}
    assert not repeated, [name for name, message in messages.items() if message in repeated]


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("1.5", "use auto or 1 or 2"),
        ("0.5", "use auto or 1"),
        ("2.25", "use auto or 2 or 3"),
        ("0.001", "would die at start"),
    ],
)
def test_a_kv_budget_that_is_not_whole_gib_is_refused_with_values_that_work(raw: str, says: str) -> None:
    with pytest.raises(SettingsError) as refused:
        settings(VLLM_CPU_KVCACHE_SPACE=raw)
    message = str(refused.value)
    assert f"VLLM_CPU_KVCACHE_SPACE={raw!r} is invalid" in message and "whole GiB" in message and says in message
    for value in [*re.findall(r"\b\d+\b", message.split("; use ", 1)[1]), "auto"]:
        assert not judge(settings(VLLM_CPU_KVCACHE_SPACE=value), SMOL, "native", 20 * GiB).refusals


def test_the_defaults_pass_without_warnings() -> None:
    for dtype in ("bfloat16", "float32"):
        verdict = judge(settings(DTYPE=dtype), SMOL, "native", 20 * GiB)
        assert not verdict.refusals and not verdict.warnings
    assert not judge(settings(), SMOL, "docker", 0).refusals  # 5g holds 0.25 + 1 + 2 GiB


def test_more_full_length_sequences_than_the_pool_holds_warns() -> None:
    env = {"MAX_MODEL_LEN": "8192", "MAX_NUM_SEQS": "16", "VLLM_CPU_KVCACHE_SPACE": "1"}
    verdict = judge(settings(**env), SMOL, "native", 20 * GiB)
    assert not verdict.refusals and [w.variable for w in verdict.warnings] == ["MAX_NUM_SEQS"]
    message = verdict.warnings[0].message
    assert "131,072 tokens exceeds the KV pool (46,592 tokens)" in message
    assert "admission queues on KV space" in message
    assert suggestions(message) == [("MAX_NUM_SEQS", "5"), ("VLLM_CPU_KVCACHE_SPACE", "3")]
    for var, value in suggestions(message):
        assert not judge(settings(**{**env, var: value}), SMOL, "native", 20 * GiB).warnings


def test_auto_sizes_the_batch_to_the_memory_instead_of_warning() -> None:
    verdict = judge(settings(MAX_MODEL_LEN="8192"), SMOL, "native", 20 * GiB)
    assert not verdict.refusals and not verdict.warnings  # 16 x 8,192 tokens: auto takes 3 GiB of KV


def test_an_unknown_model_is_not_sized() -> None:
    assert not judge(settings(MAX_MODEL_LEN="100000"), None, "docker", 0).refusals


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"MAX_MODEL_LEN": "16384"}, "MAX_MODEL_LEN=16384 is too long"),
        ({"VLLM_CPU_KVCACHE_SPACE": "1.5"}, "VLLM_CPU_KVCACHE_SPACE='1.5' is invalid"),
        ({"VLLM_CPU_KVCACHE_SPACE": "4096"}, "VLLM_CPU_KVCACHE_SPACE=4096 is too large for this machine"),
    ],
)
def test_up_sh_refuses_before_starting_anything(env: dict[str, str], says: str) -> None:
    port = free_port()
    result = run_script("up.sh", kit_env(VLLM_PORT=str(port), RUNTIME="native", **env), timeout_s=300)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert says in output and "Traceback" not in output
    assert len([line for line in output.splitlines() if line.startswith("error:")]) == 1
    assert not (RUN_DIR / f"vllm-{port}.pid").exists() and not (LOG_DIR / f"vllm-{port}.log").exists()


@pytest.mark.parametrize(
    ("runtime", "tag", "block_size"),
    [("native", "0.9.1-oe2403lts", 128), ("docker", "0.9.1-oe2403lts", 16), ("docker", "0.14.0", 128)],
)
def test_block_size_follows_the_engine_version(runtime: str, tag: str, block_size: int) -> None:
    assert block_size_for(settings(CPU_IMAGE_TAG=tag), runtime) == block_size


def test_v0_blocks_in_the_cpu_image_round_the_pool_differently() -> None:
    llama = {**EXPLICIT, "MAX_MODEL_LEN": "8192", "MEMORY_LIMIT": "40g"}
    assert not judge(settings(**llama), LLAMA_8B, "docker", 0, block_size=16).refusals
    one_more = judge(settings(**{**llama, "MAX_MODEL_LEN": "8193"}), LLAMA_8B, "docker", 0, block_size=16)
    assert "needs 513 blocks of 16" in one_more.refusals[0].message
