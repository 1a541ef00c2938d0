"""The doctor's diagnosis rules on V0 and V1 exposition text: pure, no engine, no HTTP.

KV pressure and preemptions cannot be produced on demand on a 46k-token pool with 2 cores, and V0 (the
openEuler image) is not installed here: V0's text below is written by this project in vLLM 0.9.1's format.
The doctor's command against real servers is tests/labs/doctor/test_doctor.py.
"""

from __future__ import annotations

import pytest

from labs.doctor.diagnosis import Limits, diagnose
from serve.processes.metrics import parse

LIMITS = Limits(max_num_seqs=16, max_model_len=1024, kv_cache_space_gib=1)


def v0_text(running: float = 0, waiting: float = 0, kv: float = 0.0, preemptions: float = 0) -> str:
    """Project-written exposition text in vLLM 0.9.1 (V0) format: gpu_cache_usage_perc, swap in the config."""
    labels = 'model_name="HuggingFaceTB/SmolLM2-135M-Instruct"'
    cache_config = ",".join(
        [
            'block_size="16"',
            'cache_dtype="auto"',
            'cpu_offload_gb="0"',
            'enable_prefix_caching="False"',
            'gpu_memory_utilization="0.9"',
            'is_attention_free="False"',
            'num_cpu_blocks="0"',
            'num_gpu_blocks="1456"',
            'num_gpu_blocks_override="None"',
            'sliding_window="None"',
            'swap_space="4"',
            'swap_space_bytes="4294967296"',
        ]
    )
    return f"""# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{{{cache_config}}} 1.0
# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{{labels}}} {running}
# HELP vllm:num_requests_swapped Number of requests swapped to CPU.
# TYPE vllm:num_requests_swapped gauge
vllm:num_requests_swapped{{{labels}}} 0.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{{labels}}} {waiting}
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{{{labels}}} {kv}
# HELP vllm:cpu_cache_usage_perc CPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:cpu_cache_usage_perc gauge
vllm:cpu_cache_usage_perc{{{labels}}} 0.0
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{{{labels}}} {preemptions}
"""


V1_DEFERRED_TEXT = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
# TYPE vllm:num_requests_waiting_by_reason gauge
vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="capacity"} 0.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="deferred"} 3.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.1
"""


def test_v0_names_are_understood() -> None:
    snapshot = parse(v0_text(running=4, waiting=2, kv=0.5, preemptions=3))
    assert snapshot.format == "v0"
    assert (snapshot.running, snapshot.waiting, snapshot.kv_usage, snapshot.preemptions_total) == (4, 2, 0.5, 3)
    assert snapshot.cache_config["num_gpu_blocks"] == "1456" and snapshot.cache_config["swap_space"] == "4"


def test_v0_kv_pressure_says_raise_the_kv_budget_and_not_swap() -> None:
    history = [parse(v0_text(16, 2, 0.95, 3)), parse(v0_text(16, 6, 0.98, 3))]
    diagnosis = diagnose(history, LIMITS)
    assert (diagnosis.state, diagnosis.lever) == ("kv", "VLLM_CPU_KVCACHE_SPACE")
    assert "6 waiting (rising) with KV usage 98%" in diagnosis.advice
    assert "raise VLLM_CPU_KVCACHE_SPACE from 1 to 2" in diagnosis.advice
    assert "lower MAX_MODEL_LEN from 1024 to 512" in diagnosis.advice
    assert any("SWAP_SPACE adds no blocks on CPU" in note for note in diagnosis.notes)
    assert any("swap_space=4 GiB: that reserves swap, not KV blocks" in note for note in diagnosis.notes)


def test_v0_rising_preemptions_are_kv_pressure_even_with_nothing_waiting() -> None:
    diagnosis = diagnose([parse(v0_text(8, 0, 0.7, 3)), parse(v0_text(8, 0, 0.72, 5))], LIMITS)
    assert diagnosis.state == "kv" and "2 preemption(s) while sampling" in diagnosis.advice


def test_v0_waiting_with_low_kv_says_raise_max_num_seqs() -> None:
    diagnosis = diagnose([parse(v0_text(16, 4, 0.2)), parse(v0_text(16, 8, 0.21))], LIMITS)
    assert (diagnosis.state, diagnosis.lever) == ("slots", "MAX_NUM_SEQS")
    assert "8 waiting (rising) while KV usage is only 21%" in diagnosis.advice
    assert "raise MAX_NUM_SEQS from 16 to 24" in diagnosis.advice


def test_waiting_with_free_slots_and_low_kv_is_prefill_not_max_num_seqs() -> None:
    diagnosis = diagnose([parse(v0_text(5, 9, 0.36)), parse(v0_text(5, 9, 0.37))], LIMITS)
    assert (diagnosis.state, diagnosis.lever) == ("prefill", None)
    assert "5 of MAX_NUM_SEQS=16 slots in use" in diagnosis.advice and "--max-num-batched-tokens" in diagnosis.advice
    assert diagnose([parse(v0_text(5, 9, 0.36))], Limits()).state == "slots"  # MAX_NUM_SEQS unknown


@pytest.mark.parametrize(
    ("text", "state"), [(v0_text(), "idle"), (v0_text(running=3, kv=0.1), "busy"), (V1_DEFERRED_TEXT, "deferred")]
)
def test_idle_busy_and_deferred(text: str, state: str) -> None:
    diagnosis = diagnose([parse(text)], LIMITS)
    assert diagnosis.state == state and diagnosis.lever is None


def test_diagnose_needs_a_snapshot() -> None:
    with pytest.raises(ValueError, match="at least one snapshot"):
        diagnose([])
