// Host emulation of Ascend C: synchronisation, atomics, block indices and the kernel type
// (ascendc-api.md §1.3-1.4, §7; cube cores: cube-api.md §1.3-1.4, §6).
//
// Pipes are not modelled as asynchronous (copies, vector ops, LoadData, Mmad and Fixpipe complete
// when issued), so PipeBarrier orders nothing that is not already ordered; what IS checked is the
// PIPE_M barrier after small Mmads (cube.h) and the flag protocol: SetFlag/WaitFlag pairing, IDs, double SetFlag, flags or atomic mode left set at
// kernel end, and that an event or pipe exists on the running core (V on a vector core, MTE1/M/FIX
// on a cube core).
// A launch is decided as if its blocks ran one after another, so SyncAll (a barrier across
// blocks) cannot be honoured: it is reported as a rule violation instead of deadlocking.
#ifndef ASCENDC_EMU_SYNC_H
#define ASCENDC_EMU_SYNC_H

#include <cinttypes>

#include "ascendc_emu/pipe.h"

namespace ascendc_emu {

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

/// An event that exists on neither kind of A2 core does not compile; one of the other kind's
/// pipes is an error at run time (core.h, check_event_core).
template <HardEvent event>
void SetFlag(int32_t eventID)
{
    static_assert(ascendc_emu::is_aiv_event(event) || ascendc_emu::is_aic_event(event),
                  "this HardEvent exists on neither a vector nor a cube core of Atlas A2");
    ascendc_emu::set_flag(event, eventID, "SetFlag");
}

template <HardEvent event>
void WaitFlag(int32_t eventID)
{
    static_assert(ascendc_emu::is_aiv_event(event) || ascendc_emu::is_aic_event(event),
                  "this HardEvent exists on neither a vector nor a cube core of Atlas A2");
    ascendc_emu::wait_flag(event, eventID, "WaitFlag");
}

/// Orders the given pipe; every operation completes when issued here, so there is nothing to wait
/// for. The pipe must exist on the running core: V on a vector core, MTE1/M/FIX on a cube core.
/// PIPE_M and PIPE_ALL are recorded on a cube core: an Mmad accumulating onto a small Mmad's
/// result needs one in between (cube.h, kPipeMBarrierFractals).
template <pipe_t pipe>
void PipeBarrier()
{
    static_assert(pipe == PIPE_V || pipe == PIPE_MTE1 || pipe == PIPE_MTE2 || pipe == PIPE_MTE3 || pipe == PIPE_M ||
                      pipe == PIPE_FIX || pipe == PIPE_ALL,
                  "PipeBarrier takes PIPE_V, PIPE_MTE2, PIPE_MTE3 or PIPE_ALL (vector core) or PIPE_MTE1, PIPE_MTE2, "
                  "PIPE_MTE3, PIPE_M, PIPE_FIX or PIPE_ALL (cube core)");
    if constexpr (pipe == PIPE_V) {
        ascendc_emu::require_vector("PipeBarrier<PIPE_V>");
    } else if constexpr (pipe == PIPE_MTE1 || pipe == PIPE_M || pipe == PIPE_FIX) {
        ascendc_emu::require_cube("PipeBarrier<PIPE_MTE1|PIPE_M|PIPE_FIX>");
    }
    if constexpr (pipe == PIPE_M || pipe == PIPE_ALL) {
        ascendc_emu::CoreState& c = ascendc_emu::core();
        c.mmadsAtBarrier = c.mmadCalls;
    }
}

/// SetFlag/WaitFlag spelled by pipe pair.
template <pipe_t src, pipe_t dst>
class TQueSync {
    static constexpr HardEvent kEvent = ascendc_emu::pipe_pair_event(src, dst);
    static_assert(kEvent != HardEvent::MAX, "no flag exists between these pipes on an Atlas A2 core");

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

// ---- Block indices (one core per block: a vector core, or a cube core under AIC_ONLY, whose
// sub-block index is 0 as well, cube-api.md §6) ----

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

/// KERNEL_TASK_TYPE_DEFAULT decides the kind of core the block runs on: AIV_ONLY and MIX_AIV_1_0
/// (blockDim vector cores) keep the vector core every block starts as; AIC_ONLY makes it a fresh
/// cube core. On the device the macro is a compile-time marker; here the kind is decided when it
/// runs, so AIC_ONLY must be the kernel's first statement: any use of the core before it (a TPipe,
/// an API, GetBlockIdx, ...) has already run as a vector core.
inline void declare_kernel_type(KernelMetaType type)
{
    CoreState* c = t_running_core;
    if (c == nullptr) {
        outside_kernel();
    }
    switch (type) {
        case KERNEL_TYPE_AIV_ONLY:
        case KERNEL_TYPE_MIX_AIV_1_0:
            if (c->kind != CoreKind::Vector) {
                fail("KERNEL_TASK_TYPE_DEFAULT(%d) (vector cores) after KERNEL_TYPE_AIC_ONLY: one kernel has one type",
                     static_cast<int>(type));
            }
            c->kindFixed = true;
            return;
        case KERNEL_TYPE_AIC_ONLY:
            if (c->kindFixed) {
                fail("KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY) after the kernel already used the core (an API, "
                     "a TPipe, GetBlockIdx, another kernel type): it must be the kernel's first statement, since the "
                     "emulation decides there that the block runs on a cube core");
            }
            become_cube_core();
            return;
        case KERNEL_TYPE_MIX_AIC_1_0:
        case KERNEL_TYPE_MIX_AIC_1_1:
        case KERNEL_TYPE_MIX_AIC_1_2:
            fail("KERNEL_TASK_TYPE_DEFAULT(%d): MIX kernel types with cube cores are not emulated: the blocks of a "
                 "launch are decided one after another, so cores that synchronise through cross-core flags (the AIC "
                 "and AIV halves of a group) cannot meet",
                 static_cast<int>(type));
        default:
            fail("KERNEL_TASK_TYPE_DEFAULT(%d): not a kernel type of Atlas A2 (AIV_ONLY, AIC_ONLY, MIX_AIV_1_0, "
                 "MIX_AIC_1_0/1_1/1_2)",
                 static_cast<int>(type));
    }
}

}  // namespace ascendc_emu

#define KERNEL_TASK_TYPE_DEFAULT(value) ::ascendc_emu::declare_kernel_type(value)

#endif
