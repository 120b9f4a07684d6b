// blackwell-doctor probe kernel: a block-scaled (NVFP4) GEMM mainloop laid out in shared
// memory like CUTLASS's SM120 grouped-GEMM SharedStorage.
//
// WHAT THIS IS: a probe of this GPU's limits and tile behaviour, NOT the production kernel.
// It asks the driver whether a block with CUTLASS's shared-storage size and layout launches,
// and gives a relative throughput for tiles of different K at the stage counts that fit. It
// uses no tensor cores, no TMA and no mbarriers: a production NVFP4 kernel is many times
// faster. Compare its numbers with each other, never with a runtime's.
//
// Dynamic shared memory (offsets are kernel parameters, computed by
// blackwell_doctor.probe.plan.storage_layout for the same tile and stage count):
//   a_offset         STAGES x M x K_TILE/2 bytes   packed E2M1 A, two values per byte
//   b_offset         STAGES x N x K_TILE/2 bytes   packed E2M1 B
//   sfa_offset       STAGES x ROWS_A x K_TILE/16   E4M3 scales of A, one per 16 K elements,
//                                                  rows padded to 128 (ROWS_A = align(M,128))
//   sfb_offset       STAGES x COLS_B x K_TILE/16   E4M3 scales of B (COLS_B = align(N,128))
//   tensormap_offset 4 x 128 bytes                 unused here (TMA descriptors in CUTLASS)
//   barrier_offset   STAGES x 16 bytes             unused here (full/empty mbarriers)
//   epilogue_offset  epilogue_bytes                accumulators are staged here before the
//                                                  global write, as an epilogue would
//   ... total_bytes                                the whole request; its last byte, the
//                                                  tensormap and barrier areas are written at
//                                                  the start and checked at the end
//
// Mainloop: a STAGES-deep cp.async ring (one commit group per K tile, STAGES-1 tiles in
// flight) streams k_iterations K tiles from global memory. Each of the 256 threads owns a
// (M/16) x (N/16) piece of the M x N tile: it dequantises its A rows and B columns from
// shared memory (E2M1 nibble decoded exactly, bit-identical to the 16-entry table
// {0, .5, 1, 1.5, 2, 3, 4, 6, -0, -.5, ...}, times the E4M3 scale decoded to float) and
// multiply-accumulates in fp32 registers. Rows of A and B are stored with their 16-byte
// chunks XOR-swizzled so that the column-wise reads hit the same (2-way) bank pattern for
// every K_TILE, and tiles of different K are compared fairly.
//
// Global layout (the probe's own): tile-major, so each stage is one contiguous copy:
//   a[kt][M][K_TILE/2], b[kt][N][K_TILE/2], sfa[kt][ROWS_A][K_TILE/16], sfb[kt][COLS_B][K_TILE/16]
// Nibble order: element 2c is the low nibble of byte c. Every block computes the same tile
// (the probe measures the SM, not the memory system) and writes it to out[blockIdx.x][M][N];
// status[blockIdx.x] = 1 when the guard bytes read back, 2 when not.
//
// Compiled at run time by NVRTC; instantiated through name expressions, e.g.
// "blockscaled_mainloop<128, 128, 64, 3>".

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 800)
#define BWD_HAS_CP_ASYNC 1
#else
#define BWD_HAS_CP_ASYNC 0
#endif

