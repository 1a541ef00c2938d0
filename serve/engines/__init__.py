"""The engines: one `Runtime` shape (runtime.py) and the registry that picks one (runtimes.py); native vLLM, the
Docker CPU and GPU tracks, llama.cpp, llama-server, and the vLLM router in front of native replicas."""
