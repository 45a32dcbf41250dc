// extend_attention (paged prefill), cube path, kernel 1 of 3 (AIC), one pass: the raw scores
// S = q . k of every chunk row and query head against the keys of the pass's window, read
// through the block table (extend_split.h), for extend_attention_softmax.cpp and
// extend_attention_values.cpp to finish (the softmax kernel folds the passes together).
//
// Workspace layout: scores [T, HQ, window] f32: row (t, h)'s score of position w0 + j is
// scores[(t * HQ + h) * window + j]. Unscaled: the scale is the softmax kernel's. A row's
// scores past its causal limit are computed (they share its unit's key tiles) but never read.
//
// Work split: a unit is (request, key/value head, tile of `tokenTile` chunk rows, tile of
// `headTile` heads of the group; tokenTile is 1 when the group is cut), round-robin over the
// cube cores. A unit loads its rows of q once into L1 (A, m = tokens x heads, token-major: one
// ND->NZ copy per token, a token's heads being adjacent rows of q) and streams the window's
// keys up to its last row's position in tiles of `keyTile`: a tile's keys are the rows of one
// or more pages, one ND->NZ copy per page run (key rows of one head are HKV * Dk apart) into
// an n x k tile (keys as rows: B^T, loaded into L0B without transpose); Dk is cut into `kStep`
// columns per L0A/L0B load and accumulated in L0C; one Fixpipe per token writes its heads' rows.
// Only half and bf16, as decode_attention's cube path.
#include "extend_split.h"

// Global and prefixed: a by-value kernel parameter (see kernel_common.h).
struct BurnExtendScoresTiling {
    uint32_t requests;   // R: rows of the block table
    uint32_t tokens;     // T: rows of q
    uint32_t qHeads;     // HQ
    uint32_t kvHeads;    // HKV
    uint32_t headDimK;   // Dk
    uint32_t slots;      // rows of k_cache
    uint32_t pageSize;   // slots per page
    uint32_t width;      // W: pages per block-table row
    uint32_t window;     // positions per pass (the workspace's row pitch), a multiple of 16
    uint32_t pass;       // this launch's window: positions pass * window ..
    uint32_t headTile;   // query heads per unit (a whole group unless tokenTile is 1)
    uint32_t tokenTile;  // chunk rows per unit
    uint32_t keyTile;    // keys per Mmad (n), a multiple of 16
    uint32_t kStep;      // Dk columns per L0 load, a multiple of 16
    uint32_t dtype;      // 1 half, 2 bfloat16
};

