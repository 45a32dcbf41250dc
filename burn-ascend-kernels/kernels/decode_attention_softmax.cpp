// decode_attention, cube path, kernel 2 of 3 (AIV): the split softmax of the scores that
// decode_attention_scores.cpp left in the scores workspace [HQ, T] f32. For request b, query
// head h and split c (cut exactly as stage 1 cuts it, decode_split.h), with s_j = scale *
// scores_j, capped as stage 1 caps it (cap * tanh(s / cap)):
//   m = max_j s_j, Z = sum_j exp(s_j - m), part_lse[b, h, c] = m + ln Z,
//   probs[h, i] = exp(s_j - m) / Z for the split's keys (i their position in kv_indices),
// in q's dtype: the probabilities are the A operand of the value product
// (decode_attention_values.cpp), whose results are then already normalised. An empty split
// gets lse = -inf and a zero row of part_out here (the value product skips it: a cube core
// can only write what an Mmad produced).
//
// Workspace layout: probs [HQ, T] in q's dtype, the same layout as the scores, so that the
// value product reads a head tile's probabilities of a key tile as one strided ND->NZ copy.
//
// Work split: a unit is one (request, head, split), round-robin over the vector cores. A split
// of up to `chunk` scores is loaded once; a longer one streams through the unified buffer in
// three passes (max, sum, write), recomputing the scaled scores each pass.
#include "decode_split.h"


// Global and prefixed: a by-value kernel parameter (see kernel_common.h).
struct BurnDecodeSoftmaxTiling {
    uint32_t batch;      // B
    uint32_t qHeads;     // HQ
    uint32_t headDimV;   // Dv (the zero rows of empty splits)
    uint32_t maxSplits;  // max_kv_splits
    uint32_t indices;    // T: entries of kv_indices (the workspaces' row pitch)
    uint32_t chunk;      // scores per pass, a multiple of 64
    uint32_t dtype;      // 1 half, 2 bfloat16 (probs)
    float scale;         // sm_scale
    float logitCap;      // 0: none
};

namespace burn_ascend {

using namespace AscendC;

template <typename T>
class DecodeSoftmaxKernel {
public:
    __aicore__ inline void Init(GM_ADDR indptr, GM_ADDR splits, GM_ADDR scores, GM_ADDR probs, GM_ADDR partOut,
                                GM_ADDR partLse, const BurnDecodeSoftmaxTiling& t, TPipe* pipe)
    {
        tiling = t;
        const uint64_t cells = static_cast<uint64_t>(t.qHeads) * t.indices;
        indptrGm.SetGlobalBuffer((__gm__ int32_t*)indptr, t.batch + 1);
        splitsGm.SetGlobalBuffer((__gm__ int32_t*)splits, t.batch);
        scoresGm.SetGlobalBuffer((__gm__ float*)scores, cells);
        probsGm.SetGlobalBuffer((__gm__ T*)probs, cells);
        const uint64_t rows = static_cast<uint64_t>(t.batch) * t.qHeads * t.maxSplits;
        outGm.SetGlobalBuffer((__gm__ float*)partOut, rows * t.headDimV);
        lseGm.SetGlobalBuffer((__gm__ float*)partLse, rows);
        pipe->InitBuffer(scoreBuf, t.chunk * sizeof(float));
        if (t.logitCap > 0.0f) {
            pipe->InitBuffer(capBuf, t.chunk * sizeof(float));
        }
        pipe->InitBuffer(probBuf, t.chunk * sizeof(T));
        pipe->InitBuffer(reduceBuf, 2 * ReduceTmpElems(t.chunk) * sizeof(float));
        pipe->InitBuffer(statBuf, 8 * sizeof(float));
        pipe->InitBuffer(zeroBuf, Align32(t.headDimV * sizeof(float)));
    }

    __aicore__ inline void Process()
    {
        const uint32_t units = tiling.batch * tiling.qHeads * tiling.maxSplits;
        for (uint32_t u = static_cast<uint32_t>(GetBlockIdx()); u < units; u += static_cast<uint32_t>(GetBlockNum())) {
            const uint32_t c = u % tiling.maxSplits;
            const uint32_t h = (u / tiling.maxSplits) % tiling.qHeads;
            const uint32_t b = u / tiling.maxSplits / tiling.qHeads;
            Unit(b, h, c, u);
        }
    }

private:
    // The n scores at `at`, scaled and capped, in the score buffer.
    __aicore__ inline void LoadScores(uint64_t at, uint32_t n)
    {
        LocalTensor<float> s = scoreBuf.Get<float>();
        // The previous pass's vector ops have read the buffer.
        Sync<HardEvent::V_MTE2>();
        Load(s, scoresGm[at], n);
        Sync<HardEvent::MTE2_V>();
        const int32_t count = static_cast<int32_t>(n);
        Muls(s, s, tiling.scale, count);
        if (tiling.logitCap > 0.0f) {
            // Stage 1's formula: cap * (e - 1) / (e + 1), e = exp(2 clamp(s / cap, -15, 15)).
            LocalTensor<float> den = capBuf.Get<float>();
            Muls(s, s, 1.0f / tiling.logitCap, count);
            Mins(s, s, 15.0f, count);
            Maxs(s, s, -15.0f, count);
            Muls(s, s, 2.0f, count);
            Exp(s, s, count);
            Adds(den, s, 1.0f, count);
            Adds(s, s, -1.0f, count);
            Div(s, s, den, count);
            Muls(s, s, tiling.logitCap, count);
        }
    }

