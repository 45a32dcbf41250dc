// Host emulation of Ascend C: qualifiers, scalar types, enums and parameter structs
// (ascendc-api.md §2, §3.1, §4, §5.3-5.4, §7.1).
#ifndef ASCENDC_EMU_TYPES_H
#define ASCENDC_EMU_TYPES_H

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "ascendc_emu/numeric.h"

// Address-space and function qualifiers mean nothing on the host (CANN's CPU mode erases them too).
#define __gm__
#define __ubuf__
#define __cbuf__
#define __ca__
#define __cb__
#define __cc__
#define __fbuf__
#define __global__
#define __aicore__
#define __host__
#define __sync_alias__
#define __inout_pipe__(pipe)
#define __in_pipe__(pipe)
#define __out_pipe__(pipe)

#define GM_ADDR uint8_t*

// The emulated target: Atlas A2/A3 (ASCEND_IS_AIV / ASCEND_IS_AIC follow the running core: core.h).
#define __NPU_ARCH__ 2201
#define __CCE_AICORE__ 220

// Pipes and event IDs are global enums on the device as well.
enum pipe_t {
    PIPE_S = 0,
    PIPE_V,
    PIPE_M,
    PIPE_MTE1,
    PIPE_MTE2,
    PIPE_MTE3,
    PIPE_ALL,
    PIPE_MTE4 = 7,
    PIPE_MTE5 = 8,
    PIPE_V2 = 9,
    PIPE_FIX = 10,
};

enum event_t { EVENT_ID0 = 0, EVENT_ID1, EVENT_ID2, EVENT_ID3, EVENT_ID4, EVENT_ID5, EVENT_ID6, EVENT_ID7 };

enum KernelMetaType : uint8_t {
    KERNEL_TYPE_AIV_ONLY,
    KERNEL_TYPE_AIC_ONLY,
    KERNEL_TYPE_MIX_AIV_1_0,
    KERNEL_TYPE_MIX_AIC_1_0,
    KERNEL_TYPE_MIX_AIC_1_1,
    KERNEL_TYPE_MIX_AIC_1_2,
    KERNEL_TYPE_AICORE,
    KERNEL_TYPE_VECTORCORE,
    KERNEL_TYPE_MIX_AICORE,
    KERNEL_TYPE_MIX_VECTOR_CORE,
    KERNEL_TYPE_MAX,
};

namespace ascendc_emu {
/// Tag for constructing a 16-bit float from its bit pattern.
struct Bits16 {
    uint16_t bits;
};
}  // namespace ascendc_emu

/// IEEE binary16. Converts from any arithmetic type (rounding to nearest even) and to float.
/// Arithmetic on `half` scalars happens in float through the conversion.
struct half {
    uint16_t val = 0;

    constexpr half() = default;
    constexpr explicit half(ascendc_emu::Bits16 b) : val(b.bits) {}
    template <class U, std::enable_if_t<std::is_arithmetic_v<U>, int> = 0>
    half(U v)
    {
        if constexpr (std::is_same_v<U, float>) {
            val = ascendc_emu::float_to_half_rne(v);
        } else {
            val = static_cast<uint16_t>(
                ascendc_emu::encode<ascendc_emu::HalfFormat>(static_cast<double>(v), ascendc_emu::Rounding::NearestEven));
        }
    }
    operator float() const { return ascendc_emu::half_to_float(val); }
};

/// bfloat16. As in CANN's CPU mode it converts implicitly from float only, and to float. It is
/// not an arithmetic type of the vector unit: the vector APIs reject it (see vector.h).
struct bfloat16_t {
    uint16_t val = 0;

    constexpr bfloat16_t() = default;
    constexpr explicit bfloat16_t(ascendc_emu::Bits16 b) : val(b.bits) {}
    bfloat16_t(float v) : val(ascendc_emu::float_to_bf16_rne(v)) {}
    operator float() const { return ascendc_emu::bf16_to_float(val); }
};

static_assert(sizeof(half) == 2 && std::is_trivially_copyable_v<half>, "half must be a 2-byte value type");
static_assert(sizeof(bfloat16_t) == 2 && std::is_trivially_copyable_v<bfloat16_t>, "bf16 must be a 2-byte value type");

