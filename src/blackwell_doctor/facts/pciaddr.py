"""PCI addresses: one spelling for NVML, CUDA and sysfs (pure, shared by collectors and rules)."""

from __future__ import annotations

import functools


# Pure, and asked again for every GPU of every node of a fleet (the health, link, gpu and
# collective checks): a fleet's machines share their bus ids.
@functools.lru_cache(maxsize=4096)
def normalize_pci_bus_id(bus_id: str) -> str:
    """NVML's ``00000000:41:00.0`` and CUDA's ``0000:41:00.0`` → sysfs's ``0000:41:00.0``.

    Lower-case, domain at least four hex digits (sysfs prints VMD domains as ``10000``), so
    NVML, CUDA and the PCI collector name a GPU the same way. Anything unparsable is
    returned stripped but otherwise as given.
    """
    text = bus_id.strip()
    try:
        domain, bus, rest = text.split(":")
        device, function = rest.split(".")
        return (
            f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{int(function, 16):x}"
        )
    except ValueError:
        return text
