// layer_norm_backward: the gradients of layer_norm (fused-ops contract 6, backward). For x and
// dy [M, N], the forward's f32 row statistics mean and rstd [M] and an optional gamma [N]:
//   xhat = (x - mean) * rstd,  g = dy * gamma (dy without gamma),
//   dx = rstd * (g - mean_N(g) - xhat * mean_N(g * xhat))   in x's type,
//   dgamma = sum_M dy * xhat,  dbeta = sum_M dy              in f32.
//
// Work split: block b owns rows [b * rowsPerCore, min((b + 1) * rowsPerCore, M)), as in the
// forward, and computes their dx row by row in f32. dgamma and dbeta sum over all rows: each
// block sums its own rows in the unified buffer and adds the sums into global memory under
// SetAtomicAdd<float>, so both outputs must hold zeros when the kernel starts (the caller zeroes
// them) and the blocks' shares meet there.
// Rows are taken in groups of statRows, whose mean and rstd are loaded together. Two modes, chosen
// by the tiling from the row width and the unified buffer:
// * resident rows (chunk == N): each row of x and dy is loaded once; the block's column sums
//   stay in the unified buffer until its last row, then go out in one atomic add;
// * chunked rows (chunk < N, rows wider than the unified buffer): per group, a first pass over
//   the chunks gathers each row's two means, then a second pass computes dx chunk by chunk for
//   every row of the group and adds the group's column sums of that chunk atomically.
#include "kernel_common.h"


// Global and prefixed: a by-value kernel parameter (see kernel_common.h).
struct BurnLayerNormBackwardTiling {
    uint32_t rows;         // M
    uint32_t cols;         // N
    uint32_t rowsPerCore;  // rows per block (the last block may have fewer)
    uint32_t chunk;        // elements per unified-buffer chunk (N when rows are resident)
    uint32_t statRows;     // rows per group (a multiple of 8)
    uint32_t hasGamma;     // 1 if gamma is given
    uint32_t dtype;        // 0 float, 1 half, 2 bfloat16
};

namespace burn_ascend {

using namespace AscendC;

template <typename T>
class LayerNormBackwardKernel {
public:
    __aicore__ inline void Init(GM_ADDR dy, GM_ADDR x, GM_ADDR mean, GM_ADDR rstd, GM_ADDR gamma, GM_ADDR dx,
                                GM_ADDR dgamma, GM_ADDR dbeta, const BurnLayerNormBackwardTiling& t, TPipe* pipe)
    {
        tiling = t;
        uint32_t first = GetBlockIdx() * t.rowsPerCore;
        rows = first >= t.rows ? 0 : (t.rows - first < t.rowsPerCore ? t.rows - first : t.rowsPerCore);
        uint64_t start = static_cast<uint64_t>(first) * t.cols;
        uint64_t span = static_cast<uint64_t>(rows) * t.cols;
        dyGm.SetGlobalBuffer((__gm__ T*)dy + start, span);
        xGm.SetGlobalBuffer((__gm__ T*)x + start, span);
        dxGm.SetGlobalBuffer((__gm__ T*)dx + start, span);
        meanGm.SetGlobalBuffer((__gm__ float*)mean + first, rows);
        rstdGm.SetGlobalBuffer((__gm__ float*)rstd + first, rows);
        dgammaGm.SetGlobalBuffer((__gm__ float*)dgamma, t.cols);
        dbetaGm.SetGlobalBuffer((__gm__ float*)dbeta, t.cols);
        if (t.hasGamma) {
            gammaGm.SetGlobalBuffer((__gm__ T*)gamma, t.cols);
        }
        uint32_t c = t.chunk;
        pipe->InitBuffer(inQ, 1, Align32(c * sizeof(T)));
        pipe->InitBuffer(outQ, 1, Align32(c * sizeof(T)));
        pipe->InitBuffer(xhatBuf, Align32(c * sizeof(float)));
        pipe->InitBuffer(gBuf, Align32(c * sizeof(float)));
        pipe->InitBuffer(tmpBuf, Align32(c * sizeof(float)));
        pipe->InitBuffer(gammaBuf, Align32(c * sizeof(float)));
        pipe->InitBuffer(sums, 2 * Align32(c * sizeof(float)));
        pipe->InitBuffer(reduceTmp, Align32(ReduceTmpElems(c) * sizeof(float)));
        pipe->InitBuffer(result, 32);
        pipe->InitBuffer(stats, 4 * t.statRows * sizeof(float));
        if (sizeof(T) != sizeof(float)) {
            pipe->InitBuffer(stage, Align32(c * sizeof(T)));
        }
    }

