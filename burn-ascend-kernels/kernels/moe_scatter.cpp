// moe_scatter: weighted un-permutation and top-k reduction (fused-ops contract 2):
// out[t, :] = sum_k w(t*K + k) * y[inv[t*K + k], :] for y [T*K, H] in expert-major order, where
// inv is the inverse of the gather permutation (inv[indices[i]] = i, built on the device before
// the launch by moe_scatter_inverse, -1 where no index points) and w the token-major routing
// weights (1 when absent). Each output row is owned by one block and accumulated in f32, then
// rounded once: no atomics, deterministic.
//
// Check: every slot must have a source row. A slot left at -1 means indices is not a
// permutation (a value repeats, so another is missing); the block traps, naming the slot.
//
// Work split: block b owns tokens [b * tokensPerCore, ...); its inverse indices and weights are
// loaded `idxTokens` tokens at a time; rows wider than `chunk` elements are processed in column
// chunks.
#include "kernel_common.h"


// Global and prefixed: a by-value kernel parameter (see kernel_common.h).
struct BurnMoeScatterTiling {
    uint32_t tokens;         // T
    uint32_t topK;           // K
    uint32_t cols;           // H
    uint32_t tokensPerCore;  // tokens per block
    uint32_t chunk;          // columns per pass (a multiple of 32 bytes)
    uint32_t idxTokens;      // tokens whose indices and weights are loaded at a time
    uint32_t hasWeights;     // 1 if weights are given
    uint32_t dtype;          // 0 float, 1 half, 2 bfloat16 (y, out and weights)
};

namespace burn_ascend {

using namespace AscendC;

template <typename T>
class MoeScatterKernel {
public:
    __aicore__ inline void Init(GM_ADDR y, GM_ADDR inv, GM_ADDR weights, GM_ADDR out, const BurnMoeScatterTiling& t, TPipe* pipe)
    {
        tiling = t;
        first = GetBlockIdx() * t.tokensPerCore;
        tokens = first >= t.tokens ? 0 : (t.tokens - first < t.tokensPerCore ? t.tokens - first : t.tokensPerCore);
        uint64_t slots = static_cast<uint64_t>(t.tokens) * t.topK;
        yGm.SetGlobalBuffer((__gm__ T*)y, slots * t.cols);
        invGm.SetGlobalBuffer((__gm__ int32_t*)inv + static_cast<uint64_t>(first) * t.topK, static_cast<uint64_t>(tokens) * t.topK);
        if (t.hasWeights) {
            wGm.SetGlobalBuffer((__gm__ T*)weights + static_cast<uint64_t>(first) * t.topK, static_cast<uint64_t>(tokens) * t.topK);
        }
        outGm.SetGlobalBuffer((__gm__ T*)out + static_cast<uint64_t>(first) * t.cols, static_cast<uint64_t>(tokens) * t.cols);
        uint32_t slotsPerLoad = t.idxTokens * t.topK;
        pipe->InitBuffer(invBuf, Align32(slotsPerLoad * sizeof(int32_t)));
        pipe->InitBuffer(wRaw, Align32(slotsPerLoad * sizeof(T)));
        pipe->InitBuffer(wWide, Align32(slotsPerLoad * sizeof(float)));
        pipe->InitBuffer(inQ, 2, Align32(t.chunk * sizeof(T)));
        pipe->InitBuffer(outQ, 1, Align32(t.chunk * sizeof(T)));
        pipe->InitBuffer(acc, Align32(t.chunk * sizeof(float)));
        pipe->InitBuffer(term, Align32(t.chunk * sizeof(float)));
    }

    __aicore__ inline void Process()
    {
        LocalTensor<int32_t> inv = invBuf.Get<int32_t>();
        LocalTensor<float> w = wWide.Get<float>();
        for (uint32_t done = 0; done < tokens; done += tiling.idxTokens) {
            uint32_t n = tokens - done < tiling.idxTokens ? tokens - done : tiling.idxTokens;
            LoadRouting(inv, w, done, n);
            for (uint32_t t = 0; t < n; ++t) {
                for (uint32_t at = 0; at < tiling.cols; at += tiling.chunk) {
                    uint32_t len = tiling.cols - at < tiling.chunk ? tiling.cols - at : tiling.chunk;
                    Token(inv, w, t, done + t, at, len);
                }
            }
        }
    }

private:

