"""Read a model directory (config.json, the quantization description, safetensors headers)
without reading its weights, and size it against the GPUs in the facts.

Named ``checkpoint`` to keep it apart from ``rules.model`` (the check results' model).
"""
