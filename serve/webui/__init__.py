"""A chat UI on the kit's engines: Open WebUI natively, from its own venv (open_webui.py); compose's `webui` profile
runs its image."""
