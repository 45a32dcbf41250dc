// Tests of the cube-core (AIC) emulation: a correct cube kernel computing C = A * B for half,
// bf16 and float against a host reference, a K-split across blocks combined by atomic Fixpipe
// stores, the exact ND -> NZ layout, and one kernel per broken rule that must be reported as an
// AI Core error naming it; plus the compile-time dtype rules of Mmad.
//
// Build and run (from ascend-emulator/, one line):
//   g++ -std=c++17 -Wall -Wextra -Werror -I ascendc/include ascendc/src/runner.cpp
//       ascendc/tests/cube_test.cpp ascendc/tests/fake_host.cpp -o /tmp/cube && /tmp/cube
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "harness.h"

using namespace AscendC;

namespace {

constexpr uint32_t RoundUp(uint32_t v, uint32_t a) { return (v + a - 1) / a * a; }

template <class T>
constexpr uint32_t C0 = 32 / sizeof(T);

template <class T>
const char* dtype() { return ascendc_emu::type_name<T>(); }

}  // namespace

// =================================================================================================
// A correct cube kernel: each block computes m rows of C = A * B (A row-major m x k per block; B
// either k x n row-major, or n x k rows: keys as rows, the decode-attention recipe), K in steps of
// kStep: the first Mmad initialises L0C, the others accumulate. C leaves through Fixpipe as float
// and as half or bf16 (and, for float inputs, the first column block in NZ layout).
// =================================================================================================

struct CubeMatmulTiling {
    uint16_t m, n, k;
    uint16_t kStep;  // a multiple of 16
    bool bRows;      // B given as n x k rows
};

template <class T, class Low>
class CubeMatmulKernel {
public:
    __aicore__ inline void Init(GM_ADDR a, GM_ADDR b, GM_ADDR cF, GM_ADDR cLow, GM_ADDR cNz, const CubeMatmulTiling& t,
                                TPipe* pipe)
    {
        m = t.m;
        n = t.n;
        k = t.k;
        kStep = t.kStep;
        bRows = t.bRows;
        mp = RoundUp(m, 16);
        np = RoundUp(n, 16);
        kp = RoundUp(k, C0<T>);
        kRows = RoundUp(k, 16);
        const uint32_t row0 = static_cast<uint32_t>(GetBlockIdx()) * m;
        aGm.SetGlobalBuffer((__gm__ T*)a + row0 * k, m * k);
        bGm.SetGlobalBuffer((__gm__ T*)b, n * k);
        cFGm.SetGlobalBuffer((__gm__ float*)cF + row0 * n, m * n);
        cLowGm.SetGlobalBuffer((__gm__ Low*)cLow + row0 * n, m * n);
        cNzGm.SetGlobalBuffer((__gm__ float*)cNz + row0 * 16, m * 16);
        pipe->InitBuffer(qA1, 1, mp * kp * sizeof(T));
        pipe->InitBuffer(qB1, 1, (bRows ? np * kp : kRows * np) * sizeof(T));
        pipe->InitBuffer(qA2, 2, mp * kStep * sizeof(T));
        pipe->InitBuffer(qB2, 2, kStep * np * sizeof(T));
        pipe->InitBuffer(qC, 1, mp * np * sizeof(float));
    }

    __aicore__ inline void Process()
    {
        CopyIn();
        LocalTensor<T> a1 = qA1.DeQue<T>();
        LocalTensor<T> b1 = qB1.DeQue<T>();
        LocalTensor<float> c = qC.AllocTensor<float>();
        for (uint32_t k0 = 0; k0 < k; k0 += kStep) {
            const uint32_t kc = k - k0 < kStep ? k - k0 : kStep;
            SplitA(a1, k0, kc);
            SplitB(b1, k0, kc);
            LocalTensor<T> a2 = qA2.DeQue<T>();
            LocalTensor<T> b2 = qB2.DeQue<T>();
            MmadParams p;
            p.m = static_cast<uint16_t>(m);
            p.n = static_cast<uint16_t>(n);
            p.k = static_cast<uint16_t>(kc);
            p.cmatrixInitVal = k0 == 0;
            Mmad(c, a2, b2, p);
            // The next step accumulates onto this result: a small one needs the M pipe ordered
            // first (cube-api.md §4.4, catlass's threshold).
            if ((m / 16) * (n / 16) < 10) {
                PipeBarrier<PIPE_M>();
            }
            qA2.FreeTensor(a2);
            qB2.FreeTensor(b2);
        }
        qC.EnQue(c);
        qA1.FreeTensor(a1);
        qB1.FreeTensor(b1);
        CopyOut();
    }

private:
    __aicore__ inline void CopyIn()
    {
        LocalTensor<T> a1 = qA1.AllocTensor<T>();
        DataCopy(a1, aGm, Nd2NzParams(1, m, k, 0, k, mp, 1, 0));
        qA1.EnQue(a1);
        LocalTensor<T> b1 = qB1.AllocTensor<T>();
        if (bRows) {
            DataCopy(b1, bGm, Nd2NzParams(1, n, k, 0, k, np, 1, 0));
        } else {
            DataCopy(b1, bGm, Nd2NzParams(1, k, n, 0, n, kRows, 1, 0));
        }
        qB1.EnQue(b1);
    }

