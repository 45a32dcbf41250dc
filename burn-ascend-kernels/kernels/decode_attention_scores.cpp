// decode_attention, cube path, kernel 1 of 3 (AIC): the raw scores S = q . k of every
// (request, query head, key) on the cube unit, for the softmax kernel
// (decode_attention_softmax.cpp) and the value product (decode_attention_values.cpp) to
// finish; stage 2 then merges the splits as on the vector path.
//
// Workspace layout: scores [HQ, T] f32 (T = entries of kv_indices): head h's score of the key
// at kv_indices[i] is scores[h * T + i]. Rows by head, columns by position in kv_indices, so a
// unit's tile is one strided Fixpipe (m = heads of a group, row pitch T, which Fixpipe's
// uint32 dstStride holds for any T) and the softmax kernel reads a (head, split) as one
// contiguous run. Scores are unscaled: scale and logit cap are the softmax kernel's.
//
// Work split: a unit is (request, key/value head, head tile, split), cut like stage 1's so
// every split's range is the one the other kernels compute; units round-robin over the cube
// cores. A unit loads its group's query rows once into L1 (A, m = heads, k = Dk, one ND->NZ
// copy) and streams its keys in tiles of `keyTile`: each key row is gathered by its slot with
// one ND->NZ copy into row j of an n x k tile (keys as rows: B^T, which loads into L0B with no
// transpose), then Dk is cut into `kStep` columns per L0A/L0B load, accumulated in L0C.
// Queues (depth 1) carry the MTE2 -> MTE1 -> M -> FIX events. Only half and bf16: float B
// would need the same tile, but the value product's B (values as k x n) is not loadable for
// float (LoadDataWithTranspose), so float stays on the vector path.
#include "decode_split.h"


// Global and prefixed: a by-value kernel parameter (see kernel_common.h).
struct BurnDecodeScoresTiling {
    uint32_t batch;      // B
    uint32_t qHeads;     // HQ
    uint32_t kvHeads;    // HKV
    uint32_t headDimK;   // Dk
    uint32_t maxSplits;  // max_kv_splits
    uint32_t slots;      // rows of k_cache
    uint32_t indices;    // T: entries of kv_indices (the workspace's row pitch)
    uint32_t headTile;   // query heads per unit, in [2, group]: Mmad's m (m = 1 is GEMV)
    uint32_t keyTile;    // keys per Mmad (n), a multiple of 16
    uint32_t kStep;      // Dk columns per L0 load, a multiple of 16
    uint32_t dtype;      // 1 half, 2 bfloat16
};

namespace burn_ascend {

using namespace AscendC;

template <typename T>
class DecodeScoresKernel {
public:
    __aicore__ inline void Init(GM_ADDR q, GM_ADDR k, GM_ADDR indptr, GM_ADDR kvIndices, GM_ADDR splits, GM_ADDR scores,
                                const BurnDecodeScoresTiling& t, TPipe* pipe)
    {
        tiling = t;
        group = t.qHeads / t.kvHeads;
        mp = Align16(t.headTile);
        np = t.keyTile;
        kp = Align16(t.headDimK);
        qGm.SetGlobalBuffer((__gm__ T*)q, static_cast<uint64_t>(t.batch) * t.qHeads * t.headDimK);
        kGm.SetGlobalBuffer((__gm__ T*)k, static_cast<uint64_t>(t.slots) * t.kvHeads * t.headDimK);
        indptrGm.SetGlobalBuffer((__gm__ int32_t*)indptr, t.batch + 1);
        idxGm.SetGlobalBuffer((__gm__ int32_t*)kvIndices, t.indices);
        splitsGm.SetGlobalBuffer((__gm__ int32_t*)splits, t.batch);
        scoresGm.SetGlobalBuffer((__gm__ float*)scores, static_cast<uint64_t>(t.qHeads) * t.indices);
        pipe->InitBuffer(qA1, 1, mp * kp * sizeof(T));
        pipe->InitBuffer(kB1, 1, np * kp * sizeof(T));
        pipe->InitBuffer(qA2, 1, mp * t.kStep * sizeof(T));
        pipe->InitBuffer(kB2, 1, t.kStep * np * sizeof(T));
        pipe->InitBuffer(sCo1, 1, mp * np * sizeof(float));
    }

