// Tests of the Ascend C host emulation: tiny kernels, written against the real API, that break one
// hardware rule each and must be reported as an AI Core error naming it; kernels that follow the
// rules and must compute the right values and statistics; and compile-time dtype rules.
//
// Build and run (from ascend-emulator/, one line):
//   g++ -std=c++17 -Wall -Wextra -Werror -I ascendc/include ascendc/src/runner.cpp
//       ascendc/tests/rules_test.cpp ascendc/tests/fake_host.cpp -o /tmp/rules
//       && BURN_ASCEND_EMU_THREADS=1 /tmp/rules
// One block thread: the block-order tests record the order blocks ran in from the kernel bodies,
// which is the launch order only on one thread (with helper threads the recording would race).
#include <algorithm>
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

// =================================================================================================
// A correct double-buffered kernel: y = x * alpha over half, with a DataCopyPad tail.
// =================================================================================================

struct ScaleTiling {
    uint32_t perCore;  // elements per block
    uint32_t tile;     // elements per tile (a multiple of 32 bytes)
    float alpha;
};

class KernelScale {
public:
    __aicore__ inline void Init(GM_ADDR x, GM_ADDR y, const ScaleTiling& t, TPipe* p)
    {
        pipe = p;
        perCore = t.perCore;
        tile = t.tile;
        alpha = static_cast<half>(t.alpha);
        xGm.SetGlobalBuffer((__gm__ half*)x + GetBlockIdx() * t.perCore, t.perCore);
        yGm.SetGlobalBuffer((__gm__ half*)y + GetBlockIdx() * t.perCore, t.perCore);
        pipe->InitBuffer(qIn, 2, tile * sizeof(half));
        pipe->InitBuffer(qOut, 2, tile * sizeof(half));
    }
    __aicore__ inline void Process()
    {
        for (uint32_t at = 0; at < perCore; at += tile) {
            const uint32_t n = perCore - at < tile ? perCore - at : tile;
            CopyIn(at, n);
            Compute(n);
            CopyOut(at, n);
        }
    }

private:
    __aicore__ inline void CopyIn(uint32_t at, uint32_t n)
    {
        LocalTensor<half> a = qIn.AllocTensor<half>();
        if (n == tile) {
            DataCopy(a, xGm[at], n);
        } else {
            DataCopyExtParams row{1, static_cast<uint32_t>(n * sizeof(half)), 0, 0, 0};
            DataCopyPad(a, xGm[at], row, DataCopyPadExtParams<half>{false, 0, 0, 0});
        }
        qIn.EnQue(a);
    }
    __aicore__ inline void Compute(uint32_t n)
    {
        LocalTensor<half> b = qIn.DeQue<half>();
        LocalTensor<half> c = qOut.AllocTensor<half>();
        Muls(c, b, alpha, static_cast<int32_t>(n));
        qOut.EnQue(c);
        qIn.FreeTensor(b);
    }
    __aicore__ inline void CopyOut(uint32_t at, uint32_t n)
    {
        LocalTensor<half> d = qOut.DeQue<half>();
        if (n == tile) {
            DataCopy(yGm[at], d, n);
        } else {
            DataCopyExtParams row{1, static_cast<uint32_t>(n * sizeof(half)), 0, 0, 0};
            DataCopyPad(yGm[at], d, row);
        }
        qOut.FreeTensor(d);
    }

    TPipe* pipe = nullptr;
    TQue<TPosition::VECIN, 1> qIn;
    TQue<TPosition::VECOUT, 1> qOut;
    GlobalTensor<half> xGm, yGm;
    uint32_t perCore = 0, tile = 0;
    half alpha;
};

extern "C" __global__ __aicore__ void scale_kernel(GM_ADDR x, GM_ADDR y, ScaleTiling t)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    TPipe pipe;
    KernelScale op;
    op.Init(x, y, t, &pipe);
    op.Process();
}

// What a generated aclrtlaunch_<kernel> stub does on the emulated path: pack the arguments, hand
// the entry and the deleter to the host, which runs the blocks when the stream reaches them.
struct ScaleArgs {
    uint8_t* x;
    uint8_t* y;
    ScaleTiling t;
};

extern "C" uint32_t aclrtlaunch_scale_kernel(uint32_t blockDim, void* stream, void* x, void* y, ScaleTiling* t)
{
    auto* args = new ScaleArgs{static_cast<uint8_t*>(x), static_cast<uint8_t*>(y), *t};
    return ascendc_emu_launch(
        stream, "scale_kernel", blockDim,
        [](void* p) {
            auto* a = static_cast<ScaleArgs*>(p);
            scale_kernel(a->x, a->y, a->t);
        },
        args, [](void* p) { delete static_cast<ScaleArgs*>(p); });
}

void test_scale_kernel()
{
    const uint32_t blocks = 3, perCore = 1003, tile = 256;  // 3 whole tiles + a 235-element (470 B) tail
    const uint32_t total = blocks * perCore, guard = 16;
    const uint64_t x = fake_host::alloc(total * sizeof(half));
    const uint64_t y = fake_host::alloc((total + guard) * sizeof(half));
    half* hx = host_as<half>(x);
    half* hy = host_as<half>(y);
    for (uint32_t i = 0; i < total; ++i) {
        hx[i] = static_cast<float>(i % 97) * 0.37f - 11.0f;
    }
    const half sentinel = 1234.0f;
    for (uint32_t i = 0; i < total + guard; ++i) {
        hy[i] = sentinel;
    }
    ScaleTiling t{perCore, tile, 1.7f};
    const uint32_t rc = aclrtlaunch_scale_kernel(blocks, nullptr, fake_host::gm(x), fake_host::gm(y), &t);
    const fake_host::Launch& l = fake_host::last_launch();
    check(rc == 0 && l.status == 0, "scale_kernel launch: " + l.error);

    int wrong = 0;
    for (uint32_t i = 0; i < total; ++i) {
        // The vector unit's Muls: the product of two halves, rounded once to half.
        const half want = static_cast<float>(hx[i]) * static_cast<float>(half(1.7f));
        wrong += std::memcmp(&want, &hy[i], sizeof(half)) != 0;
    }
    for (uint32_t i = total; i < total + guard; ++i) {
        wrong += hy[i].val != sentinel.val;  // DataCopyPad wrote no byte past the tail
    }
    check(wrong == 0, "scale_kernel values (" + std::to_string(wrong) + " wrong)");

    const uint64_t bytes = perCore * sizeof(half);
    check(l.stats.gm_bytes_read == blocks * bytes, "scale_kernel gm_bytes_read");
    check(l.stats.gm_bytes_written == blocks * bytes, "scale_kernel gm_bytes_written");
    check(l.stats.data_copies == blocks * 8, "scale_kernel data_copies (4 in + 4 out per block)");
    check(l.stats.ub_peak_bytes == 2 * 2 * tile * sizeof(half), "scale_kernel ub_peak_bytes");
    // One Muls per tile: 3 of 256 halves (2 repeats each) and the tail of 235 (470 B: 2 repeats).
    check(l.stats.vector_instructions == blocks * 4, "scale_kernel vector_instructions");
    check(l.stats.vector_repeats == blocks * 8, "scale_kernel vector_repeats");
    for (uint32_t b = 0; b < blocks; ++b) {
        check(l.perBlock[b].gm_bytes == 2 * bytes, "scale_kernel per-block bytes");
        check(l.perBlock[b].vector_instructions == 4 && l.perBlock[b].vector_repeats == 8,
              "scale_kernel per-block vector counts");
    }
    std::printf("ok   %-34s %u blocks: read %llu B, written %llu B, %llu copies, UB peak %llu B, %llu B/block\n",
                "double-buffered scale_kernel", blocks, static_cast<unsigned long long>(l.stats.gm_bytes_read),
                static_cast<unsigned long long>(l.stats.gm_bytes_written),
                static_cast<unsigned long long>(l.stats.data_copies),
                static_cast<unsigned long long>(l.stats.ub_peak_bytes),
                static_cast<unsigned long long>(l.perBlock[0].gm_bytes));
}

