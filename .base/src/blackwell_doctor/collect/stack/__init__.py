"""The Python GPU stack a runtime will load: its packages (from package metadata, never
imported), the GPU code targets inside their shared objects (ELF section and fatbin
headers only), and the ptxas Triton will compile with. Judged by ``rules.stack``."""
