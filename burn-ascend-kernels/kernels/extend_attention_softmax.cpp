// extend_attention (paged prefill), cube path, kernel 2 of 3 (AIV), one pass: the online softmax
// of each row over the pass's window of key positions, and the rescaled fold of the previous
// pass's value product; launched once more after the last pass (pass == passes) to fold the last
// value product and normalise.
//
// Row (t, h), chunk row i of request r at position pos = kv - rows + i, sees window positions
// w0 .. min(w0 + window, pos + 1): n of them (a prefix of the window: keys are causal). Its
// running statistics stats[t, h] = (m, l, alpha) are the max of its scaled scores so far, their
// exp-sum relative to m, and the factor the last pass rescaled the accumulator by. Per pass,
// with s_j = scale * scores_j (extend_attention_scores.cpp left them in [T, HQ, window] f32):
//   m' = max(m, max_j s_j), alpha = exp(m - m'), l' = alpha l + sum_j exp(s_j - m'),
//   probs[t, h, j] = exp(s_j - m') for j < n, 0 for n <= j < min(w0 + window, kv) - w0,
// in q's dtype (the A operand of extend_attention_values.cpp, whose units read up to their last
// row's limit, at most the request's kv). The next launch first folds that pass's value product
// pv[t, h] into the f32 accumulator acc[t, h] = alpha acc + pv (the first pass's is taken as
// is); the finishing launch writes out[t, h] = acc / l in q's dtype. A row without keys in a
// window (past its causal limit) keeps its statistics and accumulator: it has none in the later
// windows either, and its stale pv is never folded.
//
// Work split: a unit is one row (t, h), round-robin over the vector cores; the window (at most
// `window` scores, which the tiling fits in the unified buffer) is loaded once.
#include "extend_split.h"

// Global and prefixed: a by-value kernel parameter (see kernel_common.h).
struct BurnExtendSoftmaxTiling {
    uint32_t requests;  // R
    uint32_t tokens;    // T
    uint32_t qHeads;    // HQ
    uint32_t headDimV;  // Dv
    uint32_t capacity;  // W x page size: the most tokens a request caches
    uint32_t window;    // positions per pass (the workspaces' row pitch), a multiple of 16
    uint32_t pass;      // this launch's window; == passes: the finishing launch
    uint32_t passes;    // windows in all
    uint32_t dtype;     // 1 half, 2 bfloat16 (probs, out)
    float scale;        // sm_scale
};

namespace burn_ascend {

using namespace AscendC;

// f32 per row of the statistics workspace: m, l, alpha, padded to a 32-byte block.
constexpr uint32_t EXTEND_STATS = 8;

template <typename T>
class ExtendSoftmaxKernel {
public:
    __aicore__ inline void Init(GM_ADDR lens, GM_ADDR scores, GM_ADDR probs, GM_ADDR stats, GM_ADDR acc, GM_ADDR pv,
                                GM_ADDR out, const BurnExtendSoftmaxTiling& t, TPipe* pipe)
    {
        tiling = t;
        const uint64_t rows = static_cast<uint64_t>(t.tokens) * t.qHeads;
        lensGm.SetGlobalBuffer((__gm__ int32_t*)lens, 2 * t.requests + 1);
        scoresGm.SetGlobalBuffer((__gm__ float*)scores, rows * t.window);
        probsGm.SetGlobalBuffer((__gm__ T*)probs, rows * t.window);
        statsGm.SetGlobalBuffer((__gm__ float*)stats, rows * EXTEND_STATS);
        accGm.SetGlobalBuffer((__gm__ float*)acc, rows * t.headDimV);
        pvGm.SetGlobalBuffer((__gm__ float*)pv, rows * t.headDimV);
        outGm.SetGlobalBuffer((__gm__ T*)out, rows * t.headDimV);
        pipe->InitBuffer(scoreBuf, t.window * sizeof(float));
        pipe->InitBuffer(probBuf, Align32(t.window * sizeof(T)));
        pipe->InitBuffer(zeroProbBuf, Align32(t.window * sizeof(T)));
        pipe->InitBuffer(reduceBuf, 2 * ReduceTmpElems(t.window) * sizeof(float));
        pipe->InitBuffer(statBuf, EXTEND_STATS * sizeof(float));
        pipe->InitBuffer(scalBuf, 8 * sizeof(float));
        pipe->InitBuffer(accBuf, Align32(t.headDimV * sizeof(float)));
        pipe->InitBuffer(pvBuf, Align32(t.headDimV * sizeof(float)));
        pipe->InitBuffer(outBuf, Align32(t.headDimV * sizeof(T)));
        // Zeros of q's type, once: the probabilities past a row's limit.
        LocalTensor<float> s = scoreBuf.Get<float>();
        Duplicate(s, 0.0f, static_cast<int32_t>(t.window));
        Cast(zeroProbBuf.Get<T>(), s, RoundMode::CAST_RINT, static_cast<int32_t>(t.window));
        Sync<HardEvent::V_MTE3>();
    }