// =================================================================================================
// Correct kernels exercising numerics, padding, flags and atomics.
// =================================================================================================

// out[0] = sum, out[1] = max, out[2] = argmax (as float), out[3..] = relu via CompareScalar+Select,
// then x rounded through bf16 (CAST_RINT) and half (CAST_TRUNC).
extern "C" __global__ __aicore__ void vector_ops(GM_ADDR x, GM_ADDR out)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 8 * 1024);
    GlobalTensor<float> xGm, outGm;
    xGm.SetGlobalBuffer((__gm__ float*)x, 64);
    outGm.SetGlobalBuffer((__gm__ float*)out, 256);
    LocalTensor<float> v = buf.GetWithOffset<float>(64, 0);
    LocalTensor<float> tmp = buf.GetWithOffset<float>(64, 256);
    LocalTensor<float> res = buf.GetWithOffset<float>(256, 512);
    LocalTensor<uint8_t> mask = buf.GetWithOffset<uint8_t>(32, 1536);
    LocalTensor<bfloat16_t> b16 = buf.GetWithOffset<bfloat16_t>(64, 1600);
    LocalTensor<half> f16 = buf.GetWithOffset<half>(64, 1728);

    DataCopy(v, xGm, 64);
    const event_t e = static_cast<event_t>(GetTPipePtr()->FetchEventID(HardEvent::MTE2_V));
    SetFlag<HardEvent::MTE2_V>(e);
    WaitFlag<HardEvent::MTE2_V>(e);

    Duplicate(res, 0.0f, 256);
    ReduceSum(res, v, tmp, 64);
    LocalTensor<float> mx = res[8];
    ReduceMax(mx, v, tmp, 64, true);
    res.SetValue(1, mx.GetValue(0));
    res.SetValue(2, static_cast<float>(mx.ReinterpretCast<uint32_t>().GetValue(1)));
    res.SetValue(8, 0.0f);
    res.SetValue(9, 0.0f);
    CompareScalar(mask, v, 0.0f, CMPMODE::GT, 64);
    Select(res[64], mask, v, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, 64);
    Cast(b16, v, RoundMode::CAST_RINT, 64);
    Cast(res[128], b16, RoundMode::CAST_NONE, 64);
    Cast(f16, v, RoundMode::CAST_TRUNC, 64);
    Cast(res[192], f16, RoundMode::CAST_NONE, 64);
    DataCopy(outGm, res, 256);
}

void test_vector_ops()
{
    const uint64_t x = fake_host::alloc(64 * sizeof(float));
    const uint64_t out = fake_host::alloc(256 * sizeof(float));
    float* hx = host_as<float>(x);
    for (int i = 0; i < 64; ++i) {
        hx[i] = (i == 41 ? 100.0f : 0.0f) + static_cast<float>(i) * 0.1f - 3.3f + 1e-3f / 3.0f;
    }
    const Outcome o = run("vector_ops", 1, [&] { vector_ops(fake_host::gm(x), fake_host::gm(out)); });
    expect_ok("vector_ops", o);
    const float* r = host_as<float>(out);
    double sum = 0;
    for (int i = 0; i < 64; ++i) {
        sum += hx[i];
    }
    check(std::fabs(r[0] - sum) < 1e-3, "ReduceSum value");
    check(r[1] == hx[41] && r[2] == 41.0f, "ReduceMax value and index");
    int wrong = 0;
    for (int i = 0; i < 64; ++i) {
        wrong += r[64 + i] != (hx[i] > 0.0f ? hx[i] : 0.0f);
        wrong += r[128 + i] != static_cast<float>(bfloat16_t(hx[i]));  // RNE, like CAST_RINT
        const float t = r[192 + i];  // CAST_TRUNC: |t| <= |x| and the next half away from zero passes it
        const half next(ascendc_emu::Bits16{static_cast<uint16_t>(half(t).val + 1)});
        wrong += !(std::fabs(t) <= std::fabs(hx[i]) && std::fabs(static_cast<float>(next)) > std::fabs(hx[i]));
    }
    check(wrong == 0, "CompareScalar/Select and Cast values (" + std::to_string(wrong) + " wrong)");
}

// Axpy: dst += src * a, in float and widening half -> float.
extern "C" __global__ __aicore__ void axpy_values(GM_ADDR out)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 2048);
    GlobalTensor<float> outGm;
    outGm.SetGlobalBuffer((__gm__ float*)out, 128);
    LocalTensor<float> acc = buf.GetWithOffset<float>(128, 0);
    LocalTensor<float> src = buf.GetWithOffset<float>(64, 512);
    LocalTensor<half> h = buf.GetWithOffset<half>(64, 768);
    for (int32_t i = 0; i < 64; ++i) {
        src.SetValue(i, static_cast<float>(i));
        h.SetValue(i, half(static_cast<float>(i) * 0.5f));
    }
    Duplicate(acc, 1.0f, 128);
    const event_t e = static_cast<event_t>(GetTPipePtr()->FetchEventID(HardEvent::S_V));
    SetFlag<HardEvent::S_V>(e);
    WaitFlag<HardEvent::S_V>(e);
    Axpy(acc, src, 3.0f, 64);
    Axpy(acc[64], h, half(-2.0f), 64);
    const event_t f = static_cast<event_t>(GetTPipePtr()->FetchEventID(HardEvent::V_MTE3));
    SetFlag<HardEvent::V_MTE3>(f);
    WaitFlag<HardEvent::V_MTE3>(f);
    DataCopy(outGm, acc, 128);
}