    // A's columns [k0, k0 + kc) of the zN tile to zZ: one load per row of fractals.
    __aicore__ inline void SplitA(const LocalTensor<T>& a1, uint32_t k0, uint32_t kc)
    {
        const uint32_t kcp = RoundUp(kc, C0<T>);
        LocalTensor<T> a2 = qA2.AllocTensor<T>();
        for (uint32_t ib = 0; ib < mp / 16; ++ib) {
            LoadData2DParams l;
            l.startIndex = static_cast<uint16_t>(ib);
            l.repeatTimes = static_cast<uint8_t>(kcp / C0<T>);
            l.srcStride = static_cast<uint16_t>(mp / 16);
            LoadData(a2[ib * 16 * kcp], a1[k0 * mp], l);
        }
        qA2.EnQue(a2);
    }

    // B's rows [k0, k0 + kc) to nZ: keys as rows are already in L0B order (one load); k x n
    // needs each 16 x 16 fractal transposed.
    __aicore__ inline void SplitB(const LocalTensor<T>& b1, uint32_t k0, uint32_t kc)
    {
        LocalTensor<T> b2 = qB2.AllocTensor<T>();
        if (bRows) {
            LoadData2DParams l;
            l.repeatTimes = static_cast<uint8_t>(RoundUp(kc, C0<T>) / C0<T> * (np / 16));
            l.srcStride = 1;
            LoadData(b2, b1[k0 * np], l);
        } else {
            for (uint32_t kb = 0; kb < RoundUp(kc, 16) / 16; ++kb) {
                LoadData2DParams l;
                l.startIndex = static_cast<uint16_t>(k0 / 16 + kb);
                l.repeatTimes = static_cast<uint8_t>(np / 16);
                l.srcStride = static_cast<uint16_t>(kRows / 16);
                l.ifTranspose = true;
                LoadData(b2[kb * 16 * np], b1, l);
            }
        }
        qB2.EnQue(b2);
    }

    __aicore__ inline void CopyOut()
    {
        LocalTensor<float> c = qC.DeQue<float>();
        FixpipeParamsV220 f;
        f.nSize = static_cast<uint16_t>(n);
        f.mSize = static_cast<uint16_t>(m);
        f.srcStride = static_cast<uint16_t>(mp);
        f.dstStride = n;
        Fixpipe(cFGm, c, f);
        f.quantPre = std::is_same_v<Low, half> ? QuantMode_t::F322F16 : QuantMode_t::F322BF16;
        Fixpipe(cLowGm, c, f);
        if (std::is_same_v<T, float>) {
            FixpipeParamsV220 z;
            z.nSize = 16;
            z.mSize = static_cast<uint16_t>(m);
            z.srcStride = static_cast<uint16_t>(mp);
            z.dstStride = m * 16 * sizeof(float) / 32;
            Fixpipe<float, float, CFG_NZ>(cNzGm, c, z);
        }
        qC.FreeTensor(c);
    }

    TQue<TPosition::A1, 1> qA1;
    TQue<TPosition::B1, 1> qB1;
    TQue<TPosition::A2, 1> qA2;
    TQue<TPosition::B2, 1> qB2;
    TQue<TPosition::CO1, 1> qC;
    GlobalTensor<T> aGm, bGm;
    GlobalTensor<float> cFGm, cNzGm;
    GlobalTensor<Low> cLowGm;
    uint32_t m = 0, n = 0, k = 0, kStep = 0, mp = 0, np = 0, kp = 0, kRows = 0;
    bool bRows = false;
};

template <class T, class Low>
__global__ __aicore__ void cube_matmul(GM_ADDR a, GM_ADDR b, GM_ADDR cF, GM_ADDR cLow, GM_ADDR cNz,
                                       CubeMatmulTiling t)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    CubeMatmulKernel<T, Low> op;
    op.Init(a, b, cF, cLow, cNz, t, &pipe);
    op.Process();
}

