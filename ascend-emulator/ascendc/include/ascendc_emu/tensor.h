// Host emulation of Ascend C: GlobalTensor and LocalTensor (ascendc-api.md §3.2-3.3), and the
// checked access to their memory shared by the data-copy and vector APIs.
//
// A GlobalTensor holds an EMULATED DEVICE ADDRESS: it is never dereferenced; every access asks
// the Rust host for the host address of the exact byte range (ascendc_emu_gm), after checking
// the range against the bounds given to SetGlobalBuffer. A LocalTensor holds a byte offset into
// one of the core's local memories (the unified buffer of a vector core, L1/L0A/L0B/L0C of a
// cube core), given by the TPosition of the TQue/TBuf it was cut from.
#ifndef ASCENDC_EMU_TENSOR_H
#define ASCENDC_EMU_TENSOR_H

#include <cinttypes>
#include <cstdint>

#include "ascendc_emu/core.h"

namespace AscendC {
template <typename T>
class LocalTensor;
template <typename T>
class GlobalTensor;
}  // namespace AscendC

namespace ascendc_emu {

/// Where a LocalTensor lives.
struct LocalRef {
    uint32_t addr = 0;            // byte offset of element 0 in its physical memory
    uint32_t end = 0;             // byte end of the TQue/TBuf buffer it was cut from
    const void* owner = nullptr;  // the TQue or TBuf of that buffer; nullptr: no buffer
    int32_t buffer = -1;          // index of the buffer inside its TQue (-1 for a TBuf)
    AscendC::TPosition pos = AscendC::TPosition::VECCALC;  // the position of that TQue/TBuf

    Phys phys() const { return phys_of(pos); }
};

/// The emulator's view of the tensors' private state.
struct TensorAccess {
    template <class T>
    static const LocalRef& ref(const AscendC::LocalTensor<T>& t)
    {
        return t.ref_;
    }
    template <class T>
    static AscendC::LocalTensor<T> make(const LocalRef& r, uint32_t size)
    {
        AscendC::LocalTensor<T> t;
        t.ref_ = r;
        t.size_ = size;
        return t;
    }
    template <class T>
    static uint8_t* gm_span(const AscendC::GlobalTensor<T>& g, uint64_t offsetBytes, uint64_t len, bool elemAligned,
                            const char* api)
    {
        return g.span(offsetBytes, len, elemAligned, api);
    }
    /// The device address of element 0 of a GlobalTensor view.
    template <class T>
    static uint64_t gm_addr(const AscendC::GlobalTensor<T>& g)
    {
        return g.addr_;
    }
};

inline bool overlaps(uint32_t a, uint64_t aLen, uint32_t b, uint64_t bLen)
{
    return aLen > 0 && bLen > 0 && a < b + bLen && b < a + aLen;
}

/// Checks that `t` is a live operand in memory `where` whose start is `align`-byte aligned (from
/// the start of that memory) and which holds at least `bytes` bytes; returns the host address of
/// its start.
template <class T>
uint8_t* local_operand(const char* api, const char* role, const AscendC::LocalTensor<T>& t, uint64_t bytes, Phys where,
                       uint32_t align)
{
    const LocalRef& r = TensorAccess::ref(t);
    if (r.owner == nullptr) {
        fail("%s: %s is a LocalTensor with no buffer (default-constructed)", api, role);
    }
    if (r.phys() != where) {
        fail("%s: %s is a tensor at TPosition::%s (%s), but this operand must be in %s", api, role,
             position_name(r.pos), phys_name(r.phys()), phys_name(where));
    }
    if (r.addr % align != 0) {
        fail("%s: %s starts at %s offset %" PRIu32 ", not %" PRIu32 "-byte aligned (e.g. t[k] with k*sizeof(%s) "
             "not a multiple of %" PRIu32 ")",
             api, role, phys_name(where), r.addr, align, type_name<T>(), align);
    }
    const uint64_t have = static_cast<uint64_t>(t.GetSize()) * sizeof(T);
    if (bytes > have) {
        fail("%s: %s needs %" PRIu64 " bytes but the LocalTensor<%s> holds %" PRIu32 " elements (%" PRIu64
             " bytes)",
             api, role, bytes, type_name<T>(), t.GetSize(), have);
    }
    return core().mem[static_cast<size_t>(where)] + r.addr;
}

/// A unified-buffer operand of a vector API or a GM<->UB copy: only on a vector core.
template <class T>
uint8_t* ub_operand(const char* api, const char* role, const AscendC::LocalTensor<T>& t, uint64_t bytes,
                    uint32_t align = kBlockBytes)
{
    require_vector(api);
    return local_operand(api, role, t, bytes, Phys::UB, align);
}

/// Element-wise APIs accept dst == src (100 % overlap) but not a partial overlap.
template <class D, class S>
void check_overlap(const char* api, const char* role, const AscendC::LocalTensor<D>& dst, uint64_t dstBytes,
                   const AscendC::LocalTensor<S>& src, uint64_t srcBytes, bool allowSameStart = true)
{
    const LocalRef& d = TensorAccess::ref(dst);
    const LocalRef& s = TensorAccess::ref(src);
    if (!overlaps(d.addr, dstBytes, s.addr, srcBytes)) {
        return;
    }
    if (allowSameStart && d.addr == s.addr) {
        return;
    }
    fail("%s: dst [UB %" PRIu32 ", +%" PRIu64 ") partially overlaps %s [UB %" PRIu32 ", +%" PRIu64
         "): the result is undefined",
         api, d.addr, dstBytes, role, s.addr, srcBytes);
}

}  // namespace ascendc_emu

