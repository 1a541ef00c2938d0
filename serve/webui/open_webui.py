"""Open WebUI, natively: PyPI's open-webui in its own venv, started by up.sh when OPEN_WEBUI=true.

It is the chat UI many Ollama users already run; here it talks to the kit's engines over their OpenAI-compatible
/v1, one connection per engine in ENGINES (with the kit's key when VLLM_API_KEY is set), and to the learner's own
Ollama when one answers (serve/engines/ollama.py). The kit configures it through its environment alone, so that
.env stays the one source (ENABLE_PERSISTENT_CONFIG=False: Open WebUI otherwise keeps the first start's
connections in its database and ignores the environment after), and offline: no telemetry, no update check, no
model downloads (OFFLINE_MODE; the document search and the speech-to-text models it would fetch are switched off).
It listens on 127.0.0.1:OPEN_WEBUI_PORT only, with no login (WEBUI_AUTH=False: one local user, as for the
engines on 127.0.0.1), and runs under the kit's supervisor like the engines:
    .kit/open-webui/                  the venv (serve/install/open_webui_venv.py)
    .kit/open-webui-data/             its database (chats, settings) and secret key, kept across reinstalls
    .kit/run/open-webui-PORT.pid, .kit/logs/open-webui-PORT.log
down.sh stops it whatever OPEN_WEBUI says then: it has nothing to talk to once the engines are gone.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from serve.config.paths import ROOT, RUN_DIR, STATE_DIR
from serve.config.settings import OPEN_WEBUI_VERSION, Settings
from serve.engines import ollama, runtimes
from serve.engines.ollama import Ollama
from serve.install import open_webui_venv, system
from serve.processes.local_server import LocalRuntime, LocalServer
from ui.progress import console

LOOPBACK = "127.0.0.1"  # no login: never beyond this machine
HEALTH_PATH = "/health"  # {"status": true} once it serves
START_TIMEOUT_S = 600  # its first start creates its database and imports ~90 packages: minutes on 2 busy cores
DATA_DIR = STATE_DIR / "open-webui-data"
SECRET_KEY_FILE = DATA_DIR / "secret-key"  # signs its session tokens; made once, mode 600
OLLAMA_DEFAULT_URL = "http://127.0.0.1:11434"  # where a learner's Ollama listens unless told otherwise
# Open WebUI 0.12.4's built-in tool categories (open_webui/utils/tools.py, get_builtin_tools) but `time`
OTHER_BUILTIN_TOOLS = (
    "user_input",
    "files",
    "knowledge",
    "chats",
    "subagents",
    "memory",
    "web_search",
    "image_generation",
    "code_interpreter",
    "notes",
    "channels",
    "skills",
    "tasks",
    "automations",
    "calendar",
    "notifications",
)
# Its built-in tools go to the model with each chat (as `tools`, tool_choice left to the engine: auto). The kit's
# native vLLM serves tool calls (TOOL_CALL_PARSER); with all of them (files, knowledge, chats, notes, memory, ...) a
# one-line question came to more than the kit's MAX_MODEL_LEN of 1024 tokens of prompt (vLLM answered a 400, shown
# in the chat); with the time tools alone it fits, and they run offline. With a longer context, turn the others on
# in Open WebUI's model settings.
TIME_TOOLS_ONLY = json.dumps({"builtinTools": {"time": True, **dict.fromkeys(OTHER_BUILTIN_TOOLS, False)}})
# Where the engine serves no tool calls (TOOL_CALL_PARSER=none; compose's webui profile, whose CPU image's vLLM 0.9.1
# serves none for the bundled model) a chat with tools would get vLLM's 400: none are sent
BUILTIN_TOOLS_OFF = json.dumps({"capabilities": {"builtin_tools": False}})
# What the kit sets whatever the engines: offline, private, configured by the environment alone.
FIXED_ENV = {
    "OFFLINE_MODE": "true",  # no version check, no Hugging Face downloads
    "HF_HUB_OFFLINE": "1",
    "ENABLE_VERSION_UPDATE_CHECK": "false",
    "DO_NOT_TRACK": "true",
    "SCARF_NO_ANALYTICS": "true",
    "ANONYMIZED_TELEMETRY": "false",
    "WEBUI_AUTH": "False",  # one local user on 127.0.0.1 (Open WebUI allows it only on a fresh data folder)
    "ENABLE_PERSISTENT_CONFIG": "False",  # .env stays the one source: the environment wins at every start
    "ENABLE_OPENAI_API": "True",
    "ENABLE_SIGNUP": "False",
    "ENABLE_COMMUNITY_SHARING": "False",  # its "share to the Open WebUI community" button
    # Document search would load an embedding model from Hugging Face at every start (sentence-transformers: seconds
    # of imports, then an error offline): without one, an attached file goes to the model whole.
    "RAG_EMBEDDING_MODEL": "",
    "BYPASS_EMBEDDING_AND_RETRIEVAL": "true",
    "AUDIO_STT_ENGINE": "web",  # speech to text in the browser, not a Whisper model downloaded at the first use
    # After each answer it would ask the model for follow-up questions and tags too: two more requests of
    # hundreds of prompt tokens on a CPU the chat shares. The chat's title (one short request) stays.
    "ENABLE_FOLLOW_UP_GENERATION": "False",
    "ENABLE_TAGS_GENERATION": "False",
}


@dataclass(frozen=True, slots=True)
class Connection:
    """One of Open WebUI's OpenAI connections: a kit engine's /v1, with the kit's key when VLLM_API_KEY is set."""

    name: str  # the engine's name in ENGINES
    url: str
    model: str  # the model it serves
    key: str = ""


