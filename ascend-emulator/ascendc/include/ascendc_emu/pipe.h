// Host emulation of Ascend C: TPipe, TQue/TQueBind and TBuf (ascendc-api.md §3.4-3.6, §7.3;
// cube positions: cube-api.md §1).
//
// TPipe bump-allocates 32-byte-rounded buffers in each physical memory of the core, with its own
// bump pointer and capacity per memory: the unified buffer of a vector core, or L1 (A1/B1/C1), L0A
// (A2), L0B (B2) and L0C (CO1) of a cube core. The queues follow the
// buffer protocol of the device (Alloc -> EnQue -> DeQue -> Free) and its hidden events: EnQue
// sets and DeQue waits the queue's enqueue event; FreeTensor sets the free event, which the next
// AllocTensor of that buffer waits. Those events take IDs from the TPipe's per-HardEvent pool of 8
// and use the same flag table as SetFlag/WaitFlag, so an exhausted pool or a hand-written flag
// that collides with a queue's is caught as on hardware.
#ifndef ASCENDC_EMU_PIPE_H
#define ASCENDC_EMU_PIPE_H

#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <iterator>
#include <type_traits>
#include <vector>

#include "ascendc_emu/tensor.h"

namespace ascendc_emu {

/// The hidden events of a queue between two logical positions (MAX: none, e.g. VECCALC).
struct QueueEvents {
    AscendC::HardEvent enque;
    AscendC::HardEvent free;
};

/// The hidden events of TQueBind<Src, Dst> (cube-api.md §1.2 for the cube edges).
template <AscendC::TPosition Src, AscendC::TPosition Dst>
constexpr QueueEvents queue_events()
{
    using AscendC::HardEvent;
    using AscendC::TPosition;
    if constexpr (Src == TPosition::GM && Dst == TPosition::VECIN) {
        return {HardEvent::MTE2_V, HardEvent::V_MTE2};
    } else if constexpr (Src == TPosition::VECOUT && Dst == TPosition::GM) {
        return {HardEvent::V_MTE3, HardEvent::MTE3_V};
    } else if constexpr (Src == TPosition::VECIN && Dst == TPosition::VECOUT) {
        return {HardEvent::MTE2_MTE3, HardEvent::MTE3_MTE2};
    } else if constexpr (Src == TPosition::GM &&
                         (Dst == TPosition::A1 || Dst == TPosition::B1 || Dst == TPosition::C1)) {
        return {HardEvent::MTE2_MTE1, HardEvent::MTE1_MTE2};  // GM -> L1 (MTE2), read by MTE1
    } else if constexpr ((Src == TPosition::A1 && Dst == TPosition::A2) ||
                         (Src == TPosition::B1 && Dst == TPosition::B2)) {
        return {HardEvent::MTE1_M, HardEvent::M_MTE1};  // L1 -> L0A/L0B (MTE1), read by the cube (M)
    } else if constexpr (Src == TPosition::CO1 && Dst == TPosition::CO2) {
        return {HardEvent::M_FIX, HardEvent::FIX_M};  // L0C written by the cube (M), drained by Fixpipe (FIX)
    } else {
        static_assert(Src == TPosition::VECCALC && Dst == TPosition::VECCALC,
                      "the emulation models the queues TQue<VECIN|VECOUT|VECCALC>, TQueBind<VECIN, VECOUT> and, "
                      "on cube cores, TQue<A1|B1|C1|A2|B2|CO1>");
        return {HardEvent::MAX, HardEvent::MAX};
    }
}

/// Where the buffers of TQueBind<Src, Dst> live: the side that is not GM (or CO2, GM on 2201),
/// else the destination.
constexpr AscendC::TPosition queue_home(AscendC::TPosition src, AscendC::TPosition dst)
{
    using AscendC::TPosition;
    if (src == TPosition::GM) {
        return dst;
    }
    return dst == TPosition::GM || dst == TPosition::CO2 ? src : dst;
}

/// Something a TPipe gives a piece of a local memory to; it is valid while that TPipe plan lasts.
class PipeClient {
protected:
    void check_live(const char* api) const
    {
        if (!initialised_) {
            fail("%s: not initialised with TPipe::InitBuffer", api);
        }
        if (core().pipe == nullptr || epoch_ != core().pipeEpoch) {
            fail("%s: its TPipe was destroyed or Reset since InitBuffer", api);
        }
    }
    void attach(uint32_t addr, uint32_t len)
    {
        addr_ = addr;
        len_ = len;
        epoch_ = core().pipeEpoch;
        initialised_ = true;
    }

