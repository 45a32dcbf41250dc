// The harness of the Ascend C emulation's C++ tests (rules_test.cpp, cube_test.cpp): runs a kernel
// body as the blocks of a launch through ascendc_emu_run and checks its outcome.
#ifndef ASCENDC_EMU_TESTS_HARNESS_H
#define ASCENDC_EMU_TESTS_HARNESS_H

#include <cstdio>
#include <string>
#include <vector>

#include "fake_host.h"
#include "kernel_operator.h"

namespace {

int g_failures = 0;
int g_checks = 0;

struct Outcome {
    int32_t status = 0;
    std::string error;
    AscendcEmuStats stats = {};
    std::vector<AscendcEmuBlockStats> perBlock;
};

/// Runs `body` (which calls a kernel) as `blocks` blocks of kernel `name`.
template <class F>
Outcome run(const char* name, uint32_t blocks, F body)
{
    Outcome o;
    o.perBlock.assign(blocks, AscendcEmuBlockStats{});
    char err[1024];
    o.status = ascendc_emu_run(
        nullptr, name, blocks, [](void* p) { (*static_cast<F*>(p))(); }, &body, &o.stats, o.perBlock.data(), err, sizeof err);
    o.error = err;
    return o;
}

inline void check(bool ok, const std::string& what)
{
    ++g_checks;
    if (!ok) {
        ++g_failures;
        std::printf("FAIL %s\n", what.c_str());
    }
}

/// The kernel must fail with an AI Core error whose message contains `rule`.
inline void expect_rule(const char* test, const Outcome& o, const char* rule)
{
    const bool ok = o.status == 507015 && o.error.find(rule) != std::string::npos;
    ++g_checks;
    if (ok) {
        std::printf("ok   %-34s %s\n", test, o.error.c_str());
    } else {
        ++g_failures;
        std::printf("FAIL %-34s expected 507015 with \"%s\", got %d \"%s\"\n", test, rule, o.status, o.error.c_str());
    }
}

inline void expect_ok(const char* test, const Outcome& o)
{
    ++g_checks;
    if (o.status == 0) {
        std::printf("ok   %-34s runs clean\n", test);
    } else {
        ++g_failures;
        std::printf("FAIL %-34s %d \"%s\"\n", test, o.status, o.error.c_str());
    }
}

template <class T>
T* host_as(uint64_t addr)
{
    return reinterpret_cast<T*>(fake_host::host(addr));
}

/// Prints the tally; the exit status of the test program.
inline int summary()
{
    std::printf("%s: %d checks, %d failed\n", g_failures == 0 ? "PASS" : "FAIL", g_checks, g_failures);
    return g_failures == 0 ? 0 : 1;
}

}  // namespace

#endif
