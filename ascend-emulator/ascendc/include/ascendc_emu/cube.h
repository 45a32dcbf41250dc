// Host emulation of Ascend C: the cube (matrix) basic API of an Atlas A2 cube core (AIC, arch
// 2201), from the facts in ascend-emulator/ascendc/cube-api.md (§ numbers below):
//   GM -> L1    DataCopy with Nd2NzParams (ND to the "zN" fractal layout), MTE2
//   L1 -> L0A/B LoadData with LoadData2DParams (512-byte fractals, optional 16x16 transpose), MTE1
//   L0A x L0B   Mmad with MmadParams into L0C (float accumulation), M
//   L0C -> GM   Fixpipe with FixpipeParamsV220 (NZ -> ND or NZ, float -> half/bf16), FIX
// Every operand is checked (live tensor, physical memory, alignment, footprint) and every GM range
// is bounds-checked and recorded for the race check like DataCopy's. The pipes are not modelled as
// asynchronous: each call completes when issued (README).
#ifndef ASCENDC_EMU_CUBE_H
#define ASCENDC_EMU_CUBE_H

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <vector>

#include "ascendc_emu/data_copy.h"

/// Fixpipe's conversion of the L0C values (a global unscoped enum of the compiler on the device;
/// values as in the compiler stub, cube-api.md §5.4: they do not matter here). Only the documented
/// A2 modes; NoQuant, F322F16 and F322BF16 are emulated.
typedef enum {
    NoQuant = 0,
    F322F16 = 1,
    VREQ8 = 8,
    REQ8 = 9,
    VDEQF16 = 10,
    DEQF16 = 11,
    F322BF16 = 16,
    VQF322B8_PRE = 23,
    QF322B8_PRE = 24,
} QuantMode_t;

namespace AscendC {

/// DataCopy GM -> L1 with ND -> NZ conversion (§2.1). Not an aggregate: brace-initialisation calls
/// the 8-argument constructor, in member order.
struct Nd2NzParams {
    uint16_t ndNum = 0;
    uint16_t nValue = 0;
    uint16_t dValue = 0;
    uint16_t srcNdMatrixStride = 0;
    uint16_t srcDValue = 0;
    uint16_t dstNzC0Stride = 0;
    uint16_t dstNzNStride = 0;
    uint16_t dstNzMatrixStride = 0;

    Nd2NzParams() {}
    Nd2NzParams(uint16_t ndNumIn, uint16_t nValueIn, uint16_t dValueIn, uint16_t srcNdMatrixStrideIn,
                uint16_t srcDValueIn, uint16_t dstNzC0StrideIn, uint16_t dstNzNStrideIn, uint16_t dstNzMatrixStrideIn)
        : ndNum(ndNumIn),
          nValue(nValueIn),
          dValue(dValueIn),
          srcNdMatrixStride(srcNdMatrixStrideIn),
          srcDValue(srcDValueIn),
          dstNzC0Stride(dstNzC0StrideIn),
          dstNzNStride(dstNzNStrideIn),
          dstNzMatrixStride(dstNzMatrixStrideIn)
    {
    }
};

/// LoadData L1 -> L0A/L0B in 512-byte fractals (§3.2). The constructor's parameter order differs
/// from the member order.
struct LoadData2DParams {
    uint16_t startIndex = 0;
    uint16_t dstGap = 0;
    uint16_t srcStride = 0;
    bool ifTranspose = false;
    uint8_t repeatTimes = 0;
    uint8_t sid = 0;
    uint8_t addrMode = 0;

    LoadData2DParams() {}
    LoadData2DParams(uint16_t startIndexIn, uint8_t repeatTimesIn, uint16_t srcStrideIn, uint8_t sidIn,
                     uint16_t dstGapIn, bool ifTransposeIn, uint8_t addrModeIn)
        : startIndex(startIndexIn),
          dstGap(dstGapIn),
          srcStride(srcStrideIn),
          ifTranspose(ifTransposeIn),
          repeatTimes(repeatTimesIn),
          sid(sidIn),
          addrMode(addrModeIn)
    {
    }
};
using LoadData2dParams = LoadData2DParams;

/// The 3510 form of LoadData (§3.1); not supported on 2201, so LoadData with it does not compile.
struct LoadData2DParamsV2 {
    uint32_t mStartPosition = 0;
    uint32_t kStartPosition = 0;
    uint16_t mStep = 0;
    uint16_t kStep = 0;
    int32_t srcStride = 0;
    uint16_t dstStride = 0;
    bool ifTranspose = false;
    uint8_t sid = 0;
};

/// Mmad (§4.2).
struct MmadParams {
    uint16_t m = 0;
    uint16_t n = 0;
    uint16_t k = 0;
    bool isBias = false;
    int32_t fmOffset = 0;
    bool enSsparse = false;
    bool enWinogradA = false;
    bool enWinogradB = false;
    uint8_t unitFlag = 0;
    bool kDirectionAlign = false;
    bool cmatrixSource = false;
    bool cmatrixInitVal = true;

