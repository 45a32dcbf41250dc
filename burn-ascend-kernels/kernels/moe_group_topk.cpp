// moe_group_topk: a DeepSeek router's whole choice in one launch, as transformers computes it
// (what CANN's aclnnMoeGatingTopK does, which 8.1.RC1 does not declare:
// aclnn-fused-decode-ops.md §1). For each token's f32 logits row [E]:
//   scores = softmax(row) or sigmoid(row)                 (written out: the router's probs)
//   sel    = scores + bias                                  (the selection-only bias, if any)
//   group g (experts [g*P, (g+1)*P), P = E/G) scores the max of its sel values, or the sum of
//   its two largest; the `keepGroups` best groups stay, and every other expert's sel becomes 0
//   (transformers' masked_fill(~mask, 0.0): a kept expert whose biased score is negative ranks
//   below the masked ones, as there);
//   ids    = the topK largest sel values, largest first (ties: the lower expert id, in groups and
//            experts alike);
//   w      = the chosen sel values (DeepSeek-V2's group_limited_greedy) or the chosen unbiased
//            scores (`gatherScores`, DeepSeek-V3's noaux_tc); with `renorm`, w / (sum(w) + 1e-20);
//            then w * scale, rounded once to the weights' type (f32, f16 or bf16: the model's, so no
//            cast follows).
//
// Work split: tokens over the vector cores. A token's scores are computed by vector
// instructions; the choice (a few hundred comparisons for DeepSeek-V3's 256 experts) runs on the
// scalar unit over the unified buffer, which holds the whole row (E <= 4096, checked by the host).
#include "kernel_common.h"

// Global and prefixed: a by-value kernel parameter (see kernel_common.h).
struct BurnMoeGroupTopkTiling {
    uint32_t tokens;        // T
    uint32_t experts;       // E
    uint32_t topK;          // experts chosen per token
    uint32_t groups;        // G, dividing E
    uint32_t keepGroups;    // groups kept per token, 1..=G
    uint32_t groupTopTwo;   // 1: a group scores the sum of its two best; 0: its best
    uint32_t sigmoid;       // 1: sigmoid scores; 0: softmax
    uint32_t hasBias;       // 1: bias [E] is given
    uint32_t gatherScores;  // 1: the weights are the unbiased scores of the chosen experts
    uint32_t renorm;        // 1: the weights are divided by their sum (+ 1e-20)
    float scale;            // factor on the weights
    uint32_t rowsPerCore;   // tokens per block
    uint32_t rowElems;      // E rounded up to whole 32-byte blocks
    uint32_t groupElems;    // G rounded up to whole 32-byte blocks
    uint32_t topKElems;     // topK rounded up to whole 32-byte blocks
    uint32_t weightType;    // the weights' type: 0 f32, 1 f16, 2 bf16
};

namespace burn_ascend {

using namespace AscendC;

template <typename W>
class MoeGroupTopkKernel {
public:
    __aicore__ inline void Init(GM_ADDR logits, GM_ADDR bias, GM_ADDR scores, GM_ADDR weights, GM_ADDR ids,
                                const BurnMoeGroupTopkTiling& t, TPipe* pipe)
    {
        tiling = t;
        first = GetBlockIdx() * t.rowsPerCore;
        rows = first >= t.tokens ? 0 : (t.tokens - first < t.rowsPerCore ? t.tokens - first : t.rowsPerCore);
        const uint64_t e = t.experts;
        logitsGm.SetGlobalBuffer((__gm__ float*)logits + first * e, rows * e);
        scoresGm.SetGlobalBuffer((__gm__ float*)scores + first * e, rows * e);
        weightsGm.SetGlobalBuffer((__gm__ W*)weights + static_cast<uint64_t>(first) * t.topK,
                                  static_cast<uint64_t>(rows) * t.topK);
        idsGm.SetGlobalBuffer((__gm__ int32_t*)ids + static_cast<uint64_t>(first) * t.topK,
                              static_cast<uint64_t>(rows) * t.topK);
        if (t.hasBias) {
            biasGm.SetGlobalBuffer((__gm__ float*)bias, e);
            pipe->InitBuffer(biasBuf, t.rowElems * sizeof(float));
        }
        pipe->InitBuffer(rowBuf, t.rowElems * sizeof(float));
        pipe->InitBuffer(selBuf, t.rowElems * sizeof(float));
        pipe->InitBuffer(workBuf, t.rowElems * sizeof(float));
        pipe->InitBuffer(reduceBuf, ReduceTmpElems(t.experts) * sizeof(float));
        pipe->InitBuffer(statBuf, 8 * sizeof(float));
        pipe->InitBuffer(groupBuf, t.groupElems * sizeof(float));
        pipe->InitBuffer(weightBuf, t.topKElems * sizeof(float));
        pipe->InitBuffer(castBuf, Align32(t.topKElems * sizeof(W)));
        pipe->InitBuffer(idBuf, t.topKElems * sizeof(int32_t));
    }

