// Row gathers shared by moe_gather and token_rearrange: out[i, :] = x[source(i), :], where the
// source row comes from an index tensor read on the device.
//
// Work split: block b owns output rows [b * rowsPerCore, ...). Its indices are loaded into the
// unified buffer `idxChunk` at a time; each row moves GM -> UB -> GM in chunks of `chunk`
// elements (tails with DataCopyPad), ping-ponging between two buffers so the load of one row
// overlaps the store of the previous one. The data is only moved, never computed on, so any
// element type of its size works.
//
// Checks: every index must lie in [0, srcRows * divisor) (a negative or too large one traps,
// naming it). With `validate` (BURN_ASCEND_VALIDATE=1) the indices must also be a permutation of
// 0..outRows: block b reads all of them and traps on a value of its own range [b * rowsPerCore,
// ...) seen twice (with every value in range and as many values as slots, no repeat means a
// permutation). That costs every block a read of the whole index tensor, so it is off by default.
#ifndef BURN_ASCEND_ROW_GATHER_H
#define BURN_ASCEND_ROW_GATHER_H

#include "kernel_common.h"

// Global and prefixed: a by-value kernel parameter (see kernel_common.h).
struct BurnRowGatherTiling {
    uint32_t outRows;      // rows of out
    uint32_t srcRows;      // rows of x
    uint32_t cols;         // elements per row
    uint32_t rowsPerCore;  // output rows per block
    uint32_t chunk;        // elements per copy (a multiple of 32 bytes)
    uint32_t idxChunk;     // indices loaded at a time (a multiple of 8)
    uint32_t divisor;      // source row = index / divisor (top-k for moe_gather, 1 otherwise)
    uint32_t elemBytes;    // 2 or 4
    uint32_t indexBytes;   // 4 (int32) or 8 (int64)
    uint32_t validate;     // 1: also check that the indices are a permutation of 0..outRows
};

namespace burn_ascend {

using namespace AscendC;

template <typename T, typename I>
class RowGatherKernel {
public:
    // `op` and `what` name the kernel's op and its index tensor in the check messages.
    __aicore__ inline void Init(GM_ADDR x, GM_ADDR indices, GM_ADDR out, const BurnRowGatherTiling& t, TPipe* pipe,
                                __gm__ const char* op, __gm__ const char* what)
    {
        tiling = t;
        opName = op;
        idxName = what;
        limit = static_cast<int64_t>(t.srcRows) * t.divisor;
        first = GetBlockIdx() * t.rowsPerCore;
        rows = first >= t.outRows ? 0 : (t.outRows - first < t.rowsPerCore ? t.outRows - first : t.rowsPerCore);
        xGm.SetGlobalBuffer((__gm__ T*)x, static_cast<uint64_t>(t.srcRows) * t.cols);
        allIdxGm.SetGlobalBuffer((__gm__ I*)indices, t.outRows);
        idxGm.SetGlobalBuffer((__gm__ I*)indices + first, rows);
        outGm.SetGlobalBuffer((__gm__ T*)out + static_cast<uint64_t>(first) * t.cols, static_cast<uint64_t>(rows) * t.cols);
        pipe->InitBuffer(idxBuf, t.idxChunk * sizeof(I));
        pipe->InitBuffer(rowBuf, 2 * t.chunk * sizeof(T));
        if (t.validate) {
            pipe->InitBuffer(seenBuf, Align32(SeenWords() * sizeof(int32_t)));
        }
    }

    __aicore__ inline void Process()
    {
        LocalTensor<I> idx = idxBuf.Get<I>();
        LocalTensor<T> ping = rowBuf.Get<T>();
        if (tiling.validate) {
            CheckPermutation(idx);
        }
        uint32_t turn = 0;
        for (uint32_t done = 0; done < rows; done += tiling.idxChunk) {
            uint32_t n = rows - done < tiling.idxChunk ? rows - done : tiling.idxChunk;
            LoadIndices(idx, idxGm[done], n);
            for (uint32_t r = 0; r < n; ++r) {
                const int64_t v = static_cast<int64_t>(idx.GetValue(r));
                Require(v >= 0 && v < limit, "%s: %s[%u] = %d is outside [0, %d)\n", opName, idxName, first + done + r, v,
                        limit);
                uint32_t src = static_cast<uint32_t>(v / tiling.divisor);
                CopyRow(ping[(turn & 1) * tiling.chunk], src, done + r, turn);
                ++turn;
            }
        }
        // The last stores must finish before the block ends its use of the buffers.
        PipeBarrier<PIPE_ALL>();
    }

private:
    // Bit words of the `seen` map: one bit per value of this block's range.
    __aicore__ inline uint32_t SeenWords() const { return ((tiling.rowsPerCore + 31) / 32 + 7) / 8 * 8; }

