"""blackwell-doctor: is this GPU inference host on the fast path for NVFP4 MoE serving?"""

__version__ = "0.1.0"
TOOL_NAME = "blackwell-doctor"
