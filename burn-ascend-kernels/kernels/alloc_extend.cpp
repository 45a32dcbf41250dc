// alloc_extend: paged KV-cache slot allocation for a batch of requests whose caches grow from
// prefix_lens[b] to seq_lens[b] tokens (fused-ops contract 4). Every length is read on the
// device, so a decode step never waits for the host.
//
// For request b with p = prefix_lens[b], s = seq_lens[b] and pages of P slots:
//   new_pages(b) = ceil(s/P) - ceil(p/P), page_base(b) = sum of new_pages before b,
//   out_base(b) = sum of (s - p) before b;
//   token j in [p, s) goes to last_loc[b] + 1 + (j - p) while it is still inside the partly
//   filled last page (j < ceil(p/P) * P), else to free_pages[page_base(b) + j/P - ceil(p/P)] * P
//   + j % P.
// Block 0 also writes the totals: pages taken and tokens extended. A page index past the free
// list (a batch needing more pages than it holds, which the scheduler checks before launching)
// is never read: its slots are written as -1, and the totals still report what was needed.
//
// Work split: block b handles requests b, b + blockDim, ...; each block reads all lengths (the
// batch is small) to form its prefix sums on the scalar unit, and writes its slots through the
// unified buffer `slotChunk` slots at a time.
#include "kernel_operator.h"

using namespace AscendC;

struct AllocExtendTiling {
    uint32_t batch;       // B
    uint32_t freePages;   // entries of free_pages
    uint32_t pageSize;    // slots per page
    uint32_t outSlots;    // sum(seq_lens - prefix_lens), known to the scheduler
    uint32_t slotChunk;   // slots written at a time (a multiple of 8)
    uint32_t indexBytes;  // 4 (int32) or 8 (int64), for every index tensor
};

template <typename I>
class AllocExtend {
public:
    __aicore__ inline void Init(GM_ADDR prefixLens, GM_ADDR seqLens, GM_ADDR lastLoc, GM_ADDR freePages, GM_ADDR outSlots,
                                GM_ADDR totals, const AllocExtendTiling& t, TPipe* pipe)
    {
        tiling = t;
        prefixGm.SetGlobalBuffer((__gm__ I*)prefixLens, t.batch);
        seqGm.SetGlobalBuffer((__gm__ I*)seqLens, t.batch);
        lastGm.SetGlobalBuffer((__gm__ I*)lastLoc, t.batch);
        freeGm.SetGlobalBuffer((__gm__ I*)freePages, t.freePages);
        outGm.SetGlobalBuffer((__gm__ I*)outSlots, t.outSlots);
        totalsGm.SetGlobalBuffer((__gm__ I*)totals, 2);
        uint32_t lens = Align32(t.batch * sizeof(I));
        pipe->InitBuffer(prefixBuf, lens);
        pipe->InitBuffer(seqBuf, lens);
        pipe->InitBuffer(lastBuf, lens);
        pipe->InitBuffer(slotBuf, Align32(t.slotChunk * sizeof(I)));
        pipe->InitBuffer(pageBuf, 32);
    }

    __aicore__ inline void Process()
    {
        LocalTensor<I> prefix = prefixBuf.Get<I>();
        LocalTensor<I> seq = seqBuf.Get<I>();
        LocalTensor<I> last = lastBuf.Get<I>();
        Load(prefix, prefixGm, tiling.batch);
        Load(seq, seqGm, tiling.batch);
        Load(last, lastGm, tiling.batch);
        Sync<HardEvent::MTE2_S>();
        uint32_t ps = tiling.pageSize;
        int64_t pageBase = 0;
        int64_t outBase = 0;
        for (uint32_t b = 0; b < tiling.batch; ++b) {
            int64_t p = static_cast<int64_t>(prefix.GetValue(b));
            int64_t s = static_cast<int64_t>(seq.GetValue(b));
            int64_t filledPages = (p + ps - 1) / ps;
            int64_t newPages = (s + ps - 1) / ps - filledPages;
            if (b % GetBlockNum() == static_cast<uint32_t>(GetBlockIdx())) {
                Request(p, s, static_cast<int64_t>(last.GetValue(b)), filledPages, pageBase, outBase);
            }
            pageBase += newPages;
            outBase += s - p;
        }
        if (GetBlockIdx() == 0) {
            LocalTensor<I> out = slotBuf.Get<I>();
            out.SetValue(0, static_cast<I>(pageBase));
            out.SetValue(1, static_cast<I>(outBase));
            Sync<HardEvent::S_MTE3>();
            Store(totalsGm, out, 2);
            Sync<HardEvent::MTE3_S>();
        }
    }

private:
    __aicore__ static inline uint32_t Align32(uint32_t bytes) { return (bytes + 31) / 32 * 32; }