    MmadParams() {}
    MmadParams(uint16_t mIn, uint16_t nIn, uint16_t kIn, bool isBiasIn, int32_t fmOffsetIn, bool enSsparseIn,
               bool enWinogradAIn, bool enWinogradBIn)
        : m(mIn),
          n(nIn),
          k(kIn),
          isBias(isBiasIn),
          fmOffset(fmOffsetIn),
          enSsparse(enSsparseIn),
          enWinogradA(enWinogradAIn),
          enWinogradB(enWinogradBIn)
    {
    }
    MmadParams(uint16_t mIn, uint16_t nIn, uint16_t kIn, uint8_t unitFlagIn, bool cmatrixSourceIn,
               bool cmatrixInitValIn)
        : m(mIn), n(nIn), k(kIn), unitFlag(unitFlagIn), cmatrixSource(cmatrixSourceIn), cmatrixInitVal(cmatrixInitValIn)
    {
    }
};

/// The layout Fixpipe writes (§5.2): ROW_MAJOR converts NZ to ND, NZ copies the fractals.
enum class CO2Layout : uint8_t { NZ = 0, ROW_MAJOR, COLUMN_MAJOR };

struct FixpipeConfig {
    CO2Layout format;
};

inline constexpr FixpipeConfig CFG_NZ = {CO2Layout::NZ};
inline constexpr FixpipeConfig CFG_ROW_MAJOR = {CO2Layout::ROW_MAJOR};
inline constexpr FixpipeConfig CFG_COLUMN_MAJOR = {CO2Layout::COLUMN_MAJOR};

/// Fixpipe L0C -> GM (§5.3). deqScalar has no initialiser, as in the real header; the constructors
/// take their parameters in another order than the members.
struct FixpipeParamsV220 {
    uint16_t nSize = 0;
    uint16_t mSize = 0;
    uint16_t srcStride = 0;
    uint32_t dstStride = 0;
    QuantMode_t quantPre = QuantMode_t::NoQuant;
    uint64_t deqScalar;
    uint16_t ndNum = 1;
    uint16_t srcNdStride = 0;
    uint16_t dstNdStride = 0;
    bool reluEn = false;
    uint8_t unitFlag = 0;
    bool isChannelSplit = false;

    FixpipeParamsV220() {}
    FixpipeParamsV220(uint16_t nSizeIn, uint16_t mSizeIn, uint16_t srcStrideIn, uint32_t dstStrideIn, bool reluEnIn)
        : nSize(nSizeIn), mSize(mSizeIn), srcStride(srcStrideIn), dstStride(dstStrideIn), reluEn(reluEnIn)
    {
    }
    FixpipeParamsV220(uint16_t nSizeIn, uint16_t mSizeIn, uint16_t srcStrideIn, uint32_t dstStrideIn, bool reluEnIn,
                      QuantMode_t quantPreIn, int64_t deqScalarIn, uint16_t ndNumIn, uint16_t srcNdStrideIn,
                      uint16_t dstNdStrideIn, uint8_t unitFlagIn)
        : nSize(nSizeIn),
          mSize(mSizeIn),
          srcStride(srcStrideIn),
          dstStride(dstStrideIn),
          quantPre(quantPreIn),
          deqScalar(static_cast<uint64_t>(deqScalarIn)),
          ndNum(ndNumIn),
          srcNdStride(srcNdStrideIn),
          dstNdStride(dstNdStrideIn),
          reluEn(reluEnIn),
          unitFlag(unitFlagIn)
    {
    }
    FixpipeParamsV220(uint16_t nSizeIn, uint16_t mSizeIn, uint16_t srcStrideIn, uint32_t dstStrideIn, bool reluEnIn,
                      QuantMode_t quantPreIn, int64_t deqScalarIn, uint16_t ndNumIn, uint16_t srcNdStrideIn,
                      uint16_t dstNdStrideIn, uint8_t unitFlagIn, bool isChannelSplitIn)
        : FixpipeParamsV220(nSizeIn, mSizeIn, srcStrideIn, dstStrideIn, reluEnIn, quantPreIn, deqScalarIn, ndNumIn,
                            srcNdStrideIn, dstNdStrideIn, unitFlagIn)
    {
        isChannelSplit = isChannelSplitIn;
    }
};

}  // namespace AscendC