    __aicore__ inline void Process()
    {
        if (rows == 0) {
            return;
        }
        bool resident = tiling.chunk == tiling.cols;
        if (resident) {
            LoadGamma(0, tiling.cols);
            ZeroSums(tiling.cols);
        }
        LocalTensor<float> st = stats.Get<float>();
        for (uint32_t done = 0; done < rows; done += tiling.statRows) {
            uint32_t group = rows - done < tiling.statRows ? rows - done : tiling.statRows;
            LoadStats(st, done, group);
            if (resident) {
                for (uint32_t r = 0; r < group; ++r) {
                    ResidentRow(done + r, st.GetValue(r), st.GetValue(tiling.statRows + r));
                }
            } else {
                ChunkedGroup(st, done, group);
            }
        }
        if (resident) {
            AddSums(0, tiling.cols);
        }
    }

private:

    // Loads n elements of `src` at `at` as f32 into `dst`.
    __aicore__ inline void LoadWide(const LocalTensor<float>& dst, const GlobalTensor<T>& src, uint64_t at, uint32_t n)
    {
        LocalTensor<T> raw = inQ.AllocTensor<T>();
        Load(raw, src[at], n);
        inQ.EnQue(raw);
        LocalTensor<T> in = inQ.DeQue<T>();
        if constexpr (sizeof(T) == sizeof(float)) {
            DataCopy(dst, in, Align32(n * sizeof(float)) / sizeof(float));
        } else {
            Cast(dst, in, RoundMode::CAST_NONE, n);
        }
        inQ.FreeTensor(in);
    }

    // gamma [from, from + n) as f32 in gammaBuf.
    __aicore__ inline void LoadGamma(uint32_t from, uint32_t n)
    {
        if (!tiling.hasGamma) {
            return;
        }
        // The previous chunk's vector ops must be done reading gamma (and its staging copy).
        Sync<HardEvent::V_MTE2>();
        LocalTensor<float> dst = gammaBuf.Get<float>();
        if constexpr (sizeof(T) == sizeof(float)) {
            Load(dst.template ReinterpretCast<T>(), gammaGm[from], n);
            Sync<HardEvent::MTE2_V>();
        } else {
            LocalTensor<T> s = stage.Get<T>();
            Load(s, gammaGm[from], n);
            Sync<HardEvent::MTE2_V>();
            Cast(dst, s, RoundMode::CAST_NONE, n);
        }
    }

    // mean and rstd of rows [first, first + group) of the block into st[0..] and st[statRows..].
    __aicore__ inline void LoadStats(const LocalTensor<float>& st, uint32_t first, uint32_t group)
    {
        Load(st, meanGm[first], group);
        Load(st[tiling.statRows], rstdGm[first], group);
        Sync<HardEvent::MTE2_S>();
    }

    __aicore__ inline float VectorSum(const LocalTensor<float>& v, uint32_t n)
    {
        LocalTensor<float> tmp = reduceTmp.Get<float>();
        LocalTensor<float> r = result.Get<float>();
        ReduceSum(r, v, tmp, static_cast<int32_t>(n));
        return r.GetValue(0);
    }

    __aicore__ inline LocalTensor<float> SumOfDy()
    {
        return sums.Get<float>()[Align32(tiling.chunk * sizeof(float)) / sizeof(float)];
    }

    __aicore__ inline void ZeroSums(uint32_t n)
    {
        Duplicate(sums.Get<float>(), 0.0f, static_cast<int32_t>(n));
        Duplicate(SumOfDy(), 0.0f, static_cast<int32_t>(n));
    }

