// A stand-in for the Rust host of the Ascend C emulation, for the C++ tests: emulated global
// memory over plain host memory, at device addresses the host CPU cannot dereference.
#ifndef ASCENDC_EMU_FAKE_HOST_H
#define ASCENDC_EMU_FAKE_HOST_H

#include <cstddef>
#include <cstdint>
#include <string>

#include "ascendc_emu_abi.h"

namespace fake_host {

/// Allocates `bytes` of zeroed device memory; returns its device address.
uint64_t alloc(size_t bytes);

/// The host copy of device memory at `addr` (for the test to fill and inspect).
uint8_t* host(uint64_t addr);

/// The device address as the kernel parameter type.
inline uint8_t* gm(uint64_t addr) { return reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(addr)); }

/// What the last ascendc_emu_launch produced.
struct Launch {
    int32_t status = -1;
    std::string error;
    AscendcEmuStats stats = {};
    AscendcEmuBlockStats perBlock[64] = {};
};
const Launch& last_launch();

}  // namespace fake_host

#endif
