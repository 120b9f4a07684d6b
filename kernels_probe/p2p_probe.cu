// blackwell-doctor P2P probe kernels: fill a buffer with a known pattern, count the words
// of a buffer that do not hold it, and (a test seam only) spin on a flag.
//
// The peer-write test launches p2p_fill on GPU A with `out` pointing into GPU B's memory:
// with unified addressing that pointer is valid on A once A's context has enabled peer
// access to B's, so the stores travel over the peer mapping (NVLink or PCIe). p2p_check then
// runs on the GPU that owns the buffer (local reads only) and counts the mismatches.
//
// The pattern is a 32-bit hash of the word index and a seed, so every word differs from its
// neighbours and a copy that lands at the wrong offset, a stale buffer or a zeroed one all
// fail. blackwell_doctor.probe._p2p_child.pattern_word computes the same hash on the host
// for spot checks; keep the two in step.
//
// Buffers are a whole number of 16-byte words-of-four (the parent sizes them in 4 KiB steps).
// This is a probe of the GPU pair, not production code. Compiled at run time by NVRTC.

__device__ __forceinline__ unsigned int p2p_pattern(unsigned long long index, unsigned int seed) {
    unsigned int x = (unsigned int)index * 0x9E3779B1u + seed;
    x ^= (unsigned int)(index >> 32) * 0x85EBCA77u;
    x ^= x >> 15;
    x *= 0x2C1B3C6Du;
    x ^= x >> 12;
    x *= 0x297A2D39u;
    x ^= x >> 15;
    return x;
}

extern "C" __global__ void p2p_fill(uint4* out, unsigned long long quads, unsigned int seed) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long q = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         q < quads; q += stride) {
        const unsigned long long i = q * 4ull;
        out[q] = make_uint4(p2p_pattern(i, seed), p2p_pattern(i + 1ull, seed),
                            p2p_pattern(i + 2ull, seed), p2p_pattern(i + 3ull, seed));
    }
}

// result[0] += mismatching words; result[1] = min(result[1], index of the first bad word).
// The host sets result to {0, ~0ull} before the launch.
extern "C" __global__ void p2p_check(const uint4* in, unsigned long long quads, unsigned int seed,
                                     unsigned long long* result) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long bad = 0ull;
    unsigned long long first = ~0ull;
    for (unsigned long long q = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         q < quads; q += stride) {
        const uint4 v = in[q];
        const unsigned long long i = q * 4ull;
        const unsigned int got[4] = {v.x, v.y, v.z, v.w};
        for (int k = 0; k < 4; ++k) {
            if (got[k] != p2p_pattern(i + (unsigned long long)k, seed)) {
                ++bad;
                if (first == ~0ull) {
                    first = i + (unsigned long long)k;
                }
            }
        }
    }
    if (bad != 0ull) {
        atomicAdd(&result[0], bad);
        atomicMin(&result[1], first);
    }
}

// Test seam (BLACKWELL_DOCTOR_P2P_TEST_HANG=gpu:STAGE): a kernel that waits for a flag that
// nobody sets, so the child blocks inside the driver as a wedged peer transfer would. It
// gives up by itself after max_ns of the GPU's global timer, so a GPU is never left busy
// even if the process could not be killed.
extern "C" __global__ void p2p_spin(const volatile unsigned int* flag, unsigned long long max_ns) {
    unsigned long long start;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    while (*flag == 0u) {
        unsigned long long now;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        if (now - start > max_ns) {
            break;
        }
        __nanosleep(1000);
    }
}