    __aicore__ inline void Process()
    {
        ForEachExtendUnit(
            lensGm, tiling.requests, tiling.tokens, tiling.capacity,
            [this](const ExtendRequest& q) { return static_cast<uint64_t>(q.rows) * tiling.qHeads; },
            [this](const ExtendRequest& q, uint32_t, uint32_t local) { Row(q, local / tiling.qHeads, local % tiling.qHeads); });
    }

private:
    __aicore__ inline void Row(const ExtendRequest& q, uint32_t i, uint32_t h)
    {
        const int64_t win = tiling.window;
        const int64_t w0 = static_cast<int64_t>(tiling.pass) * win;
        const int64_t limit = q.kv - q.rows + i + 1;  // the row's keys: positions 0 .. limit
        const uint64_t row = static_cast<uint64_t>(q.first + i) * tiling.qHeads + h;
        const int32_t dv = static_cast<int32_t>(tiling.headDimV);
        LocalTensor<float> stat = statBuf.Get<float>();
        // The previous row's stores have read the staging buffers.
        Sync<HardEvent::MTE3_V>();
        Sync<HardEvent::MTE3_S>();
        float m = -3.0e38f;
        float l = 0.0f;
        if (tiling.pass > 0) {
            Sync<HardEvent::S_MTE2>();
            DataCopy(stat, statsGm[row * EXTEND_STATS], EXTEND_STATS);
            Sync<HardEvent::MTE2_S>();
            m = stat.GetValue(0);
            l = stat.GetValue(1);
        }
        // The previous pass's value product, when the row had keys in it.
        const bool fold = tiling.pass > 0 && w0 - win < limit;
        LocalTensor<float> acc = accBuf.Get<float>();
        if (fold) {
            LocalTensor<float> pv = pvBuf.Get<float>();
            Sync<HardEvent::V_MTE2>();
            Load(pv, pvGm[row * tiling.headDimV], tiling.headDimV);
            if (tiling.pass > 1) {
                Load(acc, accGm[row * tiling.headDimV], tiling.headDimV);
            }
            Sync<HardEvent::MTE2_V>();
            if (tiling.pass > 1) {
                Muls(acc, acc, stat.GetValue(2), dv);
                Add(acc, acc, pv, dv);
            } else {
                Adds(acc, pv, 0.0f, dv);
            }
        }
        if (tiling.pass == tiling.passes) {
            if (!fold) {
                Sync<HardEvent::V_MTE2>();
                Load(acc, accGm[row * tiling.headDimV], tiling.headDimV);
                Sync<HardEvent::MTE2_V>();
            }
            LocalTensor<T> o = outBuf.Get<T>();
            Muls(acc, acc, 1.0f / l, dv);
            Cast(o, acc, RoundMode::CAST_RINT, dv);
            Sync<HardEvent::V_MTE3>();
            Store(outGm[row * tiling.headDimV], o, tiling.headDimV);
            return;
        }
        if (fold) {
            Sync<HardEvent::V_MTE3>();
            Store(accGm[row * tiling.headDimV], acc, tiling.headDimV);
        }
        const int64_t lim = limit < w0 + win ? limit : w0 + win;
        const int64_t reach = q.kv < w0 + win ? q.kv : w0 + win;
        const uint32_t n = lim > w0 ? static_cast<uint32_t>(lim - w0) : 0;
        const uint32_t zeroTo = reach > w0 ? static_cast<uint32_t>(reach - w0) : 0;
        const uint64_t at = row * tiling.window;
        if (n == 0) {
            if (zeroTo > 0) {
                Store(probsGm[at], zeroProbBuf.Get<T>(), zeroTo);
            }
            return;
        }
        LocalTensor<float> s = scoreBuf.Get<float>();
        LocalTensor<float> shared = reduceBuf.Get<float>();
        LocalTensor<float> scal = scalBuf.Get<float>();
        const int32_t count = static_cast<int32_t>(n);
        Sync<HardEvent::V_MTE2>();
        Load(s, scoresGm[at], n);
        Sync<HardEvent::MTE2_V>();
        Muls(s, s, tiling.scale, count);
        ReduceMax(scal, s, shared, count);
        Sync<HardEvent::V_S>();
        const float top = scal.GetValue(0);
        const float mNew = top > m ? top : m;
        Sync<HardEvent::S_V>();
        // alpha = exp(m - m'): 0 on the first pass (m is the -3e38 start).
        Duplicate(scal, m - mNew, 8);
        Exp(scal, scal, 8);
        Adds(s, s, -mNew, count);
        Exp(s, s, count);
        ReduceSum(scal[1], s, shared, count);
        Sync<HardEvent::V_S>();
        const float alpha = scal.GetValue(0);
        const float z = scal.GetValue(1);
        LocalTensor<T> p = probBuf.Get<T>();
        Cast(p, s, RoundMode::CAST_RINT, count);
        stat.SetValue(0, mNew);
        stat.SetValue(1, alpha * l + z);
        stat.SetValue(2, alpha);
        Sync<HardEvent::V_MTE3>();
        Sync<HardEvent::S_MTE3>();
        Store(probsGm[at], p, n);
        if (zeroTo > n) {
            Store(probsGm[at + n], zeroProbBuf.Get<T>(), zeroTo - n);
        }
        DataCopy(statsGm[row * EXTEND_STATS], stat, EXTEND_STATS);
    }

