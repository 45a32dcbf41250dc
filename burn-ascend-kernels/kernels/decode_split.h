// The key range of one split of one request, as every decode_attention kernel cuts it
// (fused-ops contract 5): request b's keys are kv_indices[kv_indptr[b] .. kv_indptr[b+1]],
// cut into num_kv_splits[b] consecutive chunks of ceil(L / splits); splits past the count are
// empty. Read by scalar GM reads (GlobalTensor::GetValue), which both cube and vector cores
// have: a cube core has no unified buffer to stage them in. The checks are listed in
// decode_attention_stage1.cpp; every kernel checks what it reads itself, since each may be the
// first to read a bad value.
#pragma once

#include "kernel_common.h"

namespace burn_ascend {

using namespace AscendC;

struct DecodeSplit {
    int32_t start;  // kv_indptr[b]: the request's first entry of kv_indices
    int64_t from;   // the split's first key, counted from start
    int64_t to;     // one past its last key; from >= to for an empty split
};

__aicore__ inline DecodeSplit ReadDecodeSplit(const GlobalTensor<int32_t>& indptrGm, const GlobalTensor<int32_t>& splitsGm,
                                              uint32_t b, uint32_t c, uint32_t indicesCount, uint32_t maxSplitsCount)
{
    const int32_t start = indptrGm.GetValue(b);
    const int32_t end = indptrGm.GetValue(b + 1);
    const int32_t splits = splitsGm.GetValue(b);
    const int32_t indices = static_cast<int32_t>(indicesCount);
    const int32_t maxSplits = static_cast<int32_t>(maxSplitsCount);
    Require(start >= 0 && start <= indices, "decode_attention: kv_indptr[%u] = %d is outside the %d entries of kv_indices\n",
            b, start, indices);
    Require(end <= indices, "decode_attention: kv_indptr[%u] = %d is past the %d entries of kv_indices\n", b + 1, end,
            indices);
    Require(end >= start, "decode_attention: kv_indptr decreases: kv_indptr[%u] = %d > kv_indptr[%u] = %d\n", b, start,
            b + 1, end);
    Require(end > start,
            "decode_attention: request %u has no cached token (kv_indptr[%u] = kv_indptr[%u] = %d): every request "
            "attends to at least its own key\n",
            b, b, b + 1, start);
    Require(splits >= 1 && splits <= maxSplits, "decode_attention: num_kv_splits[%u] = %d is outside [1, %d] (max_kv_splits)\n",
            b, splits, maxSplits);
    // In 64 bits: c * per passes 2^31 for the empty splits of a long request.
    const int64_t len = end - start;
    const int64_t per = (len + splits - 1) / splits;
    const int64_t from = static_cast<int64_t>(c) * per;
    DecodeSplit s;
    s.start = start;
    s.from = from;
    s.to = from + per < len ? from + per : len;
    return s;
}

// Checks that s, read at kv_indices[at], is a row of the caches.
__aicore__ inline void CheckDecodeSlot(int32_t s, int64_t at, uint32_t slots)
{
    Require(s >= 0 && static_cast<uint32_t>(s) < slots,
            "decode_attention: kv_indices[%d] = %d is not a cache slot (k_cache has %u rows)\n", static_cast<int32_t>(at), s,
            slots);
}

// The cache slot at kv_indices[at], checked.
__aicore__ inline uint64_t ReadDecodeSlot(const GlobalTensor<int32_t>& idxGm, int64_t at, uint32_t slots)
{
    const int32_t s = idxGm.GetValue(static_cast<uint64_t>(at));
    CheckDecodeSlot(s, at, slots);
    return static_cast<uint64_t>(s);
}

// After an Mmad the next one accumulates onto: production cube kernels order the M pipe when
// the result has fewer than 10 whole 16 x 16 fractals (catlass's PIPE_M_BARRIER_THRESHOLD,
// ascend-emulator/ascendc/cube-api.md §4.4), which the emulation enforces. Cube kernels only.
__aicore__ inline void OrderSmallMmad(uint32_t m, uint32_t n)
{
    if ((m / 16) * (n / 16) < 10) {
        PipeBarrier<PIPE_M>();
    }
}

// Deals this block its units of work (request b, key/value head hkv, head tile, split c),
// round-robin over the blocks, and calls unit(b, hkv, first query head, heads, c) for each: the
// one order every stage-1 kernel (vector or cube) numbers its units in.
template <typename F>
__aicore__ inline void ForEachDecodeUnit(uint32_t batch, uint32_t kvHeads, uint32_t group, uint32_t headTile,
                                         uint32_t maxSplits, F unit)
{
    const uint32_t headTiles = (group + headTile - 1) / headTile;
    const uint32_t units = batch * kvHeads * headTiles * maxSplits;
    for (uint32_t u = static_cast<uint32_t>(GetBlockIdx()); u < units; u += static_cast<uint32_t>(GetBlockNum())) {
        const uint32_t c = u % maxSplits;
        uint32_t rest = u / maxSplits;
        const uint32_t tileOfGroup = rest % headTiles;
        rest /= headTiles;
        const uint32_t hkv = rest % kvHeads;
        const uint32_t b = rest / kvHeads;
        const uint32_t first = tileOfGroup * headTile;
        const uint32_t heads = group - first < headTile ? group - first : headTile;
        unit(b, hkv, hkv * group + first, heads, c);
    }
}

}  // namespace burn_ascend