namespace {

uint32_t g_seed = 12345;

/// Uniform in [-1, 1).
float next_value()
{
    g_seed = g_seed * 1664525u + 1013904223u;
    return static_cast<float>(g_seed >> 8) / 8388608.0f - 1.0f;
}

/// The relative rounding error of a conversion to Low (half: 11 significant bits, bf16: 8).
template <class Low>
constexpr double low_unit()
{
    return std::is_same_v<Low, half> ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
}

/// C = A * B against a reference that sums the exact products of the rounded inputs in double.
/// The emulated cube sums k products in float (in an order the test does not assume): with unit
/// roundoff u = 2^-24 the error is at most about (k + 1) u sum |a b| (k additions, plus the
/// product rounding for float inputs; half and bf16 products are exact in float), bounded here by
/// (k + 2) u sum |a b|. The half/bf16 output adds one rounding of that float value, relative
/// 2^-11 (half) or 2^-8 (bf16), and must equal the float output rounded to nearest even.
template <class T, class Low>
void test_matmul(uint16_t m, uint16_t n, uint16_t k, uint16_t kStep, bool bRows)
{
    const uint32_t blocks = 2;
    const uint32_t rows = blocks * m;
    const uint64_t a = fake_host::alloc(rows * k * sizeof(T));
    const uint64_t b = fake_host::alloc(n * k * sizeof(T));
    const uint64_t cF = fake_host::alloc(rows * n * sizeof(float));
    const uint64_t cLow = fake_host::alloc(rows * n * sizeof(Low));
    const uint64_t cNz = fake_host::alloc(rows * 16 * sizeof(float));
    T* ha = host_as<T>(a);
    T* hb = host_as<T>(b);
    for (uint32_t i = 0; i < rows * k; ++i) {
        ha[i] = static_cast<T>(next_value());
    }
    for (uint32_t i = 0; i < n * k; ++i) {
        hb[i] = static_cast<T>(next_value());
    }
    const CubeMatmulTiling t{m, n, k, kStep, bRows};
    const std::string name = std::string("cube_matmul<") + dtype<T>() + ", " + dtype<Low>() + ">" +
                             (bRows ? " B as n x k rows" : " B as k x n");
    const Outcome o = run(name.c_str(), blocks, [&] {
        cube_matmul<T, Low>(fake_host::gm(a), fake_host::gm(b), fake_host::gm(cF), fake_host::gm(cLow),
                            fake_host::gm(cNz), t);
    });
    expect_ok(name.c_str(), o);

    const double u = std::ldexp(1.0, -24);
    int wrong = 0, wrongLow = 0, wrongNz = 0;
    double worst = 0;
    for (uint32_t i = 0; i < rows; ++i) {
        for (uint32_t j = 0; j < n; ++j) {
            double exact = 0, magnitude = 0;
            for (uint32_t kk = 0; kk < k; ++kk) {
                const double x = static_cast<float>(ha[i * k + kk]);
                const double y = static_cast<float>(bRows ? hb[j * k + kk] : hb[kk * n + j]);
                exact += x * y;
                magnitude += std::fabs(x * y);
            }
            const float got = host_as<float>(cF)[i * n + j];
            const double tol = (k + 2) * u * magnitude;
            worst = std::max(worst, std::fabs(got - exact) / (tol > 0 ? tol : 1));
            wrong += !(std::fabs(got - exact) <= tol);
            const Low low = host_as<Low>(cLow)[i * n + j];
            const Low rounded(got);
            wrongLow += std::memcmp(&low, &rounded, sizeof(Low)) != 0;
            // |low - exact| <= |low - got| + |got - exact|; 1e-7 covers half's subnormal spacing.
            wrongLow += !(std::fabs(static_cast<float>(low) - exact) <= tol + low_unit<Low>() * std::fabs(got) + 1e-7);
            if (std::is_same_v<T, float> && j < 16) {
                wrongNz += std::memcmp(&host_as<float>(cNz)[i * 16 + j], &got, sizeof(float)) != 0;
            }
        }
    }
    check(wrong == 0, name + ": float results within (k + 2) u sum|ab| (" + std::to_string(wrong) + " wrong)");
    check(wrongLow == 0, name + ": " + dtype<Low>() + " results are the float ones rounded (" +
                             std::to_string(wrongLow) + " wrong)");
    check(wrongNz == 0, name + ": CFG_NZ column block equals the row-major one");

    // Counters per block: ceil(m/16) ceil(n/16) ceil(kc/16) cycles per Mmad (x4 for float).
    uint64_t cycles = 0, mmads = 0;
    for (uint32_t k0 = 0; k0 < k; k0 += kStep) {
        const uint32_t kc = k - k0 < kStep ? k - k0 : kStep;
        cycles += ((m + 15) / 16) * ((n + 15) / 16) * ((kc + 15) / 16) * (std::is_same_v<T, float> ? 4 : 1);
        ++mmads;
    }
    const uint64_t read = (static_cast<uint64_t>(m) * k + static_cast<uint64_t>(n) * k) * sizeof(T);
    const uint64_t written = static_cast<uint64_t>(m) * n * (sizeof(float) + sizeof(Low)) +
                             (std::is_same_v<T, float> ? m * 16 * sizeof(float) : 0);
    bool perBlock = true;
    for (uint32_t blk = 0; blk < blocks; ++blk) {
        perBlock = perBlock && o.perBlock[blk].cube_cycles == cycles && o.perBlock[blk].mmad_calls == mmads &&
                   o.perBlock[blk].gm_bytes == read + written && o.perBlock[blk].vector_instructions == 0;
    }
    check(perBlock, name + ": per-block cube cycles, Mmad calls and GM bytes");
    check(o.stats.core_kind == ASCENDC_EMU_CORE_CUBE && o.stats.cube_cycles == blocks * cycles &&
              o.stats.mmad_calls == blocks * mmads && o.stats.gm_bytes_read == blocks * read &&
              o.stats.gm_bytes_written == blocks * written &&
              o.stats.data_copies == blocks * (std::is_same_v<T, float> ? 5u : 4u) && o.stats.ub_peak_bytes == 0,
          name + ": launch counters");
    std::printf("ok   %-48s m %u n %u k %u: worst error %.2f of the bound, %" PRIu64 " cube cycles/block\n",
                name.c_str(), m, n, k, worst, cycles);
}

}  // namespace

// =================================================================================================
// K split across blocks: each block multiplies its K slice (hand-written flags, TBufs) and adds its
// partial C into GM with SetAtomicAdd<float> + Fixpipe.
// =================================================================================================

