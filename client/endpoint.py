"""The engine a tool talks to: its OpenAI /v1 URL, model and key, and the one check that it serves the model.

The client builds one from `.env`, the labs and benchmarks from their flags; every one of them asks
`models()` or `check()` before sending anything, so "cannot reach", "key refused" and "model not served"
are worded here once. (GuideLLM's `backends/backend.py` and vLLM's `get_first_model_from_server` play
this part there.) Timing a request is `client/stream.py`'s job, reading /metrics
`serve/processes/metrics.py`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import httpx

from client.keys import api_key_for, refused_key_hint
from ui.environment import load_env

DEFAULT_BASE_URL = "http://127.0.0.1:8009/v1"
ENDPOINT_SPEC = "NAME=URL[@MODEL]"  # an engine on a lab's command line (--endpoint), any OpenAI-compatible one
MODELS_TIMEOUT_S = 10.0
KEY_REFUSED = (401, 403)


class EndpointError(RuntimeError):
    """The engine cannot be used as configured; the one-line message says what to change."""


@dataclass(frozen=True, slots=True)
class ServedModel:
    """One entry of /v1/models. vLLM lists its max_model_len and the folder it loaded (root); other engines do not."""

    id: str
    max_model_len: int | None = None
    root: str = ""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """An OpenAI-compatible engine as a client sees it.

    The `*_source` fields name the setting each value came from (as `key_source` does for the key), so that
    an error names the one to change: OPENAI_BASE_URL for the client, --url for the doctor, LLAMACPP_PORT
    for the comparison's llama.cpp.
    """

    name: str  # the label in reports and progress lines
    base_url: str  # the OpenAI /v1 URL, e.g. http://127.0.0.1:8009/v1
    model: str  # "" when not named (the load tester then takes the first one listed)
    api_key: str = ""  # "" when none is sent
    key_source: str = ""  # the variable the key came from ("" when none was set)
    kind: str = ""  # which of the kit's engines it is ("vllm", "llamacpp"); "" for any other or unknown
    url_source: str = "OPENAI_BASE_URL"
    model_source: str = "MODEL"
    # behind the kit's router (REPLICAS > 1): the replicas' server roots, whose /metrics add up to this engine's
    replica_urls: tuple[str, ...] = ()

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, base_url: str | None = None, model: str | None = None, **sources: str
    ) -> Endpoint:
        """The configured engine: OPENAI_BASE_URL and MODEL (else MODEL_NAME, else with MODEL_PATH the model it lists)
        from the environment or `.env`,
        unless a flag gave `base_url` or `model`."""
        env = load_env() if env is None else env
        return cls.at(
            "engine",
            base_url or env.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL,
            # with MODEL_PATH, MODEL_NAME may be left at the bundled model's while the engine serves the model under
            # its own name (serve/config/settings.py): the one model the engine lists is the one
            model or env.get("MODEL") or ("" if env.get("MODEL_PATH") else env.get("MODEL_NAME", "")),
            env,
            **sources,
        )

    @classmethod
    def at(
        cls,
        name: str,
        base_url: str,
        model: str = "",
        env: Mapping[str, str] | None = None,
        *,
        kind: str = "",
        url_source: str = "OPENAI_BASE_URL",
        model_source: str = "MODEL",
    ) -> Endpoint:
        """An engine at a given URL, with the key the kit sends there (serve.config.settings.api_key_for)."""
        env = load_env() if env is None else env
        base_url = base_url.rstrip("/")
        key, key_source = api_key_for(base_url, env)
        return cls(name, base_url, model, key or "", key_source, kind, url_source, model_source)

    @classmethod
    def from_spec(cls, spec: str, env: Mapping[str, str] | None = None, url_source: str = "--endpoint") -> Endpoint:
        """An engine named on a command line as NAME=URL[@MODEL] (ENDPOINT_SPEC), e.g.
        ollama=http://127.0.0.1:11434/v1@smollm2:135m; ValueError (one line, with an example) for anything else."""
        name, sep, rest = spec.partition("=")
        url, _, model = rest.partition("@")
        if not sep or not name.strip() or not url.startswith(("http://", "https://")):
            raise ValueError(
                f"--endpoint {spec!r} is invalid: write {ENDPOINT_SPEC}, e.g. "
                "ollama=http://127.0.0.1:11434/v1@smollm2:135m"
            )
        return cls.at(name.strip(), url, model, env, url_source=url_source)

    def or_first_served(self) -> Endpoint:
        """This engine with its model, or, where none was named, the first its /v1/models lists."""
        if self.model:
            return self
        served = self.models()
        if not served:
            raise EndpointError(f"{self.base_url}/models lists no model: name one, as in {ENDPOINT_SPEC}")
        return replace(self, model=served[0].id)

    @property
    def root_url(self) -> str:
        """The server root, where /metrics, /health and /version live."""
        return self.base_url.rstrip("/").removesuffix("/v1")

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def models(self, timeout_s: float = MODELS_TIMEOUT_S) -> list[ServedModel]:
        """GET /v1/models: what the engine serves; EndpointError when it cannot tell (unreachable, key refused,
        not an OpenAI model list)."""
        try:
            response = httpx.get(f"{self.base_url}/models", headers=self.headers, timeout=timeout_s)
        except httpx.HTTPError as exc:
            raise self.unreachable(exc) from None
        if response.status_code in KEY_REFUSED:
            raise self.refused()
        not_a_list = EndpointError(
            f"{self._who} at {self.base_url}/models answered HTTP {response.status_code}; "
            "is that an OpenAI-compatible engine?"
        )
        if response.status_code != httpx.codes.OK:
            raise not_a_list
        try:
            return [
                ServedModel(str(entry["id"]), _whole_number(entry.get("max_model_len")), str(entry.get("root") or ""))
                for entry in response.json().get("data", [])
            ]
        except (ValueError, TypeError, KeyError, AttributeError):  # not JSON, or not a list of models
            raise not_a_list from None

    def check(self, timeout_s: float = MODELS_TIMEOUT_S) -> list[ServedModel]:
        """models(), and EndpointError unless this endpoint's model is among them."""
        served = self.models(timeout_s)
        if self.model not in [model.id for model in served]:
            raise self.not_served([model.id for model in served])
        return served

    @property
    def _who(self) -> str:
        return self.kind or "an engine"

    def unreachable(self, exc: Exception) -> EndpointError:
        start = f"it with `ENGINES={self.kind} bash up.sh`" if self.kind else "vLLM with `bash up.sh`"
        return EndpointError(
            f"cannot reach {self._who} at {self.base_url} ({exc.__class__.__name__}). Is it up? "
            f"Start {start}, or point {self.url_source} at a running engine"
        )

    def refused(self) -> EndpointError:
        hint = refused_key_hint(self.base_url, self.key_source)
        return EndpointError(f"{self.kind}: {hint}" if self.kind else hint)

    def not_served(self, served: list[str]) -> EndpointError:
        listing = ", ".join(served) or "(none listed)"
        if self.kind:  # one of the kit's engines: something else may hold its port
            return EndpointError(
                f"{self.kind} at {self.base_url} does not serve model {self.model!r}; it serves: "
                f"{listing}. Set {self.model_source} to one of them or start the kit's engine on "
                "that port"
            )
        return EndpointError(
            f"{self.model_source}={self.model!r} is not served by {self.base_url}; it serves: "
            f"{listing}. Set {self.model_source} to one of them"
        )


def _whole_number(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def named_endpoints(
    specs: Sequence[str], env: Mapping[str, str], beside: Sequence[Endpoint] = (), api_key: str | None = None
) -> list[Endpoint]:
    """The engines named on a command line (--endpoint ENDPOINT_SPEC, repeatable), each with its model (the first it
    lists where the spec names none) and `api_key` (--api-key) where given; EndpointError for a malformed spec or a
    name already taken, by `beside` (the kit's engines the lab also runs) or by an earlier spec."""
    taken = {endpoint.name for endpoint in beside}
    named: list[Endpoint] = []
    for spec in specs:
        try:
            endpoint = Endpoint.from_spec(spec, env)
        except ValueError as exc:
            raise EndpointError(str(exc)) from None
        if api_key is not None:
            endpoint = replace(endpoint, api_key=api_key, key_source="--api-key")
        if endpoint.name in taken:
            raise EndpointError(f"two engines are both called {endpoint.name!r}: name --endpoint {spec!r} otherwise")
        taken.add(endpoint.name)
        named.append(endpoint.or_first_served())
    return named
