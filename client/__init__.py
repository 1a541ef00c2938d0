"""TALK: an OpenAI-SDK client; the engine is chosen by OPENAI_BASE_URL and MODEL alone."""
