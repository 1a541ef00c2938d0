"""`auto` settings: MAX_NUM_SEQS and VLLM_CPU_KVCACHE_SPACE sized from the cores, the model and the memory.

Pure: each case states the machine (cores, BF16, RAM free) and checks what vLLM would be given and why.
The session's real server shows the same values in up.sh's recap (tests/serve/test_server.py).
"""

from __future__ import annotations

import pytest

from serve.config.env_check import VLLM_NAMES_FILE
from serve.config.machine import Machine
from serve.config.model import bundled_model_facts
from serve.config.plan import RuntimeLimits, resolve
from serve.config.settings import KNOBS, Settings
from serve.config.sizing import AUTO_SEQS_CAP, SEQS_PER_CORE, GiB, kv_pool
from serve.config.vllm_flags import Target, vllm_args, vllm_env
from serve.engines.replicas import shares
from serve.engines.runtime import resolved_rows
from serve.engines.tracks import CPU, GPU, compose_env, container_command, plan_for_container
from tests.serve.config.test_preflight import LLAMA_8B
from ui.values import SettingsError

SMOL = bundled_model_facts()
ZEN4 = Machine(2, frozenset({"avx512f", "avx512_bf16"}), 20 * GiB)
NATIVE = Target("m", "127.0.0.1", 8009, (0, 32))  # where the native runtime's flags go


def settings(**overrides: str) -> Settings:
    return Settings.from_env({**{knob.env: knob.default for knob in KNOBS}, **overrides})


def machine(cores: int = 2, free_gib: float = 20) -> Machine:
    return Machine(cores, frozenset({"avx512_bf16"}), int(free_gib * GiB))


def test_defaults_on_a_two_core_machine_give_32_sequences_and_1_gib() -> None:
    resolved = resolve(settings(), machine(), SMOL)
    assert (resolved.max_num_seqs, resolved.kv_cache_space_gib) == (32, 1)
    assert resolved.max_num_seqs_reason == "auto: 16 per core x 2 cores"
    assert resolved.kv_cache_space_reason == (
        "auto: 32 sequences x 1,024 tokens need 0.70 GiB of bfloat16 KV, rounded up to whole GiB"
    )
    args = vllm_args(settings(), resolved, NATIVE)
    assert args[args.index("--max-num-seqs") + 1] == "32"
    assert vllm_env(settings(), resolved, NATIVE)["VLLM_CPU_KVCACHE_SPACE"] == "1"


@pytest.mark.parametrize(("cores", "seqs", "kv_gib"), [(1, 16, 1), (4, 64, 2), (16, 256, 6), (64, 256, 6)])
def test_the_batch_grows_with_the_cores_and_the_kv_budget_with_the_batch(cores: int, seqs: int, kv_gib: int) -> None:
    resolved = resolve(settings(), machine(cores, free_gib=64), SMOL)
    assert (resolved.max_num_seqs, resolved.kv_cache_space_gib) == (seqs, kv_gib)
    assert seqs == min(SEQS_PER_CORE * cores, AUTO_SEQS_CAP)
    pool = kv_pool(SMOL, "bfloat16", kv_gib * GiB)
    assert pool.max_num_seqs(1024) >= seqs  # every sequence has full-length room ...
    assert kv_pool(SMOL, "bfloat16", (kv_gib - 1) * GiB).max_num_seqs(1024) < seqs or kv_gib == 1  # ... no more


def test_many_cores_stop_at_vllms_own_default() -> None:
    assert resolve(settings(), machine(64, free_gib=64), SMOL).max_num_seqs_reason.endswith("capped at 256")


def test_a_longer_context_gets_a_bigger_kv_budget_not_a_smaller_batch() -> None:
    resolved = resolve(settings(MAX_MODEL_LEN="8192"), machine(), SMOL)  # labs/sizing.md quotes this
    assert (resolved.max_num_seqs, resolved.kv_cache_space_gib) == (32, 6)  # 32 x 8,192 x 23,040 B = 5.6 GiB