namespace AscendC {

/// A tensor in a local memory of the core: a (start, element count) view of a TQue/TBuf buffer.
template <typename T>
class LocalTensor {
public:
    using PrimType = T;

    LocalTensor() = default;

    /// Scalar read (PIPE_S); the index must be inside the tensor.
    T GetValue(const uint32_t index) const
    {
        return ascendc_emu::load<T>(element(index, "LocalTensor::GetValue"), 0);
    }

    /// Scalar write (PIPE_S) of `value` converted to T.
    template <typename S>
    void SetValue(const uint32_t index, const S value) const
    {
        ascendc_emu::store<T>(element(index, "LocalTensor::SetValue"), 0, static_cast<T>(value));
    }

    /// The view starting `offset` elements further; pure address arithmetic (an operand of a copy
    /// or vector API must still start 32-byte aligned, which those APIs check).
    LocalTensor operator[](const uint32_t offset) const
    {
        live("LocalTensor::operator[]");
        if (offset > size_) {
            ascendc_emu::fail("LocalTensor<%s>::operator[](%" PRIu32 ") past the end of a %" PRIu32 "-element tensor",
                              ascendc_emu::type_name<T>(), offset, size_);
        }
        LocalTensor t = *this;
        t.ref_.addr += offset * static_cast<uint32_t>(sizeof(T));
        t.size_ -= offset;
        return t;
    }

    /// The same bytes seen as U (element count rescaled).
    template <typename U>
    LocalTensor<U> ReinterpretCast() const
    {
        return ascendc_emu::TensorAccess::make<U>(ref_, static_cast<uint32_t>(size_ * sizeof(T) / sizeof(U)));
    }

    uint32_t GetSize() const { return size_; }

    /// Resizes the view; it may not grow past the buffer it was cut from.
    void SetSize(const uint32_t size)
    {
        live("LocalTensor::SetSize");
        if (ref_.addr + static_cast<uint64_t>(size) * sizeof(T) > ref_.end) {
            ascendc_emu::fail("LocalTensor<%s>::SetSize(%" PRIu32 ") exceeds its %" PRIu32 "-byte buffer",
                              ascendc_emu::type_name<T>(), size, ref_.end - ref_.addr);
        }
        size_ = size;
    }

private:
    friend struct ascendc_emu::TensorAccess;

    void live(const char* api) const
    {
        if (ref_.owner == nullptr) {
            ascendc_emu::fail("%s on a LocalTensor with no buffer (default-constructed)", api);
        }
    }

    uint8_t* element(uint32_t index, const char* api) const
    {
        live(api);
        // The scalar unit reaches the UB and GM; that it cannot address L1/L0 is UNCERTAIN
        // (cube-api.md documents no scalar access to them), so the stricter choice.
        if (ref_.phys() != ascendc_emu::Phys::UB) {
            ascendc_emu::fail("%s on a tensor at TPosition::%s (%s): the scalar unit does not address L1/L0 buffers",
                              api, ascendc_emu::position_name(ref_.pos), ascendc_emu::phys_name(ref_.phys()));
        }
        if (index >= size_) {
            ascendc_emu::fail("%s(%" PRIu32 ") out of range of a %" PRIu32 "-element LocalTensor<%s>", api, index, size_,
                              ascendc_emu::type_name<T>());
        }
        return ascendc_emu::core().mem[static_cast<size_t>(ascendc_emu::Phys::UB)] + ref_.addr +
               static_cast<uint64_t>(index) * sizeof(T);
    }