void test_axpy()
{
    const uint64_t out = fake_host::alloc(128 * sizeof(float));
    expect_ok("Axpy values", run("axpy_values", 1, [&] { axpy_values(fake_host::gm(out)); }));
    const float* r = host_as<float>(out);
    int wrong = 0;
    for (int i = 0; i < 64; ++i) {
        wrong += r[i] != 1.0f + 3.0f * static_cast<float>(i);
        wrong += r[64 + i] != 1.0f - static_cast<float>(i);
    }
    check(wrong == 0, "Axpy float and half -> float values (" + std::to_string(wrong) + " wrong)");
}

// DataCopyPad GM->UB with isPad: 5 floats + 3 elements of right padding, then a whole-block store.
extern "C" __global__ __aicore__ void pad_kernel(GM_ADDR x, GM_ADDR y)
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> q;
    pipe.InitBuffer(q, 1, 32);
    GlobalTensor<float> xGm, yGm;
    xGm.SetGlobalBuffer((__gm__ float*)x, 5);
    yGm.SetGlobalBuffer((__gm__ float*)y, 8);
    LocalTensor<float> t = q.AllocTensor<float>();
    DataCopyPad(t, xGm, DataCopyExtParams{1, 5 * sizeof(float), 0, 0, 0},
                DataCopyPadExtParams<float>{true, 0, 3, -1.0f});
    q.EnQue(t);
    LocalTensor<float> u = q.DeQue<float>();
    TQueSync<PIPE_MTE2, PIPE_MTE3> sync;  // a VECIN tensor copied straight out: MTE2 -> MTE3
    sync.SetFlag(0);
    sync.WaitFlag(0);
    DataCopy(yGm, u, 8);
    q.FreeTensor(u);
}

void test_pad()
{
    const uint64_t x = fake_host::alloc(5 * sizeof(float));
    const uint64_t y = fake_host::alloc(8 * sizeof(float));
    for (int i = 0; i < 5; ++i) {
        host_as<float>(x)[i] = static_cast<float>(i + 1);
    }
    expect_ok("DataCopyPad right padding", run("pad_kernel", 1, [&] { pad_kernel(fake_host::gm(x), fake_host::gm(y)); }));
    const float want[8] = {1, 2, 3, 4, 5, -1, -1, -1};
    check(std::memcmp(host_as<float>(y), want, sizeof want) == 0, "DataCopyPad padded row");
}

// Block forms: rows 0 and 2 of a 4 x 16 float matrix (64-byte rows, a 64-byte gap) into one UB run,
// then out with a gap of one 32-byte block between the two rows.
extern "C" __global__ __aicore__ void strided_kernel(GM_ADDR x, GM_ADDR y)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 128);
    GlobalTensor<float> xGm, yGm;
    xGm.SetGlobalBuffer((__gm__ float*)x, 64);
    yGm.SetGlobalBuffer((__gm__ float*)y, 40);
    LocalTensor<float> t = buf.Get<float>();
    DataCopy(t, xGm, DataCopyParams{2, 2, 2, 0});
    SetFlag<HardEvent::MTE2_MTE3>(EVENT_ID0);
    WaitFlag<HardEvent::MTE2_MTE3>(EVENT_ID0);
    DataCopy(yGm, t, DataCopyParams{2, 2, 0, 1});
}

extern "C" __global__ __aicore__ void block_count_range(GM_ADDR x)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 128);
    GlobalTensor<float> xGm;
    xGm.SetGlobalBuffer((__gm__ float*)x);
    DataCopy(buf.Get<float>(), xGm, DataCopyParams{4096, 1, 0, 0});
}

void test_strided()
{
    const uint64_t x = fake_host::alloc(64 * sizeof(float));
    const uint64_t y = fake_host::alloc(40 * sizeof(float));
    for (int i = 0; i < 64; ++i) {
        host_as<float>(x)[i] = static_cast<float>(i);
    }
    for (int i = 0; i < 40; ++i) {
        host_as<float>(y)[i] = -1.0f;
    }
    const Outcome o = run("strided_kernel", 1, [&] { strided_kernel(fake_host::gm(x), fake_host::gm(y)); });
    expect_ok("DataCopyParams strides", o);
    int wrong = 0;
    for (int i = 0; i < 40; ++i) {
        const float want = i < 16 ? static_cast<float>(i) : i < 24 ? -1.0f : static_cast<float>(i - 24 + 32);
        wrong += host_as<float>(y)[i] != want;
    }
    check(wrong == 0 && o.stats.gm_bytes_read == 128 && o.stats.gm_bytes_written == 128, "DataCopyParams rows and gaps");
}

// Every block adds its ones into the same 8 floats.
extern "C" __global__ __aicore__ void atomic_kernel(GM_ADDR acc)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 32);
    GlobalTensor<float> accGm;
    accGm.SetGlobalBuffer((__gm__ float*)acc, 8);
    LocalTensor<float> ones = buf.Get<float>();
    Duplicate(ones, 1.0f, 8);
    const event_t e = static_cast<event_t>(GetTPipePtr()->FetchEventID(HardEvent::V_MTE3));
    SetFlag<HardEvent::V_MTE3>(e);
    WaitFlag<HardEvent::V_MTE3>(e);
    SetAtomicAdd<float>();
    DataCopy(accGm, ones, 8);
    SetAtomicNone();
}

void test_atomic()
{
    const uint64_t acc = fake_host::alloc(8 * sizeof(float));
    const Outcome o = run("atomic_kernel", 4, [&] { atomic_kernel(fake_host::gm(acc)); });
    expect_ok("SetAtomicAdd across 4 blocks", o);
    int wrong = 0;
    for (int i = 0; i < 8; ++i) {
        wrong += host_as<float>(acc)[i] != 4.0f;
    }
    check(wrong == 0, "atomic accumulation");
}

// =================================================================================================
// One kernel per broken rule.
// =================================================================================================

uint64_t g_x;      // 4 KiB of device memory
uint64_t g_small;  // 256 bytes of device memory

extern "C" __global__ __aicore__ void ub_overflow(GM_ADDR)
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> a, b;
    pipe.InitBuffer(a, 1, 100 * 1024);
    pipe.InitBuffer(b, 1, 100 * 1024);
}

