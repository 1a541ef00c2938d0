"""Installing: the system packages a runtime needs, venvs made with the user's pip configuration, the bundled
model prepared from its GGUF, and its int8 checkpoint (the two checkpoint scripts run in the vLLM venv)."""