    uint32_t addr_ = 0;  // offset of the first buffer in its memory
    uint32_t len_ = 0;   // bytes per buffer (rounded up to 32)

private:
    uint64_t epoch_ = 0;
    bool initialised_ = false;
};

/// The position-independent part of TQueBind.
class QueueBase : public PipeClient {
public:
    QueueBase(const QueueBase&) = delete;
    QueueBase& operator=(const QueueBase&) = delete;

protected:
    QueueBase(int32_t depth, QueueEvents events, AscendC::TPosition home)
        : depth_(depth), events_(events), home_(home)
    {
    }

    LocalRef alloc()
    {
        const char* api = "TQue::AllocTensor";
        check_live(api);
        const size_t n = bufs_.size();
        for (size_t k = 0; k < n; ++k) {
            const size_t i = (cursor_ + k) % n;
            Buffer& b = bufs_[i];
            if (b.state != State::Free) {
                continue;
            }
            if (b.freeEvent >= 0) {  // wait until the consumer of its last use is done
                wait_flag(events_.free, b.freeEvent, api);
                release_event(events_.free, b.freeEvent);
                b.freeEvent = -1;
            }
            b.state = State::Allocated;
            cursor_ = (i + 1) % n;
            CoreState& c = core();
            const Phys p = phys_of(home_);
            std::memset(c.mem[static_cast<size_t>(p)] + b.addr, kPoison, len_);  // a fresh buffer holds garbage
            if (p == Phys::L0C) {
                std::memset(c.l0cTags + b.addr / sizeof(float), 0, len_ / sizeof(float) * sizeof(L0cTag));  // no Mmad wrote it
            }
            return ref(i);
        }
        fail("%s: all %zu buffers of the queue are in use (no FreeTensor): the NPU would hang", api, n);
    }

    void enque(const LocalRef& r)
    {
        const char* api = "TQue::EnQue";
        Buffer& b = owned(r, api);
        if (b.state == State::Free) {
            fail("%s of a tensor that was already freed", api);
        }
        if (b.state == State::Enqueued) {
            fail("%s of a tensor that is already in the queue", api);
        }
        if (static_cast<int32_t>(fifo_.size()) >= depth_) {
            fail("%s on a full queue (depth %d, %zu tensors waiting for DeQue)", api, depth_, fifo_.size());
        }
        if (events_.enque != AscendC::HardEvent::MAX) {
            b.enqueEvent = take_event(events_.enque, EventSlot::Queue, api);
            set_flag(events_.enque, b.enqueEvent, api);
        }
        b.state = State::Enqueued;
        fifo_.push_back(r.buffer);
    }

    LocalRef deque()
    {
        const char* api = "TQue::DeQue";
        check_live(api);
        if (fifo_.empty()) {
            fail("%s on an empty queue (no tensor was EnQue'd)", api);
        }
        const int32_t i = fifo_.front();
        fifo_.erase(fifo_.begin());
        Buffer& b = bufs_[static_cast<size_t>(i)];
        if (b.enqueEvent >= 0) {
            wait_flag(events_.enque, b.enqueEvent, api);
            release_event(events_.enque, b.enqueEvent);
            b.enqueEvent = -1;
        }
        b.state = State::Dequeued;
        return ref(static_cast<size_t>(i));
    }

