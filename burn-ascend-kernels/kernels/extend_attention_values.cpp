// extend_attention (paged prefill), cube path, kernel 3 of 3 (AIC), one pass: pv[t, h] = P . V
// on the cube unit, P the probabilities extend_attention_softmax.cpp wrote for the pass's window
// (exp(s - m) with the row's running max m, zero past each row's causal limit, in q's dtype) and
// V the window's value rows read through the block table: from v_cache, or in the MLA layout the
// first Dv dims of the key rows. The softmax kernel of the next pass (or the finishing launch)
// folds pv into the row's accumulator, rescaled.
//
// Layouts: probs [T, HQ, window]; pv [T, HQ, Dv] f32: a token's heads are adjacent rows, one
// Fixpipe per token.
//
// Work split: a unit is (request, key/value head, tile of `tokenTile` chunk rows, tile of
// `headTile` heads), round-robin over the cube cores; units whose rows see no key of the
// window are skipped (the softmax kernel folds no pv for rows without keys in it). Per tile of `keyTile` keys:
// the unit's probabilities come in as A (m = tokens x heads, k = keys; one ND->NZ copy per
// token), the value rows as B stored k x n (one ND->NZ copy per page run), which LoadData
// transposes fractal by fractal into L0B (2-byte types only, as decode_attention_values.cpp).
// The product accumulates in L0C over the window's key tiles.
#include "extend_split.h"

// Global and prefixed: a by-value kernel parameter (see kernel_common.h).
struct BurnExtendValuesTiling {
    uint32_t requests;   // R
    uint32_t tokens;     // T
    uint32_t qHeads;     // HQ
    uint32_t kvHeads;    // HKV
    uint32_t rowDim;     // elements per head of the rows the values are read from (Dk or Dv)
    uint32_t headDimV;   // Dv (at most 4095: Fixpipe's nSize)
    uint32_t slots;      // rows of the caches
    uint32_t pageSize;   // slots per page
    uint32_t width;      // W: pages per block-table row
    uint32_t window;     // positions per pass (the probabilities' row pitch)
    uint32_t pass;       // this launch's window
    uint32_t headTile;   // query heads per unit
    uint32_t tokenTile;  // chunk rows per unit
    uint32_t keyTile;    // keys per Mmad (k), a multiple of 16
    uint32_t dtype;      // 1 half, 2 bfloat16
};

namespace burn_ascend {

using namespace AscendC;

template <typename T>
class ExtendValuesKernel {
public:
    __aicore__ inline void Init(GM_ADDR vals, GM_ADDR table, GM_ADDR lens, GM_ADDR probs, GM_ADDR pv,
                                const BurnExtendValuesTiling& t, TPipe* pipe)
    {
        tiling = t;
        mp = Align16(t.tokenTile * t.headTile);
        kr = t.keyTile;
        np = Align16(t.headDimV);
        const uint64_t rows = static_cast<uint64_t>(t.tokens) * t.qHeads;
        vGm.SetGlobalBuffer((__gm__ T*)vals, static_cast<uint64_t>(t.slots) * t.kvHeads * t.rowDim);
        tableGm.SetGlobalBuffer((__gm__ int32_t*)table, static_cast<uint64_t>(t.requests) * t.width);
        lensGm.SetGlobalBuffer((__gm__ int32_t*)lens, 2 * t.requests + 1);
        probsGm.SetGlobalBuffer((__gm__ T*)probs, rows * t.window);
        outGm.SetGlobalBuffer((__gm__ float*)pv, rows * t.headDimV);
        pipe->InitBuffer(pA1, 1, mp * kr * sizeof(T));
        pipe->InitBuffer(vB1, 1, kr * np * sizeof(T));
        pipe->InitBuffer(pA2, 1, mp * kr * sizeof(T));
        pipe->InitBuffer(vB2, 1, kr * np * sizeof(T));
        // 16 rows more than the tile: a token's Fixpipe view starts at its first row and spans
        // whole 16-row blocks.
        pipe->InitBuffer(oCo1, 1, (mp + 16) * np * sizeof(float));
    }

