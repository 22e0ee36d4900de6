"""A miniature of a vLLM tensor-parallel server, used to record real GPU crash output."""