def test_float32_doubles_the_kv_bytes() -> None:
    long = settings(DTYPE="float32", MAX_MODEL_LEN="8192")
    resolved = resolve(long, machine(free_gib=64), SMOL)
    assert (resolved.max_num_seqs, resolved.kv_cache_space_gib) == (32, 12)  # 32 x 8,192 x 46,080 B = 11.3 GiB


def test_short_memory_caps_the_kv_and_cuts_the_batch_to_what_fits() -> None:
    # 7 GiB free: auto takes at most half (3.5) minus weights (0.25) and runtime (2): 1 GiB of KV,
    # which holds 5 sequences of 8,192 tokens.
    resolved = resolve(settings(MAX_MODEL_LEN="8192"), machine(free_gib=7), SMOL)
    assert (resolved.max_num_seqs, resolved.kv_cache_space_gib) == (5, 1)
    assert "the memory left for KV is 1.2 GiB" in resolved.kv_cache_space_reason
    assert resolved.max_num_seqs_reason == (
        "auto: 16 per core x 2 cores, cut to the 5 full-length sequences the KV pool holds"
    )


def test_values_set_in_env_are_kept_as_set() -> None:
    resolved = resolve(settings(MAX_NUM_SEQS="4", VLLM_CPU_KVCACHE_SPACE="3"), machine(free_gib=1), SMOL)
    assert (resolved.max_num_seqs, resolved.max_num_seqs_reason) == (4, "set in MAX_NUM_SEQS")
    assert (resolved.kv_cache_space_gib, resolved.kv_cache_space_reason) == (3, "set in VLLM_CPU_KVCACHE_SPACE")


def test_a_set_kv_budget_bounds_the_auto_batch() -> None:
    resolved = resolve(settings(VLLM_CPU_KVCACHE_SPACE="1", MAX_MODEL_LEN="4096"), machine(cores=8), SMOL)
    assert resolved.max_num_seqs == 11  # 364 blocks / 32 per 4,096-token sequence, not 8 x 8 cores


def test_an_unknown_model_gets_the_core_rule_and_vllms_cpu_default() -> None:
    resolved = resolve(settings(), machine(), None)
    assert (resolved.max_num_seqs, resolved.kv_cache_space_gib) == (32, 4)
    assert "no local config.json" in resolved.kv_cache_space_reason


def test_docker_cpu_track_sizes_for_cpu_limit_and_memory_limit() -> None:
    host = machine(cores=16, free_gib=64)
    small = settings(CPU_LIMIT="2", MEMORY_LIMIT="3g")
    resolved = plan_for_container(small, host, CPU)
    # two cores: one computes, one is left to the scheduler and API server (as vLLM's own binding leaves)
    assert (resolved.omp_threads, resolved.max_num_seqs, resolved.kv_cache_space_gib) == (1, 32, 1)
    # 16 x 16 cores = 256 sequences would need 6 GiB of KV; 8 GiB less weights and runtime leaves 5: 227 fit
    big = plan_for_container(settings(CPU_LIMIT="16", MEMORY_LIMIT="8g"), host, CPU)
    assert (big.max_num_seqs, big.kv_cache_space_gib) == (227, 5)
    exported = compose_env(settings(CPU_LIMIT="16", MEMORY_LIMIT="8g"), big, CPU)
    assert (exported["RESOLVED_MAX_NUM_SEQS"], exported["RESOLVED_VLLM_CPU_KVCACHE_SPACE"]) == ("227", "5")
    assert (exported["MAX_NUM_SEQS"], exported["VLLM_CPU_KVCACHE_SPACE"]) == ("auto", "auto")


def test_a_llama_under_a_tight_container_cap_gets_one_full_length_sequence() -> None:
    # the Docker track's resolution, with this model's facts and an 18 GiB MEMORY_LIMIT
    limits = RuntimeLimits(cores=4, memory_bytes=18 * GiB, engine_block_size=128, container=True)
    resolved = resolve(settings(MAX_MODEL_LEN="8192"), machine(cores=4), LLAMA_8B, limits)
    assert (resolved.max_num_seqs, resolved.kv_cache_space_gib) == (1, 1)