    // Adds the column sums of [from, from + n) into dgamma and dbeta.
    __aicore__ inline void AddSums(uint32_t from, uint32_t n)
    {
        Sync<HardEvent::V_MTE3>();
        SetAtomicAdd<float>();
        Store(dgammaGm[from], sums.Get<float>(), n);
        Store(dbetaGm[from], SumOfDy(), n);
        SetAtomicNone();
        // The sums are zeroed or overwritten next: the stores must have read them.
        Sync<HardEvent::MTE3_V>();
    }

    // Loads n elements of row `row` at column `at`: x normalised to xhat in xhatBuf and dy in
    // gBuf, both f32.
    __aicore__ inline void LoadRow(uint32_t row, uint32_t at, uint32_t n, float mean, float rstd)
    {
        uint64_t offset = static_cast<uint64_t>(row) * tiling.cols + at;
        LocalTensor<float> xhat = xhatBuf.Get<float>();
        int32_t count = static_cast<int32_t>(n);
        LoadWide(xhat, xGm, offset, n);
        LoadWide(gBuf.Get<float>(), dyGm, offset, n);
        Adds(xhat, xhat, -mean, count);
        Muls(xhat, xhat, rstd, count);
    }

    // Adds dy * xhat and dy (as LoadRow left them) to the column sums.
    __aicore__ inline void AddToColumnSums(uint32_t n)
    {
        LocalTensor<float> dy = gBuf.Get<float>();
        LocalTensor<float> tmp = tmpBuf.Get<float>();
        LocalTensor<float> sg = sums.Get<float>();
        LocalTensor<float> sb = SumOfDy();
        int32_t count = static_cast<int32_t>(n);
        Mul(tmp, dy, xhatBuf.Get<float>(), count);
        Add(sg, sg, tmp, count);
        Add(sb, sb, dy, count);
    }

    // Turns dy in gBuf into g = dy * gamma.
    __aicore__ inline void ApplyGamma(uint32_t n)
    {
        if (tiling.hasGamma) {
            LocalTensor<float> g = gBuf.Get<float>();
            Mul(g, g, gammaBuf.Get<float>(), static_cast<int32_t>(n));
        }
    }

    // The two row sums of g and g * xhat over n elements.
    __aicore__ inline void RowSums(uint32_t n, float& sumG, float& sumGX)
    {
        LocalTensor<float> g = gBuf.Get<float>();
        LocalTensor<float> tmp = tmpBuf.Get<float>();
        sumG += VectorSum(g, n);
        Mul(tmp, g, xhatBuf.Get<float>(), static_cast<int32_t>(n));
        sumGX += VectorSum(tmp, n);
    }

    // dx = rstd * (g - meanG - xhat * meanGX) for n elements, stored to row `row` at `at`.
    __aicore__ inline void StoreDx(uint32_t row, uint32_t at, uint32_t n, float rstd, float meanG, float meanGX)
    {
        LocalTensor<float> g = gBuf.Get<float>();
        LocalTensor<float> tmp = tmpBuf.Get<float>();
        int32_t count = static_cast<int32_t>(n);
        Muls(tmp, xhatBuf.Get<float>(), meanGX, count);
        Sub(g, g, tmp, count);
        Adds(g, g, -meanG, count);
        Muls(g, g, rstd, count);
        LocalTensor<T> o = outQ.AllocTensor<T>();
        if constexpr (sizeof(T) == sizeof(float)) {
            DataCopy(o, g, Align32(n * sizeof(float)) / sizeof(float));
        } else {
            Cast(o, g, RoundMode::CAST_RINT, n);
        }
        outQ.EnQue(o);
        LocalTensor<T> out = outQ.DeQue<T>();
        Store(dxGm[static_cast<uint64_t>(row) * tiling.cols + at], out, n);
        outQ.FreeTensor(out);
    }

    __aicore__ inline void ResidentRow(uint32_t row, float mean, float rstd)
    {
        uint32_t n = tiling.cols;
        LoadRow(row, 0, n, mean, rstd);
        AddToColumnSums(n);
        ApplyGamma(n);
        float sumG = 0.0f;
        float sumGX = 0.0f;
        RowSums(n, sumG, sumGX);
        StoreDx(row, 0, n, rstd, sumG / static_cast<float>(n), sumGX / static_cast<float>(n));
    }

