// alloc_extend: paged KV-cache slot allocation for a batch of requests whose caches grow from
// prefix_lens[b] to seq_lens[b] tokens (fused-ops contract 4). Every length is read on the
// device, so a decode step never waits for the host.
//
// For request b with p = prefix_lens[b], s = seq_lens[b] and pages of P slots:
//   new_pages(b) = ceil(s/P) - ceil(p/P), page_base(b) = sum of new_pages before b,
//   out_base(b) = sum of (s - p) before b;
//   token j in [p, s) goes to out_slots[out_base(b) + j - p] =
//     last_loc[b] + 1 + (j - p) while it is still inside the partly filled last page
//     (j < ceil(p/P) * P), else free_pages[page_base(b) + j/P - ceil(p/P)] * P + j % P.
// The last block writes the totals: pages taken and tokens extended.
//
// Checks (on values the kernel reads anyway; a failed one traps naming the value, instead of
// writing negative totals or slots that wrap into other pages): 0 <= prefix_lens[b] <=
// seq_lens[b] < 2^31; last_loc[b], when the request fills its partly filled last page, is a slot
// at the page offset of token prefix_lens[b] - 1; every page a token takes is listed in
// free_pages (a batch needing more pages than the list holds is the scheduler's error, checked
// before launch, never a silent wrap); every page id is >= 0 and small enough for its slots to
// fit the index type; the lengths add up to exactly out_slots' length (the last block, which
// scans every request, checks the sum). Positions the lengths do not reach are written -1 by
// their block before the last block reports the shortfall, so no block leaves its range unwritten.
//
// Work split: the output positions are cut into equal ranges, one per block, so the work is
// balanced whatever the lengths. Each block streams the lengths `lenTile` requests at a time to
// form the running sums on the scalar unit, stops once past its range (the last block goes on
// to the end for the totals), and fills its slots into two ping-pong staging tiles of
// `slotTile` slots, storing one while it fills the other. The free list is read through a
// window of `pageTile` entries, only where the block's tokens take pages.
//
// Positions and lengths are int32 on the scalar unit (a sequence holds fewer than 2^31 tokens,
// and out_slots fewer than 2^31 entries); slot values are of the index type, so an int64 cache
// of 2^31 slots or more computes them in 64 bits.
#include "kernel_common.h"


// Global and prefixed: a by-value kernel parameter (see kernel_common.h).
struct BurnAllocExtendTiling {
    uint32_t batch;         // B
    uint32_t freePages;     // entries of free_pages
    uint32_t pageSize;      // slots per page
    uint32_t outSlots;      // entries of out_slots: sum(seq_lens - prefix_lens), known to the scheduler
    uint32_t slotsPerCore;  // output positions per block (a multiple of 8)
    uint32_t slotTile;      // slots staged per store (a multiple of 8)
    uint32_t lenTile;       // requests whose lengths are loaded at a time (a multiple of 8)
    uint32_t pageTile;      // free-list entries loaded at a time (a multiple of 8)
    uint32_t indexBytes;    // 4 (int32) or 8 (int64), for every index tensor
};

namespace burn_ascend {

using namespace AscendC;

template <typename I>
class AllocExtendKernel {
public:
    __aicore__ inline void Init(GM_ADDR prefixLens, GM_ADDR seqLens, GM_ADDR lastLoc, GM_ADDR freePages, GM_ADDR outSlots,
                                GM_ADDR totals, const BurnAllocExtendTiling& t, TPipe* pipe)
    {
        tiling = t;
        uint32_t lo = static_cast<uint32_t>(GetBlockIdx()) * t.slotsPerCore;
        lo = lo < t.outSlots ? lo : t.outSlots;
        uint32_t hi = t.outSlots - lo < t.slotsPerCore ? t.outSlots : lo + t.slotsPerCore;
        outLo = static_cast<int32_t>(lo);
        outHi = static_cast<int32_t>(hi);
        next = outLo;
        lastBlock = GetBlockIdx() == GetBlockNum() - 1;
        prefixGm.SetGlobalBuffer((__gm__ I*)prefixLens, t.batch);
        seqGm.SetGlobalBuffer((__gm__ I*)seqLens, t.batch);
        lastGm.SetGlobalBuffer((__gm__ I*)lastLoc, t.batch);
        freeGm.SetGlobalBuffer((__gm__ I*)freePages, t.freePages);
        outGm.SetGlobalBuffer((__gm__ I*)outSlots, t.outSlots);
        totalsGm.SetGlobalBuffer((__gm__ I*)totals, 2);
        uint32_t lens = Align32(t.lenTile * sizeof(I));
        pipe->InitBuffer(prefixBuf, lens);
        pipe->InitBuffer(seqBuf, lens);
        pipe->InitBuffer(lastBuf, lens);
        pipe->InitBuffer(pageBuf, Align32(t.pageTile * sizeof(I)));
        pipe->InitBuffer(stageBuf, 2 * Align32(t.slotTile * sizeof(I)));
        pipe->InitBuffer(totalsBuf, 32);
        stored[0] = GetTPipePtr()->AllocEventID<HardEvent::MTE3_S>();
        stored[1] = GetTPipePtr()->AllocEventID<HardEvent::MTE3_S>();
    }

