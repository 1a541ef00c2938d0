#!/usr/bin/env bash
# Bring up vLLM serving the model on the OpenAI /v1 API, as .env says (created from .env.example).
# Everything is in Python (serve/); this only makes sure the light tools exist, then hands over.
set -euo pipefail
cd "$(dirname "$0")"

if [ ! -f .env ]; then
  install -m 600 .env.example .env  # it may come to hold VLLM_API_KEY: readable by you alone
  echo "Created .env from .env.example (edit it to change the engine's settings)"
fi
bash serve/light-tools.sh
exec .venv/bin/python -m serve up "$@"
