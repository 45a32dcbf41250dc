// layer_norm: y = (x - mean) * rstd * gamma + beta over the rows of x [M, N], with the row
// statistics mean [M] and rstd [M] in f32 (fused-ops contract 6, forward).
//
// Work split: block b owns rows [b * rowsPerCore, min((b + 1) * rowsPerCore, M)) (the tiling
// picks the block count from the device model). Statistics are computed in f32 whatever the
// input type (half and bf16 are widened on load).
// Two modes, chosen by the tiling from the row width and the unified buffer:
// * resident rows (rowResident): a whole row, widened to f32, stays in the unified buffer: it is
//   read from GM once, in chunks of `chunk` elements, and the three passes (sum, sum of squared
//   deviations, normalisation) run over it there; gamma and beta are loaded once per block and
//   kept beside it. chunk == N is the case of one chunk per row;
// * chunked rows (rows wider than the unified buffer allows): three passes over the row in GM,
//   in chunks of `chunk` elements, gamma and beta loaded per chunk.
// mean and rstd of up to `statRows` rows are gathered in the unified buffer and stored together.
#include "kernel_common.h"


// Global and prefixed: a by-value kernel parameter (see kernel_common.h).
struct BurnLayerNormTiling {
    uint32_t rows;         // M
    uint32_t cols;         // N
    uint32_t rowsPerCore;  // rows per block (the last block may have fewer)
    uint32_t chunk;        // elements per unified-buffer chunk (N when a row is one chunk)
    uint32_t rowResident;  // 1: a row (f32) and gamma/beta stay in the unified buffer
    uint32_t statRows;     // rows whose statistics are stored together (a multiple of 8)
    uint32_t hasGamma;     // 1 if gamma is given
    uint32_t hasBeta;      // 1 if beta is given
    uint32_t dtype;        // 0 float, 1 half, 2 bfloat16
    float eps;
};

namespace burn_ascend {

using namespace AscendC;

template <typename T>
class LayerNormKernel {
public:
    __aicore__ inline void Init(GM_ADDR x, GM_ADDR gamma, GM_ADDR beta, GM_ADDR y, GM_ADDR mean,
                                GM_ADDR rstd, const BurnLayerNormTiling& t, TPipe* pipe)
    {
        tiling = t;
        uint32_t first = GetBlockIdx() * t.rowsPerCore;
        rows = first >= t.rows ? 0 : (t.rows - first < t.rowsPerCore ? t.rows - first : t.rowsPerCore);
        uint64_t start = static_cast<uint64_t>(first) * t.cols;
        uint64_t span = static_cast<uint64_t>(rows) * t.cols;
        xGm.SetGlobalBuffer((__gm__ T*)x + start, span);
        yGm.SetGlobalBuffer((__gm__ T*)y + start, span);
        meanGm.SetGlobalBuffer((__gm__ float*)mean + first, rows);
        rstdGm.SetGlobalBuffer((__gm__ float*)rstd + first, rows);
        if (t.hasGamma) {
            gammaGm.SetGlobalBuffer((__gm__ T*)gamma, t.cols);
        }
        if (t.hasBeta) {
            betaGm.SetGlobalBuffer((__gm__ T*)beta, t.cols);
        }
        uint32_t c = t.chunk;
        // Resident rows keep a whole row and gamma/beta; chunked rows one chunk of each.
        uint32_t held = t.rowResident ? t.cols : c;
        betaAt = Align32(held * sizeof(float)) / sizeof(float);
        pipe->InitBuffer(inQ, 1, Align32(c * sizeof(T)));
        pipe->InitBuffer(outQ, 1, Align32(c * sizeof(T)));
        pipe->InitBuffer(work, Align32(held * sizeof(float)));
        pipe->InitBuffer(square, Align32(c * sizeof(float)));
        pipe->InitBuffer(affine, 2 * Align32(held * sizeof(float)));
        pipe->InitBuffer(reduceTmp, Align32(ReduceTmpElems(c) * sizeof(float)));
        pipe->InitBuffer(result, 32);
        pipe->InitBuffer(stats, 2 * t.statRows * sizeof(float));
        if (sizeof(T) != sizeof(float)) {
            pipe->InitBuffer(stage, Align32(c * sizeof(T)));
        }
    }