class OpenWebUIRuntime(LocalRuntime):
    """Open WebUI on 127.0.0.1:OPEN_WEBUI_PORT, its connections those of the settings (and of the Ollama found)."""

    label = "Open WebUI"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.port = settings.open_webui_port
        self.server = LocalServer(
            self.label,
            "open-webui",
            open_webui_venv.PROGRAM,
            LOOPBACK,
            self.port,
            "OPEN_WEBUI_PORT",
            f"http://{LOOPBACK}:{self.port}",
            health_path=HEALTH_PATH,
            restart=settings.restart,
            restart_attempts=settings.restart_attempts,
        )

    @property
    def config_path(self) -> Path:
        """What the running one was started with (a digest: the keys are in it), to tell a restart is needed."""
        return RUN_DIR / f"open-webui-{self.port}.config"

    def engines(self) -> list[Connection]:
        """The kit's engines in ENGINES, each at its /v1, in start order."""
        key = self.settings.api_key
        return [
            Connection(name, f"{engine.base_url(self.settings)}/v1", engine.served_model(self.settings), key)
            for name, engine in runtimes.ENGINES.items()
            if name in self.settings.engines
        ]

    def ollama_urls(self) -> list[str]:
        """Where a learner's own Ollama may answer: its own port, and LLAMACPP_PORT (which it may hold)."""
        return list(dict.fromkeys((OLLAMA_DEFAULT_URL, self.settings.url_for(self.settings.llamacpp_port))))

    def find_ollama(self) -> Ollama | None:
        """The learner's own Ollama, the first that answers `GET /api/version` where one may (ollama_urls)."""
        for url in self.ollama_urls():
            found = ollama.find(url)
            if found is not None:
                return found
        return None

    def environment(self, found: Ollama | None) -> dict[str, str]:
        """The variables the kit sets for Open WebUI, over the process environment's (Open WebUI's own variables
        that the kit does not set, exported in your shell, reach it)."""
        connections = self.engines()
        return {
            **FIXED_ENV,
            "DEFAULT_MODEL_METADATA": BUILTIN_TOOLS_OFF
            if self.settings.tool_call_parser == "none"
            else TIME_TOOLS_ONLY,
            "DATA_DIR": str(DATA_DIR),
            "CORS_ALLOW_ORIGIN": self.base_url,  # its own page only (its default, *, lets any site's script in)
            "OPENAI_API_BASE_URLS": ";".join(connection.url for connection in connections),
            "OPENAI_API_KEYS": ";".join(connection.key for connection in connections),
            # read where OPENAI_API_KEYS is empty: never a key of your shell's, sent to the kit's engines
            "OPENAI_API_KEY": connections[0].key if connections else "",
            "DEFAULT_MODELS": connections[0].model if connections else "",
            "ENABLE_OLLAMA_API": "True" if found else "False",
            # a URL even when off: without one Open WebUI probes ports 11434 and 12434 at every start
            "OLLAMA_BASE_URLS": found.base_url if found else OLLAMA_DEFAULT_URL,
        }

    def preflight(self) -> None:
        """Its port and, before its first install, the Python it needs: checked before any engine starts
        (SettingsError naming OPEN_WEBUI_PORT and a free port; MissingTools naming the Python)."""
        problem = open_webui_venv.python_problem()
        if problem:
            raise system.MissingTools(problem)
        if self.running_pid() is None:
            self.server.ensure_port_free(hint=" (an Open WebUI of your own?)")

    def start(self) -> None:
        """Install it if needed, then (re)start it on the connections of now; left as it is when it already runs
        on the same."""
        if not open_webui_venv.VENV.installed() and self.running_pid() is not None:
            console.print("Open WebUI's venv holds another version than the kit pins: stopping it to install that one")
            self.stop(quiet=True)
        open_webui_venv.install(self.settings.torch_index_url)
        found = self.find_ollama()
        env = self.environment(found)
        digest = hashlib.sha256(json.dumps(env, sort_keys=True).encode()).hexdigest()
        before = self.config_path.read_text() if self.config_path.exists() else None
        if self.running_pid() is not None and self.healthy() and before == digest:
            console.print(f"[green]✓[/green] Open WebUI already up (pid {self.running_pid()}); nothing to do")
        else:
            if self.running_pid() is not None:
                console.print("Open WebUI runs on other connections: restarting it on these")
                self.stop(quiet=True)
            self.server.ensure_port_free()
            DATA_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
            DATA_DIR.chmod(0o700)  # your chats: yours alone on a shared machine
            argv = [open_webui_venv.program(), "serve", "--host", LOOPBACK, "--port", str(self.port)]
            full_env = {**os.environ, **env, "WEBUI_SECRET_KEY": secret_key()}
            pid, waited = self.server.launch(
                argv, full_env, START_TIMEOUT_S, "its first start creates its database", progress=startup_phase
            )
            self.config_path.write_text(digest)
            console.print(f"[green]✓[/green] Open WebUI is up in {waited:.0f} s (pid {pid})")
        for line in self.recap_lines(found):
            console.print(line, soft_wrap=True, highlight=False)

    def stop(self, quiet: bool = False) -> bool:
        self.config_path.unlink(missing_ok=True)
        return self.server.stop(quiet)

    def recap_lines(self, found: Ollama | None) -> list[str]:
        engines = ", ".join(f"{c.name} {c.url} ({c.model})" for c in self.engines()) or "none (ENGINES)"
        keyed = " with the kit's key (VLLM_API_KEY)" if self.settings.api_key else ""
        return [
            f"  Open WebUI  {self.base_url} (open-webui {OPEN_WEBUI_VERSION}; no login, on this machine only; "
            f"log {self.log_path.relative_to(ROOT)})",
            f"  talks to    {engines}{keyed}",
            f"  Ollama      {found.base_url} ({found.version}, {len(found.models)} models)"
            if found
            else f"  Ollama      none answered at {', '.join(self.ollama_urls())}",
            f"  chats kept  in {DATA_DIR.relative_to(ROOT)}",
        ]


