// decode_attention stage 2: merges the split results of stage 1 (fused-ops contract 5):
//   M = max_c part_lse[b, h, c],
//   out[b, h] = sum_c exp(part_lse_c - M) * part_out_c / sum_c exp(part_lse_c - M),
//   lse[b, h] = M + ln(sum_c exp(part_lse_c - M)) (when requested).
// Splits with lse = -inf (empty) contribute nothing. out has q's type.
//
// Work split: the (b, h) pairs are dealt round-robin to the blocks; a pair's splits and their
// partial outputs are loaded whole (maxSplits x Dv f32).
#include "kernel_operator.h"

using namespace AscendC;

struct DecodeStage2Tiling {
    uint32_t pairs;      // B * HQ
    uint32_t maxSplits;  // max_kv_splits
    uint32_t headDimV;   // Dv
    uint32_t withLse;    // 1 to write lse
    uint32_t dtype;      // 0 float, 1 half, 2 bfloat16 (out)
};

template <typename T>
class DecodeStage2 {
public:
    __aicore__ inline void Init(GM_ADDR partOut, GM_ADDR partLse, GM_ADDR out, GM_ADDR lse, const DecodeStage2Tiling& t, TPipe* pipe)
    {
        tiling = t;
        dv = (t.headDimV + 7) / 8 * 8;
        partGm.SetGlobalBuffer((__gm__ float*)partOut, static_cast<uint64_t>(t.pairs) * t.maxSplits * t.headDimV);
        plseGm.SetGlobalBuffer((__gm__ float*)partLse, static_cast<uint64_t>(t.pairs) * t.maxSplits);
        outGm.SetGlobalBuffer((__gm__ T*)out, static_cast<uint64_t>(t.pairs) * t.headDimV);
        if (t.withLse) {
            lseGm.SetGlobalBuffer((__gm__ float*)lse, t.pairs);
        }
        pipe->InitBuffer(parts, t.maxSplits * dv * sizeof(float));
        pipe->InitBuffer(lses, (t.maxSplits + 7) / 8 * 8 * sizeof(float));
        pipe->InitBuffer(acc, dv * sizeof(float));
        pipe->InitBuffer(outBuf, (dv * sizeof(T) + 31) / 32 * 32);
        pipe->InitBuffer(scalar, 64);
    }

    __aicore__ inline void Process()
    {
        for (uint32_t p = GetBlockIdx(); p < tiling.pairs; p += GetBlockNum()) {
            Pair(p);
        }
    }

private:
    template <HardEvent E>
    __aicore__ inline void Sync()
    {
        event_t e = static_cast<event_t>(GetTPipePtr()->FetchEventID(E));
        SetFlag<E>(e);
        WaitFlag<E>(e);
    }

    template <typename U>
    __aicore__ inline void Move(const LocalTensor<U>& dst, const GlobalTensor<U>& src, uint32_t n)
    {
        DataCopyExtParams row{1, static_cast<uint32_t>(n * sizeof(U)), 0, 0, 0};
        DataCopyPadExtParams<U> noPad{false, 0, 0, 0};
        DataCopyPad(dst, src, row, noPad);
    }

    template <typename U>
    __aicore__ inline void Put(const GlobalTensor<U>& dst, const LocalTensor<U>& src, uint32_t n)
    {
        DataCopyExtParams row{1, static_cast<uint32_t>(n * sizeof(U)), 0, 0, 0};
        DataCopyPad(dst, src, row);
    }

    __aicore__ inline float Apply(float x, bool ln)
    {
        LocalTensor<float> s = scalar.Get<float>();
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

    __aicore__ inline void Pair(uint32_t p)
    {
        const uint32_t splits = tiling.maxSplits;
        const uint32_t d = tiling.headDimV;
        LocalTensor<float> l = lses.Get<float>();
        LocalTensor<float> part = parts.Get<float>();
        Move(l, plseGm[static_cast<uint64_t>(p) * splits], splits);
        for (uint32_t c = 0; c < splits; ++c) {
            Move(part[c * dv], partGm[(static_cast<uint64_t>(p) * splits + c) * d], d);
        }
        Sync<HardEvent::MTE2_S>();
        float m = -3.0e38f;
        for (uint32_t c = 0; c < splits; ++c) {
            float v = l.GetValue(c);
            m = v > m ? v : m;
        }
        LocalTensor<float> sum = acc.Get<float>();
        Sync<HardEvent::MTE2_V>();
        Duplicate(sum, 0.0f, static_cast<int32_t>(d));
        float z = 0.0f;
        for (uint32_t c = 0; c < splits; ++c) {
            float v = l.GetValue(c);
            if (v < -1.0e38f) {
                continue;  // an empty split
            }
            float w = Apply(v - m, false);
            z += w;
            Muls(part[c * dv], part[c * dv], w, static_cast<int32_t>(d));
            Add(sum, sum, part[c * dv], static_cast<int32_t>(d));
        }
        if (z > 0.0f) {
            Muls(sum, sum, 1.0f / z, static_cast<int32_t>(d));
        }
        LocalTensor<T> o = outBuf.Get<T>();
        if constexpr (sizeof(T) == sizeof(float)) {
            DataCopy(o, sum, dv);
        } else {
            Cast(o, sum, RoundMode::CAST_RINT, d);
        }
        Sync<HardEvent::V_MTE3>();
        Put(outGm[static_cast<uint64_t>(p) * d], o, d);
        if (tiling.withLse) {
            float total = z > 0.0f ? m + Apply(z, true) : -3.4028235e38f * 10.0f;
            LocalTensor<float> s = scalar.Get<float>();
            Sync<HardEvent::MTE3_S>();
            s.SetValue(0, total);
            Sync<HardEvent::S_MTE3>();
            Put(lseGm[p], s, 1);
        }
        Sync<HardEvent::MTE3_V>();
        Sync<HardEvent::MTE3_MTE2>();
    }

    DecodeStage2Tiling tiling;
    uint32_t dv = 8;
    TBuf<TPosition::VECCALC> parts, lses, acc, outBuf, scalar;
    GlobalTensor<float> partGm, plseGm, lseGm;
    GlobalTensor<T> outGm;
};

template <typename T>
__aicore__ inline void Run(GM_ADDR partOut, GM_ADDR partLse, GM_ADDR out, GM_ADDR lse, const DecodeStage2Tiling& t)
{
    TPipe pipe;
    DecodeStage2<T> op;
    op.Init(partOut, partLse, out, lse, t, &pipe);
    op.Process();
}

extern "C" __global__ __aicore__ void decode_attention_stage2(GM_ADDR partOut, GM_ADDR partLse, GM_ADDR out, GM_ADDR lse,
                                                              DecodeStage2Tiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    switch (tiling.dtype) {
        case 0: Run<float>(partOut, partLse, out, lse, tiling); break;
        case 1: Run<half>(partOut, partLse, out, lse, tiling); break;
        default: Run<bfloat16_t>(partOut, partLse, out, lse, tiling); break;
    }
}
