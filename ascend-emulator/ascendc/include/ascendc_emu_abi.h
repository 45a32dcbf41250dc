// The C ABI between the host emulation of Ascend C (C++, this directory) and its host: the
// emulated device (ascend-emulator's src/kernel_runner.rs) or the C++ tests' fake host. Kernel
// sources never include this file.
//
// A kernel library built against the emulation is a shared object opened at run time. Its host
// binds it once (ascendc_emu_bind) to the functions that queue launches on an emulated stream and
// resolve emulated global memory; the generated aclrtlaunch_<kernel> entry points and the
// emulated API reach the host only through that binding.
#ifndef ASCENDC_EMU_ABI_H
#define ASCENDC_EMU_ABI_H

#include <stddef.h>
#include <stdint.h>

// What an emulated kernel library exports; everything else in it is hidden (-fvisibility=hidden).
#define ASCENDC_EMU_EXPORT __attribute__((visibility("default")))

#ifdef __cplusplus
extern "C" {
#endif

/// `AscendcEmuStats::core_kind`: the blocks ran on vector cores (AIV).
#define ASCENDC_EMU_CORE_VECTOR 0
/// `AscendcEmuStats::core_kind`: the blocks ran on cube cores (AIC, KERNEL_TYPE_AIC_ONLY).
#define ASCENDC_EMU_CORE_CUBE 1

/// Counters of one kernel launch, summed over its blocks.
typedef struct {
    /// Bytes moved from global memory (DataCopy/DataCopyPad GM->UB, DataCopy GM->L1 and scalar GM
    /// reads).
    uint64_t gm_bytes_read;
    /// Bytes moved to global memory (DataCopy/DataCopyPad UB->GM, Fixpipe L0C->GM and scalar GM
    /// writes).
    uint64_t gm_bytes_written;
    /// DMA copies between GM and a core's local memory: DataCopy/DataCopyPad GM<->UB, DataCopy
    /// GM->L1, Fixpipe L0C->GM.
    uint64_t data_copies;
    /// Largest unified-buffer footprint (sum of InitBuffer lengths) of any block, bytes.
    uint64_t ub_peak_bytes;
    /// Vector instructions issued (each call of a vector API).
    uint64_t vector_instructions;
    /// Vector repeats issued: each instruction's operand bytes in 256-byte repeats (at least one).
    uint64_t vector_repeats;
    /// Cube cycles of the Mmad calls at the peak rate: ceil(m/16)*ceil(n/16)*ceil(k/16) per call
    /// for half/bf16 inputs, 4 times that for float.
    uint64_t cube_cycles;
    /// Mmad calls.
    uint64_t mmad_calls;
    /// ASCENDC_EMU_CORE_VECTOR or ASCENDC_EMU_CORE_CUBE: the kind of core the blocks ran on.
    uint64_t core_kind;
} AscendcEmuStats;

/// Counters of one block: what the device model needs per core.
typedef struct {
    /// Bytes read + written in global memory.
    uint64_t gm_bytes;
    /// Vector instructions issued.
    uint64_t vector_instructions;
    /// Vector repeats issued.
    uint64_t vector_repeats;
    /// Cube cycles issued (see AscendcEmuStats::cube_cycles).
    uint64_t cube_cycles;
    /// Mmad calls.
    uint64_t mmad_calls;
} AscendcEmuBlockStats;

/// Runs blocks 0..block_dim of a kernel (`entry(args)` once per block, with GetBlockIdx() set, on
/// one or more host threads, decided in a shuffled order: see README.md), enforcing the hardware
/// rules and detecting races between blocks. Every GM access of the blocks goes to the host's `gm`
/// with `gm_ctx`. Fills `stats` and, per block, `per_block[b]` (an array of `block_dim` entries).
/// Returns 0, or 507015
/// (ACL_ERROR_RT_AICORE_EXCEPTION) with a message naming the kernel, the block and the broken rule
/// in `err`.
typedef int32_t (*AscendcEmuRunFn)(void* gm_ctx, const char* name, uint32_t block_dim, void (*entry)(void* args),
                                   void* args, AscendcEmuStats* stats, AscendcEmuBlockStats* per_block, char* err,
                                   size_t err_len);

/// The host a kernel library is bound to.
typedef struct {
    /// The host address of emulated global memory [addr, addr + len) for the launch that passed
    /// `ctx` to the runner, or NULL with a message in `err` when the range is not live memory of
    /// that launch's device. Called from the runner's threads.
    void* (*gm)(void* ctx, uint64_t addr, uint64_t len, char* err, size_t err_len);
    /// Queues `block_dim` blocks of kernel `name` on `stream`. When the stream reaches it, the host
    /// calls `run(ctx, name, block_dim, entry, args, ...)` with a context of its choosing for `gm`
    /// and then `drop_args(args)` (also when the launch is refused). Returns 0, or a runtime status code if the launch itself is invalid.
    uint32_t (*launch)(void* stream, const char* name, uint32_t block_dim, void (*entry)(void* args), void* args,
                       void (*drop_args)(void* args), AscendcEmuRunFn run);
} AscendcEmuHost;

/// Binds the library to its host; `host` must outlive every launch. Called once, before any
/// launch; a later call replaces the binding.
ASCENDC_EMU_EXPORT void ascendc_emu_bind(const AscendcEmuHost* host);

/// The runner (see AscendcEmuRunFn); exported for hosts that run kernels directly (the C++ tests).
ASCENDC_EMU_EXPORT int32_t ascendc_emu_run(void* gm_ctx, const char* name, uint32_t block_dim,
                                           void (*entry)(void* args), void* args, AscendcEmuStats* stats,
                                           AscendcEmuBlockStats* per_block, char* err, size_t err_len);

/// Forwarded to the bound host's `gm` (called by the emulated API for every GM access).
void* ascendc_emu_gm(void* ctx, uint64_t addr, uint64_t len, char* err, size_t err_len);

/// Forwarded to the bound host's `launch` with this library's runner (called by the generated
/// aclrtlaunch_<kernel> entry points). Without a host: ACL_ERROR_RT_PARAM_INVALID.
uint32_t ascendc_emu_launch(void* stream, const char* name, uint32_t block_dim, void (*entry)(void* args), void* args,
                            void (*drop_args)(void* args));

#ifdef __cplusplus
}
#endif

#endif