def startup_phase(log_text: str) -> str:
    """What a start is doing, from its log so far: its database's migrations (the first start runs ~70), then its
    own start-up; before either, it imports its packages."""
    lines = [line for line in log_text.splitlines() if line.strip()]
    started = [line for line in lines if "Waiting for application startup" in line or "Scheduler worker" in line]
    migrations = [line.split("Running upgrade", 1)[1].strip() for line in lines if "Running upgrade" in line]
    if started:
        return "starting its web server"
    if migrations and "alembic" in lines[-1]:
        return f"creating its database: migration {len(migrations)}, {migrations[-1][:60]}"
    if migrations or any("alembic" in line for line in lines):
        return "its database is ready; importing the rest (chat, documents, audio, tools ...)"
    return "importing its packages (a web server, a vector store, document loaders ...)"


def secret_key() -> str:
    """The key Open WebUI signs its session tokens with: made once, kept in the data folder (mode 600)."""
    if not SECRET_KEY_FILE.exists():
        SECRET_KEY_FILE.parent.mkdir(parents=True, exist_ok=True)
        SECRET_KEY_FILE.touch(mode=0o600)
        SECRET_KEY_FILE.write_text(secrets.token_urlsafe(32))
    return SECRET_KEY_FILE.read_text().strip()


def wanted(settings: Settings) -> OpenWebUIRuntime | None:
    """The kit's Open WebUI when OPEN_WEBUI=true, its port checked (before any engine starts)."""
    if not settings.open_webui:
        return None
    runtime = OpenWebUIRuntime(settings)
    runtime.preflight()
    return runtime


def stop(settings: Settings) -> None:
    """Stop the kit's Open WebUI on OPEN_WEBUI_PORT if one runs (down.sh, whatever OPEN_WEBUI says now)."""
    OpenWebUIRuntime(settings).stop()