namespace ascendc_emu {

constexpr uint32_t kCubeEdge = 16;            // rows of an L0A fractal, columns of an L0B/L0C fractal
constexpr uint32_t kMaxMmadDim = 4095;        // m, n, k of Mmad (§4.2: 12 bits)
constexpr uint32_t kL0cFractalBytes = 1024;   // one 16 x 16 float fractal of L0C: Mmad dst alignment
constexpr uint32_t kL0cAlign = 64;            // Fixpipe src alignment (§5.3)
constexpr uint32_t kL0Align = kFractalBytes;  // LoadData dst and Mmad fm/filter alignment (§3.2, §4.4)

/// The dtypes of DataCopy GM -> L1 with Nd2NzParams and of LoadData on A2 (int4b_t not emulated).
template <class T>
constexpr bool l1_type = one_of<T, int8_t, uint8_t, int16_t, uint16_t, half, bfloat16_t, int32_t, uint32_t, float>;

/// The (dst, fm, filter) dtypes of Mmad emulated (§4.3 less the integer rows).
template <class T, class U, class S>
constexpr bool mmad_types = std::is_same_v<T, float> && std::is_same_v<U, S> && one_of<U, half, bfloat16_t, float>;

/// The (GM, L0C) dtypes of Fixpipe emulated: float results out as float, half or bf16 (§5.4).
template <class T, class U>
constexpr bool fixpipe_types = std::is_same_v<U, float> && one_of<T, float, half, bfloat16_t>;

inline uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

/// Elements of T in one 32-byte block: the C0 of the fractal layouts.
template <class T>
constexpr uint32_t c0_of()
{
    return kBlockBytes / sizeof(T);
}

/// Production kernels issue PipeBarrier<PIPE_M>() after an Mmad of fewer than this many whole
/// 16 x 16 result fractals, floor(m/16) * floor(n/16) (catlass's PIPE_M_BARRIER_THRESHOLD, cube-api.md
/// §4.4). The reason is undocumented (UNCERTAIN); the stricter reading is enforced: an Mmad that
/// accumulates onto L0C values such a small Mmad wrote needs a PipeBarrier<PIPE_M> (or PIPE_ALL)
/// in between.
constexpr uint32_t kPipeMBarrierFractals = 10;

/// The L0C tags of a tensor (one per float, core.h).
template <class T>
L0cTag* l0c_tags(const AscendC::LocalTensor<T>& t)
{
    return core().l0cTags + TensorAccess::ref(t).addr / sizeof(float);
}

/// Checks that a reader of L0C (Fixpipe, or an Mmad accumulating) takes each float as the element
/// the Mmad that wrote it made it: for each writing Mmad, the reader's element (r, c) must be that
/// Mmad's (r + dr, c + dc) for one offset (dr, dc) (a view may start inside a result). Mmad lays
/// its result out by its own m (column blocks Align16(m) x 16 floats apart, §3.3), so a reader
/// assuming another layout (Fixpipe's srcStride, an accumulating Mmad's m) takes other elements.
class L0cReader {
public:
    L0cReader(const char* api, const char* layout, uint64_t readerMp) : api_(api), layout_(layout), mp_(readerMp) {}

    void read(const L0cTag& t, uint64_t r, uint64_t c)
    {
        if (last_ >= seen_.size() || seen_[last_].mmad != t.mmad) {
            last_ = 0;
            while (last_ < seen_.size() && seen_[last_].mmad != t.mmad) {
                ++last_;
            }
            if (last_ == seen_.size()) {
                seen_.push_back({t.mmad, t.row, t.col, r, c});
                return;
            }
        }
        const Seen& s = seen_[last_];
        if (static_cast<int64_t>(t.row) - static_cast<int64_t>(r) != static_cast<int64_t>(s.row) - static_cast<int64_t>(s.r) ||
            static_cast<int64_t>(t.col) - static_cast<int64_t>(c) != static_cast<int64_t>(s.col) - static_cast<int64_t>(s.c)) {
            fail("%s: reads L0C as a result laid out with column blocks %" PRIu64
                 " floats apart (%s), but Mmad #%u laid its result out by its m rounded up to 16 (%u: column blocks "
                 "%u floats apart): the float read as row %" PRIu64 ", column %" PRIu64
                 " is that Mmad's row %u, column %u, while row %" PRIu64 ", column %" PRIu64
                 " is its row %u, column %u (wrong L0C elements)",
                 api_, mp_ * kCubeEdge, layout_, t.mmad, t.mp, t.mp * kCubeEdge, r, c, t.row, t.col, s.r, s.c, s.row,
                 s.col);
        }
    }

private:
    struct Seen {
        uint32_t mmad;
        uint16_t row, col;  // the writer's element ...
        uint64_t r, c;      // ... that the reader took as its (r, c)
    };
    const char* api_;
    const char* layout_;
    uint64_t mp_;
    std::vector<Seen> seen_;
    size_t last_ = 0;
};

}  // namespace ascendc_emu

