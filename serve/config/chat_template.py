"""The served model's own chat template, the tool-call format it teaches, and the kit's template where it teaches none.

vLLM serves tool calls only with a parser for the format the model writes them in (`--tool-call-parser`), and the
model writes that format only if its chat template shows it how (it lists the tools and the call syntax). A model
whose template has a tool format keeps it; a ChatML model whose template has none (the bundled SmolLM2) gets the
kit's Hermes turns (serve/engine_plugins/hermes_tools_chatml.jinja) for conversations that carry tools, composed
with its own template for every other conversation, which therefore renders exactly as before. The bundled model's
composed template is a file of the kit (serve/engine_plugins/, which the Docker images carry too); a MODEL_PATH
model's is written at its start.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from serve.config.paths import CACHE_DIR, ROOT

HERMES = "hermes"  # vLLM's parser for <tool_call>{"name": ..., "arguments": ...}</tool_call>
# The marker a template writes for a tool call -> vLLM's parser for that format (checked in vLLM 0.32's tool_parsers/)
TOOL_FORMAT_MARKERS = (
    ("<tool_call>", HERMES),  # Hermes, Qwen2.5, and ChatML models trained on them
    ("<|python_tag|>", "llama3_json"),  # Llama 3.1 / 3.2
    ("[TOOL_CALLS]", "mistral"),
)
CHATML_MARKER = "<|im_start|>"
PLUGINS = ROOT / "serve" / "engine_plugins"
KIT_TEMPLATES = {HERMES: PLUGINS / "hermes_tools_chatml.jinja"}  # parser -> the kit's turns teaching its format
BUNDLED_CHAT_TEMPLATE = ROOT / "serve" / "bundled-model-chat-template.jinja"  # a copy of the bundled model's own
BUNDLED_TOOLS_TEMPLATE = PLUGINS / "smollm2_hermes_tools.jinja"  # compose(the bundled model's own, HERMES)
COMPOSED_DIR = CACHE_DIR / "chat-templates"  # composed once per model template, shared by the clones on a machine


@dataclass(frozen=True, slots=True)
class ChatTemplate:
    """What a model's own chat template says about tool calls: `text` is the template itself."""

    text: str

    @property
    def tool_format(self) -> str | None:
        """vLLM's parser for the tool-call format the template teaches; None: none the kit recognizes."""
        return next((parser for marker, parser in TOOL_FORMAT_MARKERS if marker in self.text), None)

    @property
    def renders_tools(self) -> bool:
        """Whether it puts a request's `tools` in the prompt at all (in a format the kit may not recognize)."""
        return "tools" in self.text

    @property
    def chatml(self) -> bool:
        return CHATML_MARKER in self.text


def model_chat_template(folder: Path) -> ChatTemplate | None:
    """A checkpoint folder's own template: chat_template.jinja (newer transformers), else tokenizer_config.json's
    chat_template (a string, or a list of named ones: the `default`); None when it has neither."""
    standalone = folder / "chat_template.jinja"
    if standalone.exists():
        return ChatTemplate(standalone.read_text())
    config = folder / "tokenizer_config.json"
    if not config.exists():
        return None
    template = json.loads(config.read_text()).get("chat_template")
    if isinstance(template, list):
        template = next((item["template"] for item in template if item.get("name") == "default"), None)
    return ChatTemplate(template) if isinstance(template, str) else None


# True when the conversation has tools, a tool result or a call the assistant made: the kit's turns render it
HAS_TOOL_TURNS = """{%- set kit_tools = namespace(found=(tools is defined and tools)) %}
{%- for message in messages %}
    {%- if message.role == "tool" or (message.tool_calls is defined and message.tool_calls) %}
        {%- set kit_tools.found = true %}
    {%- endif %}
{%- endfor %}
"""


def compose(own: ChatTemplate, parser: str) -> str:
    """The model's own template for a conversation without tools, the kit's turns for `parser` for one with them."""
    turns = KIT_TEMPLATES[parser].read_text()
    return f"{HAS_TOOL_TURNS}{{%- if kit_tools.found %}}\n{turns}{{%- else %}}\n{own.text}{{%- endif %}}\n"


def bundled_chat_template() -> ChatTemplate:
    return ChatTemplate(BUNDLED_CHAT_TEMPLATE.read_text())


def composed_template_file(own: ChatTemplate, parser: str) -> Path:
    """compose(own, parser) as a file vLLM reads (`--chat-template`): the kit's own for the bundled model, else
    written once, named by what it is made of (a changed part is a new file), atomically (clones share it)."""
    text = compose(own, parser)
    if own == bundled_chat_template() and parser == HERMES:
        return BUNDLED_TOOLS_TEMPLATE
    path = COMPOSED_DIR / f"{parser}-{hashlib.sha256(text.encode()).hexdigest()[:16]}.jinja"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{hashlib.sha256(str(ROOT).encode()).hexdigest()[:8]}.tmp")
        partial.write_text(text)
        partial.replace(path)
    return path
