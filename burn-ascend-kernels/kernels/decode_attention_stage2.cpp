// decode_attention stage 2: merges the split results of stage 1 (fused-ops contract 5):
//   M = max_c part_lse[b, h, c],
//   out[b, h] = sum_c exp(part_lse_c - M) * part_out_c / sum_c exp(part_lse_c - M),
//   lse[b, h] = M + ln(sum_c exp(part_lse_c - M)).
// Splits with lse = -inf (empty) get weight 0 and contribute nothing; a pair whose splits are
// all empty gives zeros and lse = -inf. out has q's type, lse is f32.
//
// Work split: block b owns the (request, head) pairs [b * pairsPerCore, ...). They are merged
// `pairTile` pairs at a time: one copy brings the tile's part_lse rows, the weights are formed
// once per tile (Exp on the vector unit, sums on the scalar unit), then the tile's part_out rows
// (pairTile x max_kv_splits rows, contiguous in global memory) stream through a double-buffered
// queue in column chunks of `colTile` (Dv when it fits), and the merged rows leave through an
// output queue in one strided copy per chunk.
#include "kernel_common.h"


// Global and prefixed: a by-value kernel parameter (see kernel_common.h).
struct BurnDecodeStage2Tiling {
    uint32_t pairs;         // B * HQ
    uint32_t maxSplits;     // max_kv_splits
    uint32_t headDimV;      // Dv
    uint32_t pairsPerCore;  // pairs per block
    uint32_t pairTile;      // pairs merged at a time (pairTile * maxSplits <= 4095)
    uint32_t colTile;       // columns per pass: Dv, or a multiple of 16 when Dv does not fit
    uint32_t dtype;         // 0 float, 1 half, 2 bfloat16 (out)
};

namespace burn_ascend {

using namespace AscendC;

template <typename T>
class DecodeStage2Kernel {
public:
    __aicore__ inline void Init(GM_ADDR partOut, GM_ADDR partLse, GM_ADDR out, GM_ADDR lse, const BurnDecodeStage2Tiling& t,
                                TPipe* pipe)
    {
        tiling = t;
        uint32_t lo = static_cast<uint32_t>(GetBlockIdx()) * t.pairsPerCore;
        first = lo < t.pairs ? lo : t.pairs;
        count = t.pairs - first < t.pairsPerCore ? t.pairs - first : t.pairsPerCore;
        const uint64_t splits = t.maxSplits;
        partGm.SetGlobalBuffer((__gm__ float*)partOut, static_cast<uint64_t>(t.pairs) * splits * t.headDimV);
        plseGm.SetGlobalBuffer((__gm__ float*)partLse, static_cast<uint64_t>(t.pairs) * splits);
        outGm.SetGlobalBuffer((__gm__ T*)out, static_cast<uint64_t>(t.pairs) * t.headDimV);
        lseGm.SetGlobalBuffer((__gm__ float*)lse, t.pairs);
        const uint32_t p = t.pairTile;
        wPitch = Align8(t.maxSplits);
        pipe->InitBuffer(plseBuf, Align8(p * t.maxSplits) * sizeof(float));
        pipe->InitBuffer(weightBuf, p * wPitch * sizeof(float));
        pipe->InitBuffer(statBuf, 3 * Align8(p) * sizeof(float));
        pipe->InitBuffer(partQue, 2, p * t.maxSplits * Align8(t.colTile) * sizeof(float));
        pipe->InitBuffer(outQue, 2, p * AlignT(t.colTile) * sizeof(T));
        if (sizeof(T) != sizeof(float)) {
            pipe->InitBuffer(accBuf, p * AlignT(t.colTile) * sizeof(float));
        }
    }

    __aicore__ inline void Process()
    {
        if (count == 0) {
            return;
        }
        const uint32_t chunks = (tiling.headDimV + tiling.colTile - 1) / tiling.colTile;
        const uint32_t tiles = (count + tiling.pairTile - 1) / tiling.pairTile;
        const uint32_t steps = tiles * chunks;
        CopyIn(0, chunks);
        for (uint32_t step = 0; step < steps; ++step) {
            uint32_t tile = step / chunks;
            uint32_t chunk = step % chunks;
            if (chunk == 0) {
                Weights(tile);
            }
            LocalTensor<float> parts = partQue.DeQue<float>();
            if (step + 1 < steps) {
                CopyIn(step + 1, chunks);
            }
            Merge(parts, tile, chunk);
            partQue.FreeTensor(parts);
        }
    }

private:
    __aicore__ static inline uint32_t Align8(uint32_t n) { return (n + 7) / 8 * 8; }