    ascendc_emu::LocalRef ref_;
    uint32_t size_ = 0;
};

/// A tensor in global memory. Views made by operator[] keep the bounds of SetGlobalBuffer.
template <typename T>
class GlobalTensor {
public:
    using PrimType = T;

    GlobalTensor() = default;

    /// `buffer` is a device address; `bufferSize` elements of it belong to this tensor.
    void SetGlobalBuffer(__gm__ T* buffer, uint64_t bufferSize)
    {
        addr_ = base_ = reinterpret_cast<uintptr_t>(buffer);
        limit_ = base_ + bufferSize * sizeof(T);
        bounded_ = true;
        set_ = true;
    }

    /// Without a size only the device allocation bounds the accesses; GetSize() returns 0.
    void SetGlobalBuffer(__gm__ T* buffer)
    {
        addr_ = base_ = reinterpret_cast<uintptr_t>(buffer);
        limit_ = 0;
        bounded_ = false;
        set_ = true;
    }

    /// Scalar GM read (through the DCache on the device; not modelled, see README).
    T GetValue(const uint64_t offset) const
    {
        const char* api = "GlobalTensor::GetValue";
        const uint8_t* p = span(offset * sizeof(T), sizeof(T), true, api);
        ascendc_emu::note_gm(addr_ + offset * sizeof(T), sizeof(T), ascendc_emu::GmAccess::Read, api);
        ascendc_emu::core().gmRead += sizeof(T);
        return ascendc_emu::load<T>(p, 0);
    }

    void SetValue(const uint64_t offset, T value)
    {
        const char* api = "GlobalTensor::SetValue";
        uint8_t* p = span(offset * sizeof(T), sizeof(T), true, api);
        ascendc_emu::note_gm(addr_ + offset * sizeof(T), sizeof(T), ascendc_emu::GmAccess::Write, api);
        ascendc_emu::core().gmWritten += sizeof(T);
        ascendc_emu::store<T>(p, 0, value);
    }

    /// Elements from this view's start to the end of the SetGlobalBuffer range (0 if unsized).
    uint64_t GetSize() const { return bounded_ && addr_ < limit_ ? (limit_ - addr_) / sizeof(T) : 0; }

    GlobalTensor operator[](const uint64_t offset) const
    {
        GlobalTensor g = *this;
        g.addr_ += offset * sizeof(T);
        return g;
    }

    /// The device address (never dereference it on the host).
    const T* GetPhyAddr() const { return reinterpret_cast<const T*>(addr_); }
    T* GetPhyAddr(const uint64_t offset) const { return reinterpret_cast<T*>(addr_ + offset * sizeof(T)); }

private:
    friend struct ascendc_emu::TensorAccess;

    /// Checks [addr_ + offsetBytes, +len) against SetGlobalBuffer's bounds (and, if asked, the
    /// element alignment DMA needs), then maps it through the host. len 0 maps nothing.
    uint8_t* span(uint64_t offsetBytes, uint64_t len, bool elemAligned, const char* api) const
    {
        if (!set_) {
            ascendc_emu::fail("%s: GlobalTensor<%s> used before SetGlobalBuffer", api, ascendc_emu::type_name<T>());
        }
        const uint64_t at = addr_ + offsetBytes;
        if (elemAligned && at % sizeof(T) != 0) {
            ascendc_emu::fail("%s: GM address 0x%" PRIx64 " is not aligned to sizeof(%s) = %zu", api, at,
                              ascendc_emu::type_name<T>(), sizeof(T));
        }
        if (bounded_ && (at < base_ || at > limit_ || len > limit_ - at)) {
            const int64_t first = static_cast<int64_t>(at - base_) / static_cast<int64_t>(sizeof(T));
            ascendc_emu::fail("%s: GM bytes [0x%" PRIx64 ", +%" PRIu64 ") (elements from %" PRId64
                              ") are outside the GlobalTensor<%s> set by SetGlobalBuffer (%" PRIu64 " elements)",
                              api, at, len, first, ascendc_emu::type_name<T>(), (limit_ - base_) / sizeof(T));
        }
        return len == 0 ? nullptr : ascendc_emu::gm_map(at, len, api);
    }

    uint64_t addr_ = 0;   // device address of element 0 of this view
    uint64_t base_ = 0;   // SetGlobalBuffer's buffer
    uint64_t limit_ = 0;  // its end when sized
    bool bounded_ = false;
    bool set_ = false;
};

}  // namespace AscendC

#endif