    template <HardEvent E>
    __aicore__ inline void Sync()
    {
        event_t e = static_cast<event_t>(GetTPipePtr()->FetchEventID(E));
        SetFlag<E>(e);
        WaitFlag<E>(e);
    }

    __aicore__ inline void Load(const LocalTensor<I>& dst, const GlobalTensor<I>& src, uint32_t n)
    {
        DataCopyExtParams row{1, static_cast<uint32_t>(n * sizeof(I)), 0, 0, 0};
        DataCopyPadExtParams<I> noPad{false, 0, 0, 0};
        DataCopyPad(dst, src, row, noPad);
    }

    __aicore__ inline void Store(const GlobalTensor<I>& dst, const LocalTensor<I>& src, uint32_t n)
    {
        DataCopyExtParams row{1, static_cast<uint32_t>(n * sizeof(I)), 0, 0, 0};
        DataCopyPad(dst, src, row);
    }

    // The free page at list position `at`, or -1 past the end of the list.
    __aicore__ inline int64_t Page(int64_t at)
    {
        if (at < 0 || at >= static_cast<int64_t>(tiling.freePages)) {
            return -1;
        }
        LocalTensor<I> page = pageBuf.Get<I>();
        Load(page, freeGm[static_cast<uint64_t>(at)], 1);
        Sync<HardEvent::MTE2_S>();
        return static_cast<int64_t>(page.GetValue(0));
    }

    __aicore__ inline void Request(int64_t p, int64_t s, int64_t lastLoc, int64_t filledPages, int64_t pageBase, int64_t outBase)
    {
        LocalTensor<I> slots = slotBuf.Get<I>();
        uint32_t ps = tiling.pageSize;
        int64_t partialEnd = filledPages * ps;
        int64_t page = -1;
        int64_t pageOf = -1;
        for (int64_t j0 = p; j0 < s; j0 += tiling.slotChunk) {
            int64_t n = s - j0 < tiling.slotChunk ? s - j0 : tiling.slotChunk;
            // The previous chunk's store must have read the buffer before it is rewritten.
            Sync<HardEvent::MTE3_S>();
            for (int64_t k = 0; k < n; ++k) {
                int64_t j = j0 + k;
                int64_t slot;
                if (j < partialEnd) {
                    slot = lastLoc + 1 + (j - p);
                } else {
                    int64_t which = pageBase + j / ps - filledPages;
                    if (which != pageOf) {
                        page = Page(which);
                        pageOf = which;
                    }
                    slot = page < 0 ? -1 : page * ps + j % ps;
                }
                slots.SetValue(static_cast<uint32_t>(k), static_cast<I>(slot));
            }
            Sync<HardEvent::S_MTE3>();
            Store(outGm[static_cast<uint64_t>(outBase + (j0 - p))], slots, static_cast<uint32_t>(n));
        }
        Sync<HardEvent::MTE3_S>();
    }

    AllocExtendTiling tiling;
    TBuf<TPosition::VECCALC> prefixBuf, seqBuf, lastBuf, slotBuf, pageBuf;
    GlobalTensor<I> prefixGm, seqGm, lastGm, freeGm, outGm, totalsGm;
};

template <typename I>
__aicore__ inline void Run(GM_ADDR prefixLens, GM_ADDR seqLens, GM_ADDR lastLoc, GM_ADDR freePages, GM_ADDR outSlots,
                           GM_ADDR totals, const AllocExtendTiling& t)
{
    TPipe pipe;
    AllocExtend<I> op;
    op.Init(prefixLens, seqLens, lastLoc, freePages, outSlots, totals, t, &pipe);
    op.Process();
}

extern "C" __global__ __aicore__ void alloc_extend(GM_ADDR prefixLens, GM_ADDR seqLens, GM_ADDR lastLoc, GM_ADDR freePages,
                                                   GM_ADDR outSlots, GM_ADDR totals, AllocExtendTiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    if (tiling.indexBytes == 8) {
        Run<int64_t>(prefixLens, seqLens, lastLoc, freePages, outSlots, totals, tiling);
    } else {
        Run<int32_t>(prefixLens, seqLens, lastLoc, freePages, outSlots, totals, tiling);
    }
}
