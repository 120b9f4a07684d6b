"""Importing this module registers every check family."""

from blackwell_doctor.rules import driver, gpu, logs, p2p, pci, platform, probe  # noqa: F401
