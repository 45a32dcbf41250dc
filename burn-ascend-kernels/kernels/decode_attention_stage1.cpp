// decode_attention stage 1: split-KV grouped decode attention over a paged cache (fused-ops
// contract 5). For request b, query head h (key/value head h / G) and split c of the request's
// cached tokens (kv_indices[kv_indptr[b] .. kv_indptr[b+1]], cut into num_kv_splits[b]
// consecutive chunks of ceil(L / splits)), with scores s_j = scale * q . k_j (optionally
// cap * tanh(s_j / cap)):
//   part_out[b, h, c] = sum_j exp(s_j - m) v_j / Z,  part_lse[b, h, c] = m + ln Z,
// where m = max_j s_j and Z = sum_j exp(s_j - m); an empty split gives lse = -inf and zeros.
// Lengths, splits and slots are read on the device: the launch never waits for the host.
//
// Checks (each unit of request b, on values it reads anyway): kv_indptr[b] and kv_indptr[b+1]
// lie within kv_indices and do not decrease; the request has at least one key (the contract:
// its own token is cached before attention, so an empty request is a caller's bug, not a defined
// zero result); num_kv_splits[b] is in [1, max_kv_splits] (part_out has no room for more, and every
// key must belong to a computed split); every slot of kv_indices read is a row of the caches. A
// failed check traps, naming the bad value, instead of reading or writing out of range. The
// checks and the split arithmetic are decode_split.h's, shared with the cube path's kernels.
//
// Work split: one unit of work is (b, key/value head, head tile, split): `headTile` query heads
// of one group over one split's keys. Units are dealt round-robin to the blocks; the tiling
// cuts a group into several head tiles only to give every vector core work (or when the whole
// group does not fit the unified buffer beside a useful key tile), so each key and value row is
// read once per head tile. A unit loads its queries once (widened to f32 and scaled) and streams
// its keys in tiles of `keyTile` rows, K and V rows gathered by slot into double-buffered queues
// (the next tile's copies overlap this tile's compute). Per tile and head: the scores by
// Mul + ReduceSum per key, the tile's maxima by ReduceMax, then the online softmax (running max
// m, normaliser Z and f32 accumulator per head, kept as vectors in the unified buffer; each value
// row is folded in by one Axpy per head), so one tile costs two vector-to-scalar waits whatever
// the head count. With the MLA layout
// (valueFromKey) the values are the first Dv dims of the key rows and are not read again.
//
// Extend form (pageSize > 0): the vector path of extend_attention (paged prefill, f32 included):
// "requests" are the T query tokens of the chunks; `indptr` is extend_split.h's lens [2R + 1],
// `kvIndices` the block table [R, W], `splits` unused. Token b, chunk row i of request r, sees
// positions 0 ..= kv - rows + i, cut into maxSplits splits of ceil(len / maxSplits) (the later
// ones empty for short rows); each key's slot is read through the block table. Stage 2 merges the
// splits as for decode.
//
// Head dims are bounded by the unified buffer: one head's query, accumulator and a tile of 8
// key (and value) rows must fit (Dk = Dv up to about 1400), which the tiling checks.
#include "extend_split.h"


// Global and prefixed: a by-value kernel parameter (see kernel_common.h).
struct BurnDecodeStage1Tiling {
    uint32_t batch;         // B
    uint32_t qHeads;        // HQ
    uint32_t kvHeads;       // HKV
    uint32_t headDimK;      // Dk
    uint32_t headDimV;      // Dv
    uint32_t maxSplits;     // max_kv_splits
    uint32_t slots;         // rows of the caches
    uint32_t indices;       // entries of kv_indices
    uint32_t headTile;      // query heads per unit (of one group)
    uint32_t keyTile;       // keys per tile (a multiple of 8)
    uint32_t valueFromKey;  // 1: values are the first Dv dims of the key rows (MLA)
    uint32_t dtype;         // 0 float, 1 half, 2 bfloat16 (q, k, v)
    float scale;            // sm_scale
    float logitCap;         // 0: none
    uint32_t pageSize;      // 0: keys listed by kv_indices; else the extend form's page size
    uint32_t width;         // extend form: pages per block-table row
    uint32_t requests;      // extend form: rows of the block table
};