namespace AscendC {

/// GM -> L1 with ND -> NZ conversion (MTE2, §2.1-2.2): row r, column c of matrix i lands at element
/// i*dstNzMatrixStride + (c/C0)*dstNzC0Stride*C0 + r*dstNzNStride*C0 + c%C0; the tail of each
/// row's last 32-byte block is zero-filled, rows past nValue are not written.
template <typename T>
ascendc_emu::Requires<ascendc_emu::l1_type<T>> DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src,
                                                         const Nd2NzParams& p)
{
    using namespace ascendc_emu;
    const char* api = "DataCopy(GM->L1, Nd2NzParams)";
    require_cube(api);
    const auto range = [&](const char* field, uint32_t v, uint32_t lo, uint32_t hi) {
        if (v < lo || v > hi) {
            fail("%s: %s %" PRIu32 " outside [%" PRIu32 ", %" PRIu32 "]", api, field, v, lo, hi);
        }
    };
    range("ndNum", p.ndNum, 0, 4095);
    range("nValue", p.nValue, 0, 16384);
    range("srcDValue", p.srcDValue, 1, 65535);
    range("dstNzC0Stride", p.dstNzC0Stride, 1, 16384);
    range("dstNzNStride", p.dstNzNStride, 1, 16384);
    constexpr uint64_t c0 = c0_of<T>();
    if (p.ndNum > 1) {
        // Real code passes 0 for the matrix strides with one matrix (§2.1): checked only for several.
        range("dstNzMatrixStride", p.dstNzMatrixStride, 1, 65535);
        // ASSUMED: each NZ matrix starts on a 32-byte block (the doc's examples do); stricter.
        if (p.dstNzMatrixStride % c0 != 0) {
            fail("%s: dstNzMatrixStride %" PRIu32 " elements is not a whole number of 32-byte blocks of %s", api,
                 static_cast<uint32_t>(p.dstNzMatrixStride), type_name<T>());
        }
    }
    if (p.ndNum == 0 || p.nValue == 0 || p.dValue == 0) {  // moves nothing
        local_operand(api, "dst", dst, 0, Phys::L1, kBlockBytes);
        count_copy(0, false);
        return;
    }
    const uint64_t matrices = p.ndNum, rows = p.nValue, cols = p.dValue, colBlocks = ceil_div(cols, c0);
    const uint64_t matStride = matrices > 1 ? p.dstNzMatrixStride : 0;
    const uint64_t c0Stride = p.dstNzC0Stride, nStride = p.dstNzNStride;
    const uint64_t dstElems =
        (matrices - 1) * matStride + (colBlocks - 1) * c0Stride * c0 + (rows - 1) * nStride * c0 + c0;
    uint8_t* d = local_operand(api, "dst", dst, dstElems * sizeof(T), Phys::L1, kBlockBytes);
    const uint64_t srcMat = p.srcNdMatrixStride, srcPitch = p.srcDValue;
    const uint64_t srcElems = (matrices - 1) * srcMat + (rows - 1) * srcPitch + cols;
    const uint8_t* g = TensorAccess::gm_span(src, 0, srcElems * sizeof(T), true, api);
    // Destination blocks written twice would make the result depend on the DMA's order.
    thread_local std::vector<uint8_t> written;
    written.assign(dstElems / c0, 0);
    for (uint64_t i = 0; i < matrices; ++i) {
        note_rows(TensorAccess::gm_addr(src) + i * srcMat * sizeof(T), rows, cols * sizeof(T), srcPitch * sizeof(T),
                  GmAccess::Read, api);
        for (uint64_t r = 0; r < rows; ++r) {
            const uint8_t* row = g + (i * srcMat + r * srcPitch) * sizeof(T);
            for (uint64_t cb = 0; cb < colBlocks; ++cb) {
                const uint64_t block = (i * matStride) / c0 + cb * c0Stride + r * nStride;
                if (written[block]) {
                    fail("%s: row %" PRIu64 ", columns from %" PRIu64 " of matrix %" PRIu64
                         " land on a 32-byte block of dst another row already wrote (dstNzC0Stride %" PRIu64
                         " < nValue x dstNzNStride?): the result depends on the DMA's order",
                         api, r, cb * c0, i, c0Stride);
                }
                written[block] = 1;
                const uint64_t take = std::min<uint64_t>(c0, cols - cb * c0);
                uint8_t* out = d + block * kBlockBytes;
                std::memcpy(out, row + cb * c0 * sizeof(T), take * sizeof(T));
                std::memset(out + take * sizeof(T), 0, (c0 - take) * sizeof(T));  // the row tail is zero-filled
            }
        }
    }
    count_copy(matrices * rows * cols * sizeof(T), false);
}