extern "C" __global__ __aicore__ void cube_ksplit(GM_ADDR a, GM_ADDR bt, GM_ADDR c, uint32_t m, uint32_t n,
                                                  uint32_t kSlice, uint32_t k)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    TBuf<TPosition::A1> a1Buf;
    TBuf<TPosition::B1> b1Buf;
    TBuf<TPosition::A2> a2Buf;
    TBuf<TPosition::B2> b2Buf;
    TBuf<TPosition::CO1> cBuf;
    const uint32_t mp = RoundUp(m, 16), np = RoundUp(n, 16), kp = RoundUp(kSlice, 16);
    pipe.InitBuffer(a1Buf, mp * kp * sizeof(half));
    pipe.InitBuffer(b1Buf, np * kp * sizeof(half));
    pipe.InitBuffer(a2Buf, mp * kp * sizeof(half));
    pipe.InitBuffer(b2Buf, np * kp * sizeof(half));
    pipe.InitBuffer(cBuf, mp * np * sizeof(float));
    const uint32_t k0 = static_cast<uint32_t>(GetBlockIdx()) * kSlice;
    GlobalTensor<half> aGm, btGm;
    GlobalTensor<float> cGm;
    aGm.SetGlobalBuffer((__gm__ half*)a, m * k);
    btGm.SetGlobalBuffer((__gm__ half*)bt, n * k);
    cGm.SetGlobalBuffer((__gm__ float*)c, m * n);
    LocalTensor<half> a1 = a1Buf.Get<half>(), b1 = b1Buf.Get<half>();
    LocalTensor<half> a2 = a2Buf.Get<half>(), b2 = b2Buf.Get<half>();
    LocalTensor<float> acc = cBuf.Get<float>();
    DataCopy(a1, aGm[k0], Nd2NzParams(1, m, kSlice, 0, k, mp, 1, 0));
    DataCopy(b1, btGm[k0], Nd2NzParams(1, n, kSlice, 0, k, np, 1, 0));
    SetFlag<HardEvent::MTE2_MTE1>(EVENT_ID0);
    WaitFlag<HardEvent::MTE2_MTE1>(EVENT_ID0);
    for (uint32_t ib = 0; ib < mp / 16; ++ib) {
        LoadData(a2[ib * 16 * kp], a1, LoadData2DParams(ib, kp / 16, mp / 16, 0, 0, false, 0));
    }
    LoadData(b2, b1, LoadData2DParams(0, kp / 16 * (np / 16), 1, 0, 0, false, 0));
    SetFlag<HardEvent::MTE1_M>(EVENT_ID0);
    WaitFlag<HardEvent::MTE1_M>(EVENT_ID0);
    Mmad(acc, a2, b2, MmadParams(m, n, kSlice, 0, false, true));
    SetFlag<HardEvent::M_FIX>(EVENT_ID0);
    WaitFlag<HardEvent::M_FIX>(EVENT_ID0);
    SetAtomicAdd<float>();
    Fixpipe(cGm, acc, FixpipeParamsV220(n, m, mp, n, false));
    SetAtomicNone();
    PipeBarrier<PIPE_ALL>();
}

namespace {

void test_ksplit()
{
    const uint32_t m = 20, n = 24, kSlice = 40, blocks = 3, k = kSlice * blocks;
    const uint64_t a = fake_host::alloc(m * k * sizeof(half));
    const uint64_t bt = fake_host::alloc(n * k * sizeof(half));
    const uint64_t c = fake_host::alloc(m * n * sizeof(float));
    for (uint32_t i = 0; i < m * k; ++i) {
        host_as<half>(a)[i] = next_value();
    }
    for (uint32_t i = 0; i < n * k; ++i) {
        host_as<half>(bt)[i] = next_value();
    }
    expect_ok("K split, atomic Fixpipe", run("cube_ksplit", blocks, [&] {
                  cube_ksplit(fake_host::gm(a), fake_host::gm(bt), fake_host::gm(c), m, n, kSlice, k);
              }));
    // Each block's partial sum is within (kSlice + 2) u sum|ab| of its slice; the three partials
    // add in some order with two more roundings: (k + 4) u sum|ab| bounds the whole.
    const double u = std::ldexp(1.0, -24);
    int wrong = 0;
    for (uint32_t i = 0; i < m; ++i) {
        for (uint32_t j = 0; j < n; ++j) {
            double exact = 0, magnitude = 0;
            for (uint32_t kk = 0; kk < k; ++kk) {
                const double p = static_cast<double>(static_cast<float>(host_as<half>(a)[i * k + kk])) *
                                 static_cast<float>(host_as<half>(bt)[j * k + kk]);
                exact += p;
                magnitude += std::fabs(p);
            }
            wrong += !(std::fabs(host_as<float>(c)[i * n + j] - exact) <= (k + 4) * u * magnitude);
        }
    }
    check(wrong == 0, "K split: the atomic sum of the partial products (" + std::to_string(wrong) + " wrong)");
}

// The doc's ND -> NZ example: 2 rows of 24 halves, dstNzC0Stride 11, dstNzNStride 2: row 0's first
// 16 elements at block 0, its last 8 (+ 8 zeros) at block 11; row 1 at blocks 2 and 13; every other
// block keeps the garbage of fresh L1.
void test_nd2nz_layout()
{
    const uint64_t x = fake_host::alloc(2 * 24 * sizeof(half));
    for (int i = 0; i < 48; ++i) {
        host_as<half>(x)[i] = static_cast<float>(i + 1);
    }
    std::vector<uint16_t> l1(16 * 16);
    const Outcome o = run("nd2nz_layout", 1, [&] {
        KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
        TPipe pipe;
        TBuf<TPosition::A1> buf;
        pipe.InitBuffer(buf, 16 * 16 * sizeof(half));
        GlobalTensor<half> xGm;
        xGm.SetGlobalBuffer((__gm__ half*)fake_host::gm(x), 48);
        LocalTensor<half> t = buf.Get<half>();
        DataCopy(t, xGm, Nd2NzParams(1, 2, 24, 0, 24, 11, 2, 0));
        // Test-only look at L1 (kernels cannot read it with the scalar unit).
        std::memcpy(l1.data(), ascendc_emu::core().mem[static_cast<size_t>(ascendc_emu::Phys::L1)], 512);
    });
    expect_ok("ND -> NZ layout (doc example)", o);
    int wrong = 0;
    for (int block = 0; block < 16; ++block) {
        for (int e = 0; e < 16; ++e) {
            uint16_t want = 0xFFFF;  // untouched
            const int r = block == 0 || block == 11 ? 0 : block == 2 || block == 13 ? 1 : -1;
            if (r >= 0) {
                const int col = (block >= 11 ? 16 : 0) + e;
                want = col < 24 ? half(static_cast<float>(r * 24 + col + 1)).val : 0;
            }
            wrong += l1[block * 16 + e] != want;
        }
    }
    check(wrong == 0 && o.stats.gm_bytes_read == 96, "ND -> NZ blocks, zero-filled tails, untouched rows (" +
                                                         std::to_string(wrong) + " wrong)");
}

}  // namespace