namespace burn_ascend {

using namespace AscendC;

template <typename T>
class DecodeStage1Kernel {
public:
    __aicore__ inline void Init(GM_ADDR q, GM_ADDR k, GM_ADDR v, GM_ADDR indptr, GM_ADDR kvIndices, GM_ADDR splits,
                                GM_ADDR partOut, GM_ADDR partLse, const BurnDecodeStage1Tiling& t, TPipe* pipe)
    {
        tiling = t;
        group = t.qHeads / t.kvHeads;
        rowK = AlignT(t.headDimK);
        rowV = AlignT(t.headDimV);
        accPitch = Align8(t.headDimV);
        scorePitch = Align8(t.keyTile + 1);
        statLen = Align8(t.headTile + 1);
        qGm.SetGlobalBuffer((__gm__ T*)q, static_cast<uint64_t>(t.batch) * t.qHeads * t.headDimK);
        kGm.SetGlobalBuffer((__gm__ T*)k, static_cast<uint64_t>(t.slots) * t.kvHeads * t.headDimK);
        if (!t.valueFromKey) {
            vGm.SetGlobalBuffer((__gm__ T*)v, static_cast<uint64_t>(t.slots) * t.kvHeads * t.headDimV);
        }
        if (t.pageSize == 0) {
            indptrGm.SetGlobalBuffer((__gm__ int32_t*)indptr, t.batch + 1);
            idxGm.SetGlobalBuffer((__gm__ int32_t*)kvIndices, t.indices);
            splitsGm.SetGlobalBuffer((__gm__ int32_t*)splits, t.batch);
        } else {
            indptrGm.SetGlobalBuffer((__gm__ int32_t*)indptr, 2 * t.requests + 1);
            idxGm.SetGlobalBuffer((__gm__ int32_t*)kvIndices, static_cast<uint64_t>(t.requests) * t.width);
        }
        outGm.SetGlobalBuffer((__gm__ float*)partOut, static_cast<uint64_t>(t.batch) * t.qHeads * t.maxSplits * t.headDimV);
        lseGm.SetGlobalBuffer((__gm__ float*)partLse, static_cast<uint64_t>(t.batch) * t.qHeads * t.maxSplits);
        const uint32_t h = t.headTile;
        const uint32_t n = t.keyTile;
        pipe->InitBuffer(qBuf, h * rowK * sizeof(float));
        pipe->InitBuffer(accBuf, h * accPitch * sizeof(float));
        pipe->InitBuffer(kQue, 2, n * rowK * sizeof(T));
        if (!t.valueFromKey) {
            pipe->InitBuffer(vQue, 2, n * rowV * sizeof(T));
        }
        if (sizeof(T) != sizeof(float)) {
            pipe->InitBuffer(qRaw, h * rowK * sizeof(T));
            pipe->InitBuffer(kWide, n * rowK * sizeof(float));
            if (!t.valueFromKey) {
                pipe->InitBuffer(vWide, n * rowV * sizeof(float));
            }
        }
        pipe->InitBuffer(scoreBuf, h * scorePitch * sizeof(float));
        if (t.logitCap > 0.0f) {
            pipe->InitBuffer(capBuf, h * scorePitch * sizeof(float));
        }
        pipe->InitBuffer(tmpBuf, (rowK > rowV ? rowK : rowV) * sizeof(float));
        pipe->InitBuffer(reduceBuf, ReduceElems() * sizeof(float));
        pipe->InitBuffer(statBuf, 5 * statLen * sizeof(float));
        pipe->InitBuffer(lseBuf, h * 8 * sizeof(float));
        pipe->InitBuffer(idxBuf, Align8(n) * sizeof(int32_t));
    }

