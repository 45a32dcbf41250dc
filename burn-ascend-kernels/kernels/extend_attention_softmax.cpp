// extend_attention (paged prefill), cube path, kernel 2 of 3 (AIV), one pass: the softmax of
// each row's scores in the pass's window (extend_attention_scores.cpp left them in the scores
// workspace [T, HQ, window] f32). Row (t, h), chunk row i of request r at position
// pos = kv - rows + i, sees window positions w0 .. min(w0 + window, pos + 1): n of them. With
// s_j = scale * scores_j:
//   m = max_j s_j, Z = sum_j exp(s_j - m), part_lse[t, h, pass] = m + ln Z,
//   probs[t, h, j] = exp(s_j - m) / Z for j < n, 0 for n <= j < min(w0 + window, kv) - w0,
// in q's dtype (the A operand of extend_attention_values.cpp, whose units read up to their last
// row's limit, at most the request's kv). A row without keys in the window (n = 0) gets
// lse = -inf and a zero row of part_out here; stage 2 then gives it no weight.
//
// Work split: a unit is one row (t, h), round-robin over the vector cores; the window (at most
// `window` scores, which the tiling fits in the unified buffer) is loaded once.
#include "extend_split.h"

// Global and prefixed: a by-value kernel parameter (see kernel_common.h).
struct BurnExtendSoftmaxTiling {
    uint32_t requests;  // R
    uint32_t tokens;    // T
    uint32_t qHeads;    // HQ
    uint32_t headDimV;  // Dv (the zero rows of part_out)
    uint32_t capacity;  // W x page size: the most tokens a request caches
    uint32_t window;    // positions per pass (the workspaces' row pitch)
    uint32_t pass;      // this launch's window
    uint32_t passes;    // windows in all (part_out's split dim)
    uint32_t dtype;     // 1 half, 2 bfloat16 (probs)
    float scale;        // sm_scale
};