extern "C" __global__ __aicore__ void too_many_buffers(GM_ADDR)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> bufs[65];
    for (auto& b : bufs) {
        pipe.InitBuffer(b, 32);
    }
}

extern "C" __global__ __aicore__ void misaligned_ub(GM_ADDR x)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 1024);
    GlobalTensor<half> xGm;
    xGm.SetGlobalBuffer((__gm__ half*)x, 64);
    LocalTensor<half> t = buf.Get<half>();
    DataCopy(t[7], xGm, 16);  // 14 bytes into the buffer
}

extern "C" __global__ __aicore__ void copy_length(GM_ADDR x)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 1024);
    GlobalTensor<float> xGm;
    xGm.SetGlobalBuffer((__gm__ float*)x, 64);
    DataCopy(buf.Get<float>(), xGm, 7);  // 28 bytes
}

extern "C" __global__ __aicore__ void gm_out_of_bounds(GM_ADDR x)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 1024);
    GlobalTensor<float> xGm;
    xGm.SetGlobalBuffer((__gm__ float*)x, 64);
    DataCopy(buf.Get<float>(), xGm[32], 64);  // elements [32, 96) of a 64-element tensor
}

extern "C" __global__ __aicore__ void gm_rejected(GM_ADDR small)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 1024);
    GlobalTensor<float> g;
    g.SetGlobalBuffer((__gm__ float*)small);  // unsized: only the allocation bounds it
    DataCopy(buf.Get<float>(), g[32], 64);    // bytes [128, 384) of a 256-byte allocation
}

extern "C" __global__ __aicore__ void gm_scalar_rejected(GM_ADDR small)
{
    GlobalTensor<int32_t> g;
    g.SetGlobalBuffer((__gm__ int32_t*)small);
    g.SetValue(1u << 20, 7);
}

extern "C" __global__ __aicore__ void alloc_no_free(GM_ADDR)
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> q;
    pipe.InitBuffer(q, 1, 256);
    q.AllocTensor<float>();
    q.AllocTensor<float>();
}

extern "C" __global__ __aicore__ void deque_empty(GM_ADDR)
{
    TPipe pipe;
    TQue<TPosition::VECOUT, 1> q;
    pipe.InitBuffer(q, 2, 256);
    q.DeQue<float>();
}

extern "C" __global__ __aicore__ void enque_full(GM_ADDR)
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> q;
    pipe.InitBuffer(q, 2, 256);
    q.EnQue(q.AllocTensor<float>());
    q.EnQue(q.AllocTensor<float>());
}

extern "C" __global__ __aicore__ void double_free(GM_ADDR)
{
    TPipe pipe;
    TQue<TPosition::VECCALC, 1> q;
    pipe.InitBuffer(q, 2, 256);
    LocalTensor<float> a = q.AllocTensor<float>();
    q.FreeTensor(a);
    q.FreeTensor(a);
}

extern "C" __global__ __aicore__ void free_foreign(GM_ADDR)
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> q, other;
    pipe.InitBuffer(q, 1, 256);
    pipe.InitBuffer(other, 1, 256);
    LocalTensor<float> a = q.AllocTensor<float>();
    other.FreeTensor(a);
}

extern "C" __global__ __aicore__ void event_pool_exhausted(GM_ADDR)
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> q[5];  // 5 queues x 2 buffers: 10 freed buffers hold V_MTE2 IDs
    for (auto& one : q) {
        pipe.InitBuffer(one, 2, 256);
    }
    for (auto& one : q) {
        LocalTensor<float> a = one.AllocTensor<float>();
        LocalTensor<float> b = one.AllocTensor<float>();
        one.FreeTensor(a);
        one.FreeTensor(b);
    }
}

extern "C" __global__ __aicore__ void two_pipes(GM_ADDR)
{
    TPipe first;
    TPipe second;
}

extern "C" __global__ __aicore__ void double_set_flag(GM_ADDR)
{
    SetFlag<HardEvent::MTE2_V>(EVENT_ID1);
    SetFlag<HardEvent::MTE2_V>(EVENT_ID1);
}

extern "C" __global__ __aicore__ void flag_left_set(GM_ADDR)
{
    SetFlag<HardEvent::V_MTE3>(EVENT_ID2);
}

extern "C" __global__ __aicore__ void wait_without_set(GM_ADDR)
{
    WaitFlag<HardEvent::S_V>(EVENT_ID0);
}

extern "C" __global__ __aicore__ void atomic_left_set(GM_ADDR)
{
    SetAtomicAdd<float>();
}

extern "C" __global__ __aicore__ void cast_bf16_none(GM_ADDR)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 1024);
    LocalTensor<float> f = buf.Get<float>();
    Duplicate(f, 1.5f, 64);
    Cast(buf.GetWithOffset<bfloat16_t>(64, 512), f, RoundMode::CAST_NONE, 64);
}

extern "C" __global__ __aicore__ void compare_count(GM_ADDR)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 2048);
    LocalTensor<float> a = buf.Get<float>();
    Compare(buf.GetWithOffset<uint8_t>(32, 1024), a, a, CMPMODE::LT, 100);  // 400 bytes
}

extern "C" __global__ __aicore__ void compare_int32_mode(GM_ADDR)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 2048);
    LocalTensor<int32_t> a = buf.Get<int32_t>();
    Compare(buf.GetWithOffset<uint8_t>(32, 1024), a, a, CMPMODE::LT, 64);
}

extern "C" __global__ __aicore__ void reduce_tmp_small(GM_ADDR)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 8192);
    LocalTensor<float> v = buf.Get<float>(1024);
    ReduceMax(buf.GetWithOffset<float>(8, 4096), v, buf.GetWithOffset<float>(8, 4128), 1024, true);
}

extern "C" __global__ __aicore__ void partial_overlap(GM_ADDR)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 1024);
    LocalTensor<float> t = buf.Get<float>();
    Add(t[8], t, t, 64);  // dst starts 32 bytes into src
}

// The widening Axpy reads half from where it writes float: only disjoint operands are defined.
extern "C" __global__ __aicore__ void axpy_overlap(GM_ADDR)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 1024);
    Axpy(buf.Get<float>(), buf.Get<half>(), half(2.0f), 64);
}

extern "C" __global__ __aicore__ void pad_too_wide(GM_ADDR x)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 1024);
    GlobalTensor<half> xGm;
    xGm.SetGlobalBuffer((__gm__ half*)x, 64);
    DataCopyPad(buf.Get<half>(), xGm, DataCopyExtParams{1, 10, 0, 0, 0}, DataCopyPadExtParams<half>{true, 17, 0, 0});
}