    __aicore__ inline void Process()
    {
        if (tiling.pageSize != 0) {
            const uint32_t headTiles = (group + tiling.headTile - 1) / tiling.headTile;
            const uint32_t perRow = tiling.kvHeads * headTiles * tiling.maxSplits;
            ForEachExtendUnit(
                indptrGm, tiling.requests, tiling.batch, tiling.width * tiling.pageSize,
                [perRow](const ExtendRequest& q) { return static_cast<uint64_t>(q.rows) * perRow; },
                [this, headTiles](const ExtendRequest& q, uint32_t r, uint32_t local) {
                    const uint32_t c = local % tiling.maxSplits;
                    uint32_t rest = local / tiling.maxSplits;
                    const uint32_t first = rest % headTiles * tiling.headTile;
                    rest /= headTiles;
                    const uint32_t hkv = rest % tiling.kvHeads;
                    const uint32_t i = rest / tiling.kvHeads;
                    const uint32_t heads = group - first < tiling.headTile ? group - first : tiling.headTile;
                    // The row's positions, cut as a decode request's keys are.
                    const int64_t len = q.kv - q.rows + i + 1;
                    const int64_t per = (len + tiling.maxSplits - 1) / tiling.maxSplits;
                    const int64_t from = static_cast<int64_t>(c) * per;
                    const int64_t to = from + per < len ? from + per : len;
                    request = r;
                    Extent(q.first + i, hkv, hkv * group + first, heads, c, 0, from, to);
                });
            return;
        }
        ForEachDecodeUnit(tiling.batch, tiling.kvHeads, group, tiling.headTile, tiling.maxSplits,
                          [this](uint32_t b, uint32_t hkv, uint32_t h0, uint32_t heads, uint32_t c) {
                              Unit(b, hkv, h0, heads, c);
                          });
    }

private:
    __aicore__ static inline uint32_t Align8(uint32_t n) { return (n + 7) / 8 * 8; }

    // Elements of T rounded up to whole 32-byte blocks (also a multiple of 8): the unified-buffer
    // pitch of a row of T, and of its f32 copy, so one Cast widens a whole tile.
    __aicore__ static inline uint32_t AlignT(uint32_t n)
    {
        constexpr uint32_t perBlock = 32 / sizeof(T);
        return (n + perBlock - 1) / perBlock * perBlock;
    }

    // ReduceSum over Dk and ReduceMax over a key tile need this many f32 of shared buffer.
    __aicore__ inline uint32_t ReduceElems() const
    {
        uint32_t sum = (tiling.headDimK + 63) / 64;
        uint32_t max = 2 * ((tiling.keyTile + 63) / 64);
        return Align8(sum > max ? sum : max);
    }

    // The query rows of heads [h0, h0 + heads) of request b, widened to f32 and scaled.
    __aicore__ inline void LoadQueries(uint32_t b, uint32_t h0, uint32_t heads)
    {
        LocalTensor<float> qs = qBuf.Get<float>();
        // The previous unit's vector ops have read the query buffers.
        Sync<HardEvent::V_MTE2>();
        DataCopyExtParams rows{static_cast<uint16_t>(heads), static_cast<uint32_t>(tiling.headDimK * sizeof(T)), 0, 0, 0};
        DataCopyPadExtParams<T> noPad{false, 0, 0, 0};
        GlobalTensor<T> src = qGm[(static_cast<uint64_t>(b) * tiling.qHeads + h0) * tiling.headDimK];
        if constexpr (sizeof(T) == sizeof(float)) {
            DataCopyPad(qs.template ReinterpretCast<T>(), src, rows, noPad);
            Sync<HardEvent::MTE2_V>();
        } else {
            LocalTensor<T> raw = qRaw.Get<T>();
            DataCopyPad(raw, src, rows, noPad);
            Sync<HardEvent::MTE2_V>();
            Cast(qs, raw, RoundMode::CAST_NONE, heads * rowK);
        }
        Muls(qs, qs, tiling.scale, static_cast<int32_t>(heads * rowK));
    }

    // Queues the key (and value) rows of kv_indices[at, at + n) for key/value head hkv.
    __aicore__ inline void CopyIn(uint32_t hkv, int32_t at, uint32_t n)
    {
        LocalTensor<int32_t> slots = idxBuf.Get<int32_t>();
        if (tiling.pageSize == 0) {
            Load(slots, idxGm[static_cast<uint32_t>(at)], n);
            Sync<HardEvent::MTE2_S>();
        }
        const uint64_t kRow = static_cast<uint64_t>(tiling.kvHeads) * tiling.headDimK;
        const uint64_t vRow = static_cast<uint64_t>(tiling.kvHeads) * tiling.headDimV;
        LocalTensor<T> keys = kQue.AllocTensor<T>();
        for (uint32_t j = 0; j < n; ++j) {
            const uint64_t slot = SlotOf(slots, at, j);
            Load(keys[j * rowK], kGm[slot * kRow + hkv * tiling.headDimK], tiling.headDimK);
        }
        kQue.EnQue(keys);
        if (!tiling.valueFromKey) {
            LocalTensor<T> vals = vQue.AllocTensor<T>();
            for (uint32_t j = 0; j < n; ++j) {
                const uint64_t slot = SlotOf(slots, at, j);
                Load(vals[j * rowV], vGm[slot * vRow + hkv * tiling.headDimV], tiling.headDimV);
            }
            vQue.EnQue(vals);
        }
    }

