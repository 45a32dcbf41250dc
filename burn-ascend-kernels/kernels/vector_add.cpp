// vector_add: z = x + y over 1-D tensors of equal length (fused-ops contract 7). The smallest
// kernel: it proves the toolchain end to end (build, launch, emulation).
//
// Work split: block b owns elements [b * perCore, min((b + 1) * perCore, total)), processed in
// tiles of `tile` elements with double-buffered queues. A tile that is not a whole number of
// 32-byte blocks (the tail) moves with DataCopyPad, so no neighbouring GM bytes are touched.
// The vector unit has no bf16 arithmetic: bf16 is widened to float, added, rounded back.
#include "kernel_operator.h"


// Global and prefixed: a by-value kernel parameter (see kernel_common.h).
struct BurnVectorAddTiling {
    uint64_t total;    // elements in each tensor
    uint32_t perCore;  // elements per block (a multiple of 32 bytes, except the last block's share)
    uint32_t tile;     // elements per tile (a multiple of 32 bytes)
    uint32_t dtype;    // 0 float, 1 half, 2 bfloat16, 3 int32, 4 int16
};

namespace burn_ascend {

using namespace AscendC;

constexpr int32_t BUFFERS = 2;

template <typename T, typename C>
class VectorAddKernel {
public:
    __aicore__ inline void Init(GM_ADDR x, GM_ADDR y, GM_ADDR z, const BurnVectorAddTiling& t, TPipe* pipe)
    {
        uint64_t start = static_cast<uint64_t>(GetBlockIdx()) * t.perCore;
        count = start >= t.total ? 0 : static_cast<uint32_t>(t.total - start < t.perCore ? t.total - start : t.perCore);
        tile = t.tile;
        xGm.SetGlobalBuffer((__gm__ T*)x + start, count);
        yGm.SetGlobalBuffer((__gm__ T*)y + start, count);
        zGm.SetGlobalBuffer((__gm__ T*)z + start, count);
        pipe->InitBuffer(inX, BUFFERS, tile * sizeof(T));
        pipe->InitBuffer(inY, BUFFERS, tile * sizeof(T));
        pipe->InitBuffer(out, BUFFERS, tile * sizeof(T));
        if (sizeof(C) != sizeof(T)) {
            pipe->InitBuffer(wideX, tile * sizeof(C));
            pipe->InitBuffer(wideY, tile * sizeof(C));
        }
    }

    __aicore__ inline void Process()
    {
        for (uint32_t done = 0; done < count; done += tile) {
            uint32_t n = count - done < tile ? count - done : tile;
            CopyIn(done, n);
            Compute(n);
            CopyOut(done, n);
        }
    }

private:
    __aicore__ inline bool Whole(uint32_t n) const { return (n * sizeof(T)) % 32 == 0; }

    __aicore__ inline void CopyIn(uint32_t at, uint32_t n)
    {
        LocalTensor<T> a = inX.AllocTensor<T>();
        LocalTensor<T> b = inY.AllocTensor<T>();
        if (Whole(n)) {
            DataCopy(a, xGm[at], n);
            DataCopy(b, yGm[at], n);
        } else {
            DataCopyExtParams row{1, static_cast<uint32_t>(n * sizeof(T)), 0, 0, 0};
            DataCopyPadExtParams<T> noPad{false, 0, 0, 0};
            DataCopyPad(a, xGm[at], row, noPad);
            DataCopyPad(b, yGm[at], row, noPad);
        }
        inX.EnQue(a);
        inY.EnQue(b);
    }

    __aicore__ inline void Compute(uint32_t n)
    {
        LocalTensor<T> a = inX.DeQue<T>();
        LocalTensor<T> b = inY.DeQue<T>();
        LocalTensor<T> c = out.AllocTensor<T>();
        if constexpr (sizeof(C) == sizeof(T)) {
            Add(c, a, b, static_cast<int32_t>(n));
        } else {
            LocalTensor<C> wa = wideX.Get<C>();
            LocalTensor<C> wb = wideY.Get<C>();
            Cast(wa, a, RoundMode::CAST_NONE, n);
            Cast(wb, b, RoundMode::CAST_NONE, n);
            Add(wa, wa, wb, static_cast<int32_t>(n));
            Cast(c, wa, RoundMode::CAST_RINT, n);
        }
        out.EnQue(c);
        inX.FreeTensor(a);
        inY.FreeTensor(b);
    }

    __aicore__ inline void CopyOut(uint32_t at, uint32_t n)
    {
        LocalTensor<T> c = out.DeQue<T>();
        if (Whole(n)) {
            DataCopy(zGm[at], c, n);
        } else {
            DataCopyExtParams row{1, static_cast<uint32_t>(n * sizeof(T)), 0, 0, 0};
            DataCopyPad(zGm[at], c, row);
        }
        out.FreeTensor(c);
    }

    TQue<TPosition::VECIN, 1> inX, inY;
    TQue<TPosition::VECOUT, 1> out;
    TBuf<TPosition::VECCALC> wideX, wideY;
    GlobalTensor<T> xGm, yGm, zGm;
    uint32_t count = 0;
    uint32_t tile = 0;
};

template <typename T, typename C>
__aicore__ inline void Run(GM_ADDR x, GM_ADDR y, GM_ADDR z, const BurnVectorAddTiling& t)
{
    TPipe pipe;
    VectorAddKernel<T, C> op;
    op.Init(x, y, z, t, &pipe);
    op.Process();
}

}  // namespace burn_ascend

extern "C" __global__ __aicore__ void vector_add(GM_ADDR x, GM_ADDR y, GM_ADDR z, BurnVectorAddTiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    switch (tiling.dtype) {
        case 0: burn_ascend::Run<float, float>(x, y, z, tiling); break;
        case 1: burn_ascend::Run<half, half>(x, y, z, tiling); break;
        case 2: burn_ascend::Run<bfloat16_t, float>(x, y, z, tiling); break;
        case 3: burn_ascend::Run<int32_t, int32_t>(x, y, z, tiling); break;
        default: burn_ascend::Run<int16_t, int16_t>(x, y, z, tiling); break;
    }
}