def test_gpu_track_leaves_max_num_seqs_to_vllm_unless_set() -> None:
    auto = plan_for_container(settings(), machine(), GPU)
    assert auto.max_num_seqs is None and "--max-num-seqs" not in container_command(settings(), auto, GPU)
    assert compose_env(settings(), auto, GPU)["RESOLVED_MAX_NUM_SEQS_ARGS"] == ""
    set_ = settings(MAX_NUM_SEQS="64")
    fixed = plan_for_container(set_, machine(), GPU)
    command = container_command(set_, fixed, GPU)
    assert command[command.index("--max-num-seqs") + 1] == "64"
    assert compose_env(set_, fixed, GPU)["RESOLVED_MAX_NUM_SEQS_ARGS"] == "--max-num-seqs 64"
    assert "VLLM_CPU_KVCACHE_SPACE" not in vllm_env(set_, fixed, NATIVE)


@pytest.mark.parametrize(
    ("logical", "physical", "bind", "threads"),
    [
        (2, 2, "auto", 1),  # this machine: one core computes, one is left to the scheduler and API server
        (8, 4, "auto", 3),  # SMT: vLLM binds one thread per physical core
        (1, 1, "nobind", 1),  # nothing to reserve on one core
    ],
)
def test_binding_auto_is_vllms_own_where_a_core_can_be_spared(
    logical: int, physical: int, bind: str, threads: int
) -> None:
    host = Machine(logical, frozenset(), 20 * GiB, physical)
    resolved = resolve(settings(), host, SMOL)
    assert (resolved.omp_threads_bind, resolved.omp_threads) == (bind, threads)
    assert vllm_env(settings(), resolved, NATIVE)["VLLM_CPU_OMP_THREADS_BIND"] == bind


def test_without_vllms_binding_the_threads_leave_a_core_as_its_binding_does() -> None:
    """nobind (set by hand, or in a container): OMP_THREADS=auto computes on all cores but one, the one vLLM's
    own binding leaves to its scheduler and API server; a number set in OMP_THREADS is taken as it is."""
    host = Machine(4, frozenset(), 20 * GiB, 4)
    by_hand = resolve(settings(VLLM_CPU_OMP_THREADS_BIND="nobind"), host, SMOL)
    assert (by_hand.omp_threads_bind, by_hand.omp_threads) == ("nobind", 3)
    assert "one left to the scheduler and API server" in by_hand.omp_threads_reason
    set_ = resolve(settings(VLLM_CPU_OMP_THREADS_BIND="nobind", OMP_THREADS="4"), host, SMOL)
    assert (set_.omp_threads, set_.omp_threads_reason) == (4, "set in OMP_THREADS")
    container = plan_for_container(settings(CPU_LIMIT="3"), host, CPU)
    assert (container.omp_threads_bind, container.omp_threads) == ("nobind", 2)
    assert "CPU_LIMIT caps CPU time" in container.omp_threads_bind_reason
    assert "CPU_LIMIT=3: 3, one left" in container.omp_threads_reason
    single = plan_for_container(settings(CPU_LIMIT="1"), host, CPU)
    assert single.omp_threads == 1


def test_mkl_threads_follow_the_openmp_threads_unless_set() -> None:
    """torch sizes its pool from MKL_NUM_THREADS where it is set: a fixed 1 would undo OMP_THREADS."""
    host = Machine(4, frozenset(), 20 * GiB, 4)
    nobind = settings(VLLM_CPU_OMP_THREADS_BIND="nobind", OMP_THREADS="4")
    assert vllm_env(nobind, resolve(nobind, host, SMOL), NATIVE)["MKL_NUM_THREADS"] == "4"
    pinned = settings(VLLM_CPU_OMP_THREADS_BIND="nobind", OMP_THREADS="4", MKL_NUM_THREADS="1")
    assert vllm_env(pinned, resolve(pinned, host, SMOL), NATIVE)["MKL_NUM_THREADS"] == "1"
    container = plan_for_container(settings(CPU_LIMIT="3"), host, CPU)
    assert compose_env(settings(CPU_LIMIT="3"), container, CPU)["RESOLVED_MKL_NUM_THREADS"] == "2"