    // Inverse indices (for the scalar unit) and weights (widened to f32) of n tokens.
    __aicore__ inline void LoadRouting(const LocalTensor<int32_t>& inv, const LocalTensor<float>& w, uint32_t token, uint32_t n)
    {
        uint32_t slots = n * tiling.topK;
        uint64_t at = static_cast<uint64_t>(token) * tiling.topK;
        Load(inv, invGm[at], slots);
        if (tiling.hasWeights) {
            if constexpr (sizeof(T) == sizeof(float)) {
                Load(w.template ReinterpretCast<T>(), wGm[at], slots);
            } else {
                LocalTensor<T> raw = wRaw.Get<T>();
                Load(raw, wGm[at], slots);
                Sync<HardEvent::MTE2_V>();
                Cast(w, raw, RoundMode::CAST_NONE, slots);
                Sync<HardEvent::V_S>();
            }
        }
        Sync<HardEvent::MTE2_S>();
    }

    // Columns [at, at + len) of output token `token` (slot base `local` in the loaded routing).
    __aicore__ inline void Token(const LocalTensor<int32_t>& inv, const LocalTensor<float>& w, uint32_t local, uint32_t token,
                                 uint32_t at, uint32_t len)
    {
        LocalTensor<float> sum = acc.Get<float>();
        LocalTensor<float> part = term.Get<float>();
        Duplicate(sum, 0.0f, static_cast<int32_t>(len));
        const uint32_t slots = tiling.tokens * tiling.topK;
        for (uint32_t k = 0; k < tiling.topK; ++k) {
            uint32_t slot = local * tiling.topK + k;
            const int32_t source = inv.GetValue(slot);
            Require(source >= 0 && static_cast<uint32_t>(source) < slots,
                    "moe_scatter: no entry of indices is %u (token %u, choice %u has no expert row): indices must be "
                    "a permutation of 0..%u\n",
                    (first + token) * tiling.topK + k, first + token, k, slots);
            uint64_t row = static_cast<uint64_t>(source);
            LocalTensor<T> in = inQ.AllocTensor<T>();
            Load(in, yGm[row * tiling.cols + at], len);
            inQ.EnQue(in);
            LocalTensor<T> v = inQ.DeQue<T>();
            if constexpr (sizeof(T) == sizeof(float)) {
                DataCopy(part, v, Align32(len * sizeof(float)) / sizeof(float));
            } else {
                Cast(part, v, RoundMode::CAST_NONE, len);
            }
            inQ.FreeTensor(v);
            if (tiling.hasWeights) {
                Muls(part, part, w.GetValue(slot), static_cast<int32_t>(len));
            }
            Add(sum, sum, part, static_cast<int32_t>(len));
        }
        LocalTensor<T> o = outQ.AllocTensor<T>();
        if constexpr (sizeof(T) == sizeof(float)) {
            DataCopy(o, sum, Align32(len * sizeof(float)) / sizeof(float));
        } else {
            Cast(o, sum, RoundMode::CAST_RINT, len);
        }
        outQ.EnQue(o);
        LocalTensor<T> res = outQ.DeQue<T>();
        uint64_t dst = static_cast<uint64_t>(token) * tiling.cols + at;
        if ((len * sizeof(T)) % 32 == 0) {
            DataCopy(outGm[dst], res, len);
        } else {
            DataCopyExtParams row{1, static_cast<uint32_t>(len * sizeof(T)), 0, 0, 0};
            DataCopyPad(outGm[dst], res, row);
        }
        outQ.FreeTensor(res);
    }

    BurnMoeScatterTiling tiling;
    uint32_t first = 0;
    uint32_t tokens = 0;
    TBuf<TPosition::VECCALC> invBuf, wRaw, wWide, acc, term;
    TQue<TPosition::VECIN, 2> inQ;
    TQue<TPosition::VECOUT, 1> outQ;
    GlobalTensor<T> yGm, wGm, outGm;
    GlobalTensor<int32_t> invGm;
};

template <typename T>
__aicore__ inline void Run(GM_ADDR y, GM_ADDR inv, GM_ADDR weights, GM_ADDR out, const BurnMoeScatterTiling& t)
{
    TPipe pipe;
    MoeScatterKernel<T> op;
    op.Init(y, inv, weights, out, t, &pipe);
    op.Process();
}

}  // namespace burn_ascend

extern "C" __global__ __aicore__ void moe_scatter(GM_ADDR y, GM_ADDR inv, GM_ADDR weights, GM_ADDR out, BurnMoeScatterTiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    switch (tiling.dtype) {
        case 0: burn_ascend::Run<float>(y, inv, weights, out, tiling); break;
        case 1: burn_ascend::Run<half>(y, inv, weights, out, tiling); break;
        default: burn_ascend::Run<bfloat16_t>(y, inv, weights, out, tiling); break;
    }
}
