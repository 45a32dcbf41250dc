// Host emulation of Ascend C: the block runner (ascendc_emu_run) and the emulator's
// out-of-line pieces (core state, rule violations, GM translation).
//
// Blocks run one after another, in block order, on the calling thread; each starts with a fresh
// vector core (poisoned unified buffer, no TPipe, no flags, atomic mode off). A rule violation is
// a C++ exception inside the block; it is caught here and returned as an AI Core error, so a
// broken kernel never aborts the process.
#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <atomic>
#include <exception>
#include <memory>
#include <string>

#include "ascendc_emu_abi.h"
#include "kernel_operator.h"

namespace ascendc_emu {
namespace {

constexpr int32_t kAicoreException = 507015;  // ACL_ERROR_RT_AICORE_EXCEPTION

struct alignas(64) UnifiedBuffer {
    uint8_t bytes[kUbBytes];
};

thread_local CoreState t_core;
thread_local bool t_running = false;
thread_local std::unique_ptr<UnifiedBuffer> t_ub;

/// The checks a block must pass once its kernel function returned.
void check_kernel_end()
{
    const CoreState& c = t_core;
    if (c.pipe != nullptr) {
        fail("a TPipe is still alive at kernel end (a static or leaked TPipe)");
    }
    if (c.atomicApply != nullptr) {
        fail("%s<%s>() is still enabled at kernel end (SetAtomicNone missing): the core would keep accumulating "
             "into GM",
             c.atomicName, c.atomicType);
    }
    for (size_t e = 0; e < kHardEvents; ++e) {
        for (int id = 0; id < kEventIds; ++id) {
            if (c.flags[e] & (1u << id)) {
                fail("SetFlag<HardEvent::%s>(%d) has no matching WaitFlag at kernel end (the flag state would break "
                     "later kernels)",
                     event_name(static_cast<AscendC::HardEvent>(e)), id);
            }
        }
    }
}

void write_message(char* err, size_t errLen, const std::string& message)
{
    if (err == nullptr || errLen == 0) {
        return;
    }
    const size_t n = std::min(message.size(), errLen - 1);
    std::memcpy(err, message.data(), n);
    err[n] = '\0';
}

}  // namespace

void fail(const char* fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    va_list copy;
    va_copy(copy, args);
    const int n = std::vsnprintf(nullptr, 0, fmt, copy);
    va_end(copy);
    std::string message(n > 0 ? static_cast<size_t>(n) : 0, '\0');
    if (n > 0) {
        std::vsnprintf(message.data(), message.size() + 1, fmt, args);
    }
    va_end(args);
    throw RuleViolation(message);
}

CoreState& core()
{
    if (!t_running) {
        // Not catchable by a runner: an Ascend C API was called from host code.
        throw RuleViolation("an Ascend C API was called outside ascendc_emu_run");
    }
    return t_core;
}

std::atomic<const AscendcEmuHost*> g_host{nullptr};

uint8_t* gm_map(uint64_t addr, uint64_t len, const char* api)
{
    char reason[256] = {};
    void* p = ascendc_emu_gm(addr, len, reason, sizeof reason);
    if (p == nullptr) {
        fail("%s: out-of-bounds GM access [0x%" PRIx64 ", +%" PRIu64 "): %s", api, addr, len,
             reason[0] ? reason : "rejected by the device memory");
    }
    return static_cast<uint8_t*>(p);
}

}  // namespace ascendc_emu

extern "C" void ascendc_emu_bind(const AscendcEmuHost* host) { ascendc_emu::g_host.store(host); }

extern "C" void* ascendc_emu_gm(uint64_t addr, uint64_t len, char* err, size_t err_len)
{
    const AscendcEmuHost* host = ascendc_emu::g_host.load();
    if (host == nullptr) {
        ascendc_emu::write_message(err, err_len, "the kernel library is bound to no emulated device");
        return nullptr;
    }
    return host->gm(addr, len, err, err_len);
}

extern "C" uint32_t ascendc_emu_launch(void* stream, const char* name, uint32_t block_dim, void (*entry)(void*),
                                       void* args, void (*drop_args)(void*))
{
    const AscendcEmuHost* host = ascendc_emu::g_host.load();
    if (host == nullptr) {
        drop_args(args);
        return 107000;  // ACL_ERROR_RT_PARAM_INVALID: no device to launch on
    }
    return host->launch(stream, name, block_dim, entry, args, drop_args, &ascendc_emu_run);
}

extern "C" int32_t ascendc_emu_run(const char* name, uint32_t block_dim, void (*entry)(void* args), void* args,
                                   AscendcEmuStats* stats, uint64_t* per_block_gm_bytes, char* err, size_t err_len)
{
    using namespace ascendc_emu;
    AscendcEmuStats total = {};
    write_message(err, err_len, "");
    if (per_block_gm_bytes != nullptr) {
        std::fill_n(per_block_gm_bytes, block_dim, 0);
    }
    const char* kernel = name != nullptr ? name : "?";
    int32_t status = 0;
    if (t_running || entry == nullptr) {
        write_message(err, err_len,
                      std::string("kernel ") + kernel + (entry == nullptr ? ": no entry function"
                                                                          : ": launched from inside a running kernel"));
        status = kAicoreException;
    }
    if (status == 0 && !t_ub) {
        t_ub = std::make_unique<UnifiedBuffer>();
    }
    for (uint32_t b = 0; status == 0 && b < block_dim; ++b) {
        t_core = CoreState{};
        t_core.blockIdx = b;
        t_core.blockNum = block_dim;
        t_core.ub = t_ub->bytes;
        std::memset(t_core.ub, kPoison, kUbBytes);  // UB contents are garbage at kernel start

        std::string failure;
        t_running = true;
        try {
            entry(args);
            check_kernel_end();
        } catch (const RuleViolation& e) {
            failure = e.what();
        } catch (const std::exception& e) {
            failure = std::string("C++ exception in the kernel: ") + e.what();
        } catch (...) {
            failure = "unknown C++ exception in the kernel";
        }
        t_running = false;

        total.gm_bytes_read += t_core.gmRead;
        total.gm_bytes_written += t_core.gmWritten;
        total.data_copies += t_core.dataCopies;
        total.ub_peak_bytes = std::max(total.ub_peak_bytes, t_core.ubPeak);
        if (per_block_gm_bytes != nullptr) {
            per_block_gm_bytes[b] = t_core.gmRead + t_core.gmWritten;
        }
        if (!failure.empty()) {
            write_message(err, err_len, "kernel " + std::string(kernel) + ", block " + std::to_string(b) + ": " + failure);
            status = kAicoreException;
        }
    }
    if (stats != nullptr) {
        *stats = total;
    }
    return status;
}
