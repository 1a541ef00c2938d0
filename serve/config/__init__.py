"""Configuration and planning: the settings (`.env` and the shell), the machine, the model's facts, the KV
sizing, vLLM's command line, and the preflight that refuses what vLLM could not start with. Pure: nothing here
starts a process."""