    // The slot of key j of the tile at `at`: kv_indices[at + j] (checked), or in the extend form
    // position at + j of the unit's request through the block table.
    __aicore__ inline uint64_t SlotOf(const LocalTensor<int32_t>& slots, int32_t at, uint32_t j)
    {
        if (tiling.pageSize != 0) {
            return ExtendSlot(idxGm, request, static_cast<int64_t>(at) + j, tiling.width, tiling.pageSize, tiling.slots);
        }
        const int32_t s = slots.GetValue(j);
        CheckDecodeSlot(s, at + static_cast<int32_t>(j), tiling.slots);
        return static_cast<uint64_t>(s);
    }

    // n rows of a dequeued tile as f32 (a Cast into `wide` for narrow types).
    __aicore__ inline LocalTensor<float> Widen(const LocalTensor<T>& raw, TBuf<TPosition::VECCALC>& wide, uint32_t pitch,
                                               uint32_t n)
    {
        if constexpr (sizeof(T) == sizeof(float)) {
            return raw.template ReinterpretCast<float>();
        } else {
            LocalTensor<float> w = wide.Get<float>();
            Cast(w, raw, RoundMode::CAST_NONE, n * pitch);
            return w;
        }
    }

    // scores[g][j] = q_g . k_j for the tile's n keys, soft-capped when asked.
    __aicore__ inline void Scores(const LocalTensor<float>& keys, uint32_t heads, uint32_t n)
    {
        LocalTensor<float> qs = qBuf.Get<float>();
        LocalTensor<float> scores = scoreBuf.Get<float>();
        LocalTensor<float> tmp = tmpBuf.Get<float>();
        LocalTensor<float> shared = reduceBuf.Get<float>();
        const int32_t dk = static_cast<int32_t>(tiling.headDimK);
        for (uint32_t g = 0; g < heads; ++g) {
            for (uint32_t j = 0; j < n; ++j) {
                Mul(tmp, qs[g * rowK], keys[j * rowK], dk);
                ReduceSum(scores[g * scorePitch + j], tmp, shared, dk);
            }
        }
        if (tiling.logitCap > 0.0f) {
            // cap * tanh(x), x = s / cap, as cap * (e - 1) / (e + 1) with e = exp(2x); x is
            // clamped to [-15, 15], where tanh is +-1 in f32, so e stays finite.
            const int32_t all = static_cast<int32_t>(heads * scorePitch);
            LocalTensor<float> den = capBuf.Get<float>();
            Muls(scores, scores, 1.0f / tiling.logitCap, all);
            Mins(scores, scores, 15.0f, all);
            Maxs(scores, scores, -15.0f, all);
            Muls(scores, scores, 2.0f, all);
            Exp(scores, scores, all);
            Adds(den, scores, 1.0f, all);
            Adds(scores, scores, -1.0f, all);
            Div(scores, scores, den, all);
            Muls(scores, scores, tiling.logitCap, all);
        }
    }

    // One tile of the online softmax: folds the tile's scores and values into m, Z and acc.
    __aicore__ inline void Accumulate(const LocalTensor<float>& vals, uint32_t vPitch, uint32_t heads, uint32_t n,
                                      LocalTensor<float>& m, LocalTensor<float>& mNew)
    {
        LocalTensor<float> scores = scoreBuf.Get<float>();
        LocalTensor<float> shared = reduceBuf.Get<float>();
        LocalTensor<float> stats = statBuf.Get<float>();
        LocalTensor<float> z = stats[2 * statLen];
        LocalTensor<float> alpha = stats[3 * statLen];
        LocalTensor<float> sums = stats[4 * statLen];
        LocalTensor<float> acc = accBuf.Get<float>();
        const int32_t h = static_cast<int32_t>(heads);
        const int32_t dv = static_cast<int32_t>(tiling.headDimV);
        for (uint32_t g = 0; g < heads; ++g) {
            ReduceMax(mNew[g], scores[g * scorePitch], shared, static_cast<int32_t>(n));
        }
        Max(mNew, mNew, m, h);
        Sub(alpha, m, mNew, h);
        Exp(alpha, alpha, h);
        Sync<HardEvent::V_S>();
        for (uint32_t g = 0; g < heads; ++g) {
            Adds(scores[g * scorePitch], scores[g * scorePitch], -mNew.GetValue(g), static_cast<int32_t>(n));
        }
        Exp(scores, scores, static_cast<int32_t>(heads * scorePitch));
        for (uint32_t g = 0; g < heads; ++g) {
            ReduceSum(sums[g], scores[g * scorePitch], shared, static_cast<int32_t>(n));
        }
        Mul(z, z, alpha, h);
        Add(z, z, sums, h);
        Sync<HardEvent::V_S>();
        for (uint32_t g = 0; g < heads; ++g) {
            LocalTensor<float> row = acc[g * accPitch];
            Muls(row, row, alpha.GetValue(g), dv);
            for (uint32_t j = 0; j < n; ++j) {
                Axpy(row, vals[j * vPitch], scores.GetValue(g * scorePitch + j), dv);
            }
        }
        LocalTensor<float> swap = m;
        m = mNew;
        mNew = swap;
    }

