"""ui/environment.py's, for labs/contract/__main__.py, which imports it from here until the tool-calling work lands."""

from ui.environment import load_env

__all__ = ["load_env"]
