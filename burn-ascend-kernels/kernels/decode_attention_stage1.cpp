// decode_attention stage 1: split-KV grouped decode attention over a paged cache (fused-ops
// contract 5). For request b, query head h (key/value head h / G) and split c of the request's
// cached tokens (kv_indices[kv_indptr[b] .. kv_indptr[b+1]], cut into num_kv_splits[b]
// consecutive chunks of ceil(L / splits)), with scores s_j = scale * q . k_j (optionally
// cap * tanh(s_j / cap)):
//   part_out[b, h, c] = sum_j exp(s_j - m) v_j / Z,  part_lse[b, h, c] = m + ln Z,
// where m = max_j s_j and Z = sum_j exp(s_j - m); an empty split gives lse = -inf and zeros.
// Lengths, splits and slots are read on the device: the launch never waits for the host.
//
// Work split: one unit of work is (b, key/value head, split); units are dealt round-robin to
// the blocks. A unit loads the G query heads of its group once and streams its keys in tiles
// of `keyTile` rows (K and V rows gathered by slot), keeping for each head a running max,
// normaliser and f32 accumulator (the online softmax), so each key and value row is read once
// for the whole group. With the MLA layout (valueFromKey) the values are the first Dv dims of
// the key rows and are not read again.
#include "kernel_operator.h"

using namespace AscendC;

struct DecodeStage1Tiling {
    uint32_t batch;          // B
    uint32_t qHeads;         // HQ
    uint32_t kvHeads;        // HKV
    uint32_t headDimK;       // Dk
    uint32_t headDimV;       // Dv
    uint32_t maxSplits;      // max_kv_splits
    uint32_t slots;          // rows of the caches
    uint32_t indices;        // entries of kv_indices (kv_indptr[B])
    uint32_t keyTile;        // keys per tile
    uint32_t valueFromKey;   // 1: values are the first Dv dims of the key rows (MLA)
    uint32_t dtype;          // 0 float, 1 half, 2 bfloat16 (q, k, v)
    float scale;             // sm_scale
    float logitCap;          // 0: none
};

template <typename T>
class DecodeStage1 {
public:
    __aicore__ inline void Init(GM_ADDR q, GM_ADDR k, GM_ADDR v, GM_ADDR indptr, GM_ADDR kvIndices, GM_ADDR splits,
                                GM_ADDR partOut, GM_ADDR partLse, const DecodeStage1Tiling& t, TPipe* pipe)
    {
        tiling = t;
        group = t.qHeads / t.kvHeads;
        qGm.SetGlobalBuffer((__gm__ T*)q, static_cast<uint64_t>(t.batch) * t.qHeads * t.headDimK);
        kGm.SetGlobalBuffer((__gm__ T*)k, static_cast<uint64_t>(t.slots) * t.kvHeads * t.headDimK);
        if (!t.valueFromKey) {
            vGm.SetGlobalBuffer((__gm__ T*)v, static_cast<uint64_t>(t.slots) * t.kvHeads * t.headDimV);
        }
        indptrGm.SetGlobalBuffer((__gm__ int32_t*)indptr, t.batch + 1);
        idxGm.SetGlobalBuffer((__gm__ int32_t*)kvIndices, t.indices);
        splitsGm.SetGlobalBuffer((__gm__ int32_t*)splits, t.batch);
        outGm.SetGlobalBuffer((__gm__ float*)partOut, static_cast<uint64_t>(t.batch) * t.qHeads * t.maxSplits * t.headDimV);
        lseGm.SetGlobalBuffer((__gm__ float*)partLse, static_cast<uint64_t>(t.batch) * t.qHeads * t.maxSplits);
        uint32_t dk = Align(t.headDimK);
        uint32_t dv = Align(t.headDimV);
        pipe->InitBuffer(qBuf, group * dk * sizeof(float));
        pipe->InitBuffer(kBuf, t.keyTile * dk * sizeof(float));
        pipe->InitBuffer(vBuf, t.valueFromKey ? 32 : t.keyTile * dv * sizeof(float));
        pipe->InitBuffer(raw, (dk > dv ? dk : dv) * sizeof(T));
        pipe->InitBuffer(accBuf, group * dv * sizeof(float));
        pipe->InitBuffer(scoreBuf, Align(t.keyTile) * sizeof(float));
        pipe->InitBuffer(tmpBuf, dk * sizeof(float));
        pipe->InitBuffer(reduceBuf, Align((dk > t.keyTile ? dk : t.keyTile) / 64 + 8) * sizeof(float));
        pipe->InitBuffer(scalarBuf, 64);
        pipe->InitBuffer(idxBuf, Align(t.keyTile) * sizeof(int32_t));
        pipe->InitBuffer(metaBuf, 64);
    }