    void free_buffer(const LocalRef& r)
    {
        const char* api = "TQue::FreeTensor";
        Buffer& b = owned(r, api);
        if (b.state == State::Free) {
            fail("%s: double free of a queue buffer", api);
        }
        if (b.state == State::Enqueued) {
            fail("%s of a tensor still in the queue (DeQue it first)", api);
        }
        if (events_.free != AscendC::HardEvent::MAX) {
            b.freeEvent = take_event(events_.free, EventSlot::Queue, api);
            set_flag(events_.free, b.freeEvent, api);
        }
        b.state = State::Free;
    }

    uint32_t buffer_bytes() const { return len_; }
    int32_t queued() const { return static_cast<int32_t>(fifo_.size()); }
    int32_t capacity() const { return depth_; }

    bool has_idle_buffer() const
    {
        for (const Buffer& b : bufs_) {
            if (b.state == State::Free) {
                return true;
            }
        }
        return false;
    }

    /// Waits for and releases the free events the queue's buffers hold.
    void free_all_events()
    {
        const char* api = "TQue::FreeAllEvent";
        check_live(api);
        for (Buffer& b : bufs_) {
            if (b.freeEvent >= 0) {
                wait_flag(events_.free, b.freeEvent, api);
                release_event(events_.free, b.freeEvent);
                b.freeEvent = -1;
            }
        }
    }

private:
    friend class AscendC::TPipe;

    enum class State : uint8_t { Free, Allocated, Enqueued, Dequeued };
    struct Buffer {
        uint32_t addr;
        State state;
        int8_t enqueEvent;  // ID held between EnQue and DeQue
        int8_t freeEvent;   // ID held between FreeTensor and the next AllocTensor
    };

    void init(uint32_t addr, uint8_t num, uint32_t len)
    {
        attach(addr, len);
        bufs_.clear();
        for (uint32_t i = 0; i < num; ++i) {
            bufs_.push_back(Buffer{addr + i * len, State::Free, -1, -1});
        }
        fifo_.clear();
        cursor_ = 0;
    }

    LocalRef ref(size_t i) const
    {
        const uint32_t a = bufs_[i].addr;
        return LocalRef{a, a + len_, this, static_cast<int32_t>(i), home_};
    }

    Buffer& owned(const LocalRef& r, const char* api)
    {
        check_live(api);
        if (r.owner == nullptr) {
            fail("%s of a LocalTensor with no buffer", api);
        }
        if (r.owner != this || r.buffer < 0 || static_cast<size_t>(r.buffer) >= bufs_.size()) {
            fail("%s of a tensor that belongs to another queue or TBuf", api);
        }
        return bufs_[static_cast<size_t>(r.buffer)];
    }

    int32_t depth_;
    QueueEvents events_;
    AscendC::TPosition home_;  // where its buffers live
    std::vector<Buffer> bufs_;
    std::vector<int32_t> fifo_;  // buffers EnQue'd and not yet DeQue'd, oldest first
    size_t cursor_ = 0;          // AllocTensor hands buffers out round-robin
};

}  // namespace ascendc_emu

namespace AscendC {

/// Two queue positions bound by one queue (e.g. VECIN -> VECOUT copy-through).
template <TPosition src, TPosition dst, int32_t depth, auto mask = 0>
class TQueBind : public ascendc_emu::QueueBase {
    static_assert(depth >= 1, "the emulation does not provide depth-0 (in-place) queues");

public:
    TQueBind() : QueueBase(depth, ascendc_emu::queue_events<src, dst>(), ascendc_emu::queue_home(src, dst)) {}

    /// A free buffer of the InitBuffer length; its contents are garbage.
    template <typename T>
    LocalTensor<T> AllocTensor()
    {
        return ascendc_emu::TensorAccess::make<T>(alloc(), static_cast<uint32_t>(buffer_bytes() / sizeof(T)));
    }

