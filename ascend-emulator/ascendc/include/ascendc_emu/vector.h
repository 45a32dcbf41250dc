// Host emulation of Ascend C: vector compute APIs, count forms (ascendc-api.md §5, §9.1, §9.8-9.9).
//
// Every API is constrained in its signature to the dtypes of the vector instruction behind it (the
// table `isa` below, from the A2 platform description: vector-intrinsics-910b.md), so an illegal
// dtype (bf16 or int8 arithmetic, Div on integers, ...) finds no matching function at compile
// time, and the compiler's note names the instruction (`Requires<isa::vdiv<T>>` with T = int).
// Scalars are
// `const T&` with T deduced from the tensors, so Adds(halfTensor, halfTensor, 1.0f, n) does not
// compile either, as on CANN. Results are computed in float (half) or int64 (integers) and rounded
// or wrapped once per element to the destination type, as the vector unit delivers them.
#ifndef ASCENDC_EMU_VECTOR_H
#define ASCENDC_EMU_VECTOR_H

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "ascendc_emu/tensor.h"

namespace ascendc_emu {

/// The dtypes each vector instruction of the A2 vector core (AIV, dav-c220-vec) takes, from the
/// SoC's platform description (`[VectorCoreintrinsicDtypeMap]` of Ascend910B2.ini, the same for
/// every A2 SoC: /work/shared/ascend/vector-intrinsics-910b.md). Each API below is constrained by
/// the instruction that backs it, so a call on another dtype does not compile and the compiler's
/// note names the instruction. A dtype missing from a row may also be emulated by CANN's library
/// with several instructions; the emulation takes the stricter reading and refuses it.
namespace isa {
template <class T>
constexpr bool arith = one_of<T, half, float, int32_t, int16_t>;  // the rows of vadd/vsub/vmul/vmax/vmin(s)
template <class T>
constexpr bool f16_f32 = one_of<T, half, float>;

template <class T> constexpr bool vadd = arith<T>;     // Add
template <class T> constexpr bool vsub = arith<T>;     // Sub
template <class T> constexpr bool vmul = arith<T>;     // Mul
template <class T> constexpr bool vmax = arith<T>;     // Max
template <class T> constexpr bool vmin = arith<T>;     // Min
template <class T> constexpr bool vadds = arith<T>;    // Adds
template <class T> constexpr bool vmuls = arith<T>;    // Muls
template <class T> constexpr bool vmaxs = arith<T>;    // Maxs
template <class T> constexpr bool vmins = arith<T>;    // Mins
template <class T> constexpr bool vdiv = f16_f32<T>;   // Div
template <class T> constexpr bool vexp = f16_f32<T>;   // Exp
template <class T> constexpr bool vln = f16_f32<T>;    // Ln
template <class T> constexpr bool vabs = f16_f32<T>;   // Abs
template <class T> constexpr bool vrec = f16_f32<T>;   // Reciprocal
template <class T> constexpr bool vsqrt = f16_f32<T>;  // Sqrt
template <class T> constexpr bool vrsqrt = f16_f32<T>; // Rsqrt
template <class T> constexpr bool vlrelu = f16_f32<T>; // LeakyRelu
template <class T> constexpr bool vrelu = one_of<T, half, float, int32_t>;  // Relu
template <class T> constexpr bool vand = one_of<T, int16_t, uint16_t>;      // And
template <class T> constexpr bool vor = one_of<T, int16_t, uint16_t>;       // Or
template <class T> constexpr bool vnot = one_of<T, int16_t, uint16_t>;      // Not
template <class T> constexpr bool vsel = f16_f32<T>;   // Select
template <class T> constexpr bool vcadd = f16_f32<T>;  // ReduceSum
template <class T> constexpr bool vcmax = f16_f32<T>;  // ReduceMax
template <class T> constexpr bool vcmin = f16_f32<T>;  // ReduceMin
// Compare / CompareScalar: vcmpv_<mode> / vcmpvs_<mode> take float16 and float32; the EQ forms
// int32 too (checked per mode at run time, compare_operands).
template <class T> constexpr bool vcmpv_eq = one_of<T, half, float, int32_t>;
template <class T> constexpr bool vcmpvs_eq = one_of<T, half, float, int32_t>;
// Axpy: vaxpy takes f16f16f16, f32f32f32 and f32f16f16 (dst, src, scalar).
template <class T, class U>
constexpr bool vaxpy = (std::is_same_v<T, U> && f16_f32<T>) || (std::is_same_v<T, float> && std::is_same_v<U, half>);
}  // namespace isa

/// Types the vector unit computes in float (half, float; the others are integers).
template <class T>
constexpr bool float_type = isa::f16_f32<T>;

/// The host type a result is computed in before it is rounded (half) or wrapped (integers).
template <class T>
using Wide = std::conditional_t<float_type<T>, float, int64_t>;

template <class T>
Wide<T> widen(T v)
{
    return static_cast<Wide<T>>(v);
}

template <class T, class W>
T narrow(W v)
{
    return static_cast<T>(v);
}

// The element loops of the vector APIs are compiled twice on x86-64, for AVX2 and the baseline,
// and picked at load time: the same IEEE operations in the same order (no FMA contraction), so
// the same results, on 8 floats at a time where the host has them.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ASCENDC_EMU_VECTOR_LOOP __attribute__((target_clones("avx2", "default")))
#else
#define ASCENDC_EMU_VECTOR_LOOP
#endif

template <class T, class F>
ASCENDC_EMU_VECTOR_LOOP void unary_loop(uint8_t* d, const uint8_t* s, uint64_t n, F f)
{
    for (uint64_t i = 0; i < n; ++i) {
        store<T>(d, i, narrow<T>(f(widen(load<T>(s, i)))));
    }
}

template <class T, class F>
ASCENDC_EMU_VECTOR_LOOP void binary_loop(uint8_t* d, const uint8_t* a, const uint8_t* b, uint64_t n, F f)
{
    for (uint64_t i = 0; i < n; ++i) {
        store<T>(d, i, narrow<T>(f(widen(load<T>(a, i)), widen(load<T>(b, i)))));
    }
}

inline uint64_t vec_count(const char* api, int64_t count)
{
    if (count < 0) {
        fail("%s: negative count %" PRId64, api, count);
    }
    return static_cast<uint64_t>(count);
}

template <class T, class F>
void unary(const char* api, const AscendC::LocalTensor<T>& dst, const AscendC::LocalTensor<T>& src, int64_t count,
           F f)
{
    const uint64_t n = vec_count(api, count);
    const uint64_t bytes = n * sizeof(T);
    uint8_t* d = ub_operand(api, "dst", dst, bytes);
    const uint8_t* s = ub_operand(api, "src", src, bytes);
    check_overlap(api, "src", dst, bytes, src, bytes);
    count_vector(bytes);
    unary_loop<T>(d, s, n, f);
}

template <class T, class F>
void binary(const char* api, const AscendC::LocalTensor<T>& dst, const AscendC::LocalTensor<T>& src0,
            const AscendC::LocalTensor<T>& src1, int64_t count, F f)
{
    const uint64_t n = vec_count(api, count);
    const uint64_t bytes = n * sizeof(T);
    uint8_t* d = ub_operand(api, "dst", dst, bytes);
    const uint8_t* a = ub_operand(api, "src0", src0, bytes);
    const uint8_t* b = ub_operand(api, "src1", src1, bytes);
    check_overlap(api, "src0", dst, bytes, src0, bytes);
    check_overlap(api, "src1", dst, bytes, src1, bytes);
    count_vector(bytes);
    binary_loop<T>(d, a, b, n, f);
}

// ---- Cast (ascendc-api.md §5.3) ----

enum CastModeBits : uint8_t {
    kNone = 1u << 0,
    kRint = 1u << 1,
    kFloor = 1u << 2,
    kCeil = 1u << 3,
    kRound = 1u << 4,
    kTrunc = 1u << 5,
    kOdd = 1u << 6,
    kFive = kRint | kFloor | kCeil | kRound | kTrunc,
};

/// The RoundModes Cast accepts from S to D on Atlas A2 (0: the pair is not supported).
template <class D, class S>
constexpr uint8_t cast_modes()
{
    if constexpr (std::is_same_v<S, half>) {
        if constexpr (std::is_same_v<D, float>) return kNone;
        if constexpr (one_of<D, int32_t, int16_t>) return kFive;
        if constexpr (one_of<D, int8_t, uint8_t>) return kFive | kNone;
    } else if constexpr (std::is_same_v<S, float>) {
        if constexpr (std::is_same_v<D, float>) return kFive;
        if constexpr (std::is_same_v<D, half>) return kFive | kNone | kOdd;
        if constexpr (one_of<D, int32_t, int16_t, int64_t>) return kFive;
        if constexpr (std::is_same_v<D, bfloat16_t>) return kFive;  // no CAST_NONE
    } else if constexpr (std::is_same_v<S, bfloat16_t>) {
        if constexpr (std::is_same_v<D, float>) return kNone;
        if constexpr (std::is_same_v<D, int32_t>) return kFive;
    } else if constexpr (one_of<S, int8_t, uint8_t>) {
        if constexpr (std::is_same_v<D, half>) return kNone;
    } else if constexpr (std::is_same_v<S, int16_t>) {
        if constexpr (std::is_same_v<D, half>) return kFive | kNone;
        if constexpr (std::is_same_v<D, float>) return kNone;
    } else if constexpr (std::is_same_v<S, int32_t>) {
        if constexpr (std::is_same_v<D, float>) return kFive | kNone;
        if constexpr (one_of<D, int16_t, int64_t>) return kNone;
    } else if constexpr (std::is_same_v<S, int64_t>) {
        if constexpr (std::is_same_v<D, int32_t>) return kNone;
        if constexpr (std::is_same_v<D, float>) return kFive;
    }
    return 0;
}

inline const char* round_mode_name(AscendC::RoundMode m)
{
    static const char* const kNames[] = {"CAST_NONE",  "CAST_RINT",  "CAST_FLOOR", "CAST_CEIL",
                                         "CAST_ROUND", "CAST_TRUNC", "CAST_ODD"};
    const size_t i = static_cast<size_t>(m);
    return i < sizeof(kNames) / sizeof(kNames[0]) ? kNames[i] : "?";
}

/// CAST_NONE rounds like CAST_RINT when the value is not exact.
inline Rounding rounding(AscendC::RoundMode m)
{
    switch (m) {
        case AscendC::RoundMode::CAST_FLOOR: return Rounding::Floor;
        case AscendC::RoundMode::CAST_CEIL: return Rounding::Ceil;
        case AscendC::RoundMode::CAST_ROUND: return Rounding::NearestAway;
        case AscendC::RoundMode::CAST_TRUNC: return Rounding::Trunc;
        case AscendC::RoundMode::CAST_ODD: return Rounding::Odd;
        default: return Rounding::NearestEven;
    }
}

template <class T>
double to_double(T v)
{
    if constexpr (one_of<T, half, bfloat16_t>) {
        return static_cast<double>(static_cast<float>(v));
    } else {
        return static_cast<double>(v);  // int64 beyond 2^53 rounds here first (a double rounding)
    }
}

/// One element of Cast: floating destinations round in direction r; integer destinations
/// saturate (float -> int after rounding to integral in direction r).
template <class D, class S>
D convert(S v, Rounding r)
{
    if constexpr (std::is_same_v<D, float> && std::is_same_v<S, float>) {
        return static_cast<float>(round_integral(v, r));
    } else if constexpr (std::is_same_v<D, float> && one_of<S, half, bfloat16_t>) {
        const float f = static_cast<float>(v);  // exact; a NaN becomes the canonical one, as encode gives
        return std::isnan(f) ? bits_float(kCanonicalNanF32) : f;
    } else if constexpr (one_of<D, half, bfloat16_t> && std::is_same_v<S, float>) {
        return r == Rounding::NearestEven ? D(v)
                                          : D(Bits16{static_cast<uint16_t>(encode<std::conditional_t<
                                                std::is_same_v<D, half>, HalfFormat, Bf16Format>>(to_double(v), r))});
    } else if constexpr (std::is_same_v<D, half>) {
        return half(Bits16{static_cast<uint16_t>(encode<HalfFormat>(to_double(v), r))});
    } else if constexpr (std::is_same_v<D, bfloat16_t>) {
        return bfloat16_t(Bits16{static_cast<uint16_t>(encode<Bf16Format>(to_double(v), r))});
    } else if constexpr (std::is_same_v<D, float>) {
        const uint32_t bits = encode<F32Format>(to_double(v), r);
        float f;
        std::memcpy(&f, &bits, sizeof f);
        return f;
    } else if constexpr (one_of<S, half, bfloat16_t, float>) {
        return saturate<D>(round_integral(to_double(v), r));
    } else {
        // Integer narrowing saturates (UNCERTAIN: the docs do not say saturate or wrap).
        return saturate_int<D>(v);
    }
}

// ---- Compare / Select (ascendc-api.md §5.4) ----

inline const char* cmp_name(AscendC::CMPMODE m)
{
    static const char* const kNames[] = {"LT", "GT", "EQ", "LE", "GE", "NE"};
    const size_t i = static_cast<size_t>(m);
    return i < sizeof(kNames) / sizeof(kNames[0]) ? kNames[i] : "?";
}

/// The mode as the instructions' suffix spells it (vcmpv_lt, ...).
inline const char* cmp_lower(AscendC::CMPMODE m)
{
    static const char* const kNames[] = {"lt", "gt", "eq", "le", "ge", "ne"};
    const size_t i = static_cast<size_t>(m);
    return i < sizeof(kNames) / sizeof(kNames[0]) ? kNames[i] : "?";
}

template <class T>
bool compare(T x, T y, AscendC::CMPMODE m)
{
    const auto a = widen(x);
    const auto b = widen(y);
    switch (m) {
        case AscendC::CMPMODE::LT: return a < b;
        case AscendC::CMPMODE::GT: return a > b;
        case AscendC::CMPMODE::EQ: return a == b;
        case AscendC::CMPMODE::LE: return a <= b;
        case AscendC::CMPMODE::GE: return a >= b;
        case AscendC::CMPMODE::NE: return a != b;
    }
    return false;
}

/// Checks of Compare and CompareScalar; returns the dst bitmask address.
template <class T, class U>
uint8_t* compare_operands(const char* api, const AscendC::LocalTensor<U>& dst, const AscendC::LocalTensor<T>& src0,
                          AscendC::CMPMODE mode, uint64_t n)
{
    if (std::is_same_v<T, int32_t> && mode != AscendC::CMPMODE::EQ) {
        // Only vcmpv_eq / vcmpvs_eq take int32 (vector-intrinsics-910b.md).
        fail("%s: CMPMODE::%s on int32_t: the A2 vector core's %s_%s takes float16 and float32 only (int32 has "
             "EQ alone)",
             api, cmp_name(mode), std::strcmp(api, "Compare") == 0 ? "vcmpv" : "vcmpvs", cmp_lower(mode));
    }
    if (n * sizeof(T) % kRepeatBytes != 0) {
        fail("%s: count %" PRIu64 " of %s is %" PRIu64 " bytes, not a multiple of 256: the NPU leaves the "
             "elements of the last partial repeat uncomputed",
             api, n, type_name<T>(), n * sizeof(T));
    }
    const uint64_t maskBytes = n / 8;
    uint8_t* d = ub_operand(api, "dst", dst, maskBytes);
    check_overlap(api, "src0", dst, maskBytes, src0, n * sizeof(T), false);
    return d;
}

/// Bit i of a little-endian bitmask.
inline bool mask_bit(const uint8_t* mask, uint64_t i) { return (mask[i / 8] >> (i % 8)) & 1u; }

/// Select modes 1 and 2 use UB [184 KiB, 192 KiB) as scratch without asking the TPipe.
inline void check_select_scratch(const char* api, AscendC::SELMODE mode)
{
    const uint32_t planned = core().planned[static_cast<size_t>(Phys::UB)];
    if (planned > kUbBytesBelowScratch) {
        fail("%s: mode %d writes scratch at UB [184 KiB, 192 KiB), but the TPipe planned %" PRIu32
             " bytes (> 188416): buffers there would be overwritten",
             api, static_cast<int>(mode), planned);
    }
}

template <class T, class U>
const uint8_t* select_mask(const char* api, const AscendC::LocalTensor<U>& selMask, AscendC::SELMODE mode, uint64_t n)
{
    // Mode 0 reuses the first repeat's worth of bits for every repeat; modes 1/2 read one bit per element.
    const uint64_t bits = mode == AscendC::SELMODE::VSEL_CMPMASK_SPR ? kRepeatBytes / sizeof(T) : n;
    return ub_operand(api, "selMask", selMask, (bits + 7) / 8);
}

// ---- Reductions (ascendc-api.md §5.5) ----

/// Minimum sharedTmpBuffer of the count-form reductions, in elements of T.
template <class T>
uint64_t reduce_tmp_elems(uint64_t count, bool isSum, bool withIndex)
{
    const uint64_t perBlock = kBlockBytes / sizeof(T);
    const uint64_t perRepeat = kRepeatBytes / sizeof(T);
    const uint64_t r = count == 0 ? 1 : (count + perRepeat - 1) / perRepeat;  // ceil: see §10 UNCERTAIN
    auto roundUp = [&](uint64_t v) { return (v + perBlock - 1) / perBlock * perBlock; };
    if (isSum) {
        return roundUp(r);
    }
    if (!withIndex) {
        return roundUp(2 * r);
    }
    const uint64_t a = roundUp(2 * r);
    const uint64_t o2 = (2 * r + perRepeat - 1) / perRepeat * 2;
    const uint64_t b = roundUp(o2);
    const uint64_t o3 = (o2 + perRepeat - 1) / perRepeat * 2;
    return a + b + roundUp(o3);
}

/// Checks dst (element-aligned, `dstElems` elements), src and the shared buffer of a reduction;
/// returns the host addresses of dst, src and tmp.
template <class T>
void reduce_operands(const char* api, const AscendC::LocalTensor<T>& dst, const AscendC::LocalTensor<T>& src,
                     const AscendC::LocalTensor<T>& tmp, uint64_t n, uint64_t dstElems, uint64_t tmpElems,
                     uint8_t*& d, const uint8_t*& s, uint8_t*& t)
{
    d = ub_operand(api, "dst", dst, dstElems * sizeof(T), sizeof(T));
    s = ub_operand(api, "src", src, n * sizeof(T));
    if (static_cast<uint64_t>(tmp.GetSize()) < tmpElems) {
        fail("%s: sharedTmpBuffer holds %" PRIu32 " elements of %s, the count %" PRIu64 " needs at least %" PRIu64,
             api, tmp.GetSize(), type_name<T>(), n, tmpElems);
    }
    t = ub_operand(api, "sharedTmpBuffer", tmp, tmpElems * sizeof(T));
}

/// One accumulation step of the vector unit: half sums are rounded and saturate at 65504.
template <class T>
float reduce_add(float a, float b)
{
    if constexpr (std::is_same_v<T, half>) {
        const float s = static_cast<float>(half(a + b));
        return std::fmin(std::fmax(s, -65504.0f), 65504.0f);
    } else {
        return a + b;
    }
}

/// The pairwise tree of one repeat: level[i] = level[2i] + level[2i+1] until one value is left.
/// Each level has a constant width (and its own array), so the compiler vectorises it.
template <class T, uint64_t W>
float pairwise_sum(const float* level)
{
    if constexpr (W == 1) {
        return level[0];
    } else {
        float next[W / 2];
#if defined(__SSE2__)
        if constexpr (std::is_same_v<T, float> && W >= 8) {
            // Four adjacent pairs at a time: the even and the odd elements of 8, added (the same
            // additions as below, so the same result).
            for (uint64_t i = 0; i < W / 2; i += 4) {
                const __m128 a = _mm_loadu_ps(level + 2 * i);
                const __m128 b = _mm_loadu_ps(level + 2 * i + 4);
                const __m128 even = _mm_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
                const __m128 odd = _mm_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
                _mm_storeu_ps(next + i, _mm_add_ps(even, odd));
            }
            return pairwise_sum<T, W / 2>(next);
        }
#endif
        for (uint64_t i = 0; i < W / 2; ++i) {
            next[i] = reduce_add<T>(level[2 * i], level[2 * i + 1]);
        }
        return pairwise_sum<T, W / 2>(next);
    }
}

/// ReduceSum of n > 0 elements: a pairwise tree inside each 256-byte repeat (zero-padded), the
/// repeats added in order.
template <class T>
ASCENDC_EMU_VECTOR_LOOP float reduce_sum_loop(const uint8_t* s, uint64_t n)
{
    constexpr uint64_t perRepeat = kRepeatBytes / sizeof(T);
    float level[perRepeat];
    float total = 0.0f;
    for (uint64_t start = 0; start < n; start += perRepeat) {
        const uint64_t m = std::min(perRepeat, n - start);
        for (uint64_t i = 0; i < m; ++i) {
            level[i] = static_cast<float>(load<T>(s, start + i));
        }
        std::fill(level + m, level + perRepeat, 0.0f);
        const float sum = pairwise_sum<T, perRepeat>(level);
        total = start == 0 ? sum : reduce_add<T>(total, sum);
    }
    return total;
}

template <class D, class S>
ASCENDC_EMU_VECTOR_LOOP void cast_loop(uint8_t* d, const uint8_t* s, uint64_t n, Rounding r)
{
    for (uint64_t i = 0; i < n; ++i) {
        store<D>(d, i, convert<D>(load<S>(s, i), r));
    }
}

template <class T, class U>
ASCENDC_EMU_VECTOR_LOOP void axpy_loop(uint8_t* d, const uint8_t* s, uint64_t n, float a)
{
    for (uint64_t i = 0; i < n; ++i) {
        // The product is rounded to the source type before the add: the docs call the basic Axpy
        // less precise than Muls + Add, so the emulation keeps no more than two roundings
        // (UNCERTAIN: the fact sheets do not say how the unit rounds inside Axpy).
        const float p = static_cast<float>(static_cast<U>(static_cast<float>(load<U>(s, i)) * a));
        store<T>(d, i, static_cast<T>(static_cast<float>(load<T>(d, i)) + p));
    }
}

}  // namespace ascendc_emu