    // Attention of heads [h0, h0 + heads) over kv_indices[from, to) into acc, m and Z.
    __aicore__ inline void Attend(uint32_t b, uint32_t hkv, uint32_t h0, uint32_t heads, int32_t from, int32_t to,
                                  LocalTensor<float>& m)
    {
        LoadQueries(b, h0, heads);
        LocalTensor<float> stats = statBuf.Get<float>();
        LocalTensor<float> mNew = stats[statLen];
        Duplicate(m, -3.0e38f, static_cast<int32_t>(heads));
        Duplicate(stats[2 * statLen], 0.0f, static_cast<int32_t>(heads));
        const int32_t tile = static_cast<int32_t>(tiling.keyTile);
        CopyIn(hkv, from, static_cast<uint32_t>(to - from < tile ? to - from : tile));
        for (int32_t at = from; at < to; at += tile) {
            uint32_t n = static_cast<uint32_t>(to - at < tile ? to - at : tile);
            LocalTensor<T> kRaw = kQue.DeQue<T>();
            LocalTensor<T> vRaw;
            if (!tiling.valueFromKey) {
                vRaw = vQue.DeQue<T>();
            }
            if (at + tile < to) {
                CopyIn(hkv, at + tile, static_cast<uint32_t>(to - at - tile < tile ? to - at - tile : tile));
            }
            LocalTensor<float> keys = Widen(kRaw, kWide, rowK, n);
            Scores(keys, heads, n);
            if (tiling.valueFromKey) {
                Accumulate(keys, rowK, heads, n, m, mNew);
            } else {
                Accumulate(Widen(vRaw, vWide, rowV, n), rowV, heads, n, m, mNew);
                vQue.FreeTensor(vRaw);
            }
            kQue.FreeTensor(kRaw);
        }
    }

    __aicore__ inline void Unit(uint32_t b, uint32_t hkv, uint32_t h0, uint32_t heads, uint32_t c)
    {
        const DecodeSplit split = ReadDecodeSplit(indptrGm, splitsGm, b, c, tiling.indices, tiling.maxSplits);
        Extent(b, hkv, h0, heads, c, split.start, split.from, split.to);
    }

    // The unit over keys start + [from, to) (kv_indices entries, or extend positions).
    __aicore__ inline void Extent(uint32_t b, uint32_t hkv, uint32_t h0, uint32_t heads, uint32_t c, int32_t start,
                                  int64_t from, int64_t to)
    {
        // Splits past the request's count start at or after its end: empty.
        const bool empty = from >= to;

        LocalTensor<float> acc = accBuf.Get<float>();
        LocalTensor<float> m = statBuf.Get<float>();
        Duplicate(acc, 0.0f, static_cast<int32_t>(heads * accPitch));
        if (!empty) {
            Attend(b, hkv, h0, heads, start + static_cast<int32_t>(from), start + static_cast<int32_t>(to), m);
        }
        Finish(b, h0, heads, c, empty, m);
    }