namespace burn_ascend {

using namespace AscendC;

template <typename T>
class ExtendScoresKernel {
public:
    __aicore__ inline void Init(GM_ADDR q, GM_ADDR k, GM_ADDR table, GM_ADDR lens, GM_ADDR scores,
                                const BurnExtendScoresTiling& t, TPipe* pipe)
    {
        tiling = t;
        mp = Align16(t.tokenTile * t.headTile);
        np = t.keyTile;
        kp = Align16(t.headDimK);
        qGm.SetGlobalBuffer((__gm__ T*)q, static_cast<uint64_t>(t.tokens) * t.qHeads * t.headDimK);
        kGm.SetGlobalBuffer((__gm__ T*)k, static_cast<uint64_t>(t.slots) * t.kvHeads * t.headDimK);
        tableGm.SetGlobalBuffer((__gm__ int32_t*)table, static_cast<uint64_t>(t.requests) * t.width);
        lensGm.SetGlobalBuffer((__gm__ int32_t*)lens, 2 * t.requests + 1);
        scoresGm.SetGlobalBuffer((__gm__ float*)scores, static_cast<uint64_t>(t.tokens) * t.qHeads * t.window);
        pipe->InitBuffer(qA1, 1, mp * kp * sizeof(T));
        pipe->InitBuffer(kB1, 1, np * kp * sizeof(T));
        pipe->InitBuffer(qA2, 1, mp * t.kStep * sizeof(T));
        pipe->InitBuffer(kB2, 1, t.kStep * np * sizeof(T));
        // 16 rows more than the tile: a token's Fixpipe view starts at its first row and spans
        // whole 16-row blocks.
        pipe->InitBuffer(sCo1, 1, (mp + 16) * np * sizeof(float));
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
        // The unit's query rows, token-major: row i * heads + g is token i0 + i, head h0 + g.
        LocalTensor<T> a1 = qA1.AllocTensor<T>();
        const uint16_t dk = static_cast<uint16_t>(tiling.headDimK);
        for (uint32_t i = 0; i < toks; ++i) {
            const uint64_t row = (static_cast<uint64_t>(q.first + i0 + i) * tiling.qHeads + h0) * tiling.headDimK;
            DataCopy(a1[i * heads * 16], qGm[row],
                     Nd2NzParams(1, static_cast<uint16_t>(heads), dk, 0, dk, static_cast<uint16_t>(mp), 1, 0));
        }
        // m = 1 would make the Mmad a GEMV: the single row is repeated as row 1.
        const uint32_t m = toks * heads == 1 ? 2 : toks * heads;
        if (toks * heads == 1) {
            const uint64_t row = (static_cast<uint64_t>(q.first + i0) * tiling.qHeads + h0) * tiling.headDimK;
            DataCopy(a1[16], qGm[row], Nd2NzParams(1, 1, dk, 0, dk, static_cast<uint16_t>(mp), 1, 0));
        }
        qA1.EnQue(a1);
        a1 = qA1.DeQue<T>();
        for (int64_t at = w0; at < end; at += tiling.keyTile) {
            const uint32_t n = static_cast<uint32_t>(end - at < tiling.keyTile ? end - at : tiling.keyTile);
            Tile(a1, r, hkv, h0, heads, q.first + i0, toks, m, w0, at, n);
        }
        qA1.FreeTensor(a1);
    }

