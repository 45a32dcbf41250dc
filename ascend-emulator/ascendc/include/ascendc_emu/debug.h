// Host emulation of Ascend C: the kernel-side debug APIs a kernel uses to stop on bad input,
// AscendC::printf / PRINTF and AscendC::Trap, and the `assert` macro the real header defines.
//
// CANN 8.x documents Trap() as stopping the AI Core ("当软件产生异常后,使用该指令使kernel中止运行",
// CANN 8.0 API reference, Trap), and printf/PRINTF as formatted output that the runtime prints
// after the kernel (dump buffer of 1 MiB per core; compiled out with -DASCENDC_DUMP=0). So a
// device-side check is a printf of the bad value followed by Trap(): on the NPU the launch fails
// with an AI Core error and the message is printed; here the launch fails with 507015 and the
// message of the trapping block is part of the error text (README.md, "How it runs").
// ASSUMED: which status CANN reports for a trap (the fact sheet lists 507015 AICORE_EXCEPTION and
// 507016 AICORE_TRAP_EXCEPTION, acl-abi.md) is not documented; the emulation reports 507015, as
// for every other AI Core fault.
#ifndef ASCENDC_EMU_DEBUG_H
#define ASCENDC_EMU_DEBUG_H

#include <cinttypes>
#include <cstdio>
#include <string>
#include <type_traits>

#include "ascendc_emu/core.h"

namespace ascendc_emu {

/// What printf may write per core (the dump buffer); the rest is dropped, as on the NPU.
constexpr size_t kDumpBytesPerCore = 1 << 20;

/// Appends one argument converted by `conv` (one of d i u x f s p) to `out`.
template <class A>
void print_arg(std::string& out, char conv, const A& a, const char* api)
{
    using T = std::decay_t<A>;
    char buf[64];
    if constexpr (std::is_integral_v<T>) {
        if (conv == 'd' || conv == 'i') {
            std::snprintf(buf, sizeof buf, "%" PRId64, static_cast<int64_t>(a));
        } else if (conv == 'u' || conv == 'x') {
            // The value's own width: -1 as int32_t prints as ffffffff, as an int64_t as 16 f's.
            const uint64_t bits = static_cast<uint64_t>(static_cast<std::make_unsigned_t<T>>(a));
            std::snprintf(buf, sizeof buf, conv == 'u' ? "%" PRIu64 : "%" PRIx64, bits);
        } else {
            fail("%s: %%%c given an integer argument", api, conv);
        }
        out += buf;
    } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, half> || std::is_same_v<T, bfloat16_t>) {
        if (conv != 'f') {
            fail("%s: %%%c given a floating-point argument (use %%f)", api, conv);
        }
        std::snprintf(buf, sizeof buf, "%f", static_cast<double>(static_cast<float>(a)));
        out += buf;
    } else if constexpr (std::is_same_v<T, const char*> || std::is_same_v<T, char*>) {
        if (conv != 's') {
            fail("%s: %%%c given a string argument (use %%s)", api, conv);
        }
        out += a;
    } else if constexpr (std::is_pointer_v<T>) {
        if (conv != 'p') {
            fail("%s: %%%c given a pointer argument (use %%p)", api, conv);
        }
        std::snprintf(buf, sizeof buf, "%p", static_cast<const void*>(a));
        out += buf;
    } else {
        static_assert(std::is_integral_v<T>, "printf takes integers, float/half/bfloat16_t, strings and pointers");
    }
}

/// Formats like the kernel printf: only the conversions CANN 8.x documents, each matched against
/// its argument's type (the NPU formats by type, so %d prints an int64_t whole).
inline void format(std::string& out, const char* fmt, const char* at, const char* api)
{
    for (; *at != '\0'; ++at) {
        if (*at == '%') {
            if (at[1] != '%') {
                fail("%s: \"%s\" has more conversions than arguments", api, fmt);
            }
            ++at;
        }
        out += *at;
    }
}

template <class A, class... Rest>
void format(std::string& out, const char* fmt, const char* at, const char* api, const A& a, const Rest&... rest)
{
    for (; *at != '\0'; ++at) {
        if (*at != '%') {
            out += *at;
            continue;
        }
        const char conv = at[1];
        if (conv == '%') {
            out += '%';
            ++at;
            continue;
        }
        if (conv == '\0' || std::string("diuxfsp").find(conv) == std::string::npos) {
            fail("%s: unsupported conversion in \"%s\" (CANN 8.x printf takes %%d %%i %%u %%x %%f %%s %%p, no flags or "
                 "widths)",
                 api, fmt);
        }
        print_arg(out, conv, a, api);
        format(out, fmt, at + 2, api, rest...);
        return;
    }
    fail("%s: \"%s\" has fewer conversions than arguments", api, fmt);
}

template <class... Args>
void kernel_printf(const char* api, const char* fmt, const Args&... args)
{
    std::string text;
    format(text, fmt, fmt, api, args...);
    std::string& printed = core().printed;
    if (printed.size() + text.size() <= kDumpBytesPerCore) {
        printed += text;
    }
}

/// Trap(): the block stops with an AI Core error carrying what it printed.
[[noreturn]] inline void trap(const char* api)
{
    const std::string& printed = core().printed;
    if (printed.empty()) {
        fail("%s stopped the core (the kernel printed nothing)", api);
    }
    std::string text = printed;
    while (!text.empty() && text.back() == '\n') {
        text.pop_back();
    }
    fail("%s stopped the core after printing: %s", api, text.c_str());
}

}  // namespace ascendc_emu

namespace AscendC {

template <class... Args>
void printf(__gm__ const char* fmt, Args&&... args)
{
    ascendc_emu::kernel_printf("AscendC::printf", fmt, args...);
}

template <class... Args>
void PRINTF(__gm__ const char* fmt, Args&&... args)
{
    ascendc_emu::kernel_printf("AscendC::PRINTF", fmt, args...);
}

/// Stops the AI Core: the launch fails with an AI Core error.
[[noreturn]] inline void Trap() { ascendc_emu::trap("AscendC::Trap()"); }

}  // namespace AscendC

// The real kernel_operator.h replaces the C library's assert (which would abort the process) by a
// print and a trap (kernel_operator_dump_tensor_intf.h, with ASCENDC_DUMP on, its default).
#undef assert
#define assert(expr)                                                                                        \
    ((expr) ? void(0)                                                                                       \
            : (AscendC::printf("[ASSERT] %s:%u: Assertion `%s'\n", __FILE__, static_cast<uint32_t>(__LINE__), \
                               #expr),                                                                      \
               AscendC::Trap()))

#endif