    __aicore__ inline void Process()
    {
        ForEachDecodeUnit(tiling.batch, tiling.kvHeads, group, tiling.headTile, tiling.maxSplits,
                          [this](uint32_t b, uint32_t hkv, uint32_t h0, uint32_t heads, uint32_t c) {
                              Unit(b, hkv, h0, heads, c);
                          });
    }

private:
    __aicore__ static inline uint32_t Align16(uint32_t n) { return (n + 15) / 16 * 16; }

    __aicore__ inline void Unit(uint32_t b, uint32_t hkv, uint32_t h0, uint32_t heads, uint32_t c)
    {
        const DecodeSplit s = ReadDecodeSplit(indptrGm, splitsGm, b, c, tiling.indices, tiling.maxSplits);
        if (s.from >= s.to) {
            return;
        }
        // The group's query rows: heads x Dk as an Mp x Kp zN tile.
        LocalTensor<T> a1 = qA1.AllocTensor<T>();
        const uint64_t qRow = (static_cast<uint64_t>(b) * tiling.qHeads + h0) * tiling.headDimK;
        const uint16_t dk = static_cast<uint16_t>(tiling.headDimK);
        DataCopy(a1, qGm[qRow], Nd2NzParams(1, static_cast<uint16_t>(heads), dk, 0, dk, static_cast<uint16_t>(mp), 1, 0));
        qA1.EnQue(a1);
        a1 = qA1.DeQue<T>();
        const int64_t first = s.start + s.from;
        const int64_t last = s.start + s.to;
        for (int64_t at = first; at < last; at += tiling.keyTile) {
            const uint32_t n = static_cast<uint32_t>(last - at < tiling.keyTile ? last - at : tiling.keyTile);
            Tile(a1, hkv, h0, heads, at, n);
        }
        qA1.FreeTensor(a1);
    }