    BurnExtendSoftmaxTiling tiling;
    TBuf<TPosition::VECCALC> scoreBuf, probBuf, zeroProbBuf, reduceBuf, statBuf, scalBuf, accBuf, pvBuf, outBuf;
    GlobalTensor<int32_t> lensGm;
    GlobalTensor<float> scoresGm, statsGm, accGm, pvGm;
    GlobalTensor<T> probsGm, outGm;
};

template <typename T>
__aicore__ inline void RunExtendSoftmax(GM_ADDR lens, GM_ADDR scores, GM_ADDR probs, GM_ADDR stats, GM_ADDR acc, GM_ADDR pv,
                                        GM_ADDR out, const BurnExtendSoftmaxTiling& t)
{
    TPipe pipe;
    ExtendSoftmaxKernel<T> op;
    op.Init(lens, scores, probs, stats, acc, pv, out, t, &pipe);
    op.Process();
}

}  // namespace burn_ascend

extern "C" __global__ __aicore__ void extend_attention_softmax(GM_ADDR lens, GM_ADDR scores, GM_ADDR probs, GM_ADDR stats,
                                                               GM_ADDR acc, GM_ADDR pv, GM_ADDR out,
                                                               BurnExtendSoftmaxTiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    if (tiling.dtype == 1) {
        burn_ascend::RunExtendSoftmax<half>(lens, scores, probs, stats, acc, pv, out, tiling);
    } else {
        burn_ascend::RunExtendSoftmax<bfloat16_t>(lens, scores, probs, stats, acc, pv, out, tiling);
    }
}
