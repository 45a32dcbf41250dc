// Host emulation of Ascend C: number formats and rounding.
//
// The vector unit rounds every result to its destination type. The emulation computes in a wider
// host type and rounds once with the functions here, which implement every RoundMode of Cast for
// IEEE-style binary formats (fp16, bf16, fp32) and for integer destinations (saturating).
#ifndef ASCENDC_EMU_NUMERIC_H
#define ASCENDC_EMU_NUMERIC_H

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace ascendc_emu {

/// The rounding directions the Cast RoundModes map to.
enum class Rounding : uint8_t { NearestEven, NearestAway, Floor, Ceil, Trunc, Odd };

/// A binary floating-point format with `Mant` stored mantissa bits and `Exp` exponent bits.
template <int Mant, int Exp>
struct FloatFormat {
    static constexpr int kMant = Mant;
    static constexpr int kBias = (1 << (Exp - 1)) - 1;
    static constexpr int kEmin = 1 - kBias;  // exponent of the smallest normal number
    static constexpr int kEmax = kBias;      // exponent of the largest finite number
    static constexpr uint32_t kMantMask = (1u << Mant) - 1;
    static constexpr uint32_t kExpMask = ((1u << Exp) - 1) << Mant;  // also the bits of +inf
    static constexpr uint32_t kSign = 1u << (Mant + Exp);
};
using HalfFormat = FloatFormat<10, 5>;
using Bf16Format = FloatFormat<7, 8>;
using F32Format = FloatFormat<23, 8>;

/// The value of an encoded number (exact: every format here fits in a double).
template <class F>
inline double decode(uint32_t bits)
{
    const uint32_t e = (bits & F::kExpMask) >> F::kMant;
    const uint32_t m = bits & F::kMantMask;
    double v;
    if (e == (F::kExpMask >> F::kMant)) {
        v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
    } else if (e == 0) {
        v = std::ldexp(static_cast<double>(m), F::kEmin - F::kMant);
    } else {
        v = std::ldexp(static_cast<double>(m | (1u << F::kMant)), static_cast<int>(e) - F::kBias - F::kMant);
    }
    return (bits & F::kSign) ? -v : v;
}

/// Encodes `x` in format F with rounding `r`. Magnitudes past the largest finite number round
/// to infinity or saturate at the largest finite number, as the direction dictates (IEEE 754).
template <class F>
inline uint32_t encode(double x, Rounding r)
{
    if (std::isnan(x)) {
        return F::kExpMask | (1u << (F::kMant - 1));  // the quiet NaN
    }
    const uint32_t sign = std::signbit(x) ? F::kSign : 0;
    const double a = std::fabs(x);
    if (std::isinf(a)) {
        return sign | F::kExpMask;
    }
    // lo = the largest representable magnitude <= a. Encoded magnitudes are ordered like their
    // values, so the next one up is lo + 1 (possibly +inf, whose "value" is 2^(emax+1)).
    const double beyond = std::ldexp(1.0, F::kEmax + 1);
    uint32_t lo;
    double loVal;
    if (a >= beyond) {
        lo = F::kExpMask - 1;
        loVal = decode<F>(lo);
    } else {
        const int e = a == 0.0 ? F::kEmin : std::max(std::ilogb(a), F::kEmin);
        const double quantum = std::ldexp(1.0, e - F::kMant);
        const double n = std::floor(a / quantum);  // exact: scaling by a power of two
        loVal = n * quantum;
        // Normal: biased exponent (e + bias) and n - 2^mant; subnormal (n < 2^mant, e = emin): n.
        lo = (static_cast<uint32_t>(e + F::kBias - 1) << F::kMant) + static_cast<uint32_t>(n);
    }
    if (loVal == a) {
        return sign | lo;
    }
    const uint32_t hi = lo + 1;
    const double hiVal = hi == F::kExpMask ? beyond : decode<F>(hi);
    const bool negative = sign != 0;
    bool up = false;  // choose hi
    switch (r) {
        case Rounding::Trunc: up = false; break;
        case Rounding::Floor: up = negative; break;
        case Rounding::Ceil: up = !negative; break;
        case Rounding::Odd: up = (lo & 1u) == 0; break;
        case Rounding::NearestEven:
        case Rounding::NearestAway: {
            const double dLo = a - loVal;
            const double dHi = hiVal - a;
            up = dHi < dLo || (dHi == dLo && (r == Rounding::NearestAway || (lo & 1u)));
            break;
        }
    }
    return sign | (up ? hi : lo);
}

/// Fast paths of decode/encode for the conversions every kernel runs (half/bf16 <-> float,
/// rounding to nearest even): bit arithmetic with the same results as the general functions
/// above, including their quiet NaNs (decoding keeps the sign, encoding drops it) (rules_test checks them against each other).
inline uint32_t float_bits(float f)
{
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

inline float bits_float(uint32_t u)
{
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

constexpr uint32_t kCanonicalNanF32 = F32Format::kExpMask | (1u << (F32Format::kMant - 1));

/// The value of a bf16 bit pattern (exact).
inline float bf16_to_float(uint16_t bits)
{
    if ((bits & 0x7fffu) > 0x7f80u) {
        return bits_float((static_cast<uint32_t>(bits & 0x8000u) << 16) | kCanonicalNanF32);
    }
    return bits_float(static_cast<uint32_t>(bits) << 16);
}

/// The value of a half bit pattern (exact).
inline float half_to_float(uint16_t bits)
{
    const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
    const uint32_t e = (bits >> 10) & 0x1fu;
    const uint32_t m = bits & 0x3ffu;
    if (e == 0x1fu) {
        return bits_float(sign | (m != 0 ? kCanonicalNanF32 : 0x7f800000u));
    }
    if (e == 0) {
        const float v = static_cast<float>(m) * 5.9604644775390625e-8f;  // m * 2^-24, exact
        return sign != 0 ? -v : v;
    }
    return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

/// `f` rounded to nearest even as bf16 bits.
inline uint16_t float_to_bf16_rne(float f)
{
    const uint32_t u = float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return static_cast<uint16_t>(Bf16Format::kExpMask | (1u << (Bf16Format::kMant - 1)));
    }
    return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/// `f` rounded to nearest even as half bits.
inline uint16_t float_to_half_rne(float f)
{
    const uint32_t u = float_bits(f);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) {
        return static_cast<uint16_t>(HalfFormat::kExpMask | (1u << (HalfFormat::kMant - 1)));
    }
    if (a >= 0x477ff000u) {  // >= 65520: rounds to infinity (ties go to the even infinity)
        return static_cast<uint16_t>(sign | 0x7c00u);
    }
    if (a < 0x38800000u) {  // below 2^-14: a subnormal half, n * 2^-24 with n rounded to even
        const float scaled = bits_float(a) * 16777216.0f;  // exact: a power-of-two scale
        const float n = std::nearbyint(scaled);             // the default rounding: to nearest even
        return static_cast<uint16_t>(sign | static_cast<uint32_t>(n));
    }
    const uint32_t odd = (a >> 13) & 1u;
    return static_cast<uint16_t>(sign | ((a - 0x38000000u + 0xfffu + odd) >> 13));
}

/// Rounds to an integral value in direction `r` (exact for every input the emulation produces).
inline double round_integral(double x, Rounding r)
{
    if (!std::isfinite(x)) {
        return x;
    }
    switch (r) {
        case Rounding::Trunc: return std::trunc(x);
        case Rounding::Floor: return std::floor(x);
        case Rounding::Ceil: return std::ceil(x);
        case Rounding::NearestAway: return std::round(x);
        case Rounding::Odd:  // integral round-to-odd: any non-integer goes to the odd neighbour
        case Rounding::NearestEven: break;
    }
    const double f = std::floor(x);
    const double diff = x - f;
    const bool floorEven = std::fmod(f, 2.0) == 0.0;
    if (r == Rounding::Odd) {
        return diff == 0.0 ? x : (floorEven ? f + 1.0 : f);
    }
    if (diff > 0.5 || (diff == 0.5 && !floorEven)) {
        return f + 1.0;
    }
    return f;
}

/// `x` converted to integer type I, saturating at its range (NaN gives 0).
template <class I>
inline I saturate(double x)
{
    if (std::isnan(x)) {
        return 0;
    }
    const double lo = static_cast<double>(std::numeric_limits<I>::min());
    const double hi = static_cast<double>(std::numeric_limits<I>::max());  // may round up (int64)
    if (x <= lo) {
        return std::numeric_limits<I>::min();
    }
    if (x >= hi) {
        return std::numeric_limits<I>::max();
    }
    return static_cast<I>(x);
}

/// `v` converted to integer type I, saturating at its range.
template <class I, class S>
inline I saturate_int(S v)
{
    const int64_t w = static_cast<int64_t>(v);
    const int64_t lo = static_cast<int64_t>(std::numeric_limits<I>::min());
    const int64_t hi = static_cast<int64_t>(std::numeric_limits<I>::max());
    return static_cast<I>(std::min(std::max(w, lo), hi));
}

}  // namespace ascendc_emu

#endif