// =================================================================================================
// One kernel per broken rule.
// =================================================================================================

uint64_t g_gm;  // 64 KiB of device memory

/// The buffers most rule kernels need: L1, L0A, L0B and L0C with room for 32 x 32 halves/floats.
struct CubeBuffers {
    TBuf<TPosition::A1> l1;
    TBuf<TPosition::A2> l0a;
    TBuf<TPosition::B2> l0b;
    TBuf<TPosition::CO1> l0c;

    void Init(TPipe& pipe)
    {
        pipe.InitBuffer(l1, 8192);
        pipe.InitBuffer(l0a, 4096);
        pipe.InitBuffer(l0b, 4096);
        pipe.InitBuffer(l0c, 4096);
    }
};

extern "C" __global__ __aicore__ void l0a_overflow(GM_ADDR)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    TBuf<TPosition::A2> a, b;
    pipe.InitBuffer(a, 48 * 1024);
    pipe.InitBuffer(b, 17 * 1024);
}

extern "C" __global__ __aicore__ void l0b_overflow(GM_ADDR)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    TQue<TPosition::B2, 1> q;
    pipe.InitBuffer(q, 2, 33 * 1024);
}

extern "C" __global__ __aicore__ void l0c_overflow(GM_ADDR)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    TBuf<TPosition::CO1> a, b;
    pipe.InitBuffer(a, 96 * 1024);
    pipe.InitBuffer(b, 33 * 1024);
}

extern "C" __global__ __aicore__ void l1_overflow(GM_ADDR)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    TQue<TPosition::B1, 1> q;
    pipe.InitBuffer(q, 2, 256 * 1024);  // 512 KiB: over the 512 KiB - 128 B budget
}

extern "C" __global__ __aicore__ void mmad_misaligned(GM_ADDR)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    CubeBuffers bufs;
    bufs.Init(pipe);
    Mmad(bufs.l0c.Get<float>(), bufs.l0a.Get<half>()[16], bufs.l0b.Get<half>(), MmadParams(16, 16, 16, 0, false, true));
}

extern "C" __global__ __aicore__ void mmad_wrong_position(GM_ADDR)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    CubeBuffers bufs;
    bufs.Init(pipe);
    Mmad(bufs.l0c.Get<float>(), bufs.l1.Get<half>(), bufs.l0b.Get<half>(), MmadParams(16, 16, 16, 0, false, true));
}

extern "C" __global__ __aicore__ void mmad_m_one(GM_ADDR)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    CubeBuffers bufs;
    bufs.Init(pipe);
    Mmad(bufs.l0c.Get<float>(), bufs.l0a.Get<half>(), bufs.l0b.Get<half>(), MmadParams(1, 16, 16, 0, false, true));
}

extern "C" __global__ __aicore__ void mmad_zero_k(GM_ADDR)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    CubeBuffers bufs;
    bufs.Init(pipe);
    Mmad(bufs.l0c.Get<float>(), bufs.l0a.Get<half>(), bufs.l0b.Get<half>(), MmadParams(16, 16, 0, 0, false, true));
}

extern "C" __global__ __aicore__ void mmad_accumulate_garbage(GM_ADDR)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    CubeBuffers bufs;
    bufs.Init(pipe);
    Mmad(bufs.l0c.Get<float>(), bufs.l0a.Get<half>(), bufs.l0b.Get<half>(), MmadParams(16, 16, 16, 0, false, false));
}

/// L0A, L0B and L0C with room for 48 x 32 halves and 48 x 32 floats.
struct WideCubeBuffers {
    TBuf<TPosition::A2> l0a;
    TBuf<TPosition::B2> l0b;
    TBuf<TPosition::CO1> l0c;

    void Init(TPipe& pipe)
    {
        pipe.InitBuffer(l0a, 48 * 32 * 2);
        pipe.InitBuffer(l0b, 32 * 32 * 2);
        pipe.InitBuffer(l0c, 48 * 32 * 4);
    }
};

// A 16 x 16 result (one fractal, below the threshold of 10) accumulated onto at once.
extern "C" __global__ __aicore__ void mmad_small_no_barrier(GM_ADDR)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    CubeBuffers bufs;
    bufs.Init(pipe);
    Mmad(bufs.l0c.Get<float>(), bufs.l0a.Get<half>(), bufs.l0b.Get<half>(), MmadParams(16, 16, 16, 0, false, true));
    Mmad(bufs.l0c.Get<float>(), bufs.l0a.Get<half>(), bufs.l0b.Get<half>(), MmadParams(16, 16, 16, 0, false, false));
}

