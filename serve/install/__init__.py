"""Installing: the system packages a runtime needs (system.py), venvs made with the user's pip configuration
(venv.py, pip_config.py) and torch's CPU build for those that need torch (torch_cpu.py), each engine's own install
(vllm_venv.py, llamacpp_venv.py, llama_server_build.py, router_venv.py), Open WebUI's (open_webui_venv.py), and the
bundled model's checkpoints (checkpoints.py, running prepare_model.py and quantize.py in the vLLM venv). An engine
module (serve/engines/) names what it needs from here; the installing is done here."""