    __aicore__ inline void Process()
    {
        ForEachExtendCubeUnit(lensGm, tiling,
                              [this](const ExtendRequest& q, uint32_t r, uint32_t hkv, uint32_t h0, uint32_t heads,
                                     uint32_t i0, uint32_t toks) { Unit(q, r, hkv, h0, heads, i0, toks); });
    }

private:
    __aicore__ static inline uint32_t Align16(uint32_t n) { return (n + 15) / 16 * 16; }

    __aicore__ inline void Unit(const ExtendRequest& q, uint32_t r, uint32_t hkv, uint32_t h0, uint32_t heads,
                                uint32_t i0, uint32_t toks)
    {
        const int64_t w0 = static_cast<int64_t>(tiling.pass) * tiling.window;
        const int64_t end = ExtendUnitEnd(q, i0, toks, w0, tiling.window);
        if (end <= w0) {
            return;
        }
        const uint32_t t0 = q.first + i0;
        // m = 1 would make the Mmad a GEMV: the single row is repeated as row 1.
        const uint32_t m = toks * heads == 1 ? 2 : toks * heads;
        LocalTensor<float> acc = oCo1.AllocTensor<float>();
        for (int64_t at = w0; at < end; at += tiling.keyTile) {
            const uint32_t n = static_cast<uint32_t>(end - at < tiling.keyTile ? end - at : tiling.keyTile);
            Tile(acc, r, hkv, h0, heads, t0, toks, m, w0, at, n);
        }
        oCo1.EnQue(acc);
        acc = oCo1.DeQue<float>();
        for (uint32_t i = 0; i < toks; ++i) {
            FixpipeParamsV220 f;
            f.nSize = static_cast<uint16_t>(tiling.headDimV);
            f.mSize = static_cast<uint16_t>(heads);
            // Mmad laid the result out by its own m: column blocks Align16(m) rows apart.
            f.srcStride = static_cast<uint16_t>(Align16(m));
            f.dstStride = tiling.headDimV;
            const uint64_t row = static_cast<uint64_t>(t0 + i) * tiling.qHeads + h0;
            Fixpipe(outGm[row * tiling.headDimV], acc[i * heads * 16], f);
        }
        oCo1.FreeTensor(acc);
    }