namespace AscendC {

// ---- Element-wise binary: half, float, int16_t, int32_t (Div: half, float) ----

template <typename T>
ascendc_emu::Requires<ascendc_emu::isa::vadd<T>> Add(const LocalTensor<T>& dst, const LocalTensor<T>& src0,
                                                       const LocalTensor<T>& src1, const int32_t& count)
{
    ascendc_emu::binary("Add", dst, src0, src1, count, [](auto a, auto b) { return a + b; });
}

template <typename T>
ascendc_emu::Requires<ascendc_emu::isa::vsub<T>> Sub(const LocalTensor<T>& dst, const LocalTensor<T>& src0,
                                                       const LocalTensor<T>& src1, const int32_t& count)
{
    ascendc_emu::binary("Sub", dst, src0, src1, count, [](auto a, auto b) { return a - b; });
}

template <typename T>
ascendc_emu::Requires<ascendc_emu::isa::vmul<T>> Mul(const LocalTensor<T>& dst, const LocalTensor<T>& src0,
                                                       const LocalTensor<T>& src1, const int32_t& count)
{
    ascendc_emu::binary("Mul", dst, src0, src1, count, [](auto a, auto b) { return a * b; });
}

template <typename T>
ascendc_emu::Requires<ascendc_emu::isa::vdiv<T>> Div(const LocalTensor<T>& dst, const LocalTensor<T>& src0,
                                                       const LocalTensor<T>& src1, const int32_t& count)
{
    ascendc_emu::binary("Div", dst, src0, src1, count, [](float a, float b) { return a / b; });
}

template <typename T>
ascendc_emu::Requires<ascendc_emu::isa::vmax<T>> Max(const LocalTensor<T>& dst, const LocalTensor<T>& src0,
                                                       const LocalTensor<T>& src1, const int32_t& count)
{
    ascendc_emu::binary("Max", dst, src0, src1, count, [](auto a, auto b) { return a > b ? a : b; });
}

template <typename T>
ascendc_emu::Requires<ascendc_emu::isa::vmin<T>> Min(const LocalTensor<T>& dst, const LocalTensor<T>& src0,
                                                       const LocalTensor<T>& src1, const int32_t& count)
{
    ascendc_emu::binary("Min", dst, src0, src1, count, [](auto a, auto b) { return a < b ? a : b; });
}

// ---- Tensor-scalar: half, float, int16_t, int32_t ----

template <typename T, bool isSetMask = true>
ascendc_emu::Requires<ascendc_emu::isa::vadds<T>> Adds(const LocalTensor<T>& dst, const LocalTensor<T>& src,
                                                        const T& scalarValue, const int32_t& count)
{
    static_assert(isSetMask, "isSetMask=false relies on mask registers the emulation does not model");
    const auto s = ascendc_emu::widen(scalarValue);
    ascendc_emu::unary("Adds", dst, src, count, [s](auto x) { return x + s; });
}

template <typename T, bool isSetMask = true>
ascendc_emu::Requires<ascendc_emu::isa::vmuls<T>> Muls(const LocalTensor<T>& dst, const LocalTensor<T>& src,
                                                        const T& scalarValue, const int32_t& count)
{
    static_assert(isSetMask, "isSetMask=false relies on mask registers the emulation does not model");
    const auto s = ascendc_emu::widen(scalarValue);
    ascendc_emu::unary("Muls", dst, src, count, [s](auto x) { return x * s; });
}

template <typename T, bool isSetMask = true>
ascendc_emu::Requires<ascendc_emu::isa::vmaxs<T>> Maxs(const LocalTensor<T>& dst, const LocalTensor<T>& src,
                                                        const T& scalarValue, const int32_t& count)
{
    static_assert(isSetMask, "isSetMask=false relies on mask registers the emulation does not model");
    const auto s = ascendc_emu::widen(scalarValue);
    ascendc_emu::unary("Maxs", dst, src, count, [s](auto x) { return x > s ? x : s; });
}

template <typename T, bool isSetMask = true>
ascendc_emu::Requires<ascendc_emu::isa::vmins<T>> Mins(const LocalTensor<T>& dst, const LocalTensor<T>& src,
                                                        const T& scalarValue, const int32_t& count)
{
    static_assert(isSetMask, "isSetMask=false relies on mask registers the emulation does not model");
    const auto s = ascendc_emu::widen(scalarValue);
    ascendc_emu::unary("Mins", dst, src, count, [s](auto x) { return x < s ? x : s; });
}

template <typename T, bool isSetMask = true>
ascendc_emu::Requires<ascendc_emu::isa::vlrelu<T>> LeakyRelu(const LocalTensor<T>& dst, const LocalTensor<T>& src,
                                                             const T& scalarValue, const int32_t& count)
{
    static_assert(isSetMask, "isSetMask=false relies on mask registers the emulation does not model");
    const float alpha = scalarValue;
    ascendc_emu::unary("LeakyRelu", dst, src, count, [alpha](float x) { return x >= 0.0f ? x : x * alpha; });
}

// ---- Axpy: dst += src * scalar (A2 dtypes: half/half/half, float/float/float, half/half -> float) ----

template <typename T, typename U>
ascendc_emu::Requires<ascendc_emu::isa::vaxpy<T, U>> Axpy(const LocalTensor<T>& dst, const LocalTensor<U>& src,
                                                          const U& scalarValue, const int32_t& count)
{
    const uint64_t n = ascendc_emu::vec_count("Axpy", count);
    uint8_t* d = ascendc_emu::ub_operand("Axpy", "dst", dst, n * sizeof(T));
    const uint8_t* s = ascendc_emu::ub_operand("Axpy", "src", src, n * sizeof(U));
    // dst is also read: only a disjoint source is defined (the widening form moves elements).
    ascendc_emu::check_overlap("Axpy", "src", dst, n * sizeof(T), src, n * sizeof(U), std::is_same_v<T, U>);
    ascendc_emu::count_vector(n * sizeof(T));
    ascendc_emu::axpy_loop<T, U>(d, s, n, static_cast<float>(scalarValue));
}

// ---- Unary: half, float (Relu also int32_t) ----

template <typename T>
ascendc_emu::Requires<ascendc_emu::isa::vexp<T>> Exp(const LocalTensor<T>& dst, const LocalTensor<T>& src,
                                                       const int32_t& count)
{
    ascendc_emu::unary("Exp", dst, src, count, [](float x) { return std::exp(x); });
}

template <typename T>
ascendc_emu::Requires<ascendc_emu::isa::vln<T>> Ln(const LocalTensor<T>& dst, const LocalTensor<T>& src,
                                                      const int32_t& count)
{
    ascendc_emu::unary("Ln", dst, src, count, [](float x) { return std::log(x); });
}

template <typename T>
ascendc_emu::Requires<ascendc_emu::isa::vabs<T>> Abs(const LocalTensor<T>& dst, const LocalTensor<T>& src,
                                                       const int32_t& count)
{
    ascendc_emu::unary("Abs", dst, src, count, [](float x) { return std::fabs(x); });
}

template <typename T>
ascendc_emu::Requires<ascendc_emu::isa::vrec<T>> Reciprocal(const LocalTensor<T>& dst, const LocalTensor<T>& src,
                                                              const int32_t& count)
{
    ascendc_emu::unary("Reciprocal", dst, src, count, [](float x) { return 1.0f / x; });
}

template <typename T>
ascendc_emu::Requires<ascendc_emu::isa::vsqrt<T>> Sqrt(const LocalTensor<T>& dst, const LocalTensor<T>& src,
                                                        const int32_t& count)
{
    ascendc_emu::unary("Sqrt", dst, src, count, [](float x) { return std::sqrt(x); });
}

template <typename T>
ascendc_emu::Requires<ascendc_emu::isa::vrsqrt<T>> Rsqrt(const LocalTensor<T>& dst, const LocalTensor<T>& src,
                                                         const int32_t& count)
{
    ascendc_emu::unary("Rsqrt", dst, src, count, [](float x) { return 1.0f / std::sqrt(x); });
}

template <typename T>
ascendc_emu::Requires<ascendc_emu::isa::vrelu<T>> Relu(const LocalTensor<T>& dst,
                                                                         const LocalTensor<T>& src,
                                                                         const int32_t& count)
{
    ascendc_emu::unary("Relu", dst, src, count, [](auto x) { return x > 0 ? x : decltype(x)(0); });
}

// ---- Bitwise: int16_t, uint16_t ----

template <typename T>
ascendc_emu::Requires<ascendc_emu::isa::vand<T>> And(const LocalTensor<T>& dst, const LocalTensor<T>& src0,
                                                         const LocalTensor<T>& src1, const int32_t& count)
{
    ascendc_emu::binary("And", dst, src0, src1, count, [](int64_t a, int64_t b) { return a & b; });
}

template <typename T>
ascendc_emu::Requires<ascendc_emu::isa::vor<T>> Or(const LocalTensor<T>& dst, const LocalTensor<T>& src0,
                                                        const LocalTensor<T>& src1, const int32_t& count)
{
    ascendc_emu::binary("Or", dst, src0, src1, count, [](int64_t a, int64_t b) { return a | b; });
}

template <typename T>
ascendc_emu::Requires<ascendc_emu::isa::vnot<T>> Not(const LocalTensor<T>& dst, const LocalTensor<T>& src,
                                                         const int32_t& count)
{
    ascendc_emu::unary("Not", dst, src, count, [](int64_t x) { return ~x; });
}

// ---- Duplicate: fills count elements with a scalar ----

template <typename T>
ascendc_emu::Requires<ascendc_emu::one_of<T, int16_t, uint16_t, half, bfloat16_t, int32_t, uint32_t, float>>
Duplicate(const LocalTensor<T>& dst, const T& scalarValue, const int32_t& count)
{
    const char* api = "Duplicate";
    const uint64_t n = ascendc_emu::vec_count(api, count);
    uint8_t* d = ascendc_emu::ub_operand(api, "dst", dst, n * sizeof(T));
    ascendc_emu::count_vector(n * sizeof(T));
    for (uint64_t i = 0; i < n; ++i) {
        ascendc_emu::store<T>(d, i, scalarValue);
    }
}

// ---- Cast ----

/// Converts count elements; the (src, dst) pair must be in the A2 table and roundMode one of the
/// modes it supports (e.g. float -> bfloat16_t rejects CAST_NONE).
template <typename T, typename U>
ascendc_emu::Requires<(ascendc_emu::cast_modes<T, U>() != 0)> Cast(const LocalTensor<T>& dst,
                                                                   const LocalTensor<U>& src,
                                                                   const RoundMode& roundMode, const uint32_t count)
{
    using namespace ascendc_emu;
    const char* api = "Cast";
    if (!(cast_modes<T, U>() & (1u << static_cast<unsigned>(roundMode)))) {
        fail("%s %s -> %s does not support RoundMode::%s on Atlas A2", api, type_name<U>(), type_name<T>(),
             round_mode_name(roundMode));
    }
    const uint64_t n = count;
    uint8_t* d = ub_operand(api, "dst", dst, n * sizeof(T));
    const uint8_t* s = ub_operand(api, "src", src, n * sizeof(U));
    // A widening cast cannot run in place; a narrowing one may share the start address.
    check_overlap(api, "src", dst, n * sizeof(T), src, n * sizeof(U), sizeof(T) <= sizeof(U));
    const Rounding r = rounding(roundMode);
    count_vector(n * std::max(sizeof(T), sizeof(U)));  // a repeat is 256 bytes of the wider side
    cast_loop<T, U>(d, s, n, r);
}

// ---- Compare, CompareScalar, Select ----

/// dst bit i = src0[i] <cmpMode> src1[i]; count * sizeof(T) must be a multiple of 256 bytes.
template <typename T, typename U>
ascendc_emu::Requires<ascendc_emu::isa::vcmpv_eq<T> && ascendc_emu::one_of<U, uint8_t, int8_t>>
Compare(const LocalTensor<U>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, CMPMODE cmpMode,
        uint32_t count)
{
    using namespace ascendc_emu;
    const char* api = "Compare";
    const uint64_t n = count;
    uint8_t* d = compare_operands(api, dst, src0, cmpMode, n);
    const uint8_t* a = ub_operand(api, "src0", src0, n * sizeof(T));
    const uint8_t* b = ub_operand(api, "src1", src1, n * sizeof(T));
    check_overlap(api, "src1", dst, n / 8, src1, n * sizeof(T), false);
    count_vector(n * sizeof(T));
    for (uint64_t byte = 0; byte < n / 8; ++byte) {
        uint8_t bits = 0;
        for (uint64_t k = 0; k < 8; ++k) {
            const uint64_t i = byte * 8 + k;
            bits = static_cast<uint8_t>(bits | (compare(load<T>(a, i), load<T>(b, i), cmpMode) << k));
        }
        d[byte] = bits;
    }
}

/// dst bit i = src0[i] <cmpMode> src1Scalar; count * sizeof(T) must be a multiple of 256 bytes.
template <typename T, typename U>
ascendc_emu::Requires<ascendc_emu::isa::vcmpvs_eq<T> && std::is_same_v<U, uint8_t>>
CompareScalar(const LocalTensor<U>& dst, const LocalTensor<T>& src0, const T src1Scalar, CMPMODE cmpMode,
              uint32_t count)
{
    using namespace ascendc_emu;
    const char* api = "CompareScalar";
    const uint64_t n = count;
    uint8_t* d = compare_operands(api, dst, src0, cmpMode, n);
    const uint8_t* a = ub_operand(api, "src0", src0, n * sizeof(T));
    count_vector(n * sizeof(T));
    for (uint64_t byte = 0; byte < n / 8; ++byte) {
        uint8_t bits = 0;
        for (uint64_t k = 0; k < 8; ++k) {
            bits = static_cast<uint8_t>(bits | (compare(load<T>(a, byte * 8 + k), src1Scalar, cmpMode) << k));
        }
        d[byte] = bits;
    }
}

/// Modes 0 and 2: dst[i] = mask bit ? src0[i] : src1[i].
template <typename T, typename U>
ascendc_emu::Requires<ascendc_emu::isa::vsel<T> && ascendc_emu::one_of<U, uint8_t, uint16_t, uint32_t, uint64_t>>
Select(const LocalTensor<T>& dst, const LocalTensor<U>& selMask, const LocalTensor<T>& src0,
       const LocalTensor<T>& src1, SELMODE selMode, uint32_t count)
{
    using namespace ascendc_emu;
    const char* api = "Select";
    if (selMode == SELMODE::VSEL_TENSOR_SCALAR_MODE) {
        fail("%s: SELMODE::VSEL_TENSOR_SCALAR_MODE takes a scalar src1", api);
    }
    if (selMode == SELMODE::VSEL_TENSOR_TENSOR_MODE) {
        check_select_scratch(api, selMode);
    }
    const uint64_t n = count;
    const uint64_t perRepeat = kRepeatBytes / sizeof(T);
    const uint8_t* m = select_mask<T>(api, selMask, selMode, n);
    uint8_t* d = ub_operand(api, "dst", dst, n * sizeof(T));
    const uint8_t* a = ub_operand(api, "src0", src0, n * sizeof(T));
    const uint8_t* b = ub_operand(api, "src1", src1, n * sizeof(T));
    check_overlap(api, "src0", dst, n * sizeof(T), src0, n * sizeof(T));
    check_overlap(api, "src1", dst, n * sizeof(T), src1, n * sizeof(T));
    const bool reuse = selMode == SELMODE::VSEL_CMPMASK_SPR;
    count_vector(n * sizeof(T));
    for (uint64_t i = 0; i < n; ++i) {
        store<T>(d, i, mask_bit(m, reuse ? i % perRepeat : i) ? load<T>(a, i) : load<T>(b, i));
    }
}

/// Mode 1: dst[i] = mask bit ? src0[i] : src1.
template <typename T, typename U>
ascendc_emu::Requires<ascendc_emu::isa::vsel<T> && ascendc_emu::one_of<U, uint8_t, uint16_t, uint32_t, uint64_t>>
Select(const LocalTensor<T>& dst, const LocalTensor<U>& selMask, const LocalTensor<T>& src0, T src1, SELMODE selMode,
       uint32_t count)
{
    using namespace ascendc_emu;
    const char* api = "Select";
    if (selMode != SELMODE::VSEL_TENSOR_SCALAR_MODE) {
        fail("%s: a scalar src1 needs SELMODE::VSEL_TENSOR_SCALAR_MODE", api);
    }
    check_select_scratch(api, selMode);
    const uint64_t n = count;
    const uint8_t* m = select_mask<T>(api, selMask, selMode, n);
    uint8_t* d = ub_operand(api, "dst", dst, n * sizeof(T));
    const uint8_t* a = ub_operand(api, "src0", src0, n * sizeof(T));
    check_overlap(api, "src0", dst, n * sizeof(T), src0, n * sizeof(T));
    count_vector(n * sizeof(T));
    for (uint64_t i = 0; i < n; ++i) {
        store<T>(d, i, mask_bit(m, i) ? load<T>(a, i) : src1);
    }
}

// ---- Reductions (count forms) ----

/// dst[0] = sum of src[0, count): a pairwise tree inside each 256-byte repeat, the repeats added in
/// order; sharedTmpBuffer must hold the documented minimum and its contents become garbage.
template <typename T, bool isSetMask = true>
ascendc_emu::Requires<ascendc_emu::isa::vcadd<T>> ReduceSum(const LocalTensor<T>& dst, const LocalTensor<T>& src,
                                                             const LocalTensor<T>& sharedTmpBuffer,
                                                             const int32_t count)
{
    using namespace ascendc_emu;
    static_assert(isSetMask, "isSetMask=false relies on mask registers the emulation does not model");
    const char* api = "ReduceSum";
    const uint64_t n = vec_count(api, count);
    const uint64_t tmpElems = reduce_tmp_elems<T>(n, true, false);
    uint8_t* d;
    const uint8_t* s;
    uint8_t* t;
    reduce_operands(api, dst, src, sharedTmpBuffer, n, 1, tmpElems, d, s, t);
    count_vector(n * sizeof(T));
    if (n == 0) {
        return;
    }
    const float total = reduce_sum_loop<T>(s, n);
    std::memset(t, kPoison, tmpElems * sizeof(T));
    store<T>(d, 0, static_cast<T>(total));
}

}  // namespace AscendC