    __aicore__ inline void Process()
    {
        if (rows == 0) {
            return;
        }
        if (tiling.hasBias) {
            Load(biasBuf.Get<float>(), biasGm, tiling.experts);
            Sync<HardEvent::MTE2_V>();
        }
        for (uint32_t r = 0; r < rows; ++r) {
            Scores(r);
            Choose(r);
        }
        // The last stores must finish before the block ends its use of the buffers.
        PipeBarrier<PIPE_ALL>();
    }

private:
    // The token's scores into rowBuf (and out to GM), and the selection values into selBuf.
    __aicore__ inline void Scores(uint32_t r)
    {
        const int32_t e = static_cast<int32_t>(tiling.experts);
        const uint64_t at = static_cast<uint64_t>(r) * tiling.experts;
        LocalTensor<float> row = rowBuf.Get<float>();
        LocalTensor<float> sel = selBuf.Get<float>();
        LocalTensor<float> work = workBuf.Get<float>();
        LocalTensor<float> stat = statBuf.Get<float>();
        // The previous token's scores store has read row.
        Sync<HardEvent::MTE3_MTE2>();
        Load(row, logitsGm[at], tiling.experts);
        Sync<HardEvent::MTE2_V>();
        if (tiling.sigmoid) {
            // 1 / (1 + exp(-x))
            Muls(row, row, -1.0f, e);
            Exp(row, row, e);
            Adds(row, row, 1.0f, e);
            Duplicate(work, 1.0f, e);
            Div(row, work, row, e);
        } else {
            ReduceMax(stat, row, reduceBuf.Get<float>(), e);
            Sync<HardEvent::V_S>();
            const float m = stat.GetValue(0);
            Sync<HardEvent::S_V>();
            Adds(row, row, -m, e);
            Exp(row, row, e);
            ReduceSum(stat, row, reduceBuf.Get<float>(), e);
            Sync<HardEvent::V_S>();
            const float z = stat.GetValue(0);
            Sync<HardEvent::S_V>();
            Muls(row, row, 1.0f / z, e);
        }
        if (tiling.hasBias) {
            Add(sel, row, biasBuf.Get<float>(), e);
        } else {
            Adds(sel, row, 0.0f, e);
        }
        Sync<HardEvent::V_MTE3>();
        Store(scoresGm[at], row, tiling.experts);
        Sync<HardEvent::V_S>();
    }

    // The token's experts and weights from rowBuf and selBuf, on the scalar unit.
    __aicore__ inline void Choose(uint32_t r)
    {
        LocalTensor<float> row = rowBuf.Get<float>();
        LocalTensor<float> sel = selBuf.Get<float>();
        LocalTensor<float> group = groupBuf.Get<float>();
        const uint32_t per = tiling.experts / tiling.groups;
        if (tiling.keepGroups < tiling.groups) {
            for (uint32_t g = 0; g < tiling.groups; ++g) {
                float best = kLowest;
                float second = kLowest;
                for (uint32_t i = g * per; i < (g + 1) * per; ++i) {
                    const float v = sel.GetValue(i);
                    if (v > best) {
                        second = best;
                        best = v;
                    } else if (v > second) {
                        second = v;
                    }
                }
                group.SetValue(g, tiling.groupTopTwo ? best + second : best);
            }
            // The kept groups are the ones taken.
            float best;
            for (uint32_t n = 0; n < tiling.keepGroups; ++n) {
                TakeBest(group, tiling.groups, best);
            }
            for (uint32_t g = 0; g < tiling.groups; ++g) {
                if (group.GetValue(g) != kTaken) {
                    for (uint32_t i = g * per; i < (g + 1) * per; ++i) {
                        sel.SetValue(i, 0.0f);
                    }
                }
            }
        }
        LocalTensor<float> w = weightBuf.Get<float>();
        LocalTensor<int32_t> id = idBuf.Get<int32_t>();
        // The previous token's weights and ids stores have read the staging buffers.
        Sync<HardEvent::MTE3_S>();
        float sum = 0.0f;
        for (uint32_t n = 0; n < tiling.topK; ++n) {
            float best;
            const uint32_t pick = TakeBest(sel, tiling.experts, best);
            const float weight = tiling.gatherScores ? row.GetValue(pick) : best;
            w.SetValue(n, weight);
            id.SetValue(n, static_cast<int32_t>(pick));
            sum += weight;
        }
        const float factor = tiling.renorm ? tiling.scale / (sum + 1e-20f) : tiling.scale;
        for (uint32_t n = 0; n < tiling.topK; ++n) {
            w.SetValue(n, w.GetValue(n) * factor);
        }
        Sync<HardEvent::S_MTE3>();
        const uint64_t at = static_cast<uint64_t>(r) * tiling.topK;
        PutWeights(weightsGm[at], w);
        Store(idsGm[at], id, tiling.topK);
        // The next token's vector work rewrites selBuf and rowBuf, read above.
        Sync<HardEvent::S_V>();
    }