    template <typename T>
    bool EnQue(const LocalTensor<T>& tensor)
    {
        enque(ascendc_emu::TensorAccess::ref(tensor));
        return true;
    }

    template <typename T>
    LocalTensor<T> DeQue()
    {
        return ascendc_emu::TensorAccess::make<T>(deque(), static_cast<uint32_t>(buffer_bytes() / sizeof(T)));
    }

    template <typename T>
    void FreeTensor(LocalTensor<T>& tensor)
    {
        free_buffer(ascendc_emu::TensorAccess::ref(tensor));
    }

    bool VacantInQue() const { return queued() < capacity(); }
    bool HasTensorInQue() const { return queued() > 0; }
    int32_t GetTensorCountInQue() const { return queued(); }
    bool HasIdleBuffer() const { return has_idle_buffer(); }
    void FreeAllEvent() { free_all_events(); }
};

namespace detail {
/// The (source, destination) positions of TQue<pos> (cube-api.md §1.2: A1 is (GM, A1), A2 is
/// (A1, A2), CO1 is (CO1, CO2), ...).
constexpr TPosition queue_src(TPosition pos)
{
    switch (pos) {
        case TPosition::VECIN:
        case TPosition::A1:
        case TPosition::B1:
        case TPosition::C1: return TPosition::GM;
        case TPosition::A2: return TPosition::A1;
        case TPosition::B2: return TPosition::B1;
        case TPosition::C2: return TPosition::C1;
        default: return pos;
    }
}
constexpr TPosition queue_dst(TPosition pos)
{
    switch (pos) {
        case TPosition::VECOUT:
        case TPosition::CO2: return TPosition::GM;
        case TPosition::CO1: return TPosition::CO2;
        default: return pos;
    }
}
}  // namespace detail

/// A queue at one position: VECIN is filled from GM, VECOUT drained to GM, VECCALC stays in UB;
/// on a cube core A1/B1/C1 are filled from GM, A2/B2 from L1, and CO1 is drained by Fixpipe.
template <TPosition pos, int32_t depth, auto mask = 0>
class TQue : public TQueBind<detail::queue_src(pos), detail::queue_dst(pos), depth, mask> {};

/// A plain buffer: no queue protocol and no automatic synchronisation (production cube kernels use
/// TBufs at A1/A2/B2/CO1 with hand-written flags, cube-api.md §1.2).
template <TPosition pos = TPosition::LCM>
class TBuf : public ascendc_emu::PipeClient {
    static_assert(ascendc_emu::phys_of(pos) != ascendc_emu::Phys::None,
                  "the emulation models TBufs at VECIN/VECOUT/VECCALC (UB) and A1/B1/C1, A2, B2, CO1 (cube core)");

public:
    TBuf() = default;
    TBuf(const TBuf&) = delete;
    TBuf& operator=(const TBuf&) = delete;

    /// The whole buffer (the same address every time).
    template <typename T>
    LocalTensor<T> Get()
    {
        check_live("TBuf::Get");
        return view<T>(0, static_cast<uint32_t>(len_ / sizeof(T)));
    }

    /// The first `len` elements.
    template <typename T>
    LocalTensor<T> Get(uint32_t len)
    {
        check_live("TBuf::Get");
        if (static_cast<uint64_t>(len) * sizeof(T) > len_) {
            ascendc_emu::fail("TBuf::Get<%s>(%" PRIu32 "): %zu bytes exceed the %" PRIu32 "-byte buffer",
                              ascendc_emu::type_name<T>(), len, len * sizeof(T), len_);
        }
        return view<T>(0, len);
    }

