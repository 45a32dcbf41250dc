// moe_scatter_inverse: the inverse of moe_scatter's permutation, inv[indices[i]] = i for
// indices [N] (int32, N = T*K), built on the device before moe_scatter runs (fused-ops contract 2).
// inv must hold -1 everywhere when the kernel starts (the caller fills it).
//
// Work split: block b owns positions [b * perCore, ...) of indices: it loads them `idxChunk` at
// a time, checks each value (in [0, N), else it traps naming it), stages its position i in a
// 32-byte slot of the unified buffer and stores it to inv[value] with a 4-byte copy. The stores
// are atomic maxima: when indices repeats a value (not a permutation) the positions meet in one
// slot, where the largest wins whatever order the blocks run in, and the value that is missing
// keeps its -1 for moe_scatter to report. A permutation writes every slot exactly once.
#include "kernel_common.h"


// Global and prefixed: a by-value kernel parameter (see kernel_common.h).
struct BurnMoeInverseTiling {
    uint32_t slots;     // N = T*K: entries of indices and inv
    uint32_t perCore;   // positions per block
    uint32_t idxChunk;  // positions loaded and staged at a time (a multiple of 8)
};

namespace burn_ascend {

using namespace AscendC;

class MoeInverseKernel {
public:
    __aicore__ inline void Init(GM_ADDR indices, GM_ADDR inv, const BurnMoeInverseTiling& t, TPipe* pipe)
    {
        tiling = t;
        uint32_t lo = static_cast<uint32_t>(GetBlockIdx()) * t.perCore;
        first = lo < t.slots ? lo : t.slots;
        count = t.slots - first < t.perCore ? t.slots - first : t.perCore;
        idxGm.SetGlobalBuffer((__gm__ int32_t*)indices + first, count);
        invGm.SetGlobalBuffer((__gm__ int32_t*)inv, t.slots);
        pipe->InitBuffer(idxBuf, Align32(t.idxChunk * sizeof(int32_t)));
        // One 32-byte slot per staged position: a UB operand of a copy starts 32-byte aligned.
        pipe->InitBuffer(stageBuf, t.idxChunk * 32);
    }

    __aicore__ inline void Process()
    {
        LocalTensor<int32_t> idx = idxBuf.Get<int32_t>();
        LocalTensor<int32_t> stage = stageBuf.Get<int32_t>();
        const DataCopyExtParams one{1, sizeof(int32_t), 0, 0, 0};
        for (uint32_t done = 0; done < count; done += tiling.idxChunk) {
            const uint32_t n = count - done < tiling.idxChunk ? count - done : tiling.idxChunk;
            if (done > 0) {
                // The previous chunk's stores have read the staging slots refilled below.
                Sync<HardEvent::MTE3_S>();
            }
            DataCopyExtParams rows{1, static_cast<uint32_t>(n * sizeof(int32_t)), 0, 0, 0};
            DataCopyPadExtParams<int32_t> noPad{false, 0, 0, 0};
            DataCopyPad(idx, idxGm[done], rows, noPad);
            Sync<HardEvent::MTE2_S>();
            for (uint32_t r = 0; r < n; ++r) {
                const int32_t v = idx.GetValue(r);
                Require(v >= 0 && static_cast<uint32_t>(v) < tiling.slots,
                        "moe_scatter: indices[%u] = %d is outside [0, %u)\n", first + done + r, v, tiling.slots);
                stage.SetValue(r * 8, static_cast<int32_t>(first + done + r));
            }
            Sync<HardEvent::S_MTE3>();
            SetAtomicMax<int32_t>();
            for (uint32_t r = 0; r < n; ++r) {
                DataCopyPad(invGm[static_cast<uint32_t>(idx.GetValue(r))], stage[r * 8], one);
            }
            SetAtomicNone();
        }
    }

private:
    BurnMoeInverseTiling tiling;
    uint32_t first = 0;
    uint32_t count = 0;
    TBuf<TPosition::VECCALC> idxBuf, stageBuf;
    GlobalTensor<int32_t> idxGm, invGm;
};

__aicore__ inline void RunMoeInverse(GM_ADDR indices, GM_ADDR inv, const BurnMoeInverseTiling& t)
{
    TPipe pipe;
    MoeInverseKernel op;
    op.Init(indices, inv, t, &pipe);
    op.Process();
}

}  // namespace burn_ascend

extern "C" __global__ __aicore__ void moe_scatter_inverse(GM_ADDR indices, GM_ADDR inv, BurnMoeInverseTiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    burn_ascend::RunMoeInverse(indices, inv, tiling);
}
