// A stand-in for the Rust host of the Ascend C emulation (see fake_host.h).
#include "fake_host.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

namespace fake_host {
namespace {

// Non-canonical on x86-64 and AArch64: dereferencing a device address on the host would fault.
constexpr uint64_t kDeviceBase = 0x1000000000000000ull;
constexpr uint64_t kGap = 4096;  // unmapped bytes between allocations, so overruns are rejected

struct Region {
    uint64_t addr;
    std::vector<uint8_t> bytes;
};

std::vector<std::unique_ptr<Region>>& regions()
{
    static std::vector<std::unique_ptr<Region>> r;
    return r;
}

uint64_t g_next = kDeviceBase;
Launch g_last;

}  // namespace

uint64_t alloc(size_t bytes)
{
    auto r = std::make_unique<Region>();
    r->addr = g_next;
    r->bytes.assign(bytes, 0);
    g_next += (bytes + kGap - 1) / kGap * kGap + kGap;
    regions().push_back(std::move(r));
    return regions().back()->addr;
}

uint8_t* host(uint64_t addr)
{
    for (auto& r : regions()) {
        if (addr >= r->addr && addr - r->addr < r->bytes.size()) {
            return r->bytes.data() + (addr - r->addr);
        }
    }
    return nullptr;
}

const Launch& last_launch() { return g_last; }

}  // namespace fake_host

namespace {

void* fake_gm(void* /*ctx*/, uint64_t addr, uint64_t len, char* err, size_t err_len)
{
    for (auto& r : fake_host::regions()) {
        if (addr >= r->addr && addr - r->addr <= r->bytes.size() && len <= r->bytes.size() - (addr - r->addr)) {
            return r->bytes.data() + (addr - r->addr);
        }
    }
    std::snprintf(err, err_len, "[0x%" PRIx64 ", +%" PRIu64 ") is not inside a live device allocation", addr, len);
    return nullptr;
}

// Runs the launch at once (the stream is ignored) and keeps its outcome for last_launch().
uint32_t fake_launch(void* /*stream*/, const char* name, uint32_t block_dim, void (*entry)(void*), void* args,
                     void (*drop_args)(void*), AscendcEmuRunFn run)
{
    if (block_dim == 0 || block_dim > 64) {
        drop_args(args);
        return 107000;  // ACL_ERROR_RT_PARAM_INVALID
    }
    char err[1024];
    fake_host::g_last = fake_host::Launch{};
    fake_host::g_last.status =
        run(nullptr, name, block_dim, entry, args, &fake_host::g_last.stats, fake_host::g_last.perBlock, err, sizeof err);
    fake_host::g_last.error = err;
    drop_args(args);
    return 0;
}

const AscendcEmuHost kFakeHost{fake_gm, fake_launch};

// Bound before main, as the Rust host binds a library when it opens it.
const bool g_bound = (ascendc_emu_bind(&kFakeHost), true);

}  // namespace