namespace bwd {

constexpr int kThreads = 256;
constexpr int kSfVector = 16;

__device__ __forceinline__ void copy16(unsigned char* dst_smem, const unsigned char* src) {
#if BWD_HAS_CP_ASYNC
    const unsigned int dst = static_cast<unsigned int>(__cvta_generic_to_shared(dst_smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
#else
    *reinterpret_cast<uint4*>(dst_smem) = *reinterpret_cast<const uint4*>(src);
#endif
}

__device__ __forceinline__ void commit_group() {
#if BWD_HAS_CP_ASYNC
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}

template <int N>
__device__ __forceinline__ void wait_group() {
#if BWD_HAS_CP_ASYNC
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// Which 16-byte chunk of a row holds logical chunk `chunk` (XOR swizzle, see the header).
template <int ROW_BYTES>
__device__ __forceinline__ int swizzled_chunk(int row, int chunk) {
    constexpr int kChunks = ROW_BYTES / 16;
    constexpr int kPeriod = kChunks >= 8 ? 1 : 8 / kChunks;
    return chunk ^ ((row / kPeriod) % kChunks);
}

// Copy one K tile of ROWS rows (ROW_BYTES each) into shared memory, swizzled.
template <int ROWS, int ROW_BYTES>
__device__ __forceinline__ void load_rows(unsigned char* dst, const unsigned char* src) {
    constexpr int kChunks = ROW_BYTES / 16;
    for (int c = threadIdx.x; c < ROWS * kChunks; c += kThreads) {
        const int row = c / kChunks;
        const int chunk = swizzled_chunk<ROW_BYTES>(row, c % kChunks);
        copy16(dst + row * ROW_BYTES + chunk * 16, src + c * 16);
    }
}

// Copy BYTES contiguous bytes (scale tiles) into shared memory.
template <int BYTES>
__device__ __forceinline__ void load_flat(unsigned char* dst, const unsigned char* src) {
    for (int c = threadIdx.x; c < BYTES / 16; c += kThreads) {
        copy16(dst + c * 16, src + c * 16);
    }
}

// Word `word` (8 nibbles = 8 K elements) of row `row` of a swizzled tile.
template <int ROW_BYTES>
__device__ __forceinline__ unsigned int load_word(const unsigned char* tile, int row, int word) {
    const int chunk = swizzled_chunk<ROW_BYTES>(row, word >> 2);
    return *reinterpret_cast<const unsigned int*>(tile + row * ROW_BYTES + chunk * 16 +
                                                  (word & 3) * 4);
}

// E2M1 (1 sign, 2 exponent bits with bias 1, 1 mantissa bit) to float, exactly.
__device__ __forceinline__ float e2m1(unsigned int nibble) {
    const unsigned int mag = nibble & 7u;
    // mag >= 2: 2^(e-1) * (1 + m/2): exponent field e + 126, mantissa bit 22.
    unsigned int bits = (mag << 22) + (126u << 23);
    bits = mag >= 2u ? bits : (mag == 1u ? 0x3F000000u : 0u);  // 0.5 and 0 (subnormal)
    return __uint_as_float(bits | ((nibble & 8u) << 28));
}

// E4M3 (bias 7, 3 mantissa bits, subnormals) to float, exactly; the probe's data has no NaN.
__device__ __forceinline__ float e4m3(unsigned int byte) {
    const float raw = __uint_as_float(((byte & 0x7Fu) << 20) | ((byte & 0x80u) << 24));
    return raw * 0x1p120f;  // raw is the value times 2^-120 (a float subnormal when e = 0)
}

// Write kSlabs staged 16 x 16 slabs ([slab][row][col]) as 16 rows of 16*kSlabs columns.
template <int N, int kSlabs>
__device__ __noinline__ void flush_slabs(const float* epi, float* out_rows) {
    constexpr int kWidth = 16 * kSlabs;
    for (int e = threadIdx.x; e < 16 * kWidth; e += kThreads) {
        const int row = e / kWidth;
        const int col = e % kWidth;
        out_rows[row * N + col] = epi[(col / 16) * kThreads + row * 16 + (col % 16)];
    }
}

}  // namespace bwd

template <int M, int N, int K_TILE, int STAGES>
__global__ void __launch_bounds__(256, 1) blockscaled_mainloop(
    const unsigned char* __restrict__ a, const unsigned char* __restrict__ b,
    const unsigned char* __restrict__ sfa, const unsigned char* __restrict__ sfb,
    float* __restrict__ out, unsigned int* __restrict__ status, int k_iterations,
    unsigned int a_offset, unsigned int b_offset, unsigned int sfa_offset,
    unsigned int sfb_offset, unsigned int tensormap_offset, unsigned int barrier_offset,
    unsigned int epilogue_offset, unsigned int epilogue_bytes, unsigned int total_bytes) {
    using namespace bwd;
    static_assert(M % 16 == 0 && N % 16 == 0, "M and N are multiples of 16");
    static_assert(K_TILE % 32 == 0, "K_TILE covers whole 16-byte chunks of A and B rows");
    static_assert(STAGES >= 1, "at least one stage");
    constexpr int kRowBytes = K_TILE / 2;
    constexpr int kSfK = K_TILE / kSfVector;
    constexpr int kRowsA = (M + 127) / 128 * 128;
    constexpr int kColsB = (N + 127) / 128 * 128;
    constexpr int kABytes = M * kRowBytes;
    constexpr int kBBytes = N * kRowBytes;
    constexpr int kSfaBytes = kRowsA * kSfK;
    constexpr int kSfbBytes = kColsB * kSfK;
    static_assert(kSfaBytes % 16 == 0 && kSfbBytes % 16 == 0, "scale tiles copy in 16 bytes");
    constexpr int TM = M / 16;
    constexpr int TN = N / 16;

    extern __shared__ __align__(1024) unsigned char smem[];
    unsigned char* s_a = smem + a_offset;
    unsigned char* s_b = smem + b_offset;
    unsigned char* s_sfa = smem + sfa_offset;
    unsigned char* s_sfb = smem + sfb_offset;
    volatile unsigned char* guard_last = smem + (total_bytes - 1u);
    volatile unsigned int* guard_tensormap =
        reinterpret_cast<volatile unsigned int*>(smem + tensormap_offset);
    volatile unsigned int* guard_barrier =
        reinterpret_cast<volatile unsigned int*>(smem + barrier_offset);
    if (threadIdx.x == 0) {
        *guard_last = 0x5Au;
        *guard_tensormap = 0x7E450001u;
        guard_barrier[STAGES * 4 - 1] = 0xBA550002u;  // last word of the barrier area
    }

    const int tx = threadIdx.x % 16;
    const int ty = threadIdx.x / 16;

    auto issue = [&](int kt) {
        const int stage = kt % STAGES;
        load_rows<M, kRowBytes>(s_a + stage * kABytes, a + static_cast<size_t>(kt) * kABytes);
        load_rows<N, kRowBytes>(s_b + stage * kBBytes, b + static_cast<size_t>(kt) * kBBytes);
        load_flat<kSfaBytes>(s_sfa + stage * kSfaBytes, sfa + static_cast<size_t>(kt) * kSfaBytes);
        load_flat<kSfbBytes>(s_sfb + stage * kSfbBytes, sfb + static_cast<size_t>(kt) * kSfbBytes);
    };

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i) {
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            acc[i][j] = 0.0f;
        }
    }

    auto compute = [&](int stage) {
        const unsigned char* t_a = s_a + stage * kABytes;
        const unsigned char* t_b = s_b + stage * kBBytes;
        const unsigned char* t_sfa = s_sfa + stage * kSfaBytes;
        const unsigned char* t_sfb = s_sfb + stage * kSfbBytes;
#pragma unroll 1
        for (int s = 0; s < kSfK; ++s) {
            float sa[TM];
            float sb[TN];
#pragma unroll
            for (int i = 0; i < TM; ++i) {
                sa[i] = e4m3(t_sfa[(ty + 16 * i) * kSfK + s]);
            }
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                sb[j] = e4m3(t_sfb[(tx + 16 * j) * kSfK + s]);
            }
#pragma unroll 1
            for (int w = 0; w < 2; ++w) {
                unsigned int aw[TM];
                unsigned int bw[TN];
#pragma unroll
                for (int i = 0; i < TM; ++i) {
                    aw[i] = load_word<kRowBytes>(t_a, ty + 16 * i, 2 * s + w);
                }
#pragma unroll
                for (int j = 0; j < TN; ++j) {
                    bw[j] = load_word<kRowBytes>(t_b, tx + 16 * j, 2 * s + w);
                }
#pragma unroll 2
                for (int kk = 0; kk < 8; ++kk) {
                    float av[TM];
                    float bv[TN];
#pragma unroll
                    for (int i = 0; i < TM; ++i) {
                        av[i] = e2m1((aw[i] >> (4 * kk)) & 15u) * sa[i];
                    }
#pragma unroll
                    for (int j = 0; j < TN; ++j) {
                        bv[j] = e2m1((bw[j] >> (4 * kk)) & 15u) * sb[j];
                    }
#pragma unroll
                    for (int i = 0; i < TM; ++i) {
#pragma unroll
                        for (int j = 0; j < TN; ++j) {
                            acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
                        }
                    }
                }
            }
        }
    };