namespace AscendC {

enum class TPosition : uint8_t {
    GM,
    A1,
    A2,
    B1,
    B2,
    C1,
    C2,
    CO1,
    CO2,
    VECIN,
    VECOUT,
    VECCALC,
    LCM = VECCALC,
    SPM,
    SHM = SPM,
    TSCM,
    C2PIPE2GM,
    C2PIPE2LOCAL,
    MAX,
};
using QuePosition = TPosition;

/// src_dst pipe pairs of SetFlag/WaitFlag.
enum class HardEvent : uint8_t {
    MTE2_MTE1,
    MTE1_MTE2,
    MTE1_M,
    M_MTE1,
    MTE2_V,
    V_MTE2,
    MTE3_V,
    V_MTE3,
    M_V,
    V_M,
    V_V,
    MTE3_MTE1,
    MTE1_MTE3,
    MTE1_V,
    MTE2_M,
    M_MTE2,
    V_MTE1,
    M_FIX,
    FIX_M,
    MTE3_MTE2,
    MTE2_MTE3,
    S_V,
    V_S,
    S_MTE2,
    MTE2_S,
    S_MTE3,
    MTE3_S,
    MTE2_FIX,
    FIX_MTE2,
    FIX_S,
    M_S,
    FIX_MTE3,
    MTE1_FIX,
    FIX_MTE1,
    FIX_FIX,
    MAX,
};

using TEventID = int8_t;

enum class RoundMode : uint8_t { CAST_NONE = 0, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD };
enum class CMPMODE : uint8_t { LT = 0, GT, EQ, LE, GE, NE };
enum class SELMODE : uint8_t { VSEL_CMPMASK_SPR = 0, VSEL_TENSOR_SCALAR_MODE, VSEL_TENSOR_TENSOR_MODE };

/// DataCopy block parameters: lengths and gaps in 32-byte blocks on both sides.
struct DataCopyParams {
    uint16_t blockCount = 1;
    uint16_t blockLen = 0;
    uint16_t srcStride = 0;
    uint16_t dstStride = 0;

    DataCopyParams() = default;
    DataCopyParams(uint16_t count, uint16_t len, uint16_t srcStrideIn, uint16_t dstStrideIn)
        : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn)
    {
    }
};

/// DataCopyPad parameters: blockLen in bytes; the GM-side stride in bytes, the UB-side one in
/// 32-byte blocks (srcStride is GM for GM->UB, UB for UB->GM).
struct DataCopyExtParams {
    uint16_t blockCount = 1;
    uint32_t blockLen = 0;
    uint32_t srcStride = 0;
    uint32_t dstStride = 0;
    uint32_t rsv = 0;  // reserved (uint32_t in the 8.5 header, uint16_t in the docs)

    DataCopyExtParams() = default;
    DataCopyExtParams(uint16_t count, uint32_t len, uint32_t srcStrideIn, uint32_t dstStrideIn, uint32_t rsvIn)
        : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn), rsv(rsvIn)
    {
    }
};

/// DataCopyPad GM->UB padding, in elements on each side of every row.
template <typename T>
struct DataCopyPadExtParams {
    bool isPad = false;
    uint8_t leftPadding = 0;
    uint8_t rightPadding = 0;
    T paddingValue = 0;

    DataCopyPadExtParams() = default;
    DataCopyPadExtParams(bool isPadIn, uint8_t left, uint8_t right, T value)
        : isPad(isPadIn), leftPadding(left), rightPadding(right), paddingValue(value)
    {
    }
};

}  // namespace AscendC

