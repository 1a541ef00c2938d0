"""The engine-comparison lab: sequential vs concurrent, the same model on vLLM and the llama.cpp server."""