    // Scores of heads [h0, h0 + heads) against the n keys at kv_indices[at, at + n).
    __aicore__ inline void Tile(const LocalTensor<T>& a1, uint32_t hkv, uint32_t h0, uint32_t heads, int64_t at, uint32_t n)
    {
        LocalTensor<T> b1 = kB1.AllocTensor<T>();
        const uint64_t kRow = static_cast<uint64_t>(tiling.kvHeads) * tiling.headDimK;
        const uint16_t dk = static_cast<uint16_t>(tiling.headDimK);
        for (uint32_t j = 0; j < n; ++j) {
            const uint64_t slot = ReadDecodeSlot(idxGm, at + j, tiling.slots);
            // Key j becomes row j of the Np x Kp zN tile.
            DataCopy(b1[j * 16], kGm[slot * kRow + hkv * tiling.headDimK],
                     Nd2NzParams(1, 1, dk, 0, dk, static_cast<uint16_t>(np), 1, 0));
        }
        kB1.EnQue(b1);
        b1 = kB1.DeQue<T>();
        LocalTensor<float> acc = sCo1.AllocTensor<float>();
        for (uint32_t k0 = 0; k0 < tiling.headDimK; k0 += tiling.kStep) {
            const uint32_t kc = tiling.headDimK - k0 < tiling.kStep ? tiling.headDimK - k0 : tiling.kStep;
            const uint32_t kcp = Align16(kc);
            LocalTensor<T> a2 = qA2.AllocTensor<T>();
            for (uint32_t ib = 0; ib < mp / 16; ++ib) {
                LoadData2DParams l;
                l.startIndex = static_cast<uint16_t>(ib);
                l.repeatTimes = static_cast<uint8_t>(kcp / 16);
                l.srcStride = static_cast<uint16_t>(mp / 16);
                LoadData(a2[ib * 16 * kcp], a1[k0 * mp], l);
            }
            qA2.EnQue(a2);
            // Keys as rows are already in L0B's fractal order, whose k blocks are ceil(n / 16)
            // fractals apart for an Mmad of n keys: one load for a whole tile, else one per k
            // block (skipping the tile's unused rows).
            LocalTensor<T> b2 = kB2.AllocTensor<T>();
            const uint32_t nBlocks = Align16(n) / 16;
            const uint32_t loads = nBlocks == np / 16 ? 1 : kcp / 16;
            for (uint32_t kb = 0; kb < loads; ++kb) {
                LoadData2DParams l;
                l.repeatTimes = static_cast<uint8_t>(loads == 1 ? kcp / 16 * nBlocks : nBlocks);
                l.srcStride = 1;
                LoadData(b2[kb * nBlocks * 256], b1[k0 * np + kb * np * 16], l);
            }
            kB2.EnQue(b2);
            a2 = qA2.DeQue<T>();
            b2 = kB2.DeQue<T>();
            MmadParams p;
            p.m = static_cast<uint16_t>(heads);
            p.n = static_cast<uint16_t>(n);
            p.k = static_cast<uint16_t>(kc);
            p.cmatrixInitVal = k0 == 0;
            Mmad(acc, a2, b2, p);
            OrderSmallMmad(heads, n);
            qA2.FreeTensor(a2);
            kB2.FreeTensor(b2);
        }
        kB1.FreeTensor(b1);
        sCo1.EnQue(acc);
        acc = sCo1.DeQue<float>();
        FixpipeParamsV220 f;
        f.nSize = static_cast<uint16_t>(n);
        f.mSize = static_cast<uint16_t>(heads);
        // Mmad laid the result out by its own m: a last, shorter head tile has fewer row blocks.
        f.srcStride = static_cast<uint16_t>(Align16(heads));
        f.dstStride = tiling.indices;
        Fixpipe(scoresGm[static_cast<uint64_t>(h0) * tiling.indices + static_cast<uint64_t>(at)], acc, f);
        sCo1.FreeTensor(acc);
    }

    BurnDecodeScoresTiling tiling;
    uint32_t group = 1;      // G = HQ / HKV
    uint32_t mp = 16;        // head tile rounded up to 16 (A's padded rows)
    uint32_t np = 16;        // key tile (B's padded rows, already a multiple of 16)
    uint32_t kp = 16;        // Dk rounded up to 16
    TQue<TPosition::A1, 1> qA1;
    TQue<TPosition::B1, 1> kB1;
    TQue<TPosition::A2, 1> qA2;
    TQue<TPosition::B2, 1> kB2;
    TQue<TPosition::CO1, 1> sCo1;
    GlobalTensor<T> qGm, kGm;
    GlobalTensor<int32_t> indptrGm, idxGm, splitsGm;
    GlobalTensor<float> scoresGm;
};

template <typename T>
__aicore__ inline void RunScores(GM_ADDR q, GM_ADDR k, GM_ADDR indptr, GM_ADDR kvIndices, GM_ADDR splits, GM_ADDR scores,
                                 const BurnDecodeScoresTiling& t)
{
    TPipe pipe;
    DecodeScoresKernel<T> op;
    op.Init(q, k, indptr, kvIndices, splits, scores, t, &pipe);
    op.Process();
}

}  // namespace burn_ascend

extern "C" __global__ __aicore__ void decode_attention_scores(GM_ADDR q, GM_ADDR k, GM_ADDR indptr, GM_ADDR kvIndices,
                                                              GM_ADDR splits, GM_ADDR scores, BurnDecodeScoresTiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    if (tiling.dtype == 1) {
        burn_ascend::RunScores<half>(q, k, indptr, kvIndices, splits, scores, tiling);
    } else {
        burn_ascend::RunScores<bfloat16_t>(q, k, indptr, kvIndices, splits, scores, tiling);
    }
}
