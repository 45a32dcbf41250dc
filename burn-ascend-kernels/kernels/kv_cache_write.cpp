// kv_cache_write: the paged KV-cache write of a step, both of its row sources in one launch (what
// the ATB ReshapeAndCache operator does for vLLM on Ascend; aclnn 8.1.RC1 has no paged form,
// aclnn-fused-decode-ops.md §9.1). For token t and each part p (keys, then values when there are
// any):
//   cache_p[slots[t] * stride_p + offset_p + j] = src_p[t * cols_p + j],  j in [0, cols_p).
// A part writes a column range of its cache's rows, so MLA's latent and rotary rows go to the
// two ends of one cache row without being joined first (both parts then name the same cache).
//
// Checks (on values the kernel reads anyway): every slot lies in [0, cacheRows_p) for each part;
// a bad one traps naming it instead of writing another request's page. Slots must be distinct
// (the scheduler allocates them so): two tokens of one slot are a race between blocks, which the
// emulation reports.
//
// Work split: tokens evenly over the vector cores; each block loads its slots `idxChunk` at a
// time and moves each part's row GM -> UB -> GM in chunks of `chunk` elements, ping-ponging
// between two buffers so the load of one piece overlaps the store of the one before. The rows are
// only moved, never computed on, so any element type of their size works.
#include "kernel_common.h"

// Global and prefixed: a by-value kernel parameter (see kernel_common.h).
struct BurnKvCacheWriteTiling {
    uint32_t tokens;       // T: rows of each source, entries of slots
    uint32_t parts;        // 1 (keys) or 2 (keys and values)
    uint32_t rowsPerCore;  // tokens per block
    uint32_t chunk;        // elements per copy (a multiple of 32 bytes)
    uint32_t idxChunk;     // slots loaded at a time (a multiple of 8)
    uint32_t elemBytes;    // 2 or 4
    uint32_t indexBytes;   // 4 (int32) or 8 (int64)
    uint32_t cacheRows[2]; // rows (slots) of each part's cache
    uint32_t stride[2];    // elements per cache row of each part
    uint32_t offset[2];    // first column each part writes
    uint32_t cols[2];      // elements each part writes per token
};

namespace burn_ascend {

using namespace AscendC;

template <typename T, typename I>
class KvCacheWriteKernel {
public:
    __aicore__ inline void Init(GM_ADDR slots, GM_ADDR k, GM_ADDR v, GM_ADDR kCache, GM_ADDR vCache,
                                const BurnKvCacheWriteTiling& t, TPipe* pipe)
    {
        tiling = t;
        first = GetBlockIdx() * t.rowsPerCore;
        rows = first >= t.tokens ? 0 : (t.tokens - first < t.rowsPerCore ? t.tokens - first : t.rowsPerCore);
        slotGm.SetGlobalBuffer((__gm__ I*)slots + first, rows);
        GM_ADDR src[2] = {k, v};
        GM_ADDR cache[2] = {kCache, vCache};
        for (uint32_t p = 0; p < t.parts; ++p) {
            srcGm[p].SetGlobalBuffer((__gm__ T*)src[p] + static_cast<uint64_t>(first) * t.cols[p],
                                     static_cast<uint64_t>(rows) * t.cols[p]);
            cacheGm[p].SetGlobalBuffer((__gm__ T*)cache[p], static_cast<uint64_t>(t.cacheRows[p]) * t.stride[p]);
        }
        pipe->InitBuffer(idxBuf, t.idxChunk * sizeof(I));
        pipe->InitBuffer(rowBuf, 2 * t.chunk * sizeof(T));
    }

    __aicore__ inline void Process()
    {
        LocalTensor<I> idx = idxBuf.Get<I>();
        LocalTensor<T> ping = rowBuf.Get<T>();
        uint32_t turn = 0;
        for (uint32_t done = 0; done < rows; done += tiling.idxChunk) {
            uint32_t n = rows - done < tiling.idxChunk ? rows - done : tiling.idxChunk;
            Load(idx, slotGm[done], n);
            Sync<HardEvent::MTE2_S>();
            for (uint32_t r = 0; r < n; ++r) {
                const int64_t slot = static_cast<int64_t>(idx.GetValue(r));
                for (uint32_t p = 0; p < tiling.parts; ++p) {
                    Require(slot >= 0 && slot < static_cast<int64_t>(tiling.cacheRows[p]),
                            "kv_cache_write: slots[%u] = %d is outside [0, %u), the slots of the cache of part %u "
                            "(0 keys, 1 values)\n",
                            first + done + r, slot, tiling.cacheRows[p], p);
                    uint64_t to = static_cast<uint64_t>(slot) * tiling.stride[p] + tiling.offset[p];
                    MoveRow(p, static_cast<uint64_t>(done + r) * tiling.cols[p], to, ping, turn);
                }
            }
        }
        // The last stores must finish before the block ends its use of the buffers.
        PipeBarrier<PIPE_ALL>();
    }

private:
    // Moves `cols[p]` elements from srcGm[p][from] to cacheGm[p][to] through the two buffers.
    __aicore__ inline void MoveRow(uint32_t p, uint64_t from, uint64_t to, const LocalTensor<T>& ping, uint32_t& turn)
    {
        const uint32_t cols = tiling.cols[p];
        for (uint32_t at = 0; at < cols; at += tiling.chunk, ++turn) {
            uint32_t n = cols - at < tiling.chunk ? cols - at : tiling.chunk;
            LocalTensor<T> buf = ping[(turn & 1) * tiling.chunk];
            // The store that last used this buffer must be done before it is refilled.
            if (turn >= 2) {
                Sync<HardEvent::MTE3_MTE2>();
            }
            Load(buf, srcGm[p][from + at], n);
            Sync<HardEvent::MTE2_MTE3>();
            Store(cacheGm[p][to + at], buf, n);
        }
    }

    BurnKvCacheWriteTiling tiling;
    uint32_t first = 0;
    uint32_t rows = 0;
    TBuf<TPosition::VECCALC> idxBuf, rowBuf;
    GlobalTensor<I> slotGm;
    GlobalTensor<T> srcGm[2], cacheGm[2];
};

template <typename I>
__aicore__ inline void RunKvCacheWrite(GM_ADDR slots, GM_ADDR k, GM_ADDR v, GM_ADDR kCache, GM_ADDR vCache,
                                       const BurnKvCacheWriteTiling& t)
{
    TPipe pipe;
    if (t.elemBytes == 4) {
        KvCacheWriteKernel<float, I> write;
        write.Init(slots, k, v, kCache, vCache, t, &pipe);
        write.Process();
    } else {
        KvCacheWriteKernel<half, I> write;
        write.Init(slots, k, v, kCache, vCache, t, &pipe);
        write.Process();
    }
}

}  // namespace burn_ascend

extern "C" __global__ __aicore__ void kv_cache_write(GM_ADDR slots, GM_ADDR k, GM_ADDR v, GM_ADDR k_cache,
                                                     GM_ADDR v_cache, BurnKvCacheWriteTiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    if (tiling.indexBytes == 8) {
        burn_ascend::RunKvCacheWrite<int64_t>(slots, k, v, k_cache, v_cache, tiling);
    } else {
        burn_ascend::RunKvCacheWrite<int32_t>(slots, k, v, k_cache, v_cache, tiling);
    }
}
