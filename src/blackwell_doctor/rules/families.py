"""Importing this module registers every check family."""

from blackwell_doctor.rules import (  # noqa: F401
    checkpoint,
    driver,
    gpu,
    logs,
    p2p,
    pci,
    platform,
    probe,
    serving,
    stack,
)
