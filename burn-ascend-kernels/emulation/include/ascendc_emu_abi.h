// The C ABI between the host emulation of Ascend C (C++, this directory) and its Rust host
// (burn-ascend-kernels/src/emulation.rs). Kernel sources never include this file.
#ifndef ASCENDC_EMU_ABI_H
#define ASCENDC_EMU_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Counters of one kernel launch, summed over its blocks.
typedef struct {
    /// Bytes moved from global memory (DataCopy/DataCopyPad GM->UB and scalar GM reads).
    uint64_t gm_bytes_read;
    /// Bytes moved to global memory (DataCopy/DataCopyPad UB->GM and scalar GM writes).
    uint64_t gm_bytes_written;
    /// DataCopy and DataCopyPad calls between GM and UB.
    uint64_t data_copies;
    /// Largest unified-buffer footprint (sum of InitBuffer lengths) of any block, bytes.
    uint64_t ub_peak_bytes;
} AscendcEmuStats;

/// Implemented by the Rust host: the host address of emulated global memory
/// [addr, addr + len), or NULL with a message in `err` when the range is not live device memory.
void* ascendc_emu_gm(uint64_t addr, uint64_t len, char* err, size_t err_len);

/// Implemented by the Rust host: queues `block_dim` blocks of kernel `name` on `stream`. When the
/// stream reaches it, the host calls `ascendc_emu_run(name, block_dim, entry, args, ...)` and then
/// `drop_args(args)`. Returns 0, or a runtime status code if the launch itself is invalid.
uint32_t ascendc_emu_launch(void* stream, const char* name, uint32_t block_dim,
                            void (*entry)(void* args), void* args, void (*drop_args)(void* args));

/// Implemented by the C++ runner: runs blocks 0..block_dim of a kernel (`entry(args)` once per
/// block, with GetBlockIdx() set), enforcing the hardware rules. Fills `stats` and, per block,
/// `per_block_gm_bytes[b]` (bytes read + written by block b; an array of `block_dim` entries).
/// Returns 0, or 507015 (ACL_ERROR_RT_AICORE_EXCEPTION) with a message naming the kernel, the
/// block and the broken rule in `err`.
int32_t ascendc_emu_run(const char* name, uint32_t block_dim, void (*entry)(void* args), void* args,
                        AscendcEmuStats* stats, uint64_t* per_block_gm_bytes, char* err,
                        size_t err_len);

#ifdef __cplusplus
}
#endif

#endif
