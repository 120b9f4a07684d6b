"""``bench``: serving performance of an OpenAI-compatible server, measured the way
``vllm bench serve`` measures it, with reasoning tokens kept apart, output equivalence and
the server's own counters beside the client's. Nothing here prints; the CLI does."""
