"""Probes: what this GPU actually grants, measured with kernels compiled at run time."""