    // Normalises acc and stores the unit's rows of part_out and part_lse.
    __aicore__ inline void Finish(uint32_t b, uint32_t h0, uint32_t heads, uint32_t c, bool empty,
                                  const LocalTensor<float>& m)
    {
        LocalTensor<float> acc = accBuf.Get<float>();
        LocalTensor<float> stage = lseBuf.Get<float>();
        if (empty) {
            union { uint32_t u; float f; } minusInf{0xff800000u};
            for (uint32_t g = 0; g < heads; ++g) {
                stage.SetValue(g * 8, minusInf.f);
            }
        } else {
            LocalTensor<float> stats = statBuf.Get<float>();
            LocalTensor<float> z = stats[2 * statLen];
            LocalTensor<float> lse = stats[4 * statLen];
            Ln(lse, z, static_cast<int32_t>(heads));
            Add(lse, lse, m, static_cast<int32_t>(heads));
            Sync<HardEvent::V_S>();
            for (uint32_t g = 0; g < heads; ++g) {
                Muls(acc[g * accPitch], acc[g * accPitch], 1.0f / z.GetValue(g), static_cast<int32_t>(tiling.headDimV));
                stage.SetValue(g * 8, lse.GetValue(g));
            }
        }
        Sync<HardEvent::V_MTE3>();
        Sync<HardEvent::S_MTE3>();
        // Head h's row of split c is maxSplits rows after head h-1's: one strided store each.
        const uint32_t splits = tiling.maxSplits;
        const uint64_t unit = (static_cast<uint64_t>(b) * tiling.qHeads + h0) * splits + c;
        DataCopyExtParams rows{static_cast<uint16_t>(heads), static_cast<uint32_t>(tiling.headDimV * sizeof(float)), 0,
                               static_cast<uint32_t>((splits - 1) * tiling.headDimV * sizeof(float)), 0};
        DataCopyPad(outGm[unit * tiling.headDimV], acc, rows);
        DataCopyExtParams lses{static_cast<uint16_t>(heads), sizeof(float), 0,
                               static_cast<uint32_t>((splits - 1) * sizeof(float)), 0};
        DataCopyPad(lseGm[unit], stage, lses);
        // The next unit rewrites acc (vector) and the lse staging (scalar) after these stores.
        Sync<HardEvent::MTE3_V>();
        Sync<HardEvent::MTE3_S>();
    }

    BurnDecodeStage1Tiling tiling;
    uint32_t group = 1;       // G = HQ / HKV
    uint32_t rowK = 8;        // UB pitch of a key row (elements)
    uint32_t rowV = 8;        // UB pitch of a value row (elements)
    uint32_t accPitch = 8;    // UB pitch of an accumulator row (f32)
    uint32_t scorePitch = 8;  // UB pitch of a head's scores (f32)
    uint32_t statLen = 8;     // f32 per running statistic (heads, plus room for ReduceMax)
    uint32_t request = 0;     // extend form: the current unit's request (block-table row)
    TQue<TPosition::VECIN, 1> kQue, vQue;
    TBuf<TPosition::VECCALC> qBuf, qRaw, accBuf, kWide, vWide, scoreBuf, capBuf, tmpBuf, reduceBuf, statBuf, lseBuf, idxBuf;
    GlobalTensor<T> qGm, kGm, vGm;
    GlobalTensor<int32_t> indptrGm, idxGm, splitsGm;
    GlobalTensor<float> outGm, lseGm;
};

template <typename T>
__aicore__ inline void Run(GM_ADDR q, GM_ADDR k, GM_ADDR v, GM_ADDR indptr, GM_ADDR kvIndices, GM_ADDR splits, GM_ADDR partOut,
                           GM_ADDR partLse, const BurnDecodeStage1Tiling& t)
{
    TPipe pipe;
    DecodeStage1Kernel<T> op;
    op.Init(q, k, v, indptr, kvIndices, splits, partOut, partLse, t, &pipe);
    op.Process();
}

}  // namespace burn_ascend

extern "C" __global__ __aicore__ void decode_attention_stage1(GM_ADDR q, GM_ADDR k, GM_ADDR v, GM_ADDR indptr, GM_ADDR kvIndices,
                                                              GM_ADDR splits, GM_ADDR partOut, GM_ADDR partLse,
                                                              BurnDecodeStage1Tiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    switch (tiling.dtype) {
        case 0: burn_ascend::Run<float>(q, k, v, indptr, kvIndices, splits, partOut, partLse, tiling); break;
        case 1: burn_ascend::Run<half>(q, k, v, indptr, kvIndices, splits, partOut, partLse, tiling); break;
        default: burn_ascend::Run<bfloat16_t>(q, k, v, indptr, kvIndices, splits, partOut, partLse, tiling); break;
    }
}
