"""The facts documents (what was read from a host), the error type for bad input and
the one redaction module. The bottom layer: imports nothing of the package above it.
"""
