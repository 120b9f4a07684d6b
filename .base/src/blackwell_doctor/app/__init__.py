"""The flows, one per command: obtain the facts, run the checks or the measurement,
build the document. Above ``apply`` (the actions), ``render`` and everything below.
"""