    // Under validation: no value of this block's range [first, first + rows) appears twice among
    // all the indices. Out-of-range values are left to the gather's own check.
    __aicore__ inline void CheckPermutation(const LocalTensor<I>& idx)
    {
        LocalTensor<int32_t> seen = seenBuf.Get<int32_t>();
        Duplicate(seen, 0, static_cast<int32_t>(SeenWords()));
        Sync<HardEvent::V_S>();
        for (uint32_t done = 0; done < tiling.outRows; done += tiling.idxChunk) {
            uint32_t n = tiling.outRows - done < tiling.idxChunk ? tiling.outRows - done : tiling.idxChunk;
            LoadIndices(idx, allIdxGm[done], n);
            for (uint32_t r = 0; r < n; ++r) {
                const int64_t v = static_cast<int64_t>(idx.GetValue(r));
                if (v < static_cast<int64_t>(first) || v >= static_cast<int64_t>(first) + rows) {
                    continue;
                }
                const uint32_t bit = static_cast<uint32_t>(v) - first;
                const int32_t word = seen.GetValue(bit / 32);
                const int32_t mask = static_cast<int32_t>(1u << (bit % 32));
                Require((word & mask) == 0,
                        "%s: %s[%u] = %d repeats an earlier entry: %s must be a permutation of 0..%u (checked "
                        "because BURN_ASCEND_VALIDATE=1)\n",
                        opName, idxName, done + r, v, idxName, tiling.outRows);
                seen.SetValue(bit / 32, word | mask);
            }
        }
    }

    __aicore__ inline void LoadIndices(const LocalTensor<I>& idx, const GlobalTensor<I>& from, uint32_t n)
    {
        DataCopyExtParams row{1, static_cast<uint32_t>(n * sizeof(I)), 0, 0, 0};
        DataCopyPadExtParams<I> noPad{false, 0, 0, 0};
        DataCopyPad(idx, from, row, noPad);
        event_t e = static_cast<event_t>(GetTPipePtr()->FetchEventID(HardEvent::MTE2_S));
        SetFlag<HardEvent::MTE2_S>(e);
        WaitFlag<HardEvent::MTE2_S>(e);
    }

    // Moves row `src` of x to row `dst` of this block's output through `buf`.
    __aicore__ inline void CopyRow(const LocalTensor<T>& buf, uint32_t src, uint32_t dst, uint32_t turn)
    {
        uint32_t cols = tiling.cols;
        uint64_t from = static_cast<uint64_t>(src) * cols;
        uint64_t to = static_cast<uint64_t>(dst) * cols;
        for (uint32_t at = 0; at < cols; at += tiling.chunk) {
            uint32_t n = cols - at < tiling.chunk ? cols - at : tiling.chunk;
            // The store that last used this buffer must be done before it is refilled.
            if (turn >= 2 || at > 0) {
                event_t w = static_cast<event_t>(GetTPipePtr()->FetchEventID(HardEvent::MTE3_MTE2));
                SetFlag<HardEvent::MTE3_MTE2>(w);
                WaitFlag<HardEvent::MTE3_MTE2>(w);
            }
            if ((n * sizeof(T)) % 32 == 0) {
                DataCopy(buf, xGm[from + at], n);
            } else {
                DataCopyExtParams row{1, static_cast<uint32_t>(n * sizeof(T)), 0, 0, 0};
                DataCopyPadExtParams<T> noPad{false, 0, 0, 0};
                DataCopyPad(buf, xGm[from + at], row, noPad);
            }
            event_t r = static_cast<event_t>(GetTPipePtr()->FetchEventID(HardEvent::MTE2_MTE3));
            SetFlag<HardEvent::MTE2_MTE3>(r);
            WaitFlag<HardEvent::MTE2_MTE3>(r);
            if ((n * sizeof(T)) % 32 == 0) {
                DataCopy(outGm[to + at], buf, n);
            } else {
                DataCopyExtParams row{1, static_cast<uint32_t>(n * sizeof(T)), 0, 0, 0};
                DataCopyPad(outGm[to + at], buf, row);
            }
        }
    }

    BurnRowGatherTiling tiling;
    uint32_t first = 0;
    uint32_t rows = 0;
    int64_t limit = 0;  // indices lie in [0, limit)
    __gm__ const char* opName = "";
    __gm__ const char* idxName = "";
    TBuf<TPosition::VECCALC> idxBuf, rowBuf, seenBuf;
    GlobalTensor<T> xGm, outGm;
    GlobalTensor<I> idxGm, allIdxGm;
};

template <typename I>
__aicore__ inline void RunRowGather(GM_ADDR x, GM_ADDR indices, GM_ADDR out, const BurnRowGatherTiling& t,
                                    __gm__ const char* op, __gm__ const char* what)
{
    TPipe pipe;
    if (t.elemBytes == 4) {
        RowGatherKernel<float, I> gather;
        gather.Init(x, indices, out, t, &pipe, op, what);
        gather.Process();
    } else {
        RowGatherKernel<half, I> gather;
        gather.Init(x, indices, out, t, &pipe, op, what);
        gather.Process();
    }
}

}  // namespace burn_ascend

#endif