extern "C" __global__ __aicore__ void pad_footprint(GM_ADDR x)
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> q;
    pipe.InitBuffer(q, 1, 96);  // rows of 40 bytes occupy 64 UB bytes each: 2 rows need 128
    GlobalTensor<float> xGm;
    xGm.SetGlobalBuffer((__gm__ float*)x, 64);
    DataCopyPad(q.AllocTensor<float>(), xGm, DataCopyExtParams{2, 40, 0, 0, 0},
                DataCopyPadExtParams<float>{false, 0, 0, 0.0f});
}

extern "C" __global__ __aicore__ void select_scratch(GM_ADDR)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf, big;
    pipe.InitBuffer(buf, 1024);
    pipe.InitBuffer(big, 187 * 1024);
    LocalTensor<half> h = buf.Get<half>(128);
    Select(h, buf.GetWithOffset<uint8_t>(32, 512), h, static_cast<half>(0.0f), SELMODE::VSEL_TENSOR_SCALAR_MODE, 128);
}

extern "C" __global__ __aicore__ void sync_all(GM_ADDR)
{
    SyncAll();
}

// AIC and AIV halves of a MIX kernel meet at cross-core flags, which blocks decided one after
// another cannot (cube-only kernels: cube_test.cpp).
extern "C" __global__ __aicore__ void mix_kernel_type(GM_ADDR)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
}

extern "C" __global__ __aicore__ void local_out_of_range(GM_ADDR)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 64);
    buf.Get<float>().SetValue(16, 1.0f);
}

void test_rules()
{
    g_x = fake_host::alloc(4096);
    g_small = fake_host::alloc(256);
    struct Case {
        const char* test;
        void (*kernel)(GM_ADDR);
        uint64_t arg;
        const char* rule;
    };
    const Case cases[] = {
        {"UB overflow", ub_overflow, g_x, "unified buffer overflow"},
        {"more than 64 buffers", too_many_buffers, g_x, "more than 64 buffers"},
        {"misaligned UB operand", misaligned_ub, g_x, "not 32-byte aligned"},
        {"DataCopy length % 32", copy_length, g_x, "not a multiple of 32 (the NPU silently rounds"},
        {"DataCopyParams blockCount", block_count_range, g_x, "blockCount 4096 exceeds 4095"},
        {"GM outside SetGlobalBuffer", gm_out_of_bounds, g_x, "outside the GlobalTensor"},
        {"GM address the host rejects", gm_rejected, g_small, "out-of-bounds GM access"},
        {"GM scalar the host rejects", gm_scalar_rejected, g_small, "out-of-bounds GM access"},
        {"AllocTensor, no free buffer", alloc_no_free, g_x, "the NPU would hang"},
        {"DeQue on empty queue", deque_empty, g_x, "empty queue"},
        {"EnQue on full queue", enque_full, g_x, "full queue"},
        {"double FreeTensor", double_free, g_x, "double free"},
        {"FreeTensor, foreign tensor", free_foreign, g_x, "another queue"},
        {"event ID pool exhausted", event_pool_exhausted, g_x, "all 8 IDs of HardEvent::V_MTE2"},
        {"two TPipes", two_pipes, g_x, "second TPipe"},
        {"double SetFlag", double_set_flag, g_x, "already set"},
        {"SetFlag left at kernel end", flag_left_set, g_x, "no matching WaitFlag at kernel end"},
        {"WaitFlag without SetFlag", wait_without_set, g_x, "wait forever"},
        {"atomic left set", atomic_left_set, g_x, "SetAtomicAdd<float>() is still enabled"},
        {"float->bf16 CAST_NONE", cast_bf16_none, g_x, "float -> bfloat16_t does not support RoundMode::CAST_NONE"},
        {"Compare count % 256 B", compare_count, g_x, "not a multiple of 256"},
        {"Compare int32 not EQ", compare_int32_mode, g_x,
         "Compare: CMPMODE::LT on int32_t: the A2 vector core's vcmpv_lt takes float16 and float32 only"},
        {"ReduceMax tmp too small", reduce_tmp_small, g_x, "sharedTmpBuffer holds 8 elements"},
        {"partial overlap", partial_overlap, g_x, "partially overlaps"},
        {"Axpy widening in place", axpy_overlap, g_x, "Axpy: dst [UB 0, +256) partially overlaps src"},
        {"DataCopyPad padding > 32 B", pad_too_wide, g_x, "exceeds 32 bytes"},
        {"DataCopyPad UB footprint", pad_footprint, g_x, "dst needs 128 bytes"},
        {"Select scratch over buffers", select_scratch, g_x, "[184 KiB, 192 KiB)"},
        {"SyncAll", sync_all, g_x, "SyncAll is not supported"},
        {"MIX kernel type", mix_kernel_type, g_x, "MIX kernel types with cube cores are not emulated"},
        {"LocalTensor index", local_out_of_range, g_x, "out of range"},
    };
    for (const Case& c : cases) {
        const Outcome o = run(c.test, 2, [&] { c.kernel(fake_host::gm(c.arg)); });
        expect_rule(c.test, o, c.rule);
        check(o.error.rfind(std::string("kernel ") + c.test + ", block ", 0) == 0, "message names kernel and block");
    }
    // A kernel that breaks a rule only in block 1: earlier blocks ran, the message names block 1.
    const Outcome o = run("late_failure", 3, [] {
        if (GetBlockIdx() == 1) {
            SetAtomicAdd<half>();
        }
    });
    expect_rule("failure in block 1 of 3", o, "kernel late_failure, block 1: SetAtomicAdd<half>()");
}

// =================================================================================================
// Device-side checks: printf, Trap and assert.
// =================================================================================================

// Checks an index the way the fused kernels do: the bad value is printed, then the core traps.
extern "C" __global__ __aicore__ void checked_index(GM_ADDR idx)
{
    GlobalTensor<int64_t> idxGm;
    idxGm.SetGlobalBuffer((__gm__ int64_t*)idx, 4);
    const int64_t v = idxGm.GetValue(static_cast<uint64_t>(GetBlockIdx()));
    if (v < 0 || v >= 4) {
        AscendC::printf("checked_index: indices[%d] = %d is outside [0, %u)\n", static_cast<int32_t>(GetBlockIdx()), v,
                        4u);
        AscendC::Trap();
    }
}

extern "C" __global__ __aicore__ void silent_trap(GM_ADDR) { AscendC::Trap(); }

extern "C" __global__ __aicore__ void printf_length_modifier(GM_ADDR) { AscendC::printf("%ld\n", 5L); }

