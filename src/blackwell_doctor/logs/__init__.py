"""Runtime and kernel log scanning: the catalogue (checks/log_signatures.toml), the matcher,
the context rules, the sources and the ``scan-logs`` report."""
