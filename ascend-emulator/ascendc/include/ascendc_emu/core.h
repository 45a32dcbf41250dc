// Host emulation of Ascend C: the state of the emulated vector core running the current block,
// rule violations, global-memory access and the hardware event flags.
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

/// Who holds an event ID of a TPipe's pool.
enum class EventSlot : uint8_t { Free, Queue, Reserved };

/// Applies an atomic DMA store: combines `bytes` of UB data into GM in the atomic dtype.
using AtomicApply = void (*)(uint8_t* gm, const uint8_t* ub, uint64_t bytes);

struct CoreState {
    int64_t blockIdx = 0;
    int64_t blockNum = 0;
    uint8_t* ub = nullptr;              // this core's unified buffer, kUbBytes
    AscendC::TPipe* pipe = nullptr;     // the TPipe alive on this core
    uint64_t pipeEpoch = 0;             // bumped whenever a TPipe gives its buffers back
    uint32_t ubPlanned = 0;             // UB bytes the TPipe's InitBuffer calls planned so far
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
    std::string printed;                // AscendC::printf output of this block
};

/// The core running a block on this thread, nullptr outside ascendc_emu_run. Initial-exec TLS,
/// so every API call reads it with one load (8 bytes of the static TLS a dlopen'ed library may
/// take).
extern thread_local CoreState* t_running_core __attribute__((tls_model("initial-exec")));

/// Raised when an Ascend C API is called from host code (not catchable by a runner).
[[noreturn]] void outside_kernel();

/// The core running the current block (fails when no kernel is running on this thread).
inline CoreState& core()
{
    CoreState* c = t_running_core;
    if (c == nullptr) {
        outside_kernel();
    }
    return *c;
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

inline void check_event_id(AscendC::HardEvent e, int32_t id, const char* api)
{
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

/// Counts a GM<->UB DMA copy of `bytes` GM bytes.
inline void count_copy(uint64_t bytes, bool toGm)
{
    CoreState& c = core();
    ++c.dataCopies;
    (toGm ? c.gmWritten : c.gmRead) += bytes;
}

}  // namespace ascendc_emu

#endif