    // exp(s - m) over the score buffer.
    __aicore__ inline void Shift(float m, uint32_t n)
    {
        LocalTensor<float> s = scoreBuf.Get<float>();
        Adds(s, s, -m, static_cast<int32_t>(n));
        Exp(s, s, static_cast<int32_t>(n));
    }

    __aicore__ inline void Unit(uint32_t b, uint32_t h, uint32_t c, uint32_t row)
    {
        const DecodeSplit sp = ReadDecodeSplit(indptrGm, splitsGm, b, c, tiling.indices, tiling.maxSplits);
        LocalTensor<float> stat = statBuf.Get<float>();
        // The previous unit's lse store has read the staging buffer.
        Sync<HardEvent::MTE3_V>();
        if (sp.from >= sp.to) {
            LocalTensor<float> zeros = zeroBuf.Get<float>();
            Duplicate(zeros, 0.0f, static_cast<int32_t>(tiling.headDimV));
            union { uint32_t u; float f; } minusInf{0xff800000u};
            Duplicate(stat, minusInf.f, 8);
            Sync<HardEvent::V_MTE3>();
            Store(outGm[static_cast<uint64_t>(row) * tiling.headDimV], zeros, tiling.headDimV);
            StoreLse(row);
            return;
        }
        const uint64_t base = static_cast<uint64_t>(h) * tiling.indices + static_cast<uint64_t>(sp.start + sp.from);
        const uint32_t len = static_cast<uint32_t>(sp.to - sp.from);
        const bool once = len <= tiling.chunk;
        LocalTensor<float> s = scoreBuf.Get<float>();
        LocalTensor<float> shared = reduceBuf.Get<float>();
        float m = -3.0e38f;
        for (uint32_t off = 0; off < len; off += tiling.chunk) {
            const uint32_t n = len - off < tiling.chunk ? len - off : tiling.chunk;
            LoadScores(base + off, n);
            ReduceMax(stat, s, shared, static_cast<int32_t>(n));
            Sync<HardEvent::V_S>();
            const float mc = stat.GetValue(0);
            m = mc > m ? mc : m;
            // The next vector op rewrites stat after this scalar read.
            Sync<HardEvent::S_V>();
        }
        float z = 0.0f;
        for (uint32_t off = 0; off < len; off += tiling.chunk) {
            const uint32_t n = len - off < tiling.chunk ? len - off : tiling.chunk;
            if (!once) {
                LoadScores(base + off, n);
            }
            Shift(m, n);
            ReduceSum(stat, s, shared, static_cast<int32_t>(n));
            Sync<HardEvent::V_S>();
            z += stat.GetValue(0);
            Sync<HardEvent::S_V>();
        }
        LocalTensor<T> p = probBuf.Get<T>();
        for (uint32_t off = 0; off < len; off += tiling.chunk) {
            const uint32_t n = len - off < tiling.chunk ? len - off : tiling.chunk;
            if (!once) {
                LoadScores(base + off, n);
                Shift(m, n);
            }
            // The previous chunk's store has read the probabilities.
            Sync<HardEvent::MTE3_V>();
            Muls(s, s, 1.0f / z, static_cast<int32_t>(n));
            Cast(p, s, RoundMode::CAST_RINT, static_cast<int32_t>(n));
            Sync<HardEvent::V_MTE3>();
            Store(probsGm[base + off], p, n);
        }
        Duplicate(stat, z, 8);
        Ln(stat, stat, 8);
        Adds(stat, stat, m, 8);
        Sync<HardEvent::V_MTE3>();
        StoreLse(row);
    }

    __aicore__ inline void StoreLse(uint32_t row)
    {
        DataCopyExtParams one{1, sizeof(float), 0, 0, 0};
        DataCopyPad(lseGm[row], statBuf.Get<float>(), one);
    }

    BurnDecodeSoftmaxTiling tiling;
    TBuf<TPosition::VECCALC> scoreBuf, capBuf, probBuf, reduceBuf, statBuf, zeroBuf;
    GlobalTensor<int32_t> indptrGm, splitsGm;
    GlobalTensor<float> scoresGm, outGm, lseGm;
    GlobalTensor<T> probsGm;
};

template <typename T>
__aicore__ inline void RunSoftmax(GM_ADDR indptr, GM_ADDR splits, GM_ADDR scores, GM_ADDR probs, GM_ADDR partOut,
                                  GM_ADDR partLse, const BurnDecodeSoftmaxTiling& t)
{
    TPipe pipe;
    DecodeSoftmaxKernel<T> op;
    op.Init(indptr, splits, scores, probs, partOut, partLse, t, &pipe);
    op.Process();
}

}  // namespace burn_ascend

extern "C" __global__ __aicore__ void decode_attention_softmax(GM_ADDR indptr, GM_ADDR splits, GM_ADDR scores, GM_ADDR probs,
                                                               GM_ADDR partOut, GM_ADDR partLse,
                                                               BurnDecodeSoftmaxTiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    if (tiling.dtype == 1) {
        burn_ascend::RunSoftmax<half>(indptr, splits, scores, probs, partOut, partLse, tiling);
    } else {
        burn_ascend::RunSoftmax<bfloat16_t>(indptr, splits, scores, probs, partOut, partLse, tiling);
    }
}