    if constexpr (STAGES == 1) {
        for (int kt = 0; kt < k_iterations; ++kt) {
            issue(kt);
            commit_group();
            wait_group<0>();
            __syncthreads();
            compute(0);
            __syncthreads();
        }
    } else {
        // Prologue: STAGES-1 tiles in flight.
#pragma unroll 1
        for (int kt = 0; kt < STAGES - 1; ++kt) {
            if (kt < k_iterations) {
                issue(kt);
            }
            commit_group();
        }
#pragma unroll 1
        for (int kt = 0; kt < k_iterations; ++kt) {
            wait_group<STAGES - 2>();  // tile kt has landed (this thread's copies)
            __syncthreads();           // ... everyone's, and stage kt-1 is free again
            const int next = kt + STAGES - 1;
            if (next < k_iterations) {
                issue(next);  // into the stage that tile kt-1 used
            }
            commit_group();  // always, so the group count stays in step
            compute(kt % STAGES);
        }
        wait_group<0>();
    }

    // Epilogue: stage up to kSlabs 16 x 16 slabs of accumulators (8 KiB) through the
    // epilogue region, then write rows of the output tile, consecutive threads on
    // consecutive columns. Without 8 KiB of epilogue storage, write straight out.
    constexpr int kSlabs = TN < 8 ? TN : 8;
    static_assert(TN % kSlabs == 0, "whole slab groups");
    __syncthreads();
    float* epi = reinterpret_cast<float*>(smem + epilogue_offset);
    float* out_tile = out + static_cast<size_t>(blockIdx.x) * M * N;
    const bool staged = epilogue_bytes >= kSlabs * kThreads * sizeof(float);
#pragma unroll
    for (int i = 0; i < TM; ++i) {
#pragma unroll
        for (int j0 = 0; j0 < TN; j0 += kSlabs) {
            if (staged) {
#pragma unroll
                for (int j = 0; j < kSlabs; ++j) {
                    epi[j * kThreads + threadIdx.x] = acc[i][j0 + j];
                }
                __syncthreads();
                flush_slabs<N, kSlabs>(epi, out_tile + 16 * i * N + 16 * j0);
                __syncthreads();
            } else {
#pragma unroll
                for (int j = 0; j < kSlabs; ++j) {
                    out_tile[(ty + 16 * i) * N + tx + 16 * (j0 + j)] = acc[i][j0 + j];
                }
            }
        }
    }

    if (threadIdx.x == 0) {
        const bool ok = *guard_last == 0x5Au && *guard_tensormap == 0x7E450001u &&
                        guard_barrier[STAGES * 4 - 1] == 0xBA550002u;
        status[blockIdx.x] = ok ? 1u : 2u;
    }
}
