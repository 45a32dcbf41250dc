// Helpers every kernel uses: copies between global memory and the unified buffer of lengths
// that need not be whole 32-byte blocks, explicit pipe synchronisation for TBuf storage (which
// gets no queue events), and the sizes the vector API asks for.
//
// Names. The real kernel_operator.h puts many names in scope that a kernel's own can collide with
// (the emulation declares them too, in ascendc_emu/real_names.h): high-level API functions such
// as AscendC::LayerNorm, unscoped enumerators such as AscendC::MAX, and tiling structs such as
// LayerNormTiling exported to the global namespace. So every kernel keeps its types and helpers
// in namespace burn_ascend, with `using namespace AscendC;` inside it (never at file scope in a
// shared header), and its classes end in `Kernel`. Only the entry points and their by-value
// tiling structs stay global: the structs are part of the launch ABI, and CANN's stub generator
// copies their definition textually into the generated host stub (ascendc-api.md §1.2), where a
// namespace-qualified type might not survive. They take the prefix `Burn` (`Burn<Name>Tiling`)
// so no name of the real headers can clash with them; #[repr(C)] structs in src/tiling/ mirror
// their layout.
#pragma once

#include "kernel_operator.h"

namespace burn_ascend {

using namespace AscendC;

// Bytes rounded up to a whole 32-byte block (the UB allocation granule).
__aicore__ inline uint32_t Align32(uint32_t bytes) { return (bytes + 31) / 32 * 32; }

// ReduceSum's shared buffer: one partial per 256-byte repeat, rounded up to a 32-byte block.
__aicore__ inline uint32_t ReduceTmpElems(uint32_t count)
{
    uint32_t repeats = (count + 63) / 64;
    return (repeats + 7) / 8 * 8;
}

// Copies n elements from GM into UB; a length that is not whole 32-byte blocks goes through
// DataCopyPad, so nothing past the n elements is read.
template <typename U>
__aicore__ inline void Load(const LocalTensor<U>& dst, const GlobalTensor<U>& src, uint32_t n)
{
    if ((n * sizeof(U)) % 32 == 0) {
        DataCopy(dst, src, n);
    } else {
        DataCopyExtParams row{1, static_cast<uint32_t>(n * sizeof(U)), 0, 0, 0};
        DataCopyPadExtParams<U> noPad{false, 0, 0, 0};
        DataCopyPad(dst, src, row, noPad);
    }
}

// Copies n elements from UB to GM; nothing past the n elements is written.
template <typename U>
__aicore__ inline void Store(const GlobalTensor<U>& dst, const LocalTensor<U>& src, uint32_t n)
{
    if ((n * sizeof(U)) % 32 == 0) {
        DataCopy(dst, src, n);
    } else {
        DataCopyExtParams row{1, static_cast<uint32_t>(n * sizeof(U)), 0, 0, 0};
        DataCopyPad(dst, src, row);
    }
}

// Device-side checks, as device-side asserts do: when `ok` is false the kernel prints what was
// wrong (AscendC::printf: the runtime shows it after the kernel; -DASCENDC_DUMP=0 compiles the
// text out) and stops the core (AscendC::Trap), so the launch fails with an AI Core error
// instead of computing on bad input. The checks that always run test values the kernel reads
// anyway, on the scalar unit; the costlier ones run only when the tiling asks (the host's
// BURN_ASCEND_VALIDATE switch). Messages start with the op's name and name the bad value.
template <typename... Args>
__aicore__ inline void Require(bool ok, __gm__ const char* fmt, Args... args)
{
    if (!ok) {
        AscendC::printf(fmt, args...);
        AscendC::Trap();
    }
}

// Makes the consumer pipe of event E wait for its producer (TBuf storage has no queue to do it).
template <HardEvent E>
__aicore__ inline void Sync()
{
    event_t e = static_cast<event_t>(GetTPipePtr()->FetchEventID(E));
    SetFlag<E>(e);
    WaitFlag<E>(e);
}

}  // namespace burn_ascend
