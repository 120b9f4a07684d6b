"""Importing this module registers every check family."""

from blackwell_doctor.rules import (  # noqa: F401
    bar1,
    checkpoint,
    collective,
    driver,
    gpu,
    health,
    link,
    logs,
    memory,
    module,
    p2p,
    pci,
    platform,
    probe,
    serving,
    stack,
)