    __aicore__ inline void Process()
    {
        LocalTensor<I> prefix = prefixBuf.Get<I>();
        LocalTensor<I> seq = seqBuf.Get<I>();
        LocalTensor<I> last = lastBuf.Get<I>();
        const int32_t ps = static_cast<int32_t>(tiling.pageSize);
        int32_t pageBase = 0;
        int32_t outBase = 0;
        bool scanning = true;
        for (uint32_t r0 = 0; scanning && r0 < tiling.batch; r0 += tiling.lenTile) {
            uint32_t n = tiling.batch - r0 < tiling.lenTile ? tiling.batch - r0 : tiling.lenTile;
            Load(prefix, prefixGm[r0], n);
            Load(seq, seqGm[r0], n);
            Load(last, lastGm[r0], n);
            Sync<HardEvent::MTE2_S>();
            for (uint32_t k = 0; k < n; ++k) {
                const uint32_t b = r0 + k;
                const I pv = prefix.GetValue(k);
                const I sv = seq.GetValue(k);
                Require(pv >= 0 && pv <= sv && sv <= static_cast<I>(0x7fffffff),
                        "alloc_extend: request %u has prefix_lens = %d and seq_lens = %d: a cache grows, so 0 <= "
                        "prefix_lens <= seq_lens < 2^31\n",
                        b, pv, sv);
                int32_t p = static_cast<int32_t>(pv);
                int32_t s = static_cast<int32_t>(sv);
                int32_t filled = CeilPages(p, ps);
                int32_t extend = s - p;
                Require(extend <= static_cast<int32_t>(tiling.outSlots) - outBase,
                        "alloc_extend: request %u takes out_slots up to position %d, but out_slots holds %u "
                        "(extend_total must be the sum of seq_lens - prefix_lens)\n",
                        b, static_cast<int64_t>(outBase) + extend, tiling.outSlots);
                const I lastLoc = last.GetValue(k);
                if (p % ps != 0 && s > p) {
                    Require(lastLoc >= 0 && lastLoc % ps == static_cast<I>((p - 1) % ps) && lastLoc / ps <= MaxPage(),
                            "alloc_extend: last_loc[%u] = %d is not the slot of token %d in a page of %d slots (its "
                            "offset in the page must be %d)\n",
                            b, lastLoc, p - 1, ps, (p - 1) % ps);
                }
                // From `next`, not outLo: a position is written once, in order.
                int32_t from = outBase > next ? outBase : next;
                int32_t to = outBase + extend < outHi ? outBase + extend : outHi;
                if (from < to) {
                    Request(b, p + (from - outBase), p + (to - outBase), p, filled, lastLoc, pageBase);
                }
                pageBase += CeilPages(s, ps) - filled;
                outBase += extend;
                if (!lastBlock && outBase >= outHi) {
                    scanning = false;
                    break;
                }
            }
        }
        // Positions no request reached (the lengths sum to less than out_slots holds, which the
        // last block reports below): written once all the same.
        while (next < outHi) {
            Emit(static_cast<I>(-1));
        }
        if (lastBlock) {
            Require(outBase == static_cast<int32_t>(tiling.outSlots),
                    "alloc_extend: the lengths add up to %d new tokens, but out_slots holds %u (extend_total must be "
                    "the sum of seq_lens - prefix_lens)\n",
                    outBase, tiling.outSlots);
        }
        Flush();
        for (int32_t b = 0; b < 2; ++b) {
            if (pending[b]) {
                WaitFlag<HardEvent::MTE3_S>(stored[b]);
            }
            GetTPipePtr()->ReleaseEventID<HardEvent::MTE3_S>(stored[b]);
        }
        if (lastBlock) {
            LocalTensor<I> t = totalsBuf.Get<I>();
            t.SetValue(0, static_cast<I>(pageBase));
            t.SetValue(1, static_cast<I>(outBase));
            Sync<HardEvent::S_MTE3>();
            Store(totalsGm, t, 2);
        }
    }

private:

    // ceil(len / ps), without the overflow of len + ps - 1.
    __aicore__ static inline int32_t CeilPages(int32_t len, int32_t ps) { return len / ps + (len % ps > 0 ? 1 : 0); }

    // The largest page id whose slots all fit the index type.
    __aicore__ inline I MaxPage() const
    {
        const I most = sizeof(I) == 8 ? static_cast<I>(0x7fffffffffffffffll) : static_cast<I>(0x7fffffff);
        const I ps = static_cast<I>(tiling.pageSize);
        return (most - (ps - 1)) / ps;
    }

