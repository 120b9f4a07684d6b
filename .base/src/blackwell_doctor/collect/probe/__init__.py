"""Probes: what this GPU actually grants, measured with kernels compiled at run time
(NVRTC) in child processes with deadlines.
"""