    __aicore__ static inline uint32_t AlignT(uint32_t n)
    {
        constexpr uint32_t perBlock = 32 / sizeof(T);
        return (n + perBlock - 1) / perBlock * perBlock;
    }

    __aicore__ inline uint32_t TilePairs(uint32_t tile) const
    {
        uint32_t done = tile * tiling.pairTile;
        return count - done < tiling.pairTile ? count - done : tiling.pairTile;
    }

    __aicore__ inline uint32_t ChunkCols(uint32_t chunk) const
    {
        uint32_t at = chunk * tiling.colTile;
        return tiling.headDimV - at < tiling.colTile ? tiling.headDimV - at : tiling.colTile;
    }

    // Queues columns [chunk * colTile, ...) of the part_out rows of step's pair tile.
    __aicore__ inline void CopyIn(uint32_t step, uint32_t chunks)
    {
        uint32_t tile = step / chunks;
        uint32_t chunk = step % chunks;
        uint32_t pairs = TilePairs(tile);
        uint32_t cols = ChunkCols(chunk);
        uint64_t row = static_cast<uint64_t>(first + tile * tiling.pairTile) * tiling.maxSplits;
        LocalTensor<float> parts = partQue.AllocTensor<float>();
        DataCopyExtParams rows{static_cast<uint16_t>(pairs * tiling.maxSplits), static_cast<uint32_t>(cols * sizeof(float)),
                               static_cast<uint32_t>((tiling.headDimV - cols) * sizeof(float)), 0, 0};
        DataCopyPadExtParams<float> noPad{false, 0, 0, 0.0f};
        DataCopyPad(parts, partGm[row * tiling.headDimV + chunk * tiling.colTile], rows, noPad);
        partQue.EnQue(parts);
    }

    // The merge coefficients exp(lse_c - M) / Z of a pair tile (in the weight buffer) and its
    // merged lse, stored to global memory.
    __aicore__ inline void Weights(uint32_t tile)
    {
        const uint32_t pairs = TilePairs(tile);
        const uint32_t splits = tiling.maxSplits;
        const uint32_t at = first + tile * tiling.pairTile;
        LocalTensor<float> plse = plseBuf.Get<float>();
        LocalTensor<float> w = weightBuf.Get<float>();
        LocalTensor<float> stats = statBuf.Get<float>();
        LocalTensor<float> maxes = stats;
        LocalTensor<float> sums = stats[Align8(tiling.pairTile)];
        LocalTensor<float> lse = stats[2 * Align8(tiling.pairTile)];
        DataCopyExtParams row{1, static_cast<uint32_t>(pairs * splits * sizeof(float)), 0, 0, 0};
        DataCopyPadExtParams<float> noPad{false, 0, 0, 0.0f};
        DataCopyPad(plse, plseGm[static_cast<uint64_t>(at) * splits], row, noPad);
        Sync<HardEvent::MTE2_S>();
        // The previous tile's vector ops have read the statistics and weights written below.
        Sync<HardEvent::V_S>();
        for (uint32_t i = 0; i < pairs; ++i) {
            float m = plse.GetValue(i * splits);
            for (uint32_t c = 1; c < splits; ++c) {
                float v = plse.GetValue(i * splits + c);
                m = v > m ? v : m;
            }
            // All splits empty (-inf): any finite M keeps the weights at exp(-inf) = 0.
            m = m < -3.0e38f ? 0.0f : m;
            maxes.SetValue(i, m);
            for (uint32_t c = 0; c < splits; ++c) {
                w.SetValue(i * wPitch + c, plse.GetValue(i * splits + c) - m);
            }
        }
        Exp(w, w, static_cast<int32_t>(pairs * wPitch));
        Sync<HardEvent::V_S>();
        for (uint32_t i = 0; i < pairs; ++i) {
            float z = 0.0f;
            for (uint32_t c = 0; c < splits; ++c) {
                z += w.GetValue(i * wPitch + c);
            }
            sums.SetValue(i, z);
            float inv = z > 0.0f ? 1.0f / z : 0.0f;
            for (uint32_t c = 0; c < splits; ++c) {
                w.SetValue(i * wPitch + c, w.GetValue(i * wPitch + c) * inv);
            }
        }
        // lse = M + ln Z (-inf when Z = 0).
        Ln(lse, sums, static_cast<int32_t>(pairs));
        Add(lse, lse, maxes, static_cast<int32_t>(pairs));
        Sync<HardEvent::V_MTE3>();
        DataCopyExtParams out{1, static_cast<uint32_t>(pairs * sizeof(float)), 0, 0, 0};
        DataCopyPad(lseGm[at], lse, out);
        Sync<HardEvent::MTE3_V>();
    }