/// L1 -> L0A or L0B (MTE1, §3.2): repeat r copies the 512-byte fractal startIndex + r*srcStride of
/// src to fractal r*(1 + dstGap) of dst, transposing each 16 x 16 fractal when ifTranspose.
template <typename T>
ascendc_emu::Requires<ascendc_emu::l1_type<T>> LoadData(const LocalTensor<T>& dst, const LocalTensor<T>& src,
                                                         const LoadData2DParams& p)
{
    using namespace ascendc_emu;
    const char* api = "LoadData(L1->L0A/L0B)";
    require_cube(api);
    if (p.repeatTimes == 0) {
        // CANN skips it with a warning; a load that moves nothing is a kernel bug: stricter.
        fail("%s: repeatTimes 0 (range [1, 255])", api);
    }
    if (p.sid != 0 || p.addrMode != 0) {
        // Documented as reserved, to be 0 (§3.2); CANN's debug check allows sid <= 15: stricter.
        fail("%s: sid %u and addrMode %u are reserved and must be 0", api, p.sid, p.addrMode);
    }
    if (p.ifTranspose && sizeof(T) != 2) {
        fail("%s: ifTranspose transposes 16 x 16 fractals of 2-byte types only, not %s (float and int8 need "
             "LoadDataWithTranspose, which the emulation does not provide)",
             api, type_name<T>());
    }
    const Phys to = TensorAccess::ref(dst).phys();
    if (to != Phys::L0A && to != Phys::L0B) {
        fail("%s: dst is a tensor at TPosition::%s (%s), but LoadData writes L0A (A2) or L0B (B2)", api,
             position_name(TensorAccess::ref(dst).pos), phys_name(to));
    }
    const uint64_t reps = p.repeatTimes;
    const uint64_t srcFractals = p.startIndex + (reps - 1) * p.srcStride + 1;
    const uint64_t dstPitch = 1 + static_cast<uint64_t>(p.dstGap);
    const uint8_t* s = local_operand(api, "src", src, srcFractals * kFractalBytes, Phys::L1, kBlockBytes);
    uint8_t* d = local_operand(api, "dst", dst, ((reps - 1) * dstPitch + 1) * kFractalBytes, to, kL0Align);
    for (uint64_t r = 0; r < reps; ++r) {
        const uint8_t* from = s + (p.startIndex + r * p.srcStride) * kFractalBytes;
        uint8_t* into = d + r * dstPitch * kFractalBytes;
        if (p.ifTranspose) {
            for (uint32_t i = 0; i < kCubeEdge; ++i) {
                for (uint32_t j = 0; j < kCubeEdge; ++j) {
                    std::memcpy(into + (j * kCubeEdge + i) * 2, from + (i * kCubeEdge + j) * 2, 2);
                }
            }
        } else {
            std::memcpy(into, from, kFractalBytes);
        }
    }
}

/// LoadData with LoadData2DParamsV2 exists only on later architectures (§3.1).
template <typename T>
void LoadData(const LocalTensor<T>&, const LocalTensor<T>&, const LoadData2DParamsV2&)
{
    static_assert(sizeof(T) == 0, "LoadData2DParamsV2 is not supported on Atlas A2 (2201): use LoadData2DParams");
}