def test_block_size_auto_is_32_where_vllm_v1_runs_on_cpu() -> None:
    resolved = resolve(settings(), machine(), SMOL)
    assert (resolved.block_size, resolved.kv_block_size) == (32, 32)
    args = vllm_args(settings(), resolved, NATIVE)
    assert args[args.index("--block-size") + 1] == "32"
    # 32-token blocks cut the same GiB into 4x the blocks: the same tokens, the same auto budget
    assert kv_pool(SMOL, "bfloat16", GiB, 32).num_tokens == kv_pool(SMOL, "bfloat16", GiB, 128).num_tokens


@pytest.mark.parametrize(("tag", "flag", "kv_block"), [("0.9.1-oe2403lts", None, 16), ("0.14.0", 32, 32)])
def test_docker_cpu_track_passes_a_block_size_only_to_a_v1_image(tag: str, flag: int | None, kv_block: int) -> None:
    config = settings(CPU_IMAGE_TAG=tag)
    resolved = plan_for_container(config, machine(), CPU)
    assert (resolved.block_size, resolved.kv_block_size) == (flag, kv_block)
    command = container_command(config, resolved, CPU)
    assert ("--block-size" in command) == (flag is not None)
    expected = "" if flag is None else f"--block-size {flag}"
    assert compose_env(config, resolved, CPU)["RESOLVED_BLOCK_SIZE_ARGS"] == expected


def test_block_size_set_by_hand_goes_to_every_track() -> None:
    config = settings(BLOCK_SIZE="64")
    for resolved in (resolve(config, machine(), SMOL), plan_for_container(config, machine(), GPU)):
        assert (resolved.block_size, resolved.block_size_reason) == (64, "set in BLOCK_SIZE")
    assert plan_for_container(settings(), machine(), GPU).block_size is None  # GPU: vLLM's own 16


AVX2 = frozenset({"avx2", "fma", "f16c"})
AVX512 = AVX2 | {"avx512f", "avx512_bf16"}


def test_on_avx2_the_model_runs_in_the_engine_core_on_every_core() -> None:
    """VLLM_ENABLE_V1_MULTIPROCESSING=auto: vLLM's uni executor where it measured faster (AVX2, no AVX-512), with
    both cores computing (no binding: vLLM binds only a worker), and torch's pool sized to match."""
    resolved = resolve(settings(), Machine(2, AVX2, 20 * GiB, 2), SMOL)
    assert (resolved.multiprocessing, resolved.omp_threads_bind, resolved.omp_threads) == (False, "nobind", 2)
    assert "AVX2 and no AVX-512" in resolved.multiprocessing_reason
    env = vllm_env(settings(), resolved, NATIVE)
    assert (env["VLLM_ENABLE_V1_MULTIPROCESSING"], env["OMP_NUM_THREADS"], env["MKL_NUM_THREADS"]) == ("0", "2", "2")
    assert dict(resolved_rows(resolved))["processes"].startswith("API server and engine core")


@pytest.mark.parametrize(
    ("flags", "cores", "overrides", "expected"),
    [
        (AVX512, 2, {}, True),  # a tie at 1 user and slower at 16 there: vLLM's worker process stays
        (AVX2, 1, {}, True),  # one core: nothing to gain from the spare core the worker's poller took
        (AVX2, 2, {"VLLM_ENABLE_V1_MULTIPROCESSING": "true"}, True),  # the setting turns it off
        (AVX512, 2, {"VLLM_ENABLE_V1_MULTIPROCESSING": "false"}, False),
    ],
)
def test_multiprocessing_auto_keeps_vllms_worker_elsewhere_and_the_setting_wins(
    flags: frozenset[str], cores: int, overrides: dict[str, str], expected: bool
) -> None:
    resolved = resolve(settings(**overrides), Machine(cores, flags, 20 * GiB, cores), SMOL)
    assert resolved.multiprocessing is expected
    assert vllm_env(settings(**overrides), resolved, NATIVE)["VLLM_ENABLE_V1_MULTIPROCESSING"] == (
        "1" if expected else "0"
    )


