// What every extend_attention kernel reads alike: the requests' lengths, the units of work, and
// the cache slot of a key position through the block table.
//
// Lengths: `lens` int32 [2R + 1]: lens[0..R] the running chunk starts (request r's query rows
// are tokens lens[r] .. lens[r + 1] of q, lens[0] = 0, lens[R] = T), lens[R + 1 + r] request
// r's cached tokens, its chunk included (kv). Row i of a chunk of n rows is position
// kv - n + i and sees positions 0 ..= kv - n + i (causal). The host builds them from the
// scheduler's lengths; every kernel checks what it reads, since each may be the first to read a
// bad value.
//
// Passes: the keys are taken in windows of `window` positions, one window per launch of the
// three kernels (pass p: positions p * window .. (p + 1) * window), so the workspaces hold one
// window, whatever the context. The softmax kernel keeps each row's running max and sum and
// folds each window's value product into a rescaled f32 accumulator (online softmax across the
// windows).
#pragma once

#include "decode_split.h"

namespace burn_ascend {

using namespace AscendC;

struct ExtendRequest {
    uint32_t first;  // its first row of q (a token index)
    uint32_t rows;   // its chunk's tokens
    int64_t kv;      // its cached tokens, the chunk included
};

__aicore__ inline ExtendRequest ReadExtendRequest(const GlobalTensor<int32_t>& lensGm, uint32_t r, uint32_t requests,
                                                  uint32_t tokens, uint32_t capacity)
{
    const int32_t q0 = lensGm.GetValue(r);
    const int32_t q1 = lensGm.GetValue(r + 1);
    const int32_t kv = lensGm.GetValue(requests + 1 + r);
    Require(r != 0 || q0 == 0, "extend_attention: the chunk starts begin at %d, not 0\n", q0);
    Require(q1 >= q0 && q1 <= static_cast<int32_t>(tokens),
            "extend_attention: request %u's chunk rows %d .. %d are not within the %u rows of q\n", r, q0, q1, tokens);
    Require(r + 1 != requests || q1 == static_cast<int32_t>(tokens),
            "extend_attention: the chunks end at row %d, not at the %u rows of q\n", q1, tokens);
    Require(kv >= q1 - q0 && static_cast<int64_t>(kv) <= static_cast<int64_t>(capacity),
            "extend_attention: request %u caches %d tokens: it must be at least its chunk (%d) and at most the block "
            "table's %u slots\n",
            r, kv, q1 - q0, capacity);
    ExtendRequest q;
    q.first = static_cast<uint32_t>(q0);
    q.rows = static_cast<uint32_t>(q1 - q0);
    q.kv = kv;
    return q;
}

// Deals this block its units, round-robin over the blocks in one order: per request, `per(q)`
// units, handed to unit(q, local index).
template <typename P, typename F>
__aicore__ inline void ForEachExtendUnit(const GlobalTensor<int32_t>& lensGm, uint32_t requests, uint32_t tokens,
                                         uint32_t capacity, P per, F unit)
{
    const uint32_t blocks = static_cast<uint32_t>(GetBlockNum());
    const uint32_t me = static_cast<uint32_t>(GetBlockIdx());
    uint64_t base = 0;
    for (uint32_t r = 0; r < requests; ++r) {
        const ExtendRequest q = ReadExtendRequest(lensGm, r, requests, tokens, capacity);
        const uint64_t n = per(q);
        uint64_t u = base + (me + blocks - base % blocks) % blocks;
        for (; u < base + n; u += blocks) {
            unit(q, r, static_cast<uint32_t>(u - base));
        }
        base += n;
    }
}

// A cube extend kernel's units, dealt as ForEachExtendUnit deals them: per request, its token
// tiles x kv heads x head tiles (a group's heads cut in tiles of `t.headTile`), handed to
// unit(q, r, kv head, first query head, heads, first chunk row, rows).
template <typename Tiling, typename F>
__aicore__ inline void ForEachExtendCubeUnit(const GlobalTensor<int32_t>& lensGm, const Tiling& t, F unit)
{
    const uint32_t group = t.qHeads / t.kvHeads;
    const uint32_t headTiles = (group + t.headTile - 1) / t.headTile;
    const uint32_t perTile = t.kvHeads * headTiles;
    ForEachExtendUnit(
        lensGm, t.requests, t.tokens, t.width * t.pageSize,
        [&t, perTile](const ExtendRequest& q) {
            return static_cast<uint64_t>((q.rows + t.tokenTile - 1) / t.tokenTile) * perTile;
        },
        [&t, &unit, group, headTiles](const ExtendRequest& q, uint32_t r, uint32_t local) {
            const uint32_t ht = local % headTiles;
            const uint32_t hkv = (local / headTiles) % t.kvHeads;
            const uint32_t i0 = local / headTiles / t.kvHeads * t.tokenTile;
            const uint32_t first = ht * t.headTile;
            const uint32_t heads = group - first < t.headTile ? group - first : t.headTile;
            const uint32_t toks = q.rows - i0 < t.tokenTile ? q.rows - i0 : t.tokenTile;
            unit(q, r, hkv, hkv * group + first, heads, i0, toks);
        });
}

// The cache slot of position `pos` of request r: block_table[r, pos / pageSize] * pageSize +
// pos % pageSize, the page checked against the caches.
__aicore__ inline uint64_t ExtendSlot(const GlobalTensor<int32_t>& tableGm, uint32_t r, int64_t pos, uint32_t width,
                                      uint32_t pageSize, uint32_t slots)
{
    const uint32_t k = static_cast<uint32_t>(pos / pageSize);
    const int32_t page = tableGm.GetValue(static_cast<uint64_t>(r) * width + k);
    Require(page >= 0 && (static_cast<uint64_t>(page) + 1) * pageSize <= slots,
            "extend_attention: blockTable[%u][%u] = %d is not a page of the caches (%u slots in pages of %u)\n", r, k,
            page, slots, pageSize);
    return static_cast<uint64_t>(page) * pageSize + static_cast<uint64_t>(pos % pageSize);
}

// The keys a cube unit of `tokens` chunk rows from row i0 of request q sees in window
// [w0, w0 + window): positions w0 .. end (end <= w0 the unit has none).
__aicore__ inline int64_t ExtendUnitEnd(const ExtendRequest& q, uint32_t i0, uint32_t tokens, int64_t w0, uint32_t window)
{
    const int64_t last = q.kv - q.rows + i0 + tokens;  // one past the unit's last row's position
    return last < w0 + window ? last : w0 + window;
}

}  // namespace burn_ascend