    // The largest of values[0, n) not yet taken (ties: the lower index) into `best`; marks it
    // taken and returns its index.
    __aicore__ inline uint32_t TakeBest(const LocalTensor<float>& values, uint32_t n, float& best)
    {
        uint32_t pick = 0;
        bool found = false;
        best = kLowest;
        for (uint32_t i = 0; i < n; ++i) {
            const float v = values.GetValue(i);
            if (v != kTaken && (!found || v > best)) {
                best = v;
                pick = i;
                found = true;
            }
        }
        values.SetValue(pick, kTaken);
        return pick;
    }

    // The weights in f32, stored as they are.
    __aicore__ inline void PutWeights(const GlobalTensor<float>& dst, const LocalTensor<float>& w)
    {
        Store(dst, w, tiling.topK);
    }

    // The weights rounded to a 2-byte type (to nearest even) on the vector unit, then stored.
    template <typename U>
    __aicore__ inline void PutWeights(const GlobalTensor<U>& dst, const LocalTensor<float>& w)
    {
        LocalTensor<U> narrow = castBuf.Get<U>();
        // The previous token's store has read the narrow weights.
        Sync<HardEvent::MTE3_V>();
        Sync<HardEvent::S_V>();
        Cast(narrow, w, RoundMode::CAST_RINT, static_cast<int32_t>(tiling.topK));
        Sync<HardEvent::V_MTE3>();
        Store(dst, narrow, tiling.topK);
    }

    // Sentinels no value takes: sel values are finite sums of a score in [0, 1] and a bias.
    static constexpr float kLowest = -3.0e38f;
    static constexpr float kTaken = -3.3e38f;

    BurnMoeGroupTopkTiling tiling;
    uint32_t first = 0;
    uint32_t rows = 0;
    TBuf<TPosition::VECCALC> rowBuf, selBuf, workBuf, biasBuf, reduceBuf, statBuf, groupBuf, weightBuf, castBuf, idBuf;
    GlobalTensor<float> logitsGm, biasGm, scoresGm;
    GlobalTensor<W> weightsGm;
    GlobalTensor<int32_t> idsGm;
};

template <typename W>
__aicore__ inline void RunGroupTopk(GM_ADDR logits, GM_ADDR bias, GM_ADDR scores, GM_ADDR weights, GM_ADDR ids,
                                    const BurnMoeGroupTopkTiling& t)
{
    TPipe pipe;
    MoeGroupTopkKernel<W> kernel;
    kernel.Init(logits, bias, scores, weights, ids, t, &pipe);
    kernel.Process();
}

}  // namespace burn_ascend

extern "C" __global__ __aicore__ void moe_group_topk(GM_ADDR logits, GM_ADDR bias, GM_ADDR scores, GM_ADDR weights,
                                                     GM_ADDR ids, BurnMoeGroupTopkTiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    switch (tiling.weightType) {
        case 1: burn_ascend::RunGroupTopk<half>(logits, bias, scores, weights, ids, tiling); break;
        case 2: burn_ascend::RunGroupTopk<bfloat16_t>(logits, bias, scores, weights, ids, tiling); break;
        default: burn_ascend::RunGroupTopk<float>(logits, bias, scores, weights, ids, tiling); break;
    }
}
