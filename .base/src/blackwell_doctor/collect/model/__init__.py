"""A model directory read without its weights: config.json, the quantization
description, safetensors headers.
"""
