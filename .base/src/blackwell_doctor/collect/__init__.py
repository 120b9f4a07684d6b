"""Everything that reads the world: the host (procfs, sysfs, NVML, the CUDA driver), the
probes, the logs, a model directory, the bench client, and the user's files."""