    __aicore__ inline void Process()
    {
        uint32_t units = tiling.batch * tiling.kvHeads * tiling.maxSplits;
        for (uint32_t u = GetBlockIdx(); u < units; u += GetBlockNum()) {
            uint32_t c = u % tiling.maxSplits;
            uint32_t hkv = (u / tiling.maxSplits) % tiling.kvHeads;
            uint32_t b = u / tiling.maxSplits / tiling.kvHeads;
            Unit(b, hkv, c);
        }
    }

private:
    // Elements rounded up to whole 32-byte blocks of f32.
    __aicore__ static inline uint32_t Align(uint32_t n) { return (n + 7) / 8 * 8; }

    template <HardEvent E>
    __aicore__ inline void Sync()
    {
        event_t e = static_cast<event_t>(GetTPipePtr()->FetchEventID(E));
        SetFlag<E>(e);
        WaitFlag<E>(e);
    }

    template <typename U>
    __aicore__ inline void Load(const LocalTensor<U>& dst, const GlobalTensor<U>& src, uint32_t n)
    {
        if ((n * sizeof(U)) % 32 == 0) {
            DataCopy(dst, src, n);
        } else {
            DataCopyExtParams row{1, static_cast<uint32_t>(n * sizeof(U)), 0, 0, 0};
            DataCopyPadExtParams<U> noPad{false, 0, 0, 0};
            DataCopyPad(dst, src, row, noPad);
        }
    }

    template <typename U>
    __aicore__ inline void Store(const GlobalTensor<U>& dst, const LocalTensor<U>& src, uint32_t n)
    {
        if ((n * sizeof(U)) % 32 == 0) {
            DataCopy(dst, src, n);
        } else {
            DataCopyExtParams row{1, static_cast<uint32_t>(n * sizeof(U)), 0, 0, 0};
            DataCopyPad(dst, src, row);
        }
    }

    // n elements of `src` as f32 in `dst`.
    __aicore__ inline void LoadWide(const LocalTensor<float>& dst, const GlobalTensor<T>& src, uint32_t n)
    {
        if constexpr (sizeof(T) == sizeof(float)) {
            Load(dst.template ReinterpretCast<T>(), src, n);
            Sync<HardEvent::MTE2_V>();
        } else {
            LocalTensor<T> r = raw.Get<T>();
            Sync<HardEvent::V_MTE2>();
            Load(r, src, n);
            Sync<HardEvent::MTE2_V>();
            Cast(dst, r, RoundMode::CAST_NONE, n);
        }
    }

    __aicore__ inline int32_t Meta(const GlobalTensor<int32_t>& src, uint32_t at)
    {
        LocalTensor<int32_t> m = metaBuf.Get<int32_t>();
        Load(m, src[at], 1);
        Sync<HardEvent::MTE2_S>();
        return m.GetValue(0);
    }

    // exp or ln of one value through the vector unit (the scalar unit has neither).
    __aicore__ inline float Unary(float x, bool ln)
    {
        LocalTensor<float> s = scalarBuf.Get<float>();
        s.SetValue(0, x);
        Sync<HardEvent::S_V>();
        if (ln) {
            Ln(s, s, 1);
        } else {
            Exp(s, s, 1);
        }
        Sync<HardEvent::V_S>();
        return s.GetValue(0);
    }