    // out rows = sum_c w_c * part rows, for one column chunk of a pair tile.
    __aicore__ inline void Merge(const LocalTensor<float>& parts, uint32_t tile, uint32_t chunk)
    {
        const uint32_t pairs = TilePairs(tile);
        const uint32_t cols = ChunkCols(chunk);
        const uint32_t splits = tiling.maxSplits;
        const uint32_t partPitch = Align8(cols);
        const uint32_t outPitch = AlignT(cols);
        LocalTensor<float> w = weightBuf.Get<float>();
        LocalTensor<T> o = outQue.AllocTensor<T>();
        LocalTensor<float> acc;
        if constexpr (sizeof(T) == sizeof(float)) {
            acc = o.template ReinterpretCast<float>();
        } else {
            acc = accBuf.Get<float>();
        }
        const int32_t n = static_cast<int32_t>(cols);
        for (uint32_t i = 0; i < pairs; ++i) {
            LocalTensor<float> sum = acc[i * outPitch];
            Duplicate(sum, 0.0f, n);
            for (uint32_t c = 0; c < splits; ++c) {
                float coef = w.GetValue(i * wPitch + c);
                if (coef == 0.0f) {
                    continue;  // an empty split, or one outweighed beyond f32
                }
                LocalTensor<float> part = parts[(i * splits + c) * partPitch];
                Muls(part, part, coef, n);
                Add(sum, sum, part, n);
            }
            if constexpr (sizeof(T) != sizeof(float)) {
                Cast(o[i * outPitch], sum, RoundMode::CAST_RINT, cols);
            }
        }
        outQue.EnQue(o);
        LocalTensor<T> res = outQue.DeQue<T>();
        const uint64_t at = static_cast<uint64_t>(first + tile * tiling.pairTile) * tiling.headDimV + chunk * tiling.colTile;
        DataCopyExtParams rows{static_cast<uint16_t>(pairs), static_cast<uint32_t>(cols * sizeof(T)), 0,
                               static_cast<uint32_t>((tiling.headDimV - cols) * sizeof(T)), 0};
        DataCopyPad(outGm[at], res, rows);
        outQue.FreeTensor(res);
    }

    BurnDecodeStage2Tiling tiling;
    uint32_t first = 0;  // first pair of this block
    uint32_t count = 0;  // pairs of this block
    uint32_t wPitch = 8;
    TQue<TPosition::VECIN, 1> partQue;
    TQue<TPosition::VECOUT, 1> outQue;
    TBuf<TPosition::VECCALC> plseBuf, weightBuf, statBuf, accBuf;
    GlobalTensor<float> partGm, plseGm, lseGm;
    GlobalTensor<T> outGm;
};

template <typename T>
__aicore__ inline void Run(GM_ADDR partOut, GM_ADDR partLse, GM_ADDR out, GM_ADDR lse, const BurnDecodeStage2Tiling& t)
{
    TPipe pipe;
    DecodeStage2Kernel<T> op;
    op.Init(partOut, partLse, out, lse, t, &pipe);
    op.Process();
}

}  // namespace burn_ascend

extern "C" __global__ __aicore__ void decode_attention_stage2(GM_ADDR partOut, GM_ADDR partLse, GM_ADDR out, GM_ADDR lse,
                                                              BurnDecodeStage2Tiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    switch (tiling.dtype) {
        case 0: burn_ascend::Run<float>(partOut, partLse, out, lse, tiling); break;
        case 1: burn_ascend::Run<half>(partOut, partLse, out, lse, tiling); break;
        default: burn_ascend::Run<bfloat16_t>(partOut, partLse, out, lse, tiling); break;
    }
}