/// dst (L0C, m x n) = [dst +] fm (L0A, m x k) x filter (L0B, k x n) on the cube (PIPE_M, §4).
/// Layouts (Mp = Align(m, 16), Kp = Align(k, C0), Np = Align(n, 16), C0 = 32 B / sizeof(U)):
///   fm[i][j] at (i/16)*16*Kp + (j/C0)*16*C0 + (i%16)*C0 + j%C0   (fractals row by row, "zZ")
///   filter[kk][j] at (kk/C0)*Np*C0 + (j/16)*16*C0 + (j%16)*C0 + kk%C0   ("nZ")
///   dst[i][j] at (j/16)*Mp*16 + i*16 + j%16   (fractals column by column, "zN")
/// The products of the inputs are summed in float in k order, each addition rounded to nearest
/// even, starting from 0 (cmatrixInitVal) or the L0C value (accumulate): the cube's internal order
/// and precision are UNCERTAIN (§9), so a result may only be relied on to float rounding. Elements
/// past k are ignored (§4.4); dst elements of the padded fractals past m or n are undefined
/// (UNCERTAIN): they are poisoned, and Fixpipe refuses to read them.
template <typename T, typename U, typename S>
ascendc_emu::Requires<ascendc_emu::mmad_types<T, U, S>> Mmad(const LocalTensor<T>& dst, const LocalTensor<U>& fm,
                                                              const LocalTensor<S>& filter, const MmadParams& p)
{
    using namespace ascendc_emu;
    const char* api = "Mmad";
    require_cube(api);
    if (p.m == 0 || p.n == 0 || p.k == 0 || p.m > kMaxMmadDim || p.n > kMaxMmadDim || p.k > kMaxMmadDim) {
        // CANN skips a zero size with a warning; a product of nothing is a kernel bug: stricter.
        fail("%s: m %u, n %u, k %u: each must be in [1, %u]", api, p.m, p.n, p.k, kMaxMmadDim);
    }
    if (p.m == 1) {
        fail("%s: m == 1 switches the cube to GEMV, reading L0A as plain row-major data instead of fractals "
             "(Mmad.md); not emulated: pad m to 16 as production kernels do",
             api);
    }
    if (p.unitFlag != 0) {
        fail("%s: unitFlag %u (Mmad/Fixpipe overlap) is not emulated: use 0", api, p.unitFlag);
    }
    if (p.cmatrixSource) {
        fail("%s: cmatrixSource = true starts from the BiasTable, which the emulation does not model", api);
    }
    if (p.fmOffset != 0 || p.enSsparse || p.enWinogradA || p.enWinogradB || p.kDirectionAlign) {
        fail("%s: fmOffset, enSsparse, enWinogradA/B and kDirectionAlign are reserved and must keep their defaults",
             api);
    }
    constexpr uint64_t c0 = c0_of<U>();
    const uint64_t m = p.m, n = p.n, k = p.k;
    const uint64_t mp = ceil_div(m, kCubeEdge) * kCubeEdge, np = ceil_div(n, kCubeEdge) * kCubeEdge;
    const uint64_t kp = ceil_div(k, c0) * c0;
    const uint8_t* a = local_operand(api, "fm", fm, mp * kp * sizeof(U), Phys::L0A, kL0Align);
    const uint8_t* b = local_operand(api, "filter", filter, kp * np * sizeof(S), Phys::L0B, kL0Align);
    uint8_t* c = local_operand(api, "dst", dst, mp * np * sizeof(float), Phys::L0C, kL0cFractalBytes);
    L0cTag* tags = l0c_tags(dst);
    // isBias (deprecated) means accumulate as well: the hardware gets cmatrixInitVal && !isBias (§4.2).
    const bool init = p.cmatrixInitVal && !p.isBias;
    const auto cAt = [&](uint64_t i, uint64_t j) {
        return (j / kCubeEdge) * mp * kCubeEdge + i * kCubeEdge + j % kCubeEdge;
    };
    CoreState& state = core();
    if (!init) {
        char layout[64];
        std::snprintf(layout, sizeof layout, "this Mmad's m %u rounded up to 16", p.m);
        L0cReader reader(api, layout, mp);
        for (uint64_t j = 0; j < n; ++j) {
            for (uint64_t i = 0; i < m; ++i) {
                const L0cTag& t = tags[cAt(i, j)];
                if (t.mmad == 0) {
                    fail("%s: accumulates (cmatrixInitVal false%s) onto L0C row %" PRIu64 ", column %" PRIu64
                         ", which no Mmad wrote since its buffer was allocated: it holds garbage",
                         api, p.isBias ? ", isBias" : "", i, j);
                }
                reader.read(t, i, j);
                if (t.small && t.mmad > state.mmadsAtBarrier) {
                    fail("%s: accumulates onto L0C that Mmad #%u wrote (m rounded up to 16: %u) with fewer than %u "
                         "whole 16 x 16 result fractals (floor(m/16) x floor(n/16)) and no PipeBarrier<PIPE_M>() "
                         "since: below that size production kernels order the M pipe before the next Mmad reads the "
                         "result (cube-api.md §4.4)",
                         api, t.mmad, t.mp, kPipeMBarrierFractals);
                }
            }
        }
    }
    // Unpack the operands row by row, k contiguous, as float (exact for half and bf16).
    thread_local std::vector<float> aRows, bRows;
    aRows.resize(m * k);
    bRows.resize(n * k);
    for (uint64_t i = 0; i < m; ++i) {
        for (uint64_t kk = 0; kk < k; ++kk) {
            const uint64_t at =
                (i / kCubeEdge) * kCubeEdge * kp + (kk / c0) * kCubeEdge * c0 + (i % kCubeEdge) * c0 + kk % c0;
            aRows[i * k + kk] = static_cast<float>(load<U>(a, at));
        }
    }
    for (uint64_t j = 0; j < n; ++j) {
        for (uint64_t kk = 0; kk < k; ++kk) {
            const uint64_t at = (kk / c0) * np * c0 + (j / kCubeEdge) * kCubeEdge * c0 + (j % kCubeEdge) * c0 + kk % c0;
            bRows[j * k + kk] = static_cast<float>(load<S>(b, at));
        }
    }
    constexpr uint32_t kPoisonFloat = 0xFFFFFFFFu;
    const L0cTag tag = {static_cast<uint32_t>(state.mmadCalls + 1), 0, 0, static_cast<uint16_t>(mp),
                        static_cast<uint16_t>((m / kCubeEdge) * (n / kCubeEdge) < kPipeMBarrierFractals)};
    for (uint64_t j = 0; j < np; ++j) {
        for (uint64_t i = 0; i < mp; ++i) {
            const uint64_t at = cAt(i, j);
            if (i >= m || j >= n) {
                store<uint32_t>(c, at, kPoisonFloat);
                tags[at] = L0cTag{};
                continue;
            }
            float sum = init ? 0.0f : load<float>(c, at);
            const float* x = &aRows[i * k];
            const float* y = &bRows[j * k];
            for (uint64_t kk = 0; kk < k; ++kk) {
                sum += x[kk] * y[kk];
            }
            store<float>(c, at, sum);
            tags[at] = tag;
            tags[at].row = static_cast<uint16_t>(i);
            tags[at].col = static_cast<uint16_t>(j);
        }
    }
    // The fact sheet's peak rate: one 16 x 16 x 16 block per cycle for half/bf16, float at 1/4
    // (hardware-atlas-a2.md §4.1).
    state.cubeCycles += ceil_div(m, kCubeEdge) * ceil_div(n, kCubeEdge) * ceil_div(k, kCubeEdge) *
                        (std::is_same_v<U, float> ? 4 : 1);
    ++state.mmadCalls;
}