    /// `size` elements starting `bufOffset` bytes (32-byte aligned) into the buffer.
    template <typename T>
    LocalTensor<T> GetWithOffset(uint32_t size, uint32_t bufOffset)
    {
        check_live("TBuf::GetWithOffset");
        if (bufOffset % ascendc_emu::kBlockBytes != 0) {
            ascendc_emu::fail("TBuf::GetWithOffset: bufOffset %" PRIu32 " is not a multiple of 32 bytes", bufOffset);
        }
        if (bufOffset + static_cast<uint64_t>(size) * sizeof(T) > len_) {
            ascendc_emu::fail("TBuf::GetWithOffset<%s>(%" PRIu32 ", %" PRIu32 ") exceeds the %" PRIu32 "-byte buffer",
                              ascendc_emu::type_name<T>(), size, bufOffset, len_);
        }
        return view<T>(bufOffset, size);
    }

private:
    friend class TPipe;

    template <typename T>
    LocalTensor<T> view(uint32_t offset, uint32_t size) const
    {
        return ascendc_emu::TensorAccess::make<T>(ascendc_emu::LocalRef{addr_ + offset, addr_ + len_, this, -1, pos},
                                                  size);
    }
};

/// The UB planner of a kernel. Exactly one may be alive on a core.
class TPipe {
public:
    TPipe()
    {
        ascendc_emu::CoreState& c = ascendc_emu::core();
        if (c.pipe != nullptr) {
            ascendc_emu::fail("a second TPipe was constructed while one is alive (hangs on the NPU)");
        }
        c.pipe = this;
    }
    ~TPipe()
    {
        if (alive_) {
            Destroy();
        }
    }
    TPipe(const TPipe&) = delete;
    TPipe& operator=(const TPipe&) = delete;

    /// `num` buffers of `len` bytes (rounded up to 32) for a TQue/TQueBind, in the memory of its position.
    template <class Q>
    bool InitBuffer(Q& que, uint8_t num, uint32_t len)
    {
        static_assert(std::is_base_of_v<ascendc_emu::QueueBase, Q>, "InitBuffer(que, num, len) takes a TQue");
        ascendc_emu::QueueBase& q = que;
        const uint32_t rounded = round_up(len);
        const uint32_t addr = reserve(q.home_, static_cast<uint64_t>(num) * rounded, num, "TPipe::InitBuffer(TQue)");
        q.init(addr, num, rounded);
        return true;
    }

    /// One buffer of `len` bytes (rounded up to 32) for a TBuf, in the memory of its position.
    template <TPosition pos>
    bool InitBuffer(TBuf<pos>& buf, uint32_t len)
    {
        const uint32_t rounded = round_up(len);
        buf.attach(reserve(pos, rounded, 1, "TPipe::InitBuffer(TBuf)"), rounded);
        return true;
    }

    /// Reserves an ID of `evt` until ReleaseEventID.
    template <HardEvent evt>
    TEventID AllocEventID()
    {
        live("TPipe::AllocEventID");
        return ascendc_emu::take_event(evt, ascendc_emu::EventSlot::Reserved, "TPipe::AllocEventID");
    }

    template <HardEvent evt>
    void ReleaseEventID(TEventID id)
    {
        live("TPipe::ReleaseEventID");
        ascendc_emu::check_event_id(evt, id, "TPipe::ReleaseEventID");
        ascendc_emu::EventSlot& s = ascendc_emu::core().events[static_cast<size_t>(evt)][id];
        if (s != ascendc_emu::EventSlot::Reserved) {
            ascendc_emu::fail("TPipe::ReleaseEventID<HardEvent::%s>(%d): that ID was not reserved by AllocEventID",
                              ascendc_emu::event_name(evt), id);
        }
        s = ascendc_emu::EventSlot::Free;
    }

    /// The lowest free ID of `evt`, not reserved (for an immediate SetFlag/WaitFlag pair).
    template <HardEvent evt>
    TEventID FetchEventID()
    {
        return FetchEventID(evt);
    }

    TEventID FetchEventID(HardEvent evt)
    {
        live("TPipe::FetchEventID");
        // "Taking" for holder Free only finds the lowest free ID: nothing is reserved.
        return ascendc_emu::take_event(evt, ascendc_emu::EventSlot::Free, "TPipe::FetchEventID");
    }

