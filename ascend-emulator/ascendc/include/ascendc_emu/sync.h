// Host emulation of Ascend C: synchronisation, atomics, block indices and the kernel type
// (ascendc-api.md §1.3-1.4, §7).
//
// Pipes are not modelled as asynchronous (copies and vector ops complete when issued), so
// PipeBarrier orders nothing that is not already ordered; what IS checked is the flag protocol:
// SetFlag/WaitFlag pairing, IDs, double SetFlag, flags or atomic mode left set at kernel end.
// A launch is decided as if its blocks ran one after another, so SyncAll (a barrier across
// blocks) cannot be honoured: it is reported as a rule violation instead of deadlocking.
#ifndef ASCENDC_EMU_SYNC_H
#define ASCENDC_EMU_SYNC_H

#include <cinttypes>

#include "ascendc_emu/pipe.h"

namespace ascendc_emu {

/// The HardEvent of a TQueSync<src, dst> (MAX when the pair has none on a vector core).
constexpr AscendC::HardEvent pipe_pair_event(pipe_t src, pipe_t dst)
{
    using AscendC::HardEvent;
    const struct {
        pipe_t src, dst;
        HardEvent event;
    } kPairs[] = {
        {PIPE_S, PIPE_V, HardEvent::S_V},          {PIPE_S, PIPE_MTE2, HardEvent::S_MTE2},
        {PIPE_S, PIPE_MTE3, HardEvent::S_MTE3},    {PIPE_V, PIPE_S, HardEvent::V_S},
        {PIPE_V, PIPE_MTE2, HardEvent::V_MTE2},    {PIPE_V, PIPE_MTE3, HardEvent::V_MTE3},
        {PIPE_MTE2, PIPE_S, HardEvent::MTE2_S},    {PIPE_MTE2, PIPE_V, HardEvent::MTE2_V},
        {PIPE_MTE2, PIPE_MTE3, HardEvent::MTE2_MTE3}, {PIPE_MTE3, PIPE_S, HardEvent::MTE3_S},
        {PIPE_MTE3, PIPE_V, HardEvent::MTE3_V},    {PIPE_MTE3, PIPE_MTE2, HardEvent::MTE3_MTE2},
    };
    for (const auto& p : kPairs) {
        if (p.src == src && p.dst == dst) {
            return p.event;
        }
    }
    return HardEvent::MAX;
}

/// Element-wise read-modify-write of an atomic DMA store, computed like the vector unit.
template <class A, class Op>
void atomic_combine(uint8_t* gm, const uint8_t* ub, uint64_t bytes, Op op, const char* name)
{
    if (bytes % sizeof(A) != 0) {
        fail("%s: a %" PRIu64 "-byte store is not a whole number of %s elements", name, bytes, type_name<A>());
    }
    for (uint64_t i = 0; i < bytes / sizeof(A); ++i) {
        const auto g = static_cast<std::conditional_t<std::is_integral_v<A>, int64_t, float>>(load<A>(gm, i));
        const auto u = static_cast<decltype(g)>(load<A>(ub, i));
        store<A>(gm, i, static_cast<A>(op(g, u)));
    }
}

template <class A>
constexpr bool atomic_type = one_of<A, int8_t, int16_t, half, bfloat16_t, int32_t, float>;

template <class A, int Kind>
struct AtomicMode {
    static constexpr const char* kNames[3] = {"SetAtomicAdd", "SetAtomicMax", "SetAtomicMin"};
    static void apply(uint8_t* gm, const uint8_t* ub, uint64_t bytes)
    {
        atomic_combine<A>(
            gm, ub, bytes,
            [](auto g, auto u) {
                if constexpr (Kind == 0) return g + u;
                else if constexpr (Kind == 1) return g > u ? g : u;
                else return g < u ? g : u;
            },
            kNames[Kind]);
    }
    static void enable()
    {
        CoreState& c = core();
        c.atomicName = kNames[Kind];
        c.atomicType = type_name<A>();
        c.atomicApply = &apply;
        c.atomicElemBytes = sizeof(A);
    }
};

}  // namespace ascendc_emu