    // Scores of the unit's m rows against the n keys at positions [at, at + n).
    __aicore__ inline void Tile(const LocalTensor<T>& a1, uint32_t r, uint32_t hkv, uint32_t h0, uint32_t heads,
                                uint32_t t0, uint32_t toks, uint32_t m, int64_t w0, int64_t at, uint32_t n)
    {
        LocalTensor<T> b1 = kB1.AllocTensor<T>();
        const uint64_t kRow = static_cast<uint64_t>(tiling.kvHeads) * tiling.headDimK;
        const uint16_t dk = static_cast<uint16_t>(tiling.headDimK);
        for (uint32_t j = 0; j < n;) {
            const int64_t pos = at + j;
            const uint32_t inPage = tiling.pageSize - static_cast<uint32_t>(pos % tiling.pageSize);
            const uint32_t run = n - j < inPage ? n - j : inPage;
            const uint64_t slot = ExtendSlot(tableGm, r, pos, tiling.width, tiling.pageSize, tiling.slots);
            // Keys j .. j + run (one page's consecutive slots) become rows j.. of the Np x Kp zN tile.
            DataCopy(b1[j * 16], kGm[slot * kRow + hkv * tiling.headDimK],
                     Nd2NzParams(1, static_cast<uint16_t>(run), dk, 0, static_cast<uint16_t>(kRow),
                                 static_cast<uint16_t>(np), 1, 0));
            j += run;
        }
        kB1.EnQue(b1);
        b1 = kB1.DeQue<T>();
        LocalTensor<float> acc = sCo1.AllocTensor<float>();
        for (uint32_t k0 = 0; k0 < tiling.headDimK; k0 += tiling.kStep) {
            const uint32_t kc = tiling.headDimK - k0 < tiling.kStep ? tiling.headDimK - k0 : tiling.kStep;
            const uint32_t kcp = Align16(kc);
            LocalTensor<T> a2 = qA2.AllocTensor<T>();
            for (uint32_t ib = 0; ib < mp / 16; ++ib) {
                LoadData2DParams l;
                l.startIndex = static_cast<uint16_t>(ib);
                l.repeatTimes = static_cast<uint8_t>(kcp / 16);
                l.srcStride = static_cast<uint16_t>(mp / 16);
                LoadData(a2[ib * 16 * kcp], a1[k0 * mp], l);
            }
            qA2.EnQue(a2);
            // Keys as rows are already in L0B's fractal order (as decode_attention_scores.cpp):
            // one load for a whole tile, else one per k block.
            LocalTensor<T> b2 = kB2.AllocTensor<T>();
            const uint32_t nBlocks = Align16(n) / 16;
            const uint32_t loads = nBlocks == np / 16 ? 1 : kcp / 16;
            for (uint32_t kb = 0; kb < loads; ++kb) {
                LoadData2DParams l;
                l.repeatTimes = static_cast<uint8_t>(loads == 1 ? kcp / 16 * nBlocks : nBlocks);
                l.srcStride = 1;
                LoadData(b2[kb * nBlocks * 256], b1[k0 * np + kb * np * 16], l);
            }
            kB2.EnQue(b2);
            a2 = qA2.DeQue<T>();
            b2 = kB2.DeQue<T>();
            MmadParams p;
            p.m = static_cast<uint16_t>(m);
            p.n = static_cast<uint16_t>(n);
            p.k = static_cast<uint16_t>(kc);
            p.cmatrixInitVal = k0 == 0;
            Mmad(acc, a2, b2, p);
            OrderSmallMmad(m, n);
            qA2.FreeTensor(a2);
            kB2.FreeTensor(b2);
        }
        kB1.FreeTensor(b1);
        sCo1.EnQue(acc);
        acc = sCo1.DeQue<float>();
        for (uint32_t i = 0; i < toks; ++i) {
            FixpipeParamsV220 f;
            f.nSize = static_cast<uint16_t>(n);
            f.mSize = static_cast<uint16_t>(heads);
            // Mmad laid the result out by its own m: column blocks Align16(m) rows apart.
            f.srcStride = static_cast<uint16_t>(Align16(m));
            f.dstStride = tiling.window;
            const uint64_t row = static_cast<uint64_t>(t0 + i) * tiling.qHeads + h0;
            Fixpipe(scoresGm[row * tiling.window + static_cast<uint64_t>(at - w0)], acc[i * heads * 16], f);
        }
        sCo1.FreeTensor(acc);
    }

    BurnExtendScoresTiling tiling;
    uint32_t mp = 16;        // tokenTile x headTile rounded up to 16 (A's padded rows)
    uint32_t np = 16;        // key tile (B's padded rows, already a multiple of 16)
    uint32_t kp = 16;        // Dk rounded up to 16
    TQue<TPosition::A1, 1> qA1;
    TQue<TPosition::B1, 1> kB1;
    TQue<TPosition::A2, 1> qA2;
    TQue<TPosition::B2, 1> kB2;
    TQue<TPosition::CO1, 1> sCo1;
    GlobalTensor<T> qGm, kGm;
    GlobalTensor<int32_t> tableGm, lensGm;
    GlobalTensor<float> scoresGm;
};

template <typename T>
__aicore__ inline void RunExtendScores(GM_ADDR q, GM_ADDR k, GM_ADDR table, GM_ADDR lens, GM_ADDR scores,
                                       const BurnExtendScoresTiling& t)
{
    TPipe pipe;
    ExtendScoresKernel<T> op;
    op.Init(q, k, table, lens, scores, t, &pipe);
    op.Process();
}

}  // namespace burn_ascend

extern "C" __global__ __aicore__ void extend_attention_scores(GM_ADDR q, GM_ADDR k, GM_ADDR table, GM_ADDR lens,
                                                              GM_ADDR scores, BurnExtendScoresTiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    if (tiling.dtype == 1) {
        burn_ascend::RunExtendScores<half>(q, k, table, lens, scores, tiling);
    } else {
        burn_ascend::RunExtendScores<bfloat16_t>(q, k, table, lens, scores, tiling);
    }
}