namespace ascendc_emu {

/// ReduceMax/ReduceMin: dst[0] = the extreme value, dst[1] = its first index (bits stored in T).
template <class T, class Better>
void reduce_extreme(const char* api, const AscendC::LocalTensor<T>& dst, const AscendC::LocalTensor<T>& src,
                    const AscendC::LocalTensor<T>& tmp, int32_t count, bool calIndex, Better better)
{
    const uint64_t n = vec_count(api, count);
    const uint64_t tmpElems = reduce_tmp_elems<T>(n, false, calIndex);
    uint8_t* d;
    const uint8_t* s;
    uint8_t* t;
    reduce_operands(api, dst, src, tmp, n, calIndex ? 2 : 1, tmpElems, d, s, t);
    count_vector(n * sizeof(T));
    using Index = std::conditional_t<sizeof(T) == 2, uint16_t, uint32_t>;
    if (calIndex && n - 1 > std::numeric_limits<Index>::max()) {
        fail("%s: count %" PRIu64 " has indices beyond what a %s can hold", api, n, type_name<T>());
    }
    if (n == 0) {
        return;
    }
    T best = load<T>(s, 0);
    uint64_t at = 0;
    for (uint64_t i = 1; i < n; ++i) {
        const T v = load<T>(s, i);
        if (better(static_cast<float>(v), static_cast<float>(best))) {
            best = v;
            at = i;
        }
    }
    std::memset(t, kPoison, tmpElems * sizeof(T));
    store<T>(d, 0, best);
    if (calIndex) {
        store<Index>(d + sizeof(T), 0, static_cast<Index>(at));
    }
}

}  // namespace ascendc_emu

namespace AscendC {

template <typename T>
ascendc_emu::Requires<ascendc_emu::isa::vcmax<T>> ReduceMax(const LocalTensor<T>& dst, const LocalTensor<T>& src,
                                                             const LocalTensor<T>& sharedTmpBuffer,
                                                             const int32_t count, bool calIndex = 0)
{
    ascendc_emu::reduce_extreme("ReduceMax", dst, src, sharedTmpBuffer, count, calIndex,
                                [](float v, float best) { return v > best; });
}

template <typename T>
ascendc_emu::Requires<ascendc_emu::isa::vcmin<T>> ReduceMin(const LocalTensor<T>& dst, const LocalTensor<T>& src,
                                                             const LocalTensor<T>& sharedTmpBuffer,
                                                             const int32_t count, bool calIndex = 0)
{
    ascendc_emu::reduce_extreme("ReduceMin", dst, src, sharedTmpBuffer, count, calIndex,
                                [](float v, float best) { return v < best; });
}

}  // namespace AscendC

#endif