extern "C" __global__ __aicore__ void printf_float_as_int(GM_ADDR) { AscendC::printf("%d\n", 1.5f); }

extern "C" __global__ __aicore__ void printf_missing_argument(GM_ADDR) { AscendC::PRINTF("%d and %d\n", 1); }

extern "C" __global__ __aicore__ void failed_assert(GM_ADDR)
{
    const int32_t blocks = static_cast<int32_t>(GetBlockNum());
    assert(blocks == 1);
}

extern "C" __global__ __aicore__ void prints_and_returns(GM_ADDR) { AscendC::printf("half %f, hex %x\n", half(0.5f), -1); }

void test_device_checks()
{
    const uint64_t idx = fake_host::alloc(4 * sizeof(int64_t));
    const int64_t values[4] = {0, 3, -5000000000ll, 2};
    std::memcpy(host_as<int64_t>(idx), values, sizeof values);
    Outcome o = run("checked_index", 4, [&] { checked_index(fake_host::gm(idx)); });
    expect_rule("printf + Trap", o,
                "kernel checked_index, block 2: AscendC::Trap() stopped the core after printing: checked_index: "
                "indices[2] = -5000000000 is outside [0, 4)");
    expect_rule("Trap without printf", run("silent_trap", 1, [&] { silent_trap(fake_host::gm(idx)); }),
                "AscendC::Trap() stopped the core (the kernel printed nothing)");
    expect_rule("printf length modifier", run("printf_length_modifier", 1, [&] { printf_length_modifier(nullptr); }),
                "unsupported conversion in \"%ld\n\"");
    expect_rule("printf %d of a float", run("printf_float_as_int", 1, [&] { printf_float_as_int(nullptr); }),
                "%d given a floating-point argument");
    expect_rule("PRINTF missing argument", run("printf_missing_argument", 1, [&] { printf_missing_argument(nullptr); }),
                "has more conversions than arguments");
    expect_rule("assert traps", run("failed_assert", 2, [&] { failed_assert(nullptr); }),
                "stopped the core after printing: [ASSERT] ");
    check(run("failed_assert", 2, [&] { failed_assert(nullptr); }).error.find("Assertion `blocks == 1'") !=
              std::string::npos,
          "assert names its expression");
    expect_ok("printf without Trap", run("prints_and_returns", 1, [&] { prints_and_returns(nullptr); }));
}

// =================================================================================================
// Blocks: a shuffled order, races between blocks, atomics in that order.
// =================================================================================================

// Each block copies 8 floats to `out` at element offset GetBlockIdx() * stride.
extern "C" __global__ __aicore__ void store_at(GM_ADDR out, uint32_t stride)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 32);
    GlobalTensor<float> outGm;
    outGm.SetGlobalBuffer((__gm__ float*)out, 64);
    LocalTensor<float> v = buf.Get<float>();
    Duplicate(v, static_cast<float>(GetBlockIdx()), 8);
    const event_t e = static_cast<event_t>(GetTPipePtr()->FetchEventID(HardEvent::V_MTE3));
    SetFlag<HardEvent::V_MTE3>(e);
    WaitFlag<HardEvent::V_MTE3>(e);
    DataCopy(outGm[GetBlockIdx() * stride], v, 8);
}

// Block 0 writes 8 floats; the other blocks read them.
extern "C" __global__ __aicore__ void read_what_block_0_writes(GM_ADDR data)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 32);
    GlobalTensor<float> gm;
    gm.SetGlobalBuffer((__gm__ float*)data, 8);
    LocalTensor<float> v = buf.Get<float>();
    if (GetBlockIdx() == 0) {
        Duplicate(v, 1.0f, 8);
        const event_t e = static_cast<event_t>(GetTPipePtr()->FetchEventID(HardEvent::V_MTE3));
        SetFlag<HardEvent::V_MTE3>(e);
        WaitFlag<HardEvent::V_MTE3>(e);
        DataCopy(gm, v, 8);
    } else {
        DataCopy(v, gm, 8);
    }
}

// Block 0 stores a scalar into the word the other blocks add into atomically.
extern "C" __global__ __aicore__ void atomic_beside_plain(GM_ADDR acc)
{
    GlobalTensor<float> gm;
    gm.SetGlobalBuffer((__gm__ float*)acc, 8);
    if (GetBlockIdx() == 0) {
        gm.SetValue(3, 2.0f);
        return;
    }
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 32);
    LocalTensor<float> ones = buf.Get<float>();
    Duplicate(ones, 1.0f, 8);
    const event_t e = static_cast<event_t>(GetTPipePtr()->FetchEventID(HardEvent::V_MTE3));
    SetFlag<HardEvent::V_MTE3>(e);
    WaitFlag<HardEvent::V_MTE3>(e);
    SetAtomicAdd<float>();
    DataCopy(gm, ones, 8);
    SetAtomicNone();
}

// Each block adds ones into its own 8 floats atomically, then reads them back.
extern "C" __global__ __aicore__ void atomic_read_back(GM_ADDR acc)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 32);
    GlobalTensor<float> gm;
    gm.SetGlobalBuffer((__gm__ float*)acc + 8 * GetBlockIdx(), 8);
    LocalTensor<float> ones = buf.Get<float>();
    Duplicate(ones, 1.0f, 8);
    const event_t e = static_cast<event_t>(GetTPipePtr()->FetchEventID(HardEvent::V_MTE3));
    SetFlag<HardEvent::V_MTE3>(e);
    WaitFlag<HardEvent::V_MTE3>(e);
    SetAtomicAdd<float>();
    DataCopy(gm, ones, 8);
    SetAtomicNone();
    const event_t back = static_cast<event_t>(GetTPipePtr()->FetchEventID(HardEvent::MTE3_MTE2));
    SetFlag<HardEvent::MTE3_MTE2>(back);
    WaitFlag<HardEvent::MTE3_MTE2>(back);
    DataCopy(ones, gm, 8);
}

// Block b adds values[b] into acc[0] atomically (DataCopyPad of one float).
extern "C" __global__ __aicore__ void atomic_sum(GM_ADDR values, GM_ADDR acc)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 32);
    GlobalTensor<float> valuesGm, accGm;
    valuesGm.SetGlobalBuffer((__gm__ float*)values, 8);
    accGm.SetGlobalBuffer((__gm__ float*)acc, 1);
    LocalTensor<float> v = buf.Get<float>();
    DataCopyPad(v, valuesGm[GetBlockIdx()], DataCopyExtParams{1, 4, 0, 0, 0},
                DataCopyPadExtParams<float>{false, 0, 0, 0.0f});
    const event_t e = static_cast<event_t>(GetTPipePtr()->FetchEventID(HardEvent::MTE2_MTE3));
    SetFlag<HardEvent::MTE2_MTE3>(e);
    WaitFlag<HardEvent::MTE2_MTE3>(e);
    SetAtomicAdd<float>();
    DataCopyPad(accGm, v, DataCopyExtParams{1, 4, 0, 0, 0});
    SetAtomicNone();
}