    // acc (+)= P[m rows, n keys at positions at..] . V[n keys, Dv].
    __aicore__ inline void Tile(const LocalTensor<float>& acc, uint32_t r, uint32_t hkv, uint32_t h0, uint32_t heads,
                                uint32_t t0, uint32_t toks, uint32_t m, int64_t w0, int64_t at, uint32_t n)
    {
        const uint32_t kp = Align16(n);
        LocalTensor<T> a1 = pA1.AllocTensor<T>();
        const uint16_t keys = static_cast<uint16_t>(n);
        const uint16_t pitch = static_cast<uint16_t>(tiling.window);
        for (uint32_t i = 0; i < toks; ++i) {
            const uint64_t pAt = (static_cast<uint64_t>(t0 + i) * tiling.qHeads + h0) * tiling.window + (at - w0);
            DataCopy(a1[i * heads * 16], probsGm[pAt],
                     Nd2NzParams(1, static_cast<uint16_t>(heads), keys, 0, pitch, static_cast<uint16_t>(mp), 1, 0));
        }
        if (toks * heads == 1) {
            const uint64_t pAt = (static_cast<uint64_t>(t0) * tiling.qHeads + h0) * tiling.window + (at - w0);
            DataCopy(a1[16], probsGm[pAt], Nd2NzParams(1, 1, keys, 0, pitch, static_cast<uint16_t>(mp), 1, 0));
        }
        pA1.EnQue(a1);
        LocalTensor<T> b1 = vB1.AllocTensor<T>();
        const uint64_t vRow = static_cast<uint64_t>(tiling.kvHeads) * tiling.rowDim;
        const uint16_t dv = static_cast<uint16_t>(tiling.headDimV);
        for (uint32_t j = 0; j < n;) {
            const int64_t pos = at + j;
            const uint32_t inPage = tiling.pageSize - static_cast<uint32_t>(pos % tiling.pageSize);
            const uint32_t run = n - j < inPage ? n - j : inPage;
            const uint64_t slot = ExtendSlot(tableGm, r, pos, tiling.width, tiling.pageSize, tiling.slots);
            // Values j .. j + run become rows j.. of the Kr x Np zN tile (B stored k x n).
            DataCopy(b1[j * 16], vGm[slot * vRow + hkv * tiling.rowDim],
                     Nd2NzParams(1, static_cast<uint16_t>(run), dv, 0, static_cast<uint16_t>(vRow),
                                 static_cast<uint16_t>(kr), 1, 0));
            j += run;
        }
        // Rows n .. Align16(n) of the last key block are read by the transposing load: zeros in
        // the probabilities' padded columns meet them, but they must be defined values.
        for (uint32_t j = n; j < kp; ++j) {
            const uint64_t slot = ExtendSlot(tableGm, r, at, tiling.width, tiling.pageSize, tiling.slots);
            DataCopy(b1[j * 16], vGm[slot * vRow + hkv * tiling.rowDim],
                     Nd2NzParams(1, 1, dv, 0, dv, static_cast<uint16_t>(kr), 1, 0));
        }
        vB1.EnQue(b1);
        a1 = pA1.DeQue<T>();
        b1 = vB1.DeQue<T>();
        LocalTensor<T> a2 = pA2.AllocTensor<T>();
        for (uint32_t ib = 0; ib < mp / 16; ++ib) {
            LoadData2DParams l;
            l.startIndex = static_cast<uint16_t>(ib);
            l.repeatTimes = static_cast<uint8_t>(kp / 16);
            l.srcStride = static_cast<uint16_t>(mp / 16);
            LoadData(a2[ib * 16 * kp], a1, l);
        }
        pA2.EnQue(a2);
        // k x n rows to L0B's nZ order: each 16 x 16 fractal transposed.
        LocalTensor<T> b2 = vB2.AllocTensor<T>();
        for (uint32_t kb = 0; kb < kp / 16; ++kb) {
            LoadData2DParams l;
            l.startIndex = static_cast<uint16_t>(kb);
            l.repeatTimes = static_cast<uint8_t>(np / 16);
            l.srcStride = static_cast<uint16_t>(kr / 16);
            l.ifTranspose = true;
            LoadData(b2[kb * 16 * np], b1, l);
        }
        vB2.EnQue(b2);
        pA1.FreeTensor(a1);
        vB1.FreeTensor(b1);
        a2 = pA2.DeQue<T>();
        b2 = vB2.DeQue<T>();
        MmadParams p;
        p.m = static_cast<uint16_t>(m);
        p.n = static_cast<uint16_t>(tiling.headDimV);
        p.k = static_cast<uint16_t>(n);
        p.cmatrixInitVal = at == w0;
        Mmad(acc, a2, b2, p);
        OrderSmallMmad(m, tiling.headDimV);
        pA2.FreeTensor(a2);
        vB2.FreeTensor(b2);
    }

    BurnExtendValuesTiling tiling;
    uint32_t mp = 16;        // tokenTile x headTile rounded up to 16
    uint32_t kr = 16;        // key tile (B's padded rows, a multiple of 16)
    uint32_t np = 16;        // Dv rounded up to 16
    TQue<TPosition::A1, 1> pA1;
    TQue<TPosition::B1, 1> vB1;
    TQue<TPosition::A2, 1> pA2;
    TQue<TPosition::B2, 1> vB2;
    TQue<TPosition::CO1, 1> oCo1;
    GlobalTensor<T> vGm, probsGm;
    GlobalTensor<int32_t> tableGm, lensGm;
    GlobalTensor<float> outGm;
};

template <typename T>
__aicore__ inline void RunExtendValues(GM_ADDR vals, GM_ADDR table, GM_ADDR lens, GM_ADDR probs, GM_ADDR pv,
                                       const BurnExtendValuesTiling& t)
{
    TPipe pipe;
    ExtendValuesKernel<T> op;
    op.Init(vals, table, lens, probs, pv, t, &pipe);
    op.Process();
}

}  // namespace burn_ascend

extern "C" __global__ __aicore__ void extend_attention_values(GM_ADDR values, GM_ADDR table, GM_ADDR lens, GM_ADDR probs,
                                                              GM_ADDR pv, BurnExtendValuesTiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    if (tiling.dtype == 1) {
        burn_ascend::RunExtendValues<half>(values, table, lens, probs, pv, tiling);
    } else {
        burn_ascend::RunExtendValues<bfloat16_t>(values, table, lens, probs, pv, tiling);
    }
}