    __aicore__ inline void Process()
    {
        bool resident = tiling.rowResident != 0;
        if (resident) {
            for (uint32_t at = 0; at < tiling.cols; at += tiling.chunk) {
                uint32_t len = tiling.cols - at < tiling.chunk ? tiling.cols - at : tiling.chunk;
                LoadAffine(at, at, len);
            }
        }
        LocalTensor<float> st = stats.Get<float>();
        for (uint32_t done = 0; done < rows; done += tiling.statRows) {
            uint32_t group = rows - done < tiling.statRows ? rows - done : tiling.statRows;
            for (uint32_t r = 0; r < group; ++r) {
                float m = 0.0f;
                float s = 0.0f;
                if (resident) {
                    ResidentRow(done + r, m, s);
                } else {
                    ChunkedRow(done + r, m, s);
                }
                st.SetValue(r, m);
                st.SetValue(tiling.statRows + r, s);
            }
            StoreStats(st, done, group);
        }
    }

private:

    // Loads n elements of x at `at` as f32 into `dst`.
    __aicore__ inline void LoadWide(const LocalTensor<float>& dst, uint64_t at, uint32_t n)
    {
        LocalTensor<T> raw = inQ.AllocTensor<T>();
        Load(raw, xGm[at], n);
        inQ.EnQue(raw);
        LocalTensor<T> in = inQ.DeQue<T>();
        if constexpr (sizeof(T) == sizeof(float)) {
            DataCopy(dst, in, Align32(n * sizeof(float)) / sizeof(float));
        } else {
            Cast(dst, in, RoundMode::CAST_NONE, n);
        }
        inQ.FreeTensor(in);
    }

    // gamma and beta [from, from + n) as f32 at element `to` of the affine buffer (gamma first,
    // then beta at betaAt); n is at most a chunk (the staging buffer's size).
    __aicore__ inline void LoadAffine(uint32_t from, uint32_t to, uint32_t n)
    {
        LocalTensor<float> g = affine.Get<float>();
        if (tiling.hasGamma) {
            LoadParam(g[to], gammaGm[from], n);
        }
        if (tiling.hasBeta) {
            LoadParam(g[betaAt + to], betaGm[from], n);
        }
    }

    __aicore__ inline void LoadParam(const LocalTensor<float>& dst, const GlobalTensor<T>& src, uint32_t n)
    {
        if constexpr (sizeof(T) == sizeof(float)) {
            Load(dst.template ReinterpretCast<T>(), src, n);
            Sync<HardEvent::MTE2_V>();
        } else {
            LocalTensor<T> s = stage.Get<T>();
            Load(s, src, n);
            Sync<HardEvent::MTE2_V>();
            Cast(dst, s, RoundMode::CAST_NONE, n);
        }
    }

    __aicore__ inline float VectorSum(const LocalTensor<float>& v, uint32_t n)
    {
        LocalTensor<float> tmp = reduceTmp.Get<float>();
        LocalTensor<float> r = result.Get<float>();
        ReduceSum(r, v, tmp, static_cast<int32_t>(n));
        return r.GetValue(0);
    }

    __aicore__ inline float SquaredDeviation(const LocalTensor<float>& v, float mean, uint32_t n)
    {
        LocalTensor<float> sq = square.Get<float>();
        Adds(sq, v, -mean, static_cast<int32_t>(n));
        Mul(sq, sq, sq, static_cast<int32_t>(n));
        return VectorSum(sq, n);
    }

    // Normalises n f32 values in place (gamma and beta from element `affineAt` of the affine
    // buffer) and stores them to y at `at`.
    __aicore__ inline void NormaliseAndStore(const LocalTensor<float>& v, float mean, float rstd, uint64_t at, uint32_t n,
                                             uint32_t affineAt)
    {
        Adds(v, v, -mean, static_cast<int32_t>(n));
        Muls(v, v, rstd, static_cast<int32_t>(n));
        LocalTensor<float> g = affine.Get<float>();
        if (tiling.hasGamma) {
            Mul(v, v, g[affineAt], static_cast<int32_t>(n));
        }
        if (tiling.hasBeta) {
            Add(v, v, g[betaAt + affineAt], static_cast<int32_t>(n));
        }
        LocalTensor<T> o = outQ.AllocTensor<T>();
        if constexpr (sizeof(T) == sizeof(float)) {
            DataCopy(o, v, Align32(n * sizeof(float)) / sizeof(float));
        } else {
            Cast(o, v, RoundMode::CAST_RINT, n);
        }
        outQ.EnQue(o);
        LocalTensor<T> out = outQ.DeQue<T>();
        Store(yGm[at], out, n);
        outQ.FreeTensor(out);
    }