    // The first slot of the page that request b's free-list position `at` holds, through a
    // window of `pageTile` entries. The position must be listed and the page id valid.
    __aicore__ inline I PageBase(uint32_t b, int32_t at)
    {
        Require(at >= 0 && static_cast<uint32_t>(at) < tiling.freePages,
                "alloc_extend: request %u needs free-list entry %d, but free_pages lists %u pages (the batch needs more "
                "pages than are free)\n",
                b, at, tiling.freePages);
        LocalTensor<I> pages = pageBuf.Get<I>();
        if (at < windowLo || at >= windowLo + windowLen) {
            uint32_t left = tiling.freePages - static_cast<uint32_t>(at);
            windowLo = at;
            windowLen = static_cast<int32_t>(left < tiling.pageTile ? left : tiling.pageTile);
            Load(pages, freeGm[static_cast<uint32_t>(at)], static_cast<uint32_t>(windowLen));
            Sync<HardEvent::MTE2_S>();
        }
        const I page = pages.GetValue(static_cast<uint32_t>(at - windowLo));
        Require(page >= 0 && page <= MaxPage(), "alloc_extend: free_pages[%d] = %d is not a page id (0..%d for pages of %u slots)\n",
                at, page, MaxPage(), tiling.pageSize);
        return page * static_cast<I>(tiling.pageSize);
    }

    // Slots of positions [j0, j1) of request b with prefix p whose last partly filled page ends
    // at position filled * P; its new pages start at free-list position pageBase.
    __aicore__ inline void Request(uint32_t b, int32_t j0, int32_t j1, int32_t p, int32_t filled, I lastLoc, int32_t pageBase)
    {
        const int32_t ps = static_cast<int32_t>(tiling.pageSize);
        int32_t partialEnd = filled * ps;
        int32_t j = j0;
        I slot = lastLoc + static_cast<I>(1 + (j - p));
        for (; j < j1 && j < partialEnd; ++j) {
            Emit(slot);
            slot = slot + static_cast<I>(1);
        }
        if (j == j1) {
            return;
        }
        // Page by page: the division happens once per request, not per token.
        int32_t at = pageBase + j / ps - filled;
        int32_t offset = j % ps;
        I base = PageBase(b, at);
        for (; j < j1; ++j) {
            Emit(base + static_cast<I>(offset));
            if (++offset == ps && j + 1 < j1) {
                offset = 0;
                base = PageBase(b, ++at);
            }
        }
    }

    // Appends the slot of output position `next` to the staging tile being filled.
    __aicore__ inline void Emit(I slot)
    {
        if (staged == 0 && pending[current]) {
            // The store that last read this tile must be done before it is refilled.
            WaitFlag<HardEvent::MTE3_S>(stored[current]);
            pending[current] = false;
        }
        Tile(current).SetValue(staged, slot);
        ++next;
        if (++staged == tiling.slotTile) {
            Flush();
        }
    }

    // Stores the staged slots and switches to the other tile.
    __aicore__ inline void Flush()
    {
        if (staged == 0) {
            return;
        }
        Sync<HardEvent::S_MTE3>();
        Store(outGm[static_cast<uint32_t>(next) - staged], Tile(current), staged);
        SetFlag<HardEvent::MTE3_S>(stored[current]);
        pending[current] = true;
        current ^= 1;
        staged = 0;
    }

    __aicore__ inline LocalTensor<I> Tile(uint32_t which)
    {
        return stageBuf.Get<I>()[which * (Align32(tiling.slotTile * sizeof(I)) / sizeof(I))];
    }

    BurnAllocExtendTiling tiling;
    int32_t outLo = 0;
    int32_t outHi = 0;
    bool lastBlock = false;
    int32_t next = 0;          // output position of the next slot
    uint32_t staged = 0;       // slots in the tile being filled
    uint32_t current = 0;      // the tile being filled
    bool pending[2] = {false, false};  // a store of the tile is in flight
    TEventID stored[2] = {0, 0};       // MTE3 -> S: the store of each tile has read it
    int32_t windowLo = 0;      // free-list positions held in the page buffer
    int32_t windowLen = 0;
    TBuf<TPosition::VECCALC> prefixBuf, seqBuf, lastBuf, pageBuf, stageBuf, totalsBuf;
    GlobalTensor<I> prefixGm, seqGm, lastGm, freeGm, outGm, totalsGm;
};

template <typename I>
__aicore__ inline void Run(GM_ADDR prefixLens, GM_ADDR seqLens, GM_ADDR lastLoc, GM_ADDR freePages, GM_ADDR outSlots,
                           GM_ADDR totals, const BurnAllocExtendTiling& t)
{
    TPipe pipe;
    AllocExtendKernel<I> op;
    op.Init(prefixLens, seqLens, lastLoc, freePages, outSlots, totals, t, &pipe);
    op.Process();
}

}  // namespace burn_ascend

extern "C" __global__ __aicore__ void alloc_extend(GM_ADDR prefixLens, GM_ADDR seqLens, GM_ADDR lastLoc, GM_ADDR freePages,
                                                   GM_ADDR outSlots, GM_ADDR totals, BurnAllocExtendTiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    if (tiling.indexBytes == 8) {
        burn_ascend::Run<int64_t>(prefixLens, seqLens, lastLoc, freePages, outSlots, totals, tiling);
    } else {
        burn_ascend::Run<int32_t>(prefixLens, seqLens, lastLoc, freePages, outSlots, totals, tiling);
    }
}