void test_blocks()
{
    // The order: a permutation, never block order, and not the same for every launch.
    std::vector<int64_t> first, second;
    expect_ok("blocks in a shuffled order", run("order", 8, [&] { first.push_back(GetBlockIdx()); }));
    run("order", 8, [&] { second.push_back(GetBlockIdx()); });
    std::vector<int64_t> sorted = first;
    std::sort(sorted.begin(), sorted.end());
    check(sorted == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}, "every block runs once");
    check(first != sorted, "blocks do not run in block order");
    check(first != second, "two launches run their blocks in different orders");
    std::vector<int64_t> two;
    run("order", 2, [&] { two.push_back(GetBlockIdx()); });
    check(two == std::vector<int64_t>{1, 0}, "two blocks never run in block order");

    const uint64_t out = fake_host::alloc(64 * sizeof(float));
    expect_ok("blocks writing their own bytes", run("store_at", 4, [&] { store_at(fake_host::gm(out), 8); }));
    Outcome o = run("store_at", 4, [&] { store_at(fake_host::gm(out), 4); });
    expect_rule("two blocks write the same bytes", o, "DataCopy(UB->GM): block ");
    check(o.error.find("writes GM") != std::string::npos && o.error.find("that block ") != std::string::npos &&
              o.error.find("also") == std::string::npos && o.error.find("(a race between blocks; give each block") !=
                                                               std::string::npos,
          "the race names both blocks: " + o.error);
    // The message names the two blocks whose 16 bytes overlap: neighbours in block order.
    int64_t b1 = -1, b2 = -1;
    std::sscanf(o.error.c_str(), "kernel store_at, block %" SCNd64, &b1);
    const size_t that = o.error.find("that block ");
    if (that != std::string::npos) {
        std::sscanf(o.error.c_str() + that, "that block %" SCNd64, &b2);
    }
    check(b1 >= 0 && b2 >= 0 && (b1 - b2 == 1 || b2 - b1 == 1), "the racing blocks are neighbours: " + o.error);

    const uint64_t data = fake_host::alloc(8 * sizeof(float));
    o = run("read_what_block_0_writes", 3, [&] { read_what_block_0_writes(fake_host::gm(data)); });
    expect_rule("a block reads what another writes", o, "GM [");
    check((o.error.find("block 0 writes") != std::string::npos && o.error.find("reads in the same launch") !=
                                                                      std::string::npos) ||
              (o.error.find("reads GM") != std::string::npos && o.error.find("that block 0 writes") != std::string::npos),
          "read/write race names block 0: " + o.error);

    const uint64_t acc = fake_host::alloc(8 * sizeof(float));
    o = run("atomic_beside_plain", 3, [&] { atomic_beside_plain(fake_host::gm(acc)); });
    expect_rule("an atomic beside a plain store", o, "atomically adds into");

    // Atomic stores land when the launch ends: reading them back in the launch is refused.
    const uint64_t own = fake_host::alloc(2 * 8 * sizeof(float));
    o = run("atomic_read_back", 2, [&] { atomic_read_back(fake_host::gm(own)); });
    expect_rule("reading back its own atomic store", o, "it added into atomically earlier in the launch");

    // Atomics accumulate in the order the blocks ran, not block order: a float sum whose value
    // depends on the order equals the sum in the order recorded here.
    const uint64_t values = fake_host::alloc(8 * sizeof(float));
    const uint64_t sum = fake_host::alloc(sizeof(float));
    const float addends[8] = {16777216.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
    std::memcpy(host_as<float>(values), addends, sizeof addends);
    std::vector<int64_t> ran;
    expect_ok("atomic sum", run("atomic_sum", 8, [&] {
                  ran.push_back(GetBlockIdx());
                  atomic_sum(fake_host::gm(values), fake_host::gm(sum));
              }));
    float want = 0.0f, inBlockOrder = 0.0f;
    for (size_t i = 0; i < ran.size(); ++i) {
        want += addends[ran[i]];
        inBlockOrder += addends[i];
    }
    check(*host_as<float>(sum) == want, "atomics add in the order the blocks ran");
    check(ran.size() == 8 && ran != std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}, "not in block order");
    // In block order each 1 is lost against 2^24 (ties to even); ones that run before block 0
    // add up first, so from two of them on the sum differs.
    const size_t ones_first = static_cast<size_t>(std::find(ran.begin(), ran.end(), 0) - ran.begin());
    check(ones_first < 2 || want != inBlockOrder, "the order changes the sum");
    std::printf("ok   %-34s sum %.1f in run order (%.1f in block order)\n", "atomic order", want, inBlockOrder);
}

// =================================================================================================
// Compile-time rules: the illegal calls must not compile (as on CANN).
// =================================================================================================

template <class T, class = void>
struct CanAdd : std::false_type {};
template <class T>
struct CanAdd<T, std::void_t<decltype(Add(std::declval<LocalTensor<T>>(), std::declval<LocalTensor<T>>(),
                                          std::declval<LocalTensor<T>>(), 0))>> : std::true_type {};

template <class T, class S, class = void>
struct CanAdds : std::false_type {};
template <class T, class S>
struct CanAdds<T, S, std::void_t<decltype(Adds(std::declval<LocalTensor<T>>(), std::declval<LocalTensor<T>>(),
                                               std::declval<S>(), 0))>> : std::true_type {};

template <class T, class = void>
struct CanExp : std::false_type {};
template <class T>
struct CanExp<T, std::void_t<decltype(Exp(std::declval<LocalTensor<T>>(), std::declval<LocalTensor<T>>(), 0))>>
    : std::true_type {};

template <class D, class S, class = void>
struct CanCast : std::false_type {};
template <class D, class S>
struct CanCast<D, S, std::void_t<decltype(Cast(std::declval<LocalTensor<D>>(), std::declval<LocalTensor<S>>(),
                                               RoundMode::CAST_RINT, 0u))>> : std::true_type {};

template <class T, class = void>
struct CanDuplicate : std::false_type {};
template <class T>
struct CanDuplicate<T, std::void_t<decltype(Duplicate(std::declval<LocalTensor<T>>(), std::declval<T>(), 0))>>
    : std::true_type {};