namespace ascendc_emu {

constexpr size_t kHardEvents = static_cast<size_t>(AscendC::HardEvent::MAX);

inline const char* event_name(AscendC::HardEvent e)
{
    static const char* const kNames[kHardEvents] = {
        "MTE2_MTE1", "MTE1_MTE2", "MTE1_M",    "M_MTE1",    "MTE2_V",   "V_MTE2",    "MTE3_V",
        "V_MTE3",    "M_V",       "V_M",       "V_V",       "MTE3_MTE1", "MTE1_MTE3", "MTE1_V",
        "MTE2_M",    "M_MTE2",    "V_MTE1",    "M_FIX",     "FIX_M",    "MTE3_MTE2", "MTE2_MTE3",
        "S_V",       "V_S",       "S_MTE2",    "MTE2_S",    "S_MTE3",   "MTE3_S",    "MTE2_FIX",
        "FIX_MTE2",  "FIX_S",     "M_S",       "FIX_MTE3",  "MTE1_FIX", "FIX_MTE1",  "FIX_FIX",
    };
    const size_t i = static_cast<size_t>(e);
    return i < kHardEvents ? kNames[i] : "MAX";
}

/// The pipe pairs an AIV core can synchronise with SetFlag/WaitFlag (ascendc-api.md §7.1).
constexpr bool is_aiv_event(AscendC::HardEvent e)
{
    using AscendC::HardEvent;
    switch (e) {
        case HardEvent::S_V:
        case HardEvent::S_MTE2:
        case HardEvent::S_MTE3:
        case HardEvent::V_S:
        case HardEvent::V_MTE2:
        case HardEvent::V_MTE3:
        case HardEvent::MTE2_S:
        case HardEvent::MTE2_V:
        case HardEvent::MTE2_MTE3:
        case HardEvent::MTE3_S:
        case HardEvent::MTE3_V:
        case HardEvent::MTE3_MTE2: return true;
        default: return false;
    }
}

/// The pipe pairs an AIC core can synchronise: the 24 events of 2201's HardEventAic (cube-api.md
/// §1.3); every event involving the vector pipe V maps to no event there.
constexpr bool is_aic_event(AscendC::HardEvent e)
{
    using AscendC::HardEvent;
    switch (e) {
        case HardEvent::MTE2_MTE1:
        case HardEvent::MTE1_MTE2:
        case HardEvent::MTE1_M:
        case HardEvent::M_MTE1:
        case HardEvent::MTE3_MTE1:
        case HardEvent::MTE1_MTE3:
        case HardEvent::MTE2_M:
        case HardEvent::M_MTE2:
        case HardEvent::M_FIX:
        case HardEvent::FIX_M:
        case HardEvent::MTE3_MTE2:
        case HardEvent::MTE2_MTE3:
        case HardEvent::S_MTE2:
        case HardEvent::MTE2_S:
        case HardEvent::S_MTE3:
        case HardEvent::MTE3_S:
        case HardEvent::MTE2_FIX:
        case HardEvent::FIX_MTE2:
        case HardEvent::FIX_S:
        case HardEvent::M_S:
        case HardEvent::FIX_MTE3:
        case HardEvent::MTE1_FIX:
        case HardEvent::FIX_MTE1:
        case HardEvent::FIX_FIX: return true;
        default: return false;
    }
}

/// The source and destination pipes a HardEvent orders (its name, src_dst).
struct EventPipes {
    pipe_t src;
    pipe_t dst;
};

constexpr EventPipes event_pipes(AscendC::HardEvent e)
{
    using AscendC::HardEvent;
    switch (e) {
        case HardEvent::MTE2_MTE1: return {PIPE_MTE2, PIPE_MTE1};
        case HardEvent::MTE1_MTE2: return {PIPE_MTE1, PIPE_MTE2};
        case HardEvent::MTE1_M: return {PIPE_MTE1, PIPE_M};
        case HardEvent::M_MTE1: return {PIPE_M, PIPE_MTE1};
        case HardEvent::MTE2_V: return {PIPE_MTE2, PIPE_V};
        case HardEvent::V_MTE2: return {PIPE_V, PIPE_MTE2};
        case HardEvent::MTE3_V: return {PIPE_MTE3, PIPE_V};
        case HardEvent::V_MTE3: return {PIPE_V, PIPE_MTE3};
        case HardEvent::M_V: return {PIPE_M, PIPE_V};
        case HardEvent::V_M: return {PIPE_V, PIPE_M};
        case HardEvent::V_V: return {PIPE_V, PIPE_V};
        case HardEvent::MTE3_MTE1: return {PIPE_MTE3, PIPE_MTE1};
        case HardEvent::MTE1_MTE3: return {PIPE_MTE1, PIPE_MTE3};
        case HardEvent::MTE1_V: return {PIPE_MTE1, PIPE_V};
        case HardEvent::MTE2_M: return {PIPE_MTE2, PIPE_M};
        case HardEvent::M_MTE2: return {PIPE_M, PIPE_MTE2};
        case HardEvent::V_MTE1: return {PIPE_V, PIPE_MTE1};
        case HardEvent::M_FIX: return {PIPE_M, PIPE_FIX};
        case HardEvent::FIX_M: return {PIPE_FIX, PIPE_M};
        case HardEvent::MTE3_MTE2: return {PIPE_MTE3, PIPE_MTE2};
        case HardEvent::MTE2_MTE3: return {PIPE_MTE2, PIPE_MTE3};
        case HardEvent::S_V: return {PIPE_S, PIPE_V};
        case HardEvent::V_S: return {PIPE_V, PIPE_S};
        case HardEvent::S_MTE2: return {PIPE_S, PIPE_MTE2};
        case HardEvent::MTE2_S: return {PIPE_MTE2, PIPE_S};
        case HardEvent::S_MTE3: return {PIPE_S, PIPE_MTE3};
        case HardEvent::MTE3_S: return {PIPE_MTE3, PIPE_S};
        case HardEvent::MTE2_FIX: return {PIPE_MTE2, PIPE_FIX};
        case HardEvent::FIX_MTE2: return {PIPE_FIX, PIPE_MTE2};
        case HardEvent::FIX_S: return {PIPE_FIX, PIPE_S};
        case HardEvent::M_S: return {PIPE_M, PIPE_S};
        case HardEvent::FIX_MTE3: return {PIPE_FIX, PIPE_MTE3};
        case HardEvent::MTE1_FIX: return {PIPE_MTE1, PIPE_FIX};
        case HardEvent::FIX_MTE1: return {PIPE_FIX, PIPE_MTE1};
        case HardEvent::FIX_FIX: return {PIPE_FIX, PIPE_FIX};
        default: return {PIPE_ALL, PIPE_ALL};
    }
}

/// The HardEvent between two pipes that exists on a vector or a cube core (MAX: none).
constexpr AscendC::HardEvent pipe_pair_event(pipe_t src, pipe_t dst)
{
    for (size_t i = 0; i < kHardEvents; ++i) {
        const auto e = static_cast<AscendC::HardEvent>(i);
        const EventPipes p = event_pipes(e);
        if (p.src == src && p.dst == dst && (is_aiv_event(e) || is_aic_event(e))) {
            return e;
        }
    }
    return AscendC::HardEvent::MAX;
}

/// Printable TPosition names for messages.
inline const char* position_name(AscendC::TPosition p)
{
    static const char* const kNames[] = {"GM",    "A1",     "A2",      "B1",  "B2",   "C1",        "C2",
                                         "CO1",   "CO2",    "VECIN",   "VECOUT", "VECCALC", "SPM", "TSCM",
                                         "C2PIPE2GM", "C2PIPE2LOCAL"};
    const size_t i = static_cast<size_t>(p);
    return i < sizeof kNames / sizeof kNames[0] ? kNames[i] : "MAX";
}

/// Printable dtype names for messages.
template <class T>
constexpr const char* type_name()
{
    if constexpr (std::is_same_v<T, half>) return "half";
    else if constexpr (std::is_same_v<T, bfloat16_t>) return "bfloat16_t";
    else if constexpr (std::is_same_v<T, float>) return "float";
    else if constexpr (std::is_same_v<T, double>) return "double";
    else if constexpr (std::is_same_v<T, int8_t>) return "int8_t";
    else if constexpr (std::is_same_v<T, uint8_t>) return "uint8_t";
    else if constexpr (std::is_same_v<T, int16_t>) return "int16_t";
    else if constexpr (std::is_same_v<T, uint16_t>) return "uint16_t";
    else if constexpr (std::is_same_v<T, int32_t>) return "int32_t";
    else if constexpr (std::is_same_v<T, uint32_t>) return "uint32_t";
    else if constexpr (std::is_same_v<T, int64_t>) return "int64_t";
    else if constexpr (std::is_same_v<T, uint64_t>) return "uint64_t";
    else return "?";
}

/// True if T is one of Ts (the dtype tables of the APIs are written with it).
template <class T, class... Ts>
constexpr bool one_of = (std::is_same_v<T, Ts> || ...);

/// Constrains an API template to the dtypes the hardware accepts: a call with another dtype
/// finds no matching function at compile time, as on CANN.
template <bool Ok>
using Requires = std::enable_if_t<Ok, void>;

/// The dtypes DataCopy and DataCopyPad move (ascendc-api.md §4).
template <class T>
constexpr bool copy_type = one_of<T, int8_t, uint8_t, int16_t, uint16_t, half, bfloat16_t, int32_t, uint32_t, float,
                                  int64_t, uint64_t, double>;

/// Unaligned-safe loads and stores of element i of a byte array.
template <class T>
inline T load(const uint8_t* p, uint64_t i)
{
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof(T));
    return v;
}
template <class T>
inline void store(uint8_t* p, uint64_t i, T v)
{
    std::memcpy(p + i * sizeof(T), &v, sizeof(T));
}

}  // namespace ascendc_emu

#endif