// An Mmad of m 48 (column blocks 48 x 16 floats apart), then one of m 32 adding onto it: its
// column block 1 starts at the first's row 32 of block 0.
extern "C" __global__ __aicore__ void mmad_accumulate_other_m(GM_ADDR)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    WideCubeBuffers bufs;
    bufs.Init(pipe);
    Mmad(bufs.l0c.Get<float>(), bufs.l0a.Get<half>(), bufs.l0b.Get<half>(), MmadParams(48, 32, 16, 0, false, true));
    PipeBarrier<PIPE_M>();
    Mmad(bufs.l0c.Get<float>(), bufs.l0a.Get<half>(), bufs.l0b.Get<half>(), MmadParams(32, 32, 16, 0, false, false));
}

// The decode kernels' bug: a tile of 32 rows (Mmad m 32) read with the srcStride of a 33-row tile
// (48): Fixpipe's column block 1 starts at the Mmad's row 16 of block 1.
extern "C" __global__ __aicore__ void fixpipe_other_layout(GM_ADDR c)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    WideCubeBuffers bufs;
    bufs.Init(pipe);
    GlobalTensor<float> cGm;
    cGm.SetGlobalBuffer((__gm__ float*)c, 32 * 32);
    LocalTensor<float> acc = bufs.l0c.Get<float>();
    Mmad(acc, bufs.l0a.Get<half>(), bufs.l0b.Get<half>(), MmadParams(32, 32, 16, 0, false, true));
    Fixpipe(cGm, acc, FixpipeParamsV220(32, 32, 48, 32, false));
}

extern "C" __global__ __aicore__ void transpose_float(GM_ADDR)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    CubeBuffers bufs;
    bufs.Init(pipe);
    LoadData(bufs.l0b.Get<float>(), bufs.l1.Get<float>(), LoadData2DParams(0, 1, 1, 0, 0, true, 0));
}

extern "C" __global__ __aicore__ void load_zero_repeats(GM_ADDR)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    CubeBuffers bufs;
    bufs.Init(pipe);
    LoadData(bufs.l0a.Get<half>(), bufs.l1.Get<half>(), LoadData2DParams());
}

extern "C" __global__ __aicore__ void load_past_l1_tensor(GM_ADDR)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    CubeBuffers bufs;
    bufs.Init(pipe);
    LoadData(bufs.l0a.Get<half>(), bufs.l1.Get<half>(), LoadData2DParams(15, 2, 1, 0, 0, false, 0));  // 17 x 512 B
}

extern "C" __global__ __aicore__ void nd2nz_src_d_value(GM_ADDR x)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    CubeBuffers bufs;
    bufs.Init(pipe);
    GlobalTensor<half> g;
    g.SetGlobalBuffer((__gm__ half*)x, 1024);
    DataCopy(bufs.l1.Get<half>(), g, Nd2NzParams(1, 16, 16, 0, 0, 16, 1, 0));
}

extern "C" __global__ __aicore__ void nd2nz_overlap(GM_ADDR x)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    CubeBuffers bufs;
    bufs.Init(pipe);
    GlobalTensor<half> g;
    g.SetGlobalBuffer((__gm__ half*)x, 1024);
    DataCopy(bufs.l1.Get<half>(), g, Nd2NzParams(1, 20, 32, 0, 32, 16, 1, 0));  // 20 rows, column blocks 16 apart
}

extern "C" __global__ __aicore__ void vector_api_on_cube(GM_ADDR)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    CubeBuffers bufs;
    bufs.Init(pipe);
    Duplicate(bufs.l1.Get<half>(), half(0.0f), 16);
}

extern "C" __global__ __aicore__ void ub_on_cube(GM_ADDR)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    TBuf<TPosition::VECCALC> ub;
    pipe.InitBuffer(ub, 1024);
}

extern "C" __global__ __aicore__ void pad_to_l1(GM_ADDR x)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    CubeBuffers bufs;
    bufs.Init(pipe);
    GlobalTensor<half> g;
    g.SetGlobalBuffer((__gm__ half*)x, 1024);
    DataCopyPad(bufs.l1.Get<half>(), g, DataCopyExtParams{1, 10, 0, 0, 0}, DataCopyPadExtParams<half>{});
}

extern "C" __global__ __aicore__ void cube_api_on_vector(GM_ADDR)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    TPipe pipe;
    TBuf<TPosition::VECCALC> ub;
    pipe.InitBuffer(ub, 8192);
    Mmad(ub.Get<float>(), ub.GetWithOffset<half>(256, 4096), ub.GetWithOffset<half>(256, 6144),
         MmadParams(16, 16, 16, 0, false, true));
}

extern "C" __global__ __aicore__ void v_event_on_cube(GM_ADDR)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    SetFlag<HardEvent::V_MTE3>(EVENT_ID0);
    WaitFlag<HardEvent::V_MTE3>(EVENT_ID0);
}

extern "C" __global__ __aicore__ void cube_event_on_vector(GM_ADDR)
{
    SetFlag<HardEvent::MTE1_M>(EVENT_ID0);
    WaitFlag<HardEvent::MTE1_M>(EVENT_ID0);
}

extern "C" __global__ __aicore__ void v_barrier_on_cube(GM_ADDR)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    PipeBarrier<PIPE_V>();
}

extern "C" __global__ __aicore__ void a1_alloc_twice(GM_ADDR)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    TQue<TPosition::A1, 1> q;
    pipe.InitBuffer(q, 1, 1024);
    q.AllocTensor<half>();
    q.AllocTensor<half>();
}

