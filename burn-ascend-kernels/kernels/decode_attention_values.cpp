// decode_attention, cube path, kernel 3 of 3 (AIC): part_out[b, h, c] = P . V on the cube
// unit, P the probabilities decode_attention_softmax.cpp wrote (already normalised by the
// split's sum, in q's dtype) and V the split's value rows gathered by slot: from v_cache, or in
// the MLA layout from the first Dv dims of the key rows. Empty splits are skipped (the softmax
// kernel wrote their zero rows and -inf).
//
// Layouts: probs [HQ, T] (T = entries of kv_indices, see the softmax kernel); part_out
// [B, HQ, max_kv_splits, Dv] f32 as stage 1 writes it, so stage 2 is unchanged: a head tile's
// rows of split c are max_kv_splits * Dv apart, one strided Fixpipe.
//
// Work split: a unit is (request, key/value head, head tile, split), round-robin over the cube
// cores. Per tile of `keyTile` keys: the head tile's probabilities come in as A (m = heads,
// k = keys; one ND->NZ copy, or one per head when T exceeds the copy's uint16 source pitch),
// the value rows as B stored k x n (one ND->NZ copy per key into row j of a zN tile), which
// LoadData transposes fractal by fractal into L0B (2-byte types only: why float stays on the
// vector path). The product accumulates in L0C over the split's key tiles and leaves through
// one Fixpipe as f32.
#include "decode_split.h"


// Global and prefixed: a by-value kernel parameter (see kernel_common.h).
struct BurnDecodeValuesTiling {
    uint32_t batch;         // B
    uint32_t qHeads;        // HQ
    uint32_t kvHeads;       // HKV
    uint32_t rowDim;        // elements per head of the cache rows the values are read from (Dk or Dv)
    uint32_t headDimV;      // Dv (at most 4095: Fixpipe's nSize)
    uint32_t maxSplits;     // max_kv_splits
    uint32_t slots;         // rows of the caches
    uint32_t indices;       // T: entries of kv_indices (the probabilities' row pitch)
    uint32_t headTile;      // query heads per unit, in [2, group]: Mmad's m
    uint32_t keyTile;       // keys per Mmad (k), a multiple of 16
    uint32_t dtype;         // 1 half, 2 bfloat16
};

namespace burn_ascend {

using namespace AscendC;

// The largest source row pitch of an ND->NZ copy (Nd2NzParams::srcDValue is uint16_t).
constexpr uint32_t MAX_ND_PITCH = 65535;

template <typename T>
class DecodeValuesKernel {
public:
    __aicore__ inline void Init(GM_ADDR vals, GM_ADDR indptr, GM_ADDR kvIndices, GM_ADDR splits, GM_ADDR probs,
                                GM_ADDR partOut, const BurnDecodeValuesTiling& t, TPipe* pipe)
    {
        tiling = t;
        group = t.qHeads / t.kvHeads;
        mp = Align16(t.headTile);
        kr = t.keyTile;
        np = Align16(t.headDimV);
        vGm.SetGlobalBuffer((__gm__ T*)vals, static_cast<uint64_t>(t.slots) * t.kvHeads * t.rowDim);
        indptrGm.SetGlobalBuffer((__gm__ int32_t*)indptr, t.batch + 1);
        idxGm.SetGlobalBuffer((__gm__ int32_t*)kvIndices, t.indices);
        splitsGm.SetGlobalBuffer((__gm__ int32_t*)splits, t.batch);
        probsGm.SetGlobalBuffer((__gm__ T*)probs, static_cast<uint64_t>(t.qHeads) * t.indices);
        outGm.SetGlobalBuffer((__gm__ float*)partOut,
                              static_cast<uint64_t>(t.batch) * t.qHeads * t.maxSplits * t.headDimV);
        pipe->InitBuffer(pA1, 1, mp * kr * sizeof(T));
        pipe->InitBuffer(vB1, 1, kr * np * sizeof(T));
        pipe->InitBuffer(pA2, 1, mp * kr * sizeof(T));
        pipe->InitBuffer(vB2, 1, kr * np * sizeof(T));
        pipe->InitBuffer(oCo1, 1, mp * np * sizeof(float));
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
        LocalTensor<float> acc = oCo1.AllocTensor<float>();
        const int64_t first = s.start + s.from;
        const int64_t last = s.start + s.to;
        for (int64_t at = first; at < last; at += tiling.keyTile) {
            const uint32_t n = static_cast<uint32_t>(last - at < tiling.keyTile ? last - at : tiling.keyTile);
            Tile(acc, hkv, h0, heads, at, n, at == first);
        }
        oCo1.EnQue(acc);
        acc = oCo1.DeQue<float>();
        FixpipeParamsV220 f;
        f.nSize = static_cast<uint16_t>(tiling.headDimV);
        f.mSize = static_cast<uint16_t>(heads);
        // Mmad laid the result out by its own m: a last, shorter head tile has fewer row blocks.
        f.srcStride = static_cast<uint16_t>(Align16(heads));
        f.dstStride = tiling.maxSplits * tiling.headDimV;
        const uint64_t row = (static_cast<uint64_t>(b) * tiling.qHeads + h0) * tiling.maxSplits + c;
        Fixpipe(outGm[row * tiling.headDimV], acc, f);
        oCo1.FreeTensor(acc);
    }