def test_docker_and_replicas_keep_the_worker_process_that_vllm_binds() -> None:
    avx2_host = Machine(4, AVX2, 20 * GiB, 4)
    container = plan_for_container(settings(CPU_LIMIT="4"), avx2_host, CPU)
    assert (
        container.multiprocessing
        and compose_env(settings(), container, CPU)["RESOLVED_VLLM_ENABLE_V1_MULTIPROCESSING"] == "1"
    )
    two = settings(REPLICAS="2")
    share = shares(two, [0, 1, 2, 3])[0]
    replica = resolve(two, avx2_host, SMOL, share.limits(avx2_host))
    assert (replica.multiprocessing, replica.omp_threads_bind) == (True, "0-1")


def test_the_native_compiled_engine_gets_inductors_cpp_wrapper_and_layer_names_it_can_pass() -> None:
    """CPP_WRAPPER=auto natively: the C++ wrapper, with vLLM's own switch that passes its attention ops the layer's
    name as a str (its opaque LayerName is what the C++ wrapper cannot pass); the eager engine of the same plan,
    which compiles nothing, gets neither."""
    resolved = resolve(settings(), ZEN4, SMOL)
    assert resolved.cpp_wrapper
    assert resolved.cpp_wrapper_reason.startswith("auto: inductor's C++ wrapper calls the compiled step's ops")
    args = vllm_args(settings(), resolved, NATIVE)
    assert args[args.index("--compilation-config") + 1] == '{"inductor_compile_config":{"cpp_wrapper":true}}'
    assert vllm_env(settings(), resolved, NATIVE)["VLLM_USE_LAYERNAME"] == "0"
    assert "VLLM_USE_LAYERNAME" in VLLM_NAMES_FILE.read_text().split()  # the native vLLM's own switch (vllm.envs)
    assert dict(resolved_rows(resolved))["step wrapper"].startswith("C++ (auto: ")
    eager = settings(ENFORCE_EAGER="true")
    assert "--compilation-config" not in vllm_args(eager, resolved, NATIVE)
    assert "VLLM_USE_LAYERNAME" not in vllm_env(eager, resolved, NATIVE)
    assert resolve(eager, ZEN4, SMOL).cpp_wrapper_reason == "ENFORCE_EAGER=true: nothing is compiled"


def test_the_cpp_wrapper_is_left_to_vllm_where_it_was_not_measured_or_the_user_sets_it() -> None:
    off = settings(CPP_WRAPPER="false")
    assert not resolve(off, ZEN4, SMOL).cpp_wrapper
    assert "--compilation-config" not in vllm_args(off, resolve(off, ZEN4, SMOL), NATIVE)
    own = settings(VLLM_EXTRA_ARGS="-O3")
    assert resolve(own, ZEN4, SMOL).cpp_wrapper_reason == "VLLM_EXTRA_ARGS sets vLLM's compilation config itself"
    assert not plan_for_container(settings(), machine(), CPU).cpp_wrapper
    assert not plan_for_container(settings(), machine(), GPU).cpp_wrapper
    with pytest.raises(SettingsError, match="CPP_WRAPPER=true is for the native CPU engine"):
        plan_for_container(settings(CPP_WRAPPER="true"), machine(), CPU)


def test_a_cpu_without_avx512_keeps_the_python_wrapper_which_tied_there() -> None:
    avx2 = Machine(2, frozenset({"avx2"}), 20 * GiB)
    resolved = resolve(settings(), avx2, SMOL)
    assert not resolved.cpp_wrapper and "without AVX-512" in resolved.cpp_wrapper_reason
    assert resolve(settings(CPP_WRAPPER="true"), avx2, SMOL).cpp_wrapper