extern "C" __global__ __aicore__ void co1_deque_empty(GM_ADDR)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    TQue<TPosition::CO1, 1> q;
    pipe.InitBuffer(q, 2, 1024);
    q.DeQue<float>();
}

/// One 16 x 16 tile of C through Mmad, then Fixpipe with the given parameters into `c`.
void fixpipe_tile(GM_ADDR c, uint32_t cElems, uint16_t m, const FixpipeParamsV220& f)
{
    TPipe pipe;
    CubeBuffers bufs;
    bufs.Init(pipe);
    GlobalTensor<float> cGm;
    cGm.SetGlobalBuffer((__gm__ float*)c, cElems);
    LocalTensor<float> acc = bufs.l0c.Get<float>();
    Mmad(acc, bufs.l0a.Get<half>(), bufs.l0b.Get<half>(), MmadParams(m, 16, 16, 0, false, true));
    Fixpipe(cGm, acc, f);
}

extern "C" __global__ __aicore__ void fixpipe_outside_tensor(GM_ADDR c)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    fixpipe_tile(c, 16 * 16 - 1, 16, FixpipeParamsV220(16, 16, 16, 16, false));
}

extern "C" __global__ __aicore__ void fixpipe_undefined_rows(GM_ADDR c)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    fixpipe_tile(c, 32 * 16, 18, FixpipeParamsV220(16, 20, 32, 16, false));  // Mmad defined 18 rows
}

extern "C" __global__ __aicore__ void fixpipe_quant_mode(GM_ADDR c)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    CubeBuffers bufs;
    bufs.Init(pipe);
    GlobalTensor<half> cGm;
    cGm.SetGlobalBuffer((__gm__ half*)c, 256);
    LocalTensor<float> acc = bufs.l0c.Get<float>();
    Mmad(acc, bufs.l0a.Get<half>(), bufs.l0b.Get<half>(), MmadParams(16, 16, 16, 0, false, true));
    Fixpipe(cGm, acc, FixpipeParamsV220(16, 16, 16, 16, false));  // float -> half without F322F16
}

// Both blocks write the same 16 rows of C.
extern "C" __global__ __aicore__ void fixpipe_race(GM_ADDR c)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    fixpipe_tile(c, 16 * 16, 16, FixpipeParamsV220(16, 16, 16, 16, false));
}

extern "C" __global__ __aicore__ void missing_aic_only(GM_ADDR)
{
    TPipe pipe;
    TQue<TPosition::A1, 1> q;
    pipe.InitBuffer(q, 1, 1024);
}

extern "C" __global__ __aicore__ void aic_only_not_first(GM_ADDR)
{
    TPipe pipe;
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
}

extern "C" __global__ __aicore__ void scalar_read_of_l1(GM_ADDR)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    CubeBuffers bufs;
    bufs.Init(pipe);
    bufs.l1.Get<half>().GetValue(0);
}

