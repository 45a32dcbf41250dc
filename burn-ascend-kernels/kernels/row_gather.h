// Row gathers shared by moe_gather and token_rearrange: out[i, :] = x[source(i), :], where the
// source row comes from an index tensor read on the device.
//
// Work split: block b owns output rows [b * rowsPerCore, ...). Its indices are loaded into the
// unified buffer `idxChunk` at a time; each row moves GM -> UB -> GM in chunks of `chunk`
// elements (tails with DataCopyPad), ping-ponging between two buffers so the load of one row
// overlaps the store of the previous one. The data is only moved, never computed on, so any
// element type of its size works.
#ifndef BURN_ASCEND_ROW_GATHER_H
#define BURN_ASCEND_ROW_GATHER_H

#include "kernel_operator.h"

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
};

namespace burn_ascend {

using namespace AscendC;

template <typename T, typename I>
class RowGatherKernel {
public:
    __aicore__ inline void Init(GM_ADDR x, GM_ADDR indices, GM_ADDR out, const BurnRowGatherTiling& t, TPipe* pipe)
    {
        tiling = t;
        first = GetBlockIdx() * t.rowsPerCore;
        rows = first >= t.outRows ? 0 : (t.outRows - first < t.rowsPerCore ? t.outRows - first : t.rowsPerCore);
        xGm.SetGlobalBuffer((__gm__ T*)x, static_cast<uint64_t>(t.srcRows) * t.cols);
        idxGm.SetGlobalBuffer((__gm__ I*)indices + first, rows);
        outGm.SetGlobalBuffer((__gm__ T*)out + static_cast<uint64_t>(first) * t.cols, static_cast<uint64_t>(rows) * t.cols);
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
            LoadIndices(idx, done, n);
            for (uint32_t r = 0; r < n; ++r) {
                uint32_t src = static_cast<uint32_t>(idx.GetValue(r)) / tiling.divisor;
                CopyRow(ping[(turn & 1) * tiling.chunk], src, done + r, turn);
                ++turn;
            }
        }
        // The last stores must finish before the block ends its use of the buffers.
        PipeBarrier<PIPE_ALL>();
    }

private:
    __aicore__ inline void LoadIndices(const LocalTensor<I>& idx, uint32_t at, uint32_t n)
    {
        DataCopyExtParams row{1, static_cast<uint32_t>(n * sizeof(I)), 0, 0, 0};
        DataCopyPadExtParams<I> noPad{false, 0, 0, 0};
        DataCopyPad(idx, idxGm[at], row, noPad);
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
    TBuf<TPosition::VECCALC> idxBuf, rowBuf;
    GlobalTensor<T> xGm, outGm;
    GlobalTensor<I> idxGm;
};

template <typename I>
__aicore__ inline void RunRowGather(GM_ADDR x, GM_ADDR indices, GM_ADDR out, const BurnRowGatherTiling& t)
{
    TPipe pipe;
    if (t.elemBytes == 4) {
        RowGatherKernel<float, I> op;
        op.Init(x, indices, out, t, &pipe);
        op.Process();
    } else {
        RowGatherKernel<half, I> op;
        op.Init(x, indices, out, t, &pipe);
        op.Process();
    }
}

}  // namespace burn_ascend

#endif