    // The row is read once into the unified buffer; the passes run over it there.
    __aicore__ inline void ResidentRow(uint32_t row, float& mean, float& rstd)
    {
        uint32_t n = tiling.cols;
        uint32_t c = tiling.chunk;
        uint64_t base = static_cast<uint64_t>(row) * n;
        LocalTensor<float> v = work.Get<float>();
        float sum = 0.0f;
        for (uint32_t at = 0; at < n; at += c) {
            uint32_t len = n - at < c ? n - at : c;
            LoadWide(v[at], base + at, len);
            sum += VectorSum(v[at], len);
        }
        mean = sum / static_cast<float>(n);
        float dev = 0.0f;
        for (uint32_t at = 0; at < n; at += c) {
            uint32_t len = n - at < c ? n - at : c;
            dev += SquaredDeviation(v[at], mean, len);
        }
        rstd = 1.0f / ScalarSqrt(dev / static_cast<float>(n) + tiling.eps);
        for (uint32_t at = 0; at < n; at += c) {
            uint32_t len = n - at < c ? n - at : c;
            NormaliseAndStore(v[at], mean, rstd, base + at, len, at);
        }
    }

    __aicore__ inline void ChunkedRow(uint32_t row, float& mean, float& rstd)
    {
        uint32_t n = tiling.cols;
        uint32_t c = tiling.chunk;
        uint64_t base = static_cast<uint64_t>(row) * n;
        LocalTensor<float> v = work.Get<float>();
        float sum = 0.0f;
        for (uint32_t at = 0; at < n; at += c) {
            uint32_t len = n - at < c ? n - at : c;
            LoadWide(v, base + at, len);
            sum += VectorSum(v, len);
        }
        mean = sum / static_cast<float>(n);
        float dev = 0.0f;
        for (uint32_t at = 0; at < n; at += c) {
            uint32_t len = n - at < c ? n - at : c;
            LoadWide(v, base + at, len);
            dev += SquaredDeviation(v, mean, len);
        }
        rstd = 1.0f / ScalarSqrt(dev / static_cast<float>(n) + tiling.eps);
        for (uint32_t at = 0; at < n; at += c) {
            uint32_t len = n - at < c ? n - at : c;
            LoadAffine(at, 0, len);
            LoadWide(v, base + at, len);
            NormaliseAndStore(v, mean, rstd, base + at, len, 0);
        }
    }

    __aicore__ static inline float ScalarSqrt(float v)
    {
        // Newton's iteration on the scalar unit, from a bit-level first guess.
        union { float f; uint32_t u; } g{v};
        g.u = 0x1fbd1df5u + (g.u >> 1);
        float r = g.f;
        for (int i = 0; i < 4; ++i) {
            r = 0.5f * (r + v / r);
        }
        return r;
    }

    __aicore__ inline void StoreStats(const LocalTensor<float>& st, uint32_t first, uint32_t group)
    {
        Store(meanGm[first], st, group);
        Store(rstdGm[first], st[tiling.statRows], group);
        event_t e = static_cast<event_t>(GetTPipePtr()->FetchEventID(HardEvent::MTE3_S));
        SetFlag<HardEvent::MTE3_S>(e);
        WaitFlag<HardEvent::MTE3_S>(e);
    }

    BurnLayerNormTiling tiling;
    uint32_t rows = 0;
    uint32_t betaAt = 0;  // element of the affine buffer where beta starts
    TQue<TPosition::VECIN, 1> inQ;
    TQue<TPosition::VECOUT, 1> outQ;
    TBuf<TPosition::VECCALC> work, square, affine, reduceTmp, result, stats, stage;
    GlobalTensor<T> xGm, yGm, gammaGm, betaGm;
    GlobalTensor<float> meanGm, rstdGm;
};

template <typename T>
__aicore__ inline void Run(GM_ADDR x, GM_ADDR gamma, GM_ADDR beta, GM_ADDR y, GM_ADDR mean, GM_ADDR rstd,
                           const BurnLayerNormTiling& t)
{
    TPipe pipe;
    LayerNormKernel<T> op;
    op.Init(x, gamma, beta, y, mean, rstd, t, &pipe);
    op.Process();
}

}  // namespace burn_ascend

extern "C" __global__ __aicore__ void layer_norm(GM_ADDR x, GM_ADDR gamma, GM_ADDR beta, GM_ADDR y, GM_ADDR mean,
                                                 GM_ADDR rstd, BurnLayerNormTiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    switch (tiling.dtype) {
        case 0: burn_ascend::Run<float>(x, gamma, beta, y, mean, rstd, tiling); break;
        case 1: burn_ascend::Run<half>(x, gamma, beta, y, mean, rstd, tiling); break;
        default: burn_ascend::Run<bfloat16_t>(x, gamma, beta, y, mean, rstd, tiling); break;
    }
}