    __aicore__ inline float Dot(const LocalTensor<float>& a, const LocalTensor<float>& b, uint32_t n)
    {
        LocalTensor<float> t = tmpBuf.Get<float>();
        Mul(t, a, b, static_cast<int32_t>(n));
        LocalTensor<float> r = scalarBuf.Get<float>();
        ReduceSum(r, t, reduceBuf.Get<float>(), static_cast<int32_t>(n));
        Sync<HardEvent::V_S>();
        return r.GetValue(0);
    }

    __aicore__ inline void Unit(uint32_t b, uint32_t hkv, uint32_t c)
    {
        const uint32_t dk = Align(tiling.headDimK);
        const uint32_t dv = Align(tiling.headDimV);
        int32_t start = Meta(indptrGm, b);
        int32_t len = Meta(indptrGm, b + 1) - start;
        int32_t splits = Meta(splitsGm, b);
        int32_t per = splits > 0 ? (len + splits - 1) / splits : len;
        int32_t from = static_cast<int32_t>(c) * per;
        int32_t to = from + per < len ? from + per : len;
        bool empty = splits <= 0 || static_cast<int32_t>(c) >= splits || from >= to;
        LocalTensor<float> qs = qBuf.Get<float>();
        LocalTensor<float> acc = accBuf.Get<float>();
        float m[MAX_GROUP];
        float z[MAX_GROUP];
        for (uint32_t g = 0; g < group; ++g) {
            uint64_t qAt = (static_cast<uint64_t>(b) * tiling.qHeads + hkv * group + g) * tiling.headDimK;
            LoadWide(qs[g * dk], qGm[qAt], tiling.headDimK);
            Muls(qs[g * dk], qs[g * dk], tiling.scale, static_cast<int32_t>(tiling.headDimK));
            Duplicate(acc[g * dv], 0.0f, static_cast<int32_t>(dv));
            m[g] = -3.0e38f;
            z[g] = 0.0f;
        }
        LocalTensor<float> keys = kBuf.Get<float>();
        LocalTensor<float> vals = tiling.valueFromKey ? keys : vBuf.Get<float>();
        const uint32_t vStride = tiling.valueFromKey ? dk : dv;
        LocalTensor<int32_t> slots = idxBuf.Get<int32_t>();
        LocalTensor<float> scores = scoreBuf.Get<float>();
        for (int32_t t0 = empty ? to : from; t0 < to; t0 += static_cast<int32_t>(tiling.keyTile)) {
            uint32_t n = static_cast<uint32_t>(to - t0 < static_cast<int32_t>(tiling.keyTile) ? to - t0 : static_cast<int32_t>(tiling.keyTile));
            Load(slots, idxGm[static_cast<uint32_t>(start + t0)], n);
            Sync<HardEvent::MTE2_S>();
            for (uint32_t j = 0; j < n; ++j) {
                uint64_t slot = static_cast<uint64_t>(slots.GetValue(j));
                LoadWide(keys[j * dk], kGm[(slot * tiling.kvHeads + hkv) * tiling.headDimK], tiling.headDimK);
                if (!tiling.valueFromKey) {
                    LoadWide(vals[j * dv], vGm[(slot * tiling.kvHeads + hkv) * tiling.headDimV], tiling.headDimV);
                }
            }
            for (uint32_t g = 0; g < group; ++g) {
                for (uint32_t j = 0; j < n; ++j) {
                    float s = Dot(qs[g * dk], keys[j * dk], tiling.headDimK);
                    if (tiling.logitCap > 0.0f) {
                        // cap * tanh(s / cap), tanh(x) = 1 - 2 / (exp(2x) + 1)
                        float e = Unary(2.0f * s / tiling.logitCap, false);
                        s = tiling.logitCap * (1.0f - 2.0f / (e + 1.0f));
                    }
                    scores.SetValue(j, s);
                }
                float tileMax = -3.0e38f;
                for (uint32_t j = 0; j < n; ++j) {
                    float s = scores.GetValue(j);
                    tileMax = s > tileMax ? s : tileMax;
                }
                float mNew = m[g] > tileMax ? m[g] : tileMax;
                float alpha = Unary(m[g] - mNew, false);
                Sync<HardEvent::S_V>();
                Adds(scores, scores, -mNew, static_cast<int32_t>(n));
                Exp(scores, scores, static_cast<int32_t>(n));
                Muls(acc[g * dv], acc[g * dv], alpha, static_cast<int32_t>(tiling.headDimV));
                Sync<HardEvent::V_S>();
                float tileSum = 0.0f;
                for (uint32_t j = 0; j < n; ++j) {
                    float p = scores.GetValue(j);
                    tileSum += p;
                    LocalTensor<float> t = tmpBuf.Get<float>();
                    Muls(t, vals[j * vStride], p, static_cast<int32_t>(tiling.headDimV));
                    Add(acc[g * dv], acc[g * dv], t, static_cast<int32_t>(tiling.headDimV));
                }
                z[g] = z[g] * alpha + tileSum;
                m[g] = mNew;
            }
        }
        for (uint32_t g = 0; g < group; ++g) {
            uint32_t h = hkv * group + g;
            uint64_t unit = (static_cast<uint64_t>(b) * tiling.qHeads + h) * tiling.maxSplits + c;
            float lse = -3.4028235e38f * 10.0f;  // -inf
            if (!empty && z[g] > 0.0f) {
                Muls(acc[g * dv], acc[g * dv], 1.0f / z[g], static_cast<int32_t>(tiling.headDimV));
                lse = m[g] + Unary(z[g], true);
            }
            Sync<HardEvent::V_MTE3>();
            Store(outGm[unit * tiling.headDimV], acc[g * dv], tiling.headDimV);
            LocalTensor<float> l = scalarBuf.Get<float>();
            Sync<HardEvent::MTE3_S>();
            l.SetValue(0, lse);
            Sync<HardEvent::S_MTE3>();
            Store(lseGm[unit], l, 1);
            Sync<HardEvent::MTE3_S>();
        }
        Sync<HardEvent::MTE3_V>();
    }

public:
    static constexpr uint32_t MAX_GROUP = 64;

private:
    DecodeStage1Tiling tiling;
    uint32_t group = 1;
    TBuf<TPosition::VECCALC> qBuf, kBuf, vBuf, raw, accBuf, scoreBuf, tmpBuf, reduceBuf, scalarBuf, idxBuf, metaBuf;
    GlobalTensor<T> qGm, kGm, vGm;
    GlobalTensor<int32_t> indptrGm, idxGm, splitsGm;
    GlobalTensor<float> outGm, lseGm;
};

template <typename T>
__aicore__ inline void Run(GM_ADDR q, GM_ADDR k, GM_ADDR v, GM_ADDR indptr, GM_ADDR kvIndices, GM_ADDR splits, GM_ADDR partOut,
                           GM_ADDR partLse, const DecodeStage1Tiling& t)
{
    TPipe pipe;
    DecodeStage1<T> op;
    op.Init(q, k, v, indptr, kvIndices, splits, partOut, partLse, t, &pipe);
    op.Process();
}

extern "C" __global__ __aicore__ void decode_attention_stage1(GM_ADDR q, GM_ADDR k, GM_ADDR v, GM_ADDR indptr, GM_ADDR kvIndices,
                                                              GM_ADDR splits, GM_ADDR partOut, GM_ADDR partLse,
                                                              DecodeStage1Tiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    switch (tiling.dtype) {
        case 0: Run<float>(q, k, v, indptr, kvIndices, splits, partOut, partLse, tiling); break;
        case 1: Run<half>(q, k, v, indptr, kvIndices, splits, partOut, partLse, tiling); break;
        default: Run<bfloat16_t>(q, k, v, indptr, kvIndices, splits, partOut, partLse, tiling); break;
    }
}
