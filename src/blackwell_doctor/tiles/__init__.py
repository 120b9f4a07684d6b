"""NVFP4 MoE GEMM tiles: CUTLASS's shared-memory arithmetic and the tile catalogue.

Pure (no GPU, no child process): the checks, ``probe --plan`` and the probe children all
use it, so it lives outside the impure :mod:`blackwell_doctor.probe` package.
"""
