"""TALK: everything that talks to an engine: the endpoint, its models check, request timing, /metrics."""