namespace AscendC {

// ---- Flags between pipes of this core ----

template <HardEvent event>
void SetFlag(int32_t eventID)
{
    static_assert(ascendc_emu::is_aiv_event(event), "this HardEvent does not exist on a vector core");
    ascendc_emu::set_flag(event, eventID, "SetFlag");
}

template <HardEvent event>
void WaitFlag(int32_t eventID)
{
    static_assert(ascendc_emu::is_aiv_event(event), "this HardEvent does not exist on a vector core");
    ascendc_emu::wait_flag(event, eventID, "WaitFlag");
}

/// Orders the given pipe; every operation completes when issued here, so there is nothing to wait for.
template <pipe_t pipe>
void PipeBarrier()
{
    static_assert(pipe == PIPE_V || pipe == PIPE_MTE2 || pipe == PIPE_MTE3 || pipe == PIPE_ALL,
                  "PipeBarrier on a vector core takes PIPE_V, PIPE_MTE2, PIPE_MTE3 or PIPE_ALL");
}

/// SetFlag/WaitFlag spelled by pipe pair.
template <pipe_t src, pipe_t dst>
class TQueSync {
    static constexpr HardEvent kEvent = ascendc_emu::pipe_pair_event(src, dst);
    static_assert(kEvent != HardEvent::MAX, "no flag exists between these pipes on a vector core");

public:
    void SetFlag(TEventID eventID) { ascendc_emu::set_flag(kEvent, eventID, "TQueSync::SetFlag"); }
    void WaitFlag(TEventID eventID) { ascendc_emu::wait_flag(kEvent, eventID, "TQueSync::WaitFlag"); }
};

// ---- Atomic accumulation of UB -> GM copies ----

/// From now on UB -> GM copies add into GM, element-wise as T (sticky until SetAtomicNone).
template <typename T>
void SetAtomicAdd()
{
    static_assert(ascendc_emu::atomic_type<T>, "atomic dtypes: int8_t, int16_t, half, bfloat16_t, int32_t, float");
    ascendc_emu::AtomicMode<T, 0>::enable();
}

template <typename T>
void SetAtomicMax()
{
    static_assert(ascendc_emu::atomic_type<T>, "atomic dtypes: int8_t, int16_t, half, bfloat16_t, int32_t, float");
    ascendc_emu::AtomicMode<T, 1>::enable();
}

template <typename T>
void SetAtomicMin()
{
    static_assert(ascendc_emu::atomic_type<T>, "atomic dtypes: int8_t, int16_t, half, bfloat16_t, int32_t, float");
    ascendc_emu::AtomicMode<T, 2>::enable();
}

inline void SetAtomicNone()
{
    ascendc_emu::CoreState& c = ascendc_emu::core();
    c.atomicName = nullptr;
    c.atomicType = nullptr;
    c.atomicApply = nullptr;
}

// ---- Block indices (vector-only kernels: one vector core per block) ----

inline int64_t GetBlockIdx() { return ascendc_emu::core().blockIdx; }
inline int64_t GetBlockNum() { return ascendc_emu::core().blockNum; }
inline int64_t GetSubBlockIdx() { return 0; }
inline int64_t GetSubBlockNum() { return 1; }
inline int64_t GetTaskRatio() { return 1; }

// ---- Inter-core barrier ----

template <bool isAIVOnly = true>
void SyncAll()
{
    ascendc_emu::fail("SyncAll is not supported by the emulation (blocks run one after another, so a barrier "
                      "across blocks cannot complete)");
}

template <bool isAIVOnly = true>
void SyncAll(const GlobalTensor<int32_t>&, const LocalTensor<int32_t>&, const int32_t = 0)
{
    SyncAll<isAIVOnly>();
}

}  // namespace AscendC

namespace ascendc_emu {

/// KERNEL_TASK_TYPE_DEFAULT: only the vector-only kernel types can run on the emulated vector cores.
inline void declare_kernel_type(KernelMetaType type)
{
    if (type != KERNEL_TYPE_AIV_ONLY && type != KERNEL_TYPE_MIX_AIV_1_0) {
        fail("KERNEL_TASK_TYPE_DEFAULT(%d): only KERNEL_TYPE_AIV_ONLY and KERNEL_TYPE_MIX_AIV_1_0 (vector cores) are "
             "emulated",
             static_cast<int>(type));
    }
}

}  // namespace ascendc_emu

#define KERNEL_TASK_TYPE_DEFAULT(value) ::ascendc_emu::declare_kernel_type(value)

#endif