    /// Gives every buffer and event back; InitBuffer may plan the UB again.
    void Reset()
    {
        live("TPipe::Reset");
        release();
    }

    /// Gives everything back and ends this TPipe (another one may then be constructed).
    void Destroy()
    {
        if (!alive_) {
            return;
        }
        release();
        alive_ = false;
        ascendc_emu::core().pipe = nullptr;
    }

private:
    static uint32_t round_up(uint32_t len)
    {
        return static_cast<uint32_t>((static_cast<uint64_t>(len) + ascendc_emu::kBlockBytes - 1) /
                                     ascendc_emu::kBlockBytes * ascendc_emu::kBlockBytes);
    }

    void live(const char* api) const
    {
        if (!alive_) {
            ascendc_emu::fail("%s on a destroyed TPipe", api);
        }
    }

    /// Bump-allocates `bytes` for `buffers` buffers in the memory of `pos`, enforcing that the
    /// core has it, its size and the buffer count.
    uint32_t reserve(TPosition pos, uint64_t bytes, uint32_t buffers, const char* api)
    {
        live(api);
        ascendc_emu::require_position(pos, api);
        ascendc_emu::CoreState& c = ascendc_emu::core();
        const ascendc_emu::Phys p = ascendc_emu::phys_of(pos);
        uint32_t& planned = c.planned[static_cast<size_t>(p)];
        const uint32_t budget = ascendc_emu::kPhysBudget[static_cast<size_t>(p)];
        if (planned + bytes > budget) {
            ascendc_emu::fail("%s: %s overflow at TPosition::%s: %" PRIu64 " more bytes on top of %" PRIu32
                              " makes %" PRIu64 " > %" PRIu32 " bytes%s",
                              api, p == ascendc_emu::Phys::UB ? "unified buffer" : ascendc_emu::phys_name(p),
                              ascendc_emu::position_name(pos), bytes, planned, planned + bytes, budget,
                              p == ascendc_emu::Phys::L1 ? " (512 KiB less the 128 B CANN reserves)" : "");
        }
        if (buffers_ + buffers > ascendc_emu::kMaxPipeBuffers) {
            ascendc_emu::fail("%s: more than %" PRIu32 " buffers in one TPipe", api, ascendc_emu::kMaxPipeBuffers);
        }
        const uint32_t addr = planned;
        planned += static_cast<uint32_t>(bytes);
        buffers_ += buffers;
        if (p == ascendc_emu::Phys::UB && planned > c.ubPeak) {
            c.ubPeak = planned;
        }
        return addr;
    }

    /// Frees the plan: the framework waits for the queues' outstanding events, so their flags are
    /// cleared; IDs reserved with AllocEventID return to the pool.
    void release()
    {
        ascendc_emu::CoreState& c = ascendc_emu::core();
        for (size_t e = 0; e < ascendc_emu::kHardEvents; ++e) {
            for (int id = 0; id < ascendc_emu::kEventIds; ++id) {
                if (c.events[e][id] == ascendc_emu::EventSlot::Queue) {
                    c.flags[e] = static_cast<uint8_t>(c.flags[e] & ~(1u << id));
                }
                c.events[e][id] = ascendc_emu::EventSlot::Free;
            }
        }
        ++c.pipeEpoch;
        std::fill(std::begin(c.planned), std::end(c.planned), 0u);
        buffers_ = 0;
    }

    uint32_t buffers_ = 0;  // buffers planned so far (the bytes per memory are CoreState::planned)
    bool alive_ = true;
};

/// The TPipe alive on this core.
inline TPipe* GetTPipePtr()
{
    TPipe* p = ascendc_emu::core().pipe;
    if (p == nullptr) {
        ascendc_emu::fail("GetTPipePtr() with no TPipe alive");
    }
    return p;
}

}  // namespace AscendC

#endif