    // acc (+)= P[heads, n keys at kv_indices[at..]] . V[n keys, Dv].
    __aicore__ inline void Tile(const LocalTensor<float>& acc, uint32_t hkv, uint32_t h0, uint32_t heads, int64_t at,
                                uint32_t n, bool init)
    {
        const uint32_t kp = Align16(n);
        LocalTensor<T> a1 = pA1.AllocTensor<T>();
        const uint64_t pAt = static_cast<uint64_t>(h0) * tiling.indices + static_cast<uint64_t>(at);
        const uint16_t keys = static_cast<uint16_t>(n);
        if (tiling.indices <= MAX_ND_PITCH) {
            DataCopy(a1, probsGm[pAt], Nd2NzParams(1, static_cast<uint16_t>(heads), keys, 0,
                                                   static_cast<uint16_t>(tiling.indices), static_cast<uint16_t>(mp), 1, 0));
        } else {
            for (uint32_t r = 0; r < heads; ++r) {
                DataCopy(a1[r * 16], probsGm[pAt + static_cast<uint64_t>(r) * tiling.indices],
                         Nd2NzParams(1, 1, keys, 0, keys, static_cast<uint16_t>(mp), 1, 0));
            }
        }
        pA1.EnQue(a1);
        LocalTensor<T> b1 = vB1.AllocTensor<T>();
        const uint64_t vRow = static_cast<uint64_t>(tiling.kvHeads) * tiling.rowDim;
        const uint16_t dv = static_cast<uint16_t>(tiling.headDimV);
        for (uint32_t j = 0; j < n; ++j) {
            const uint64_t slot = ReadDecodeSlot(idxGm, at + j, tiling.slots);
            // Value j becomes row j of the Kr x Np zN tile (B stored k x n).
            DataCopy(b1[j * 16], vGm[slot * vRow + hkv * tiling.rowDim],
                     Nd2NzParams(1, 1, dv, 0, dv, static_cast<uint16_t>(kr), 1, 0));
        }
        vB1.EnQue(b1);
        a1 = pA1.DeQue<T>();
        b1 = vB1.DeQue<T>();
        LocalTensor<T> a2 = pA2.AllocTensor<T>();
        for (uint32_t ib = 0; ib < mp / 16; ++ib) {
            LoadData2DParams l;
            l.startIndex = static_cast<uint16_t>(ib);
            l.repeatTimes = static_cast<uint8_t>(kp / 16);
            l.srcStride = static_cast<uint16_t>(mp / 16);
            LoadData(a2[ib * 16 * kp], a1, l);
        }
        pA2.EnQue(a2);
        // k x n rows to L0B's nZ order: each 16 x 16 fractal transposed.
        LocalTensor<T> b2 = vB2.AllocTensor<T>();
        for (uint32_t kb = 0; kb < kp / 16; ++kb) {
            LoadData2DParams l;
            l.startIndex = static_cast<uint16_t>(kb);
            l.repeatTimes = static_cast<uint8_t>(np / 16);
            l.srcStride = static_cast<uint16_t>(kr / 16);
            l.ifTranspose = true;
            LoadData(b2[kb * 16 * np], b1, l);
        }
        vB2.EnQue(b2);
        pA1.FreeTensor(a1);
        vB1.FreeTensor(b1);
        a2 = pA2.DeQue<T>();
        b2 = vB2.DeQue<T>();
        MmadParams p;
        p.m = static_cast<uint16_t>(heads);
        p.n = static_cast<uint16_t>(tiling.headDimV);
        p.k = static_cast<uint16_t>(n);
        p.cmatrixInitVal = init;
        Mmad(acc, a2, b2, p);
        OrderSmallMmad(heads, tiling.headDimV);
        pA2.FreeTensor(a2);
        vB2.FreeTensor(b2);
    }

    BurnDecodeValuesTiling tiling;
    uint32_t group = 1;      // G = HQ / HKV
    uint32_t mp = 16;        // head tile rounded up to 16
    uint32_t kr = 16;        // key tile (B's padded rows, a multiple of 16)
    uint32_t np = 16;        // Dv rounded up to 16
    TQue<TPosition::A1, 1> pA1;
    TQue<TPosition::B1, 1> vB1;
    TQue<TPosition::A2, 1> pA2;
    TQue<TPosition::B2, 1> vB2;
    TQue<TPosition::CO1, 1> oCo1;
    GlobalTensor<T> vGm, probsGm;
    GlobalTensor<int32_t> indptrGm, idxGm, splitsGm;
    GlobalTensor<float> outGm;
};

template <typename T>
__aicore__ inline void RunValues(GM_ADDR vals, GM_ADDR indptr, GM_ADDR kvIndices, GM_ADDR splits, GM_ADDR probs,
                                 GM_ADDR partOut, const BurnDecodeValuesTiling& t)
{
    TPipe pipe;
    DecodeValuesKernel<T> op;
    op.Init(vals, indptr, kvIndices, splits, probs, partOut, t, &pipe);
    op.Process();
}

}  // namespace burn_ascend

extern "C" __global__ __aicore__ void decode_attention_values(GM_ADDR values, GM_ADDR indptr, GM_ADDR kvIndices,
                                                              GM_ADDR splits, GM_ADDR probs, GM_ADDR partOut,
                                                              BurnDecodeValuesTiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    if (tiling.dtype == 1) {
        burn_ascend::RunValues<half>(values, indptr, kvIndices, splits, probs, partOut, tiling);
    } else {
        burn_ascend::RunValues<bfloat16_t>(values, indptr, kvIndices, splits, probs, partOut, tiling);
    }
}
