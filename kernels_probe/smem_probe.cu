// blackwell-doctor probe kernel: does a launch with this much dynamic shared memory run?
//
// The parent bisects `bytes` between 0 and the per-SM shared memory + 1; for each size it
// sets CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES and launches one block with that
// dynamic shared memory. Thread 0 writes the first and the last byte of the allocation and
// reads them back, so the launch really uses the size it asked for, and reports into
// result[0]: 1 = both bytes read back, 2 = a byte read back wrong. The parent clears
// result[0] before each launch (0 = the kernel did not run).
//
// This is a probe of the GPU's limits, not production code. Compiled at run time by NVRTC.

extern "C" __global__ void smem_probe(unsigned int* result, unsigned int bytes) {
    extern __shared__ unsigned char smem_probe_dynamic[];
    if (threadIdx.x != 0) {
        return;
    }
    unsigned int ok = 1u;
    if (bytes > 0u) {
        volatile unsigned char* smem = smem_probe_dynamic;
        smem[0] = 0xA5u;
        smem[bytes - 1u] = 0x5Au;
        const bool last_ok = smem[bytes - 1u] == 0x5Au;
        const bool first_ok = bytes == 1u || smem[0] == 0xA5u;
        ok = (last_ok && first_ok) ? 1u : 2u;
    }
    result[0] = ok;
}
