"""The bench client: an OpenAI-compatible server measured over HTTP (streamed
requests, the server's /metrics), and the GPU sampler of a soak.
"""