namespace {

void test_rules()
{
    g_gm = fake_host::alloc(64 * 1024);
    struct Case {
        const char* test;
        void (*kernel)(GM_ADDR);
        const char* rule;
    };
    const Case cases[] = {
        {"L0A overflow", l0a_overflow, "L0A overflow at TPosition::A2"},
        {"L1 overflow", l1_overflow, "L1 overflow at TPosition::B1"},
        {"L0B overflow", l0b_overflow, "L0B overflow at TPosition::B2: 67584 more bytes on top of 0 makes 67584 > 65536"},
        {"L0C overflow", l0c_overflow, "L0C overflow at TPosition::CO1: 33792 more bytes on top of 98304"},
        {"misaligned Mmad operand", mmad_misaligned, "Mmad: fm starts at L0A offset 32, not 512-byte aligned"},
        {"Mmad operand position", mmad_wrong_position,
         "Mmad: fm is a tensor at TPosition::A1 (L1), but this operand must be in L0A"},
        {"Mmad m == 1", mmad_m_one, "m == 1 switches the cube to GEMV"},
        {"Mmad k == 0", mmad_zero_k, "each must be in [1, 4095]"},
        {"Mmad accumulates onto garbage", mmad_accumulate_garbage, "which no Mmad wrote since its buffer"},
        {"small Mmad accumulated unordered", mmad_small_no_barrier,
         "Mmad: accumulates onto L0C that Mmad #1 wrote (m rounded up to 16: 16) with fewer than 10 whole 16 x 16 "
         "result fractals (floor(m/16) x floor(n/16)) and no PipeBarrier<PIPE_M>() since"},
        {"Mmad accumulates with another m", mmad_accumulate_other_m,
         "Mmad: reads L0C as a result laid out with column blocks 512 floats apart (this Mmad's m 32 rounded up to "
         "16), but Mmad #1 laid its result out by its m rounded up to 16 (48: column blocks 768 floats apart): the "
         "float read as row 0, column 16 is that Mmad's row 32, column 0"},
        {"Fixpipe srcStride of another m", fixpipe_other_layout,
         "Fixpipe(L0C->GM, CFG_ROW_MAJOR): reads L0C as a result laid out with column blocks 768 floats apart "
         "(srcStride 48), but Mmad #1 laid its result out by its m rounded up to 16 (32: column blocks 512 floats "
         "apart): the float read as row 0, column 16 is that Mmad's row 16, column 16"},
        {"ifTranspose on float", transpose_float, "ifTranspose transposes 16 x 16 fractals of 2-byte types only"},
        {"LoadData repeatTimes 0", load_zero_repeats, "repeatTimes 0"},
        {"LoadData past its source", load_past_l1_tensor, "src needs 8704 bytes"},
        {"Nd2Nz srcDValue 0", nd2nz_src_d_value, "srcDValue 0 outside [1, 65535]"},
        {"Nd2Nz overlapping blocks", nd2nz_overlap, "another row already wrote"},
        {"vector API on a cube core", vector_api_on_cube, "Duplicate on a cube core"},
        {"UB buffer on a cube core", ub_on_cube, "TPosition::VECCALC (unified buffer) on a cube core"},
        {"DataCopyPad to L1", pad_to_l1, "DataCopyPad(GM->UB) on a cube core"},
        {"cube API on a vector core", cube_api_on_vector, "Mmad on a vector core"},
        {"V event on a cube core", v_event_on_cube, "SetFlag<HardEvent::V_MTE3> on a cube core"},
        {"cube event on a vector core", cube_event_on_vector, "SetFlag<HardEvent::MTE1_M> on a vector core"},
        {"PipeBarrier<PIPE_V> on a cube core", v_barrier_on_cube, "PipeBarrier<PIPE_V> on a cube core"},
        {"queue misuse at A1", a1_alloc_twice, "all 1 buffers of the queue are in use"},
        {"DeQue on empty CO1 queue", co1_deque_empty, "DeQue on an empty queue"},
        {"Fixpipe outside GlobalTensor", fixpipe_outside_tensor, "outside the GlobalTensor<float>"},
        {"Fixpipe of undefined L0C rows", fixpipe_undefined_rows, "reads L0C row 18, column 0"},
        {"Fixpipe quant mode", fixpipe_quant_mode, "float -> half needs quantPre F322F16"},
        {"race between cube blocks", fixpipe_race, "(a race between blocks; give each block"},
        {"cube buffer without AIC_ONLY", missing_aic_only,
         "TPosition::A1 (L1) on a vector core: L1/L0 buffers exist only on cube cores; a cube kernel declares "
         "KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY)"},
        {"AIC_ONLY not first", aic_only_not_first, "it must be the kernel's first statement"},
        {"scalar read of L1", scalar_read_of_l1, "the scalar unit does not address L1/L0 buffers"},
    };
    for (const Case& c : cases) {
        const Outcome o = run(c.test, 2, [&] { c.kernel(fake_host::gm(g_gm)); });
        expect_rule(c.test, o, c.rule);
        check(o.error.rfind(std::string("kernel ") + c.test + ", block ", 0) == 0, "message names kernel and block");
    }
    // The blocks of a launch must agree on the kind of core.
    const Outcome o = run("mixed kinds", 2, [] {
        if (ascendc_emu::t_running_core->blockIdx == 1) {
            KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
        }
    });
    expect_rule("blocks of two kinds", o, "KERNEL_TASK_TYPE_DEFAULT must give every block of a launch the same kind");
    // A vector kernel's launch says so.
    const Outcome v = run("vector kind", 1, [] { KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY); });
    check(v.status == 0 && v.stats.core_kind == ASCENDC_EMU_CORE_VECTOR, "a vector launch reports vector cores");
}

}  // namespace

// =================================================================================================
// Compile-time rules: Mmad dtype triples outside the A2 table, Fixpipe pairs, do not compile.
// =================================================================================================

template <class D, class A, class B, class = void>
struct CanMmad : std::false_type {};
template <class D, class A, class B>
struct CanMmad<D, A, B,
               std::void_t<decltype(Mmad(std::declval<LocalTensor<D>>(), std::declval<LocalTensor<A>>(),
                                         std::declval<LocalTensor<B>>(), std::declval<MmadParams>()))>>
    : std::true_type {};

template <class T, class U, class = void>
struct CanFixpipe : std::false_type {};
template <class T, class U>
struct CanFixpipe<T, U, std::void_t<decltype(Fixpipe(std::declval<GlobalTensor<T>>(), std::declval<LocalTensor<U>>(),
                                                     std::declval<FixpipeParamsV220>()))>> : std::true_type {};

static_assert(CanMmad<float, half, half>::value && CanMmad<float, bfloat16_t, bfloat16_t>::value &&
              CanMmad<float, float, float>::value);
static_assert(!CanMmad<half, half, half>::value, "no half-output Mmad on 2201");
static_assert(!CanMmad<float, half, bfloat16_t>::value && !CanMmad<float, half, float>::value,
              "fm and filter of one dtype");
static_assert(CanFixpipe<half, float>::value && CanFixpipe<bfloat16_t, float>::value &&
              CanFixpipe<float, float>::value);
static_assert(!CanFixpipe<half, half>::value && !CanFixpipe<int8_t, float>::value, "pairs outside the emulated table");

int main()
{
    std::printf("ok   %-48s Mmad (half, half, half), mixed inputs; Fixpipe from half do not compile\n",
                "compile-time dtype rules");
    test_matmul<half, half>(37, 29, 70, 32, false);
    test_matmul<half, half>(37, 29, 70, 32, true);
    test_matmul<bfloat16_t, bfloat16_t>(37, 29, 70, 32, false);
    test_matmul<bfloat16_t, bfloat16_t>(37, 29, 70, 32, true);
    test_matmul<float, half>(37, 29, 70, 32, true);
    test_matmul<float, bfloat16_t>(21, 40, 45, 16, true);
    test_ksplit();
    test_nd2nz_layout();
    test_rules();
    return summary();
}