/// L0C -> GM (PIPE_FIX, §5): with CFG_ROW_MAJOR (NZ -> ND) element (r, c), r < mSize, c < nSize,
/// goes to dst[r*dstStride + c] from src[(c/16)*srcStride*16 + r*16 + c%16]; with CFG_NZ column
/// block cb goes to dst[cb*dstStride*(32/sizeof(T)) + r*16 + c%16]. Converted by quantPre: float
/// stays float (NoQuant), F322F16 / F322BF16 round to nearest even (the rounding is UNCERTAIN,
/// §5.4). Under SetAtomicAdd<T> the values add into GM.
template <typename T, typename U, const FixpipeConfig& config = CFG_ROW_MAJOR>
ascendc_emu::Requires<ascendc_emu::fixpipe_types<T, U>> Fixpipe(const GlobalTensor<T>& dst, const LocalTensor<U>& src,
                                                                 const FixpipeParamsV220& p)
{
    using namespace ascendc_emu;
    // COLUMN_MAJOR is not handled by the 2201 path (UNCERTAIN, §5.2): refused.
    static_assert(config.format == CO2Layout::ROW_MAJOR || config.format == CO2Layout::NZ,
                  "Fixpipe on Atlas A2 takes CFG_ROW_MAJOR or CFG_NZ");
    constexpr bool nz = config.format == CO2Layout::NZ;
    const char* api = nz ? "Fixpipe(L0C->GM, CFG_NZ)" : "Fixpipe(L0C->GM, CFG_ROW_MAJOR)";
    require_cube(api);
    const QuantMode_t need = std::is_same_v<T, float> ? NoQuant : std::is_same_v<T, half> ? F322F16 : F322BF16;
    if (p.quantPre != need) {
        fail("%s: float -> %s needs quantPre %s, not mode %d", api, type_name<T>(),
             need == NoQuant ? "NoQuant" : need == F322F16 ? "F322F16" : "F322BF16", static_cast<int>(p.quantPre));
    }
    if (p.reluEn || p.unitFlag != 0 || p.isChannelSplit || p.ndNum != 1) {
        fail("%s: reluEn, unitFlag, isChannelSplit and ndNum != 1 are not emulated (reluEn %d, unitFlag %u, "
             "isChannelSplit %d, ndNum %u)",
             api, p.reluEn, p.unitFlag, p.isChannelSplit, p.ndNum);
    }
    const uint64_t rows = p.mSize, cols = p.nSize;
    if (cols == 0 || cols > 4095 || rows == 0 || rows > (nz ? 65535u : 8192u)) {
        fail("%s: nSize %" PRIu64 " and mSize %" PRIu64 " must be in [1, 4095] and [1, %u]", api, cols, rows,
             nz ? 65535u : 8192u);
    }
    if (nz && cols % kCubeEdge != 0) {
        fail("%s: nSize %" PRIu64 " is not a multiple of 16", api, cols);
    }
    const uint64_t blocks = ceil_div(cols, kCubeEdge);
    const uint64_t rowsPadded = ceil_div(rows, kCubeEdge) * kCubeEdge;
    if (p.srcStride < rowsPadded) {
        // The hardware's legality of a smaller stride is UNCERTAIN (§8.6): column blocks of L0C
        // would overlap, so the stricter choice.
        fail("%s: srcStride %u is less than mSize rounded up to 16 (%" PRIu64 ")", api, p.srcStride, rowsPadded);
    }
    // dst strides that make rows (ROW_MAJOR) or column blocks (NZ) overlap leave GM depending on
    // the write order: refused (stricter than the documented dstStride != 0).
    const uint64_t blockElems = kBlockBytes / sizeof(T);
    if (nz ? p.dstStride * blockElems < rows * kCubeEdge : p.dstStride < cols) {
        fail("%s: dstStride %" PRIu32 " makes the %s overlap in GM", api, p.dstStride,
             nz ? "column blocks (unit 32 bytes, each mSize x 16 elements)" : "rows (unit elements, nSize per row)");
    }
    const uint64_t srcElems = (blocks - 1) * p.srcStride * kCubeEdge + rowsPadded * kCubeEdge;
    const uint8_t* s = local_operand(api, "src", src, srcElems * sizeof(float), Phys::L0C, kL0cAlign);
    const L0cTag* tags = l0c_tags(src);
    const auto srcAt = [&](uint64_t r, uint64_t c) {
        return (c / kCubeEdge) * p.srcStride * kCubeEdge + r * kCubeEdge + c % kCubeEdge;
    };
    char layout[32];
    std::snprintf(layout, sizeof layout, "srcStride %u", p.srcStride);
    L0cReader reader(api, layout, p.srcStride);
    for (uint64_t c = 0; c < cols; ++c) {
        for (uint64_t r = 0; r < rows; ++r) {
            const L0cTag& t = tags[srcAt(r, c)];
            if (t.mmad == 0) {
                fail("%s: reads L0C row %" PRIu64 ", column %" PRIu64
                     " of src, which no Mmad defined (outside its m x n, or never written): garbage",
                     api, r, c);
            }
            reader.read(t, r, c);
        }
    }
    const CoreState& cs = core();
    if (cs.atomicApply != nullptr && std::strcmp(cs.atomicType, type_name<T>()) != 0) {
        fail("%s: %s<%s>() is on but Fixpipe writes %s", api, cs.atomicName, cs.atomicType, type_name<T>());
    }
    // Rows of the output (ROW_MAJOR: mSize rows of nSize; NZ: one row per column block).
    const uint64_t outRows = nz ? blocks : rows;
    const uint64_t rowElems = nz ? rows * kCubeEdge : cols;
    const uint64_t pitch = nz ? p.dstStride * blockElems : p.dstStride;
    uint8_t* g = TensorAccess::gm_span(dst, 0, ((outRows - 1) * pitch + rowElems) * sizeof(T), false, api);
    note_rows(TensorAccess::gm_addr(dst), outRows, rowElems * sizeof(T), pitch * sizeof(T), store_access(), api);
    thread_local std::vector<T> line;
    line.resize(rowElems);
    for (uint64_t o = 0; o < outRows; ++o) {
        for (uint64_t e = 0; e < rowElems; ++e) {
            const uint64_t r = nz ? e / kCubeEdge : o;
            const uint64_t c = nz ? o * kCubeEdge + e % kCubeEdge : e;
            line[e] = static_cast<T>(load<float>(s, srcAt(r, c)));
        }
        gm_store(g + o * pitch * sizeof(T), reinterpret_cast<const uint8_t*>(line.data()), rowElems * sizeof(T));
    }
    count_copy(outRows * rowElems * sizeof(T), true);
}

}  // namespace AscendC

#endif