    // Rows [first, first + group) of the block; st holds their mean and rstd and receives
    // their two row means in st[2 * statRows..] and st[3 * statRows..].
    __aicore__ inline void ChunkedGroup(const LocalTensor<float>& st, uint32_t first, uint32_t group)
    {
        uint32_t n = tiling.cols;
        uint32_t c = tiling.chunk;
        uint32_t s = tiling.statRows;
        for (uint32_t r = 0; r < group; ++r) {
            st.SetValue(2 * s + r, 0.0f);
            st.SetValue(3 * s + r, 0.0f);
        }
        // First pass: the row sums, chunk by chunk (gamma loaded once per chunk).
        for (uint32_t at = 0; at < n; at += c) {
            uint32_t len = n - at < c ? n - at : c;
            LoadGamma(at, len);
            for (uint32_t r = 0; r < group; ++r) {
                float sumG = st.GetValue(2 * s + r);
                float sumGX = st.GetValue(3 * s + r);
                LoadRow(first + r, at, len, st.GetValue(r), st.GetValue(s + r));
                ApplyGamma(len);
                RowSums(len, sumG, sumGX);
                st.SetValue(2 * s + r, sumG);
                st.SetValue(3 * s + r, sumGX);
            }
        }
        // Second pass: dx and the column sums of each chunk over the group.
        for (uint32_t at = 0; at < n; at += c) {
            uint32_t len = n - at < c ? n - at : c;
            LoadGamma(at, len);
            ZeroSums(len);
            for (uint32_t r = 0; r < group; ++r) {
                float rstd = st.GetValue(s + r);
                LoadRow(first + r, at, len, st.GetValue(r), rstd);
                AddToColumnSums(len);
                ApplyGamma(len);
                StoreDx(first + r, at, len, rstd, st.GetValue(2 * s + r) / static_cast<float>(n),
                        st.GetValue(3 * s + r) / static_cast<float>(n));
            }
            AddSums(at, len);
        }
    }

    BurnLayerNormBackwardTiling tiling;
    uint32_t rows = 0;
    TQue<TPosition::VECIN, 1> inQ;
    TQue<TPosition::VECOUT, 1> outQ;
    TBuf<TPosition::VECCALC> xhatBuf, gBuf, tmpBuf, gammaBuf, sums, reduceTmp, result, stats, stage;
    GlobalTensor<T> dyGm, xGm, dxGm, gammaGm;
    GlobalTensor<float> meanGm, rstdGm, dgammaGm, dbetaGm;
};

template <typename T>
__aicore__ inline void Run(GM_ADDR dy, GM_ADDR x, GM_ADDR mean, GM_ADDR rstd, GM_ADDR gamma, GM_ADDR dx,
                           GM_ADDR dgamma, GM_ADDR dbeta, const BurnLayerNormBackwardTiling& t)
{
    TPipe pipe;
    LayerNormBackwardKernel<T> op;
    op.Init(dy, x, mean, rstd, gamma, dx, dgamma, dbeta, t, &pipe);
    op.Process();
}

}  // namespace burn_ascend

extern "C" __global__ __aicore__ void layer_norm_backward(GM_ADDR dy, GM_ADDR x, GM_ADDR mean, GM_ADDR rstd,
                                                          GM_ADDR gamma, GM_ADDR dx, GM_ADDR dgamma,
                                                          GM_ADDR dbeta, BurnLayerNormBackwardTiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    switch (tiling.dtype) {
        case 0: burn_ascend::Run<float>(dy, x, mean, rstd, gamma, dx, dgamma, dbeta, tiling); break;
        case 1: burn_ascend::Run<half>(dy, x, mean, rstd, gamma, dx, dgamma, dbeta, tiling); break;
        default: burn_ascend::Run<bfloat16_t>(dy, x, mean, rstd, gamma, dx, dgamma, dbeta, tiling); break;
    }
}