template <class D, class S, class = void>
struct CanAxpy : std::false_type {};
template <class D, class S>
struct CanAxpy<D, S, std::void_t<decltype(Axpy(std::declval<LocalTensor<D>>(), std::declval<LocalTensor<S>>(),
                                               std::declval<S>(), 0))>> : std::true_type {};

template <class T, class = void>
struct CanDiv : std::false_type {};
template <class T>
struct CanDiv<T, std::void_t<decltype(Div(std::declval<LocalTensor<T>>(), std::declval<LocalTensor<T>>(),
                                          std::declval<LocalTensor<T>>(), 0))>> : std::true_type {};

template <class T, class = void>
struct CanAnd : std::false_type {};
template <class T>
struct CanAnd<T, std::void_t<decltype(And(std::declval<LocalTensor<T>>(), std::declval<LocalTensor<T>>(),
                                          std::declval<LocalTensor<T>>(), 0))>> : std::true_type {};

template <class T, class = void>
struct CanOr : std::false_type {};
template <class T>
struct CanOr<T, std::void_t<decltype(Or(std::declval<LocalTensor<T>>(), std::declval<LocalTensor<T>>(),
                                        std::declval<LocalTensor<T>>(), 0))>> : std::true_type {};

template <class T, class = void>
struct CanReduceSum : std::false_type {};
template <class T>
struct CanReduceSum<T, std::void_t<decltype(ReduceSum(std::declval<LocalTensor<T>>(), std::declval<LocalTensor<T>>(),
                                                      std::declval<LocalTensor<T>>(), 0))>> : std::true_type {};

template <class T, class = void>
struct CanReduceMax : std::false_type {};
template <class T>
struct CanReduceMax<T, std::void_t<decltype(ReduceMax(std::declval<LocalTensor<T>>(), std::declval<LocalTensor<T>>(),
                                                      std::declval<LocalTensor<T>>(), 0))>> : std::true_type {};

template <class T, class = void>
struct CanSelect : std::false_type {};
template <class T>
struct CanSelect<T, std::void_t<decltype(Select(std::declval<LocalTensor<T>>(), std::declval<LocalTensor<uint8_t>>(),
                                                std::declval<LocalTensor<T>>(), std::declval<LocalTensor<T>>(),
                                                SELMODE::VSEL_TENSOR_TENSOR_MODE, 0u))>> : std::true_type {};

// The rows of the A2 vector core's instruction table (vector-intrinsics-910b.md): vdiv, vcadd,
// vcmax and vsel take float16/float32 only, vand/vor int16/uint16 only.
static_assert(CanDiv<float>::value && CanDiv<half>::value && !CanDiv<int32_t>::value && !CanDiv<int16_t>::value,
              "vdiv: float16, float32");
static_assert(CanReduceSum<float>::value && !CanReduceSum<int32_t>::value, "vcadd: float16, float32");
static_assert(CanReduceMax<half>::value && !CanReduceMax<int32_t>::value, "vcmax: float16, float32");
static_assert(CanSelect<float>::value && !CanSelect<int32_t>::value, "vsel: float16, float32");
static_assert(CanAnd<int16_t>::value && CanAnd<uint16_t>::value && !CanAnd<int32_t>::value && !CanAnd<uint32_t>::value,
              "vand: int16, uint16");
static_assert(CanOr<uint16_t>::value && !CanOr<int32_t>::value && !CanOr<uint32_t>::value, "vor: int16, uint16");
static_assert(CanAxpy<float, float>::value && CanAxpy<half, half>::value && CanAxpy<float, half>::value);
static_assert(!CanAxpy<half, float>::value && !CanAxpy<bfloat16_t, bfloat16_t>::value, "Axpy outside the A2 table");
static_assert(CanAdd<float>::value && CanAdd<half>::value && CanAdd<int16_t>::value && CanAdd<int32_t>::value);
static_assert(!CanAdd<bfloat16_t>::value, "bf16 arithmetic must not compile");
static_assert(!CanAdd<int8_t>::value, "int8 arithmetic must not compile");
static_assert(CanAdds<half, half>::value && !CanAdds<half, float>::value,
              "Adds(halfTensor, halfTensor, 1.0f, n) must not compile");
static_assert(CanExp<float>::value && !CanExp<int32_t>::value && !CanExp<bfloat16_t>::value);
static_assert(CanCast<bfloat16_t, float>::value && CanCast<float, bfloat16_t>::value);
static_assert(!CanCast<bfloat16_t, half>::value && !CanCast<half, int32_t>::value, "pairs outside the A2 table");
static_assert(CanDuplicate<bfloat16_t>::value && !CanDuplicate<int8_t>::value);

void test_compile_time()
{
    std::printf("ok   %-34s bf16/int8 Add, Adds(half, 1.0f), Exp/Div/ReduceSum/ReduceMax/Select<int32_t>, "
                "And/Or<int32_t|uint32_t>, Cast bf16<-half do not compile\n",
                "compile-time dtype rules");
}

// Rounding of the number formats against known values.
void test_numerics()
{
    using namespace ascendc_emu;
    check(half(65519.0f).val == 0x7BFF && half(65520.0f).val == 0x7C00, "half overflow threshold (RNE)");
    check(half(5.960464477539063e-8f).val == 0x0001, "smallest half subnormal");
    check(half(2049.0f).val == half(2048.0f).val, "half tie rounds to even");
    check(encode<HalfFormat>(2049.0, Rounding::NearestAway) == half(2050.0f).val, "half tie away");
    check(encode<HalfFormat>(-1.0001, Rounding::Floor) == 0xBC01, "half floor of a negative");
    check(encode<HalfFormat>(1e9, Rounding::Trunc) == 0x7BFF, "half trunc saturates");
    check(bfloat16_t(1.00390625f).val == 0x3F80 && bfloat16_t(1.01171875f).val == 0x3F82, "bf16 ties to even");
    check(convert<int32_t>(2.5f, Rounding::NearestEven) == 2 && convert<int32_t>(-2.5f, Rounding::NearestAway) == -3,
          "float -> int32 rounding");
    check(convert<int16_t>(1e6f, Rounding::Trunc) == 32767, "float -> int16 saturates");
    check(convert<float>(16777217, Rounding::NearestEven) == 16777216.0f, "int32 -> float rounds");
    std::printf("ok   %-34s fp16/bf16/fp32 encodings, RoundModes, saturation\n", "numerics");
}

int main()
{
    test_numerics();
    test_compile_time();
    test_scale_kernel();
    test_vector_ops();
    test_axpy();
    test_pad();
    test_strided();
    test_atomic();
    test_rules();
    test_device_checks();
    test_blocks();
    return summary();
}
