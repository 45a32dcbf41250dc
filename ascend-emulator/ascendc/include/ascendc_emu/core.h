// Host emulation of Ascend C: the state of the emulated core running the current block (a
// vector core, AIV, or with KERNEL_TYPE_AIC_ONLY a cube core, AIC), rule violations,
// global-memory access and the hardware event flags.
//
// A block runs on one host thread from start to end, so the core state is thread-local (the
// runner may run blocks of a launch on several threads, and the Rust host kernels of different
// streams on different threads).
#ifndef ASCENDC_EMU_CORE_H
#define ASCENDC_EMU_CORE_H

#include <cstdint>
#include <stdexcept>
#include <string>

#include "ascendc_emu/types.h"

namespace AscendC {
class TPipe;
}

namespace ascendc_emu {

constexpr uint32_t kUbBytes = 192 * 1024;            // unified buffer of an A2/A3 vector core
constexpr uint32_t kL1Bytes = 512 * 1024;            // L1 of a cube core (hardware-atlas-a2.md §3)
// TPipe's L1 budget: CANN keeps 128 B of L1 for KFC (TOTAL_L1_SIZE); whether the device TPipe
// enforces it is UNCERTAIN (cube-api.md §7), so the stricter budget.
constexpr uint32_t kL1Budget = kL1Bytes - 128;
constexpr uint32_t kL0aBytes = 64 * 1024;            // L0A: Mmad's left operand
constexpr uint32_t kL0bBytes = 64 * 1024;            // L0B: Mmad's right operand
constexpr uint32_t kL0cBytes = 128 * 1024;           // L0C: Mmad's result
constexpr uint32_t kFractalBytes = 512;              // one L0A/L0B fractal
constexpr uint32_t kUbBytesBelowScratch = 184 * 1024;  // Select modes 1/2 use [184 KiB, 192 KiB)
constexpr uint32_t kBlockBytes = 32;                 // DMA and vector operand granule
constexpr uint32_t kRepeatBytes = 256;               // one vector repeat
constexpr uint32_t kMaxPipeBuffers = 64;             // QBUF_MAX_LEN
constexpr int kEventIds = 8;                         // IDs per HardEvent on 2201
constexpr uint16_t kMaxBlockCount = 4095;            // DataCopy(Pad) blockCount range
constexpr uint32_t kMaxPadBlockLen = 2097151;        // DataCopyPad blockLen: 21 bits
constexpr uint8_t kPoison = 0xFF;                    // garbage in fresh UB: NaN for every float type

/// A broken hardware rule: raised inside the block, reported by ascendc_emu_run.
class RuleViolation : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// Raises a RuleViolation with a printf-style message.
[[noreturn]] void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

/// The kind of core a block runs on: decided by KERNEL_TASK_TYPE_DEFAULT (sync.h).
enum class CoreKind : uint8_t { Vector, Cube };

/// The physical local memories; a TPosition maps to one of them (cube-api.md §1.1).
enum class Phys : uint8_t { UB, L1, L0A, L0B, L0C, None };
constexpr size_t kPhysCount = 5;

/// Bytes of each physical memory a TPipe may plan.
constexpr uint32_t kPhysBudget[kPhysCount] = {kUbBytes, kL1Budget, kL0aBytes, kL0bBytes, kL0cBytes};

constexpr Phys phys_of(AscendC::TPosition p)
{
    using AscendC::TPosition;
    switch (p) {
        case TPosition::VECIN:
        case TPosition::VECOUT:
        case TPosition::VECCALC: return Phys::UB;
        case TPosition::A1:
        case TPosition::B1:
        case TPosition::C1: return Phys::L1;
        case TPosition::A2: return Phys::L0A;
        case TPosition::B2: return Phys::L0B;
        case TPosition::CO1: return Phys::L0C;
        default: return Phys::None;  // GM, C2 (BiasTable), CO2, TSCM, ...: not emulated
    }
}

inline const char* phys_name(Phys p)
{
    static const char* const kNames[] = {"UB", "L1", "L0A", "L0B", "L0C", "no local memory"};
    return kNames[static_cast<size_t>(p)];
}

/// What an Mmad left in one float of L0C: which Mmad of the core wrote it (numbered from 1; 0: none
/// since the buffer was allocated, the value is garbage), which element (row, col) of that Mmad's
/// m x n result it is, the Mmad's m rounded up to 16 (its layout: column blocks mp x 16 floats
/// apart), and whether the Mmad was below the PIPE_M barrier threshold (cube.h).
struct L0cTag {
    uint32_t mmad;
    uint16_t row;
    uint16_t col;
    uint16_t mp;
    uint16_t small;
};

/// Who holds an event ID of a TPipe's pool.
enum class EventSlot : uint8_t { Free, Queue, Reserved };

/// Applies an atomic DMA store: combines `bytes` of UB data into GM in the atomic dtype.
using AtomicApply = void (*)(uint8_t* gm, const uint8_t* ub, uint64_t bytes);

struct CoreState {
    int64_t blockIdx = 0;
    int64_t blockNum = 0;
    CoreKind kind = CoreKind::Vector;
    bool kindFixed = false;             // the kernel used the core or declared its type: the kind is final
    uint8_t* mem[kPhysCount] = {};      // this core's memories: the UB on a vector core, L1/L0A/L0B/L0C on a cube core
    L0cTag* l0cTags = nullptr;          // cube core: per float of L0C, the Mmad element it holds
    uint64_t mmadsAtBarrier = 0;        // mmadCalls at the last PipeBarrier<PIPE_M> or <PIPE_ALL>
    AscendC::TPipe* pipe = nullptr;     // the TPipe alive on this core
    uint64_t pipeEpoch = 0;             // bumped whenever a TPipe gives its buffers back
    uint32_t planned[kPhysCount] = {};  // bytes of each memory the TPipe's InitBuffer calls planned so far
    uint8_t flags[kHardEvents] = {};    // bit id: SetFlag<event>(id) not yet waited
    EventSlot events[kHardEvents][kEventIds] = {};  // the TPipe's event-ID pools
    const char* atomicName = nullptr;   // "SetAtomicAdd" etc. while an atomic mode is on
    const char* atomicType = nullptr;   // its dtype
    AtomicApply atomicApply = nullptr;
    uint32_t atomicElemBytes = 1;       // sizeof its dtype
    uint64_t gmRead = 0;
    uint64_t gmWritten = 0;
    uint64_t dataCopies = 0;
    uint64_t ubPeak = 0;
    uint64_t vecInstrs = 0;
    uint64_t vecRepeats = 0;
    uint64_t cubeCycles = 0;            // Mmad cycles at the fact sheet's peak rate
    uint64_t mmadCalls = 0;
    std::string printed;                // AscendC::printf output of this block
};

/// The core running a block on this thread, nullptr outside ascendc_emu_run. Initial-exec TLS,
/// so every API call reads it with one load (8 bytes of the static TLS a dlopen'ed library may
/// take).
extern thread_local CoreState* t_running_core __attribute__((tls_model("initial-exec")));

/// Raised when an Ascend C API is called from host code (not catchable by a runner).
[[noreturn]] void outside_kernel();

/// The core running the current block (fails when no kernel is running on this thread). Any use
/// of the core fixes its kind: KERNEL_TYPE_AIC_ONLY must come first (sync.h).
inline CoreState& core()
{
    CoreState* c = t_running_core;
    if (c == nullptr) {
        outside_kernel();
    }
    c->kindFixed = true;
    return *c;
}

/// Makes the running block a fresh cube core: L1, L0A, L0B and L0C filled with garbage, no UB.
void become_cube_core();

/// Fails unless the running block is a cube core (cube APIs and memories).
inline void require_cube(const char* api)
{
    if (core().kind != CoreKind::Cube) {
        fail("%s on a vector core: cube APIs, L1/L0 buffers and the MTE1/M/FIX pipes exist only on cube cores (AIC); "
             "a cube kernel declares KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY) as its first statement",
             api);
    }
}

/// Fails unless the running block is a vector core (vector APIs, the UB, GM<->UB copies).
inline void require_vector(const char* api)
{
    if (core().kind != CoreKind::Vector) {
        fail("%s on a cube core: an AIC has no unified buffer and no vector unit (vector APIs, UB buffers, GM<->UB "
             "copies and events of the V pipe exist only on vector cores)",
             api);
    }
}

/// Fails unless the running core can use a buffer at `pos`.
inline void require_position(AscendC::TPosition pos, const char* api)
{
    const Phys p = phys_of(pos);
    if (p == Phys::None) {
        fail("%s: TPosition::%s is not emulated (only VECIN/VECOUT/VECCALC, A1/B1/C1, A2, B2 and CO1)", api,
             position_name(pos));
    }
    if (p == Phys::UB && core().kind == CoreKind::Cube) {
        fail("%s: TPosition::%s (unified buffer) on a cube core: an AIC has no unified buffer", api,
             position_name(pos));
    }
    if (p != Phys::UB && core().kind == CoreKind::Vector) {
        fail("%s: TPosition::%s (%s) on a vector core: L1/L0 buffers exist only on cube cores; a cube kernel "
             "declares KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY) as its first statement",
             api, position_name(pos), phys_name(p));
    }
}

/// The host address of GM [addr, addr + len) via the Rust host; an address it rejects is an
/// out-of-bounds AI Core access.
uint8_t* gm_map(uint64_t addr, uint64_t len, const char* api);

/// Queues an atomic store of `bytes` UB bytes into GM at `gm` (in the core's atomic mode), applied
/// when the launch ends, in the launch's block order: a launch's result never depends on which
/// host thread ran which block first.
void defer_atomic(uint8_t* gm, const uint8_t* ub, uint64_t bytes);

/// How a block touches global memory.
enum class GmAccess : uint8_t { Read, Write, Atomic };

/// Records that the running block touches GM [addr, addr + len). When the launch ends, an access
/// that races with another block's (a plain write beside any other access, an atomic beside a
/// read: blocks run concurrently on the NPU) fails the launch.
void note_gm(uint64_t addr, uint64_t len, GmAccess kind, const char* api);

/// An event of the other core kind's pipes (V on a cube core; MTE1, M or FIX on a vector core) is
/// an error: 2201's AIC event table has no V events (they map to an invalid index), and an AIV has
/// no cube pipes.
inline void check_event_core(AscendC::HardEvent e, const char* api)
{
    if (core().kind == CoreKind::Cube ? !is_aic_event(e) : !is_aiv_event(e)) {
        fail(core().kind == CoreKind::Cube
                 ? "%s<HardEvent::%s> on a cube core: an AIC has no vector pipe V, so V events do not exist there"
                 : "%s<HardEvent::%s> on a vector core: it orders the cube pipes MTE1/M/FIX, which an AIV does not "
                   "have",
             api, event_name(e));
    }
}

inline void check_event_id(AscendC::HardEvent e, int32_t id, const char* api)
{
    check_event_core(e, api);
    if (id < 0 || id >= kEventIds) {
        fail("%s<HardEvent::%s>(%d): event ID out of range [0, %d]", api, event_name(e), id, kEventIds - 1);
    }
}

/// SetFlag on the core's flag table (used by the API and by the queues' hidden events).
inline void set_flag(AscendC::HardEvent e, int32_t id, const char* api)
{
    check_event_id(e, id, api);
    uint8_t& f = core().flags[static_cast<size_t>(e)];
    if (f & (1u << id)) {
        fail("%s: SetFlag<HardEvent::%s>(%d) while that flag is already set (no WaitFlag in between): "
             "undefined on the NPU",
             api, event_name(e), id);
    }
    f = static_cast<uint8_t>(f | (1u << id));
}

inline void wait_flag(AscendC::HardEvent e, int32_t id, const char* api)
{
    check_event_id(e, id, api);
    uint8_t& f = core().flags[static_cast<size_t>(e)];
    if (!(f & (1u << id))) {
        fail("%s: WaitFlag<HardEvent::%s>(%d) with no SetFlag pending: the pipe would wait forever on the NPU", api,
             event_name(e), id);
    }
    f = static_cast<uint8_t>(f & ~(1u << id));
}

/// Takes the lowest free ID of event `e` from the TPipe's pool for `holder`.
inline int8_t take_event(AscendC::HardEvent e, EventSlot holder, const char* api)
{
    check_event_core(e, api);
    EventSlot* pool = core().events[static_cast<size_t>(e)];
    for (int i = 0; i < kEventIds; ++i) {
        if (pool[i] == EventSlot::Free) {
            pool[i] = holder;
            return static_cast<int8_t>(i);
        }
    }
    fail("%s: all %d IDs of HardEvent::%s are taken (by EnQue'd or freed-not-reallocated queue buffers and "
         "AllocEventID); the NPU would hang or mis-synchronise: use at most 8 queue buffers per event",
         api, kEventIds, event_name(e));
}

inline void release_event(AscendC::HardEvent e, int8_t id)
{
    core().events[static_cast<size_t>(e)][id] = EventSlot::Free;
}

/// Counts a vector instruction whose widest operand spans `bytes`: one repeat per 256 bytes, at
/// least one (the device model's vector term).
inline void count_vector(uint64_t bytes)
{
    CoreState& c = core();
    ++c.vecInstrs;
    c.vecRepeats += bytes == 0 ? 1 : (bytes + kRepeatBytes - 1) / kRepeatBytes;
}

/// Counts a DMA copy between GM and a local memory (GM<->UB, GM->L1, Fixpipe L0C->GM) of `bytes` GM bytes.
inline void count_copy(uint64_t bytes, bool toGm)
{
    CoreState& c = core();
    ++c.dataCopies;
    (toGm ? c.gmWritten : c.gmRead) += bytes;
}

}  // namespace ascendc_emu

// As in CANN's CPU mode, a per-core runtime test (on the device they are compile-time constants of
// each half of the build): `if ASCEND_IS_AIC { ... }`.
#define ASCEND_IS_AIV (::ascendc_emu::core().kind == ::ascendc_emu::CoreKind::Vector)
#define ASCEND_IS_AIC (::ascendc_emu::core().kind == ::ascendc_emu::CoreKind::Cube)

#endif