namespace burn_ascend {

using namespace AscendC;

template <typename T>
class ExtendSoftmaxKernel {
public:
    __aicore__ inline void Init(GM_ADDR lens, GM_ADDR scores, GM_ADDR probs, GM_ADDR partOut, GM_ADDR partLse,
                                const BurnExtendSoftmaxTiling& t, TPipe* pipe)
    {
        tiling = t;
        const uint64_t rows = static_cast<uint64_t>(t.tokens) * t.qHeads;
        lensGm.SetGlobalBuffer((__gm__ int32_t*)lens, 2 * t.requests + 1);
        scoresGm.SetGlobalBuffer((__gm__ float*)scores, rows * t.window);
        probsGm.SetGlobalBuffer((__gm__ T*)probs, rows * t.window);
        outGm.SetGlobalBuffer((__gm__ float*)partOut, rows * t.passes * t.headDimV);
        lseGm.SetGlobalBuffer((__gm__ float*)partLse, rows * t.passes);
        pipe->InitBuffer(scoreBuf, t.window * sizeof(float));
        pipe->InitBuffer(probBuf, Align32(t.window * sizeof(T)));
        pipe->InitBuffer(zeroProbBuf, Align32(t.window * sizeof(T)));
        pipe->InitBuffer(reduceBuf, 2 * ReduceTmpElems(t.window) * sizeof(float));
        pipe->InitBuffer(statBuf, 8 * sizeof(float));
        pipe->InitBuffer(zeroBuf, Align32(t.headDimV * sizeof(float)));
        // Zeros of both types, once: the probabilities past a row's limit and empty rows.
        LocalTensor<float> zeros = zeroBuf.Get<float>();
        Duplicate(zeros, 0.0f, static_cast<int32_t>(t.headDimV));
        LocalTensor<float> s = scoreBuf.Get<float>();
        Duplicate(s, 0.0f, static_cast<int32_t>(t.window));
        Cast(zeroProbBuf.Get<T>(), s, RoundMode::CAST_RINT, static_cast<int32_t>(t.window));
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
        const int64_t w0 = static_cast<int64_t>(tiling.pass) * tiling.window;
        const int64_t pos = q.kv - q.rows + i;
        const int64_t lim = pos + 1 < w0 + tiling.window ? pos + 1 : w0 + tiling.window;
        const int64_t reach = q.kv < w0 + tiling.window ? q.kv : w0 + tiling.window;
        const uint32_t n = lim > w0 ? static_cast<uint32_t>(lim - w0) : 0;
        const uint32_t zeroTo = reach > w0 ? static_cast<uint32_t>(reach - w0) : 0;
        const uint64_t row = static_cast<uint64_t>(q.first + i) * tiling.qHeads + h;
        const uint64_t at = row * tiling.window;
        LocalTensor<float> stat = statBuf.Get<float>();
        // The previous row's stores have read the staging buffers.
        Sync<HardEvent::MTE3_V>();
        if (n == 0) {
            union { uint32_t u; float f; } minusInf{0xff800000u};
            Duplicate(stat, minusInf.f, 8);
            Sync<HardEvent::V_MTE3>();
            Store(outGm[(row * tiling.passes + tiling.pass) * tiling.headDimV], zeroBuf.Get<float>(), tiling.headDimV);
            StoreLse(row);
            if (zeroTo > 0) {
                Store(probsGm[at], zeroProbBuf.Get<T>(), zeroTo);
            }
            return;
        }
        LocalTensor<float> s = scoreBuf.Get<float>();
        LocalTensor<float> shared = reduceBuf.Get<float>();
        const int32_t count = static_cast<int32_t>(n);
        Sync<HardEvent::V_MTE2>();
        Load(s, scoresGm[at], n);
        Sync<HardEvent::MTE2_V>();
        Muls(s, s, tiling.scale, count);
        ReduceMax(stat, s, shared, count);
        Sync<HardEvent::V_S>();
        const float m = stat.GetValue(0);
        Sync<HardEvent::S_V>();
        Adds(s, s, -m, count);
        Exp(s, s, count);
        ReduceSum(stat, s, shared, count);
        Sync<HardEvent::V_S>();
        const float z = stat.GetValue(0);
        Sync<HardEvent::S_V>();
        LocalTensor<T> p = probBuf.Get<T>();
        Muls(s, s, 1.0f / z, count);
        Cast(p, s, RoundMode::CAST_RINT, count);
        Duplicate(stat, z, 8);
        Ln(stat, stat, 8);
        Adds(stat, stat, m, 8);
        Sync<HardEvent::V_MTE3>();
        Store(probsGm[at], p, n);
        if (zeroTo > n) {
            Store(probsGm[at + n], zeroProbBuf.Get<T>(), zeroTo - n);
        }
        StoreLse(row);
    }

    __aicore__ inline void StoreLse(uint64_t row)
    {
        DataCopyExtParams one{1, sizeof(float), 0, 0, 0};
        DataCopyPad(lseGm[row * tiling.passes + tiling.pass], statBuf.Get<float>(), one);
    }

    BurnExtendSoftmaxTiling tiling;
    TBuf<TPosition::VECCALC> scoreBuf, probBuf, zeroProbBuf, reduceBuf, statBuf, zeroBuf;
    GlobalTensor<int32_t> lensGm;
    GlobalTensor<float> scoresGm, outGm, lseGm;
    GlobalTensor<T> probsGm;
};

template <typename T>
__aicore__ inline void RunExtendSoftmax(GM_ADDR lens, GM_ADDR scores, GM_ADDR probs, GM_ADDR partOut, GM_ADDR partLse,
                                        const BurnExtendSoftmaxTiling& t)
{
    TPipe pipe;
    ExtendSoftmaxKernel<T> op;
    op.Init(lens, scores, probs, partOut, partLse, t, &pipe);
    op.Process();
}

}  // namespace burn_ascend

extern "C" __global__ __aicore__ void extend_attention_softmax(GM_ADDR lens, GM_ADDR scores, GM_ADDR probs,
                                                               GM_ADDR partOut, GM_ADDR partLse,
                                                               BurnExtendSoftmaxTiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    if (tiling.dtype == 1) {
        burn_ascend::RunExtendSoftmax<half>(lens, scores, probs, partOut, partLse, tiling);
    } else {
        burn_ascend::RunExtendSoftmax<bfloat16_t>(lens, scores, probs, partOut, partLse, tiling);
    }
}
