"""CUTLASS's limits that the probe checks read without planning a tile (ruledata/tileplan.py
plans them: its dataclasses cost ~3 ms of import a check does not need)."""

# sm120_blockscaled_mma_array_tma.hpp: static_assert(DispatchPolicy::Stages >= 2).
MIN_STAGES = 2
