// Host emulation of Ascend C: the block runner (ascendc_emu_run) and the emulator's
// out-of-line pieces (core state, rule violations, GM translation, the race check).
//
// Blocks run one after another on the calling thread, in a shuffled order (never block order
// when there are two or more): on the NPU they run concurrently, so nothing may depend on their
// order. Each starts with a fresh vector core (poisoned unified buffer, no TPipe, no flags, atomic
// mode off). A rule violation is a C++ exception inside the block; it is caught here and returned
// as an AI Core error, so a broken kernel never aborts the process. Every GM byte range a block
// touches is recorded, and a block touching bytes another block of the launch touched in a racing
// way (a plain write beside any other access, an atomic beside a read) is an AI Core error naming
// both blocks.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iterator>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "ascendc_emu_abi.h"
#include "kernel_operator.h"

namespace ascendc_emu {
namespace {

constexpr int32_t kAicoreException = 507015;  // ACL_ERROR_RT_AICORE_EXCEPTION

struct alignas(64) UnifiedBuffer {
    uint8_t bytes[kUbBytes];
};

thread_local CoreState t_core;
thread_local std::unique_ptr<UnifiedBuffer> t_ub;

/// Byte ranges of global memory, each owned by the first block that touched it: disjoint spans
/// sorted by address (a block's ranges are merged in one linear pass when it ends).
class SpanSet {
public:
    struct Span {
        uint64_t start;
        uint64_t end;
        int64_t block;
    };

    /// The first recorded span overlapping [a, b), or nullptr.
    const Span* overlap(uint64_t a, uint64_t b) const
    {
        auto it = std::upper_bound(spans_.begin(), spans_.end(), a,
                                   [](uint64_t v, const Span& s) { return v < s.start; });
        if (it != spans_.begin() && std::prev(it)->end > a) {
            return &*std::prev(it);
        }
        return it != spans_.end() && it->start < b ? &*it : nullptr;
    }

    /// Adds the bytes of `ranges` (sorted, disjoint) not recorded yet, owned by `block`.
    void add_sorted(const std::vector<std::pair<uint64_t, uint64_t>>& ranges, int64_t block)
    {
        if (ranges.empty()) {
            return;
        }
        merged_.clear();
        size_t i = 0;
        for (const auto& r : ranges) {
            uint64_t at = r.first;
            // Recorded spans before this range stay as they are.
            while (i < spans_.size() && spans_[i].end <= at) {
                push(spans_[i++]);
            }
            // Recorded spans overlapping it keep their owner; the gaps between them are this block's.
            while (i < spans_.size() && spans_[i].start < r.second) {
                if (spans_[i].start > at) {
                    push(Span{at, spans_[i].start, block});
                }
                at = std::max(at, spans_[i].end);
                if (spans_[i].end > r.second) {
                    break;  // it also overlaps the next range: keep it for that one
                }
                push(spans_[i++]);
            }
            if (at < r.second) {
                push(Span{at, r.second, block});
            }
        }
        while (i < spans_.size()) {
            push(spans_[i++]);
        }
        spans_.swap(merged_);
    }

    void clear() { spans_.clear(); }

private:
    /// Appends a span (spans arrive in address order, disjoint), joining it to the previous one
    /// when they touch and have one owner.
    void push(const Span& s)
    {
        if (!merged_.empty() && merged_.back().end == s.start && merged_.back().block == s.block) {
            merged_.back().end = s.end;
        } else {
            merged_.push_back(s);
        }
    }

    std::vector<Span> spans_;
    std::vector<Span> merged_;
};

/// What blocks touched, by kind of access.
struct Touched {
    SpanSet read, write, atomic;

    SpanSet& of(GmAccess kind) { return kind == GmAccess::Read ? read : kind == GmAccess::Write ? write : atomic; }

    void clear()
    {
        read.clear();
        write.clear();
        atomic.clear();
    }
};

/// The ranges the running block touched, by kind of access, in the order it touched them
/// (merged into the launch's spans when the block ends: a block's own ranges never race).
struct BlockTouched {
    std::vector<std::pair<uint64_t, uint64_t>> ranges[3];

    void add(GmAccess kind, uint64_t a, uint64_t b)
    {
        auto& v = ranges[static_cast<size_t>(kind)];
        if (!v.empty() && v.back().second == a) {
            v.back().second = b;  // consecutive rows of one stream of copies
        } else {
            v.emplace_back(a, b);
        }
    }

    void merge_into(Touched& launch, int64_t block)
    {
        for (GmAccess kind : {GmAccess::Read, GmAccess::Write, GmAccess::Atomic}) {
            auto& v = ranges[static_cast<size_t>(kind)];
            std::sort(v.begin(), v.end());
            size_t out = 0;
            for (const auto& r : v) {
                if (out > 0 && r.first <= v[out - 1].second) {
                    v[out - 1].second = std::max(v[out - 1].second, r.second);
                } else {
                    v[out++] = r;
                }
            }
            v.resize(out);
            launch.of(kind).add_sorted(v, block);
        }
    }

    void clear()
    {
        for (auto& v : ranges) {
            v.clear();
        }
    }
};

thread_local Touched t_launch;       // the blocks of the running launch that have finished
thread_local BlockTouched t_block;  // the running block

const char* verb(GmAccess kind)
{
    return kind == GmAccess::Read ? "reads" : kind == GmAccess::Write ? "writes" : "atomically adds into";
}

/// The environment variable of the block-order seed and its default.
constexpr const char* kSeedEnv = "BURN_ASCEND_EMU_BLOCK_SEED";
constexpr uint64_t kDefaultSeed = 0x5eedb10c;

/// The seed of the block orders (read once), or the reason the variable does not parse.
const std::pair<uint64_t, std::string>& block_seed()
{
    static const std::pair<uint64_t, std::string> seed = [] {
        const char* v = std::getenv(kSeedEnv);
        if (v == nullptr) {
            return std::make_pair(kDefaultSeed, std::string());
        }
        char* end = nullptr;
        errno = 0;
        const unsigned long long n = std::strtoull(v, &end, 0);
        if (*v == '\0' || *v == '-' || *end != '\0' || errno != 0) {
            return std::make_pair(kDefaultSeed, std::string(kSeedEnv) + "=\"" + v +
                                                    "\" is not a number (decimal, or hexadecimal with 0x)");
        }
        return std::make_pair(static_cast<uint64_t>(n), std::string());
    }();
    return seed;
}

uint64_t splitmix(uint64_t& state)
{
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/// The order the blocks of a launch run in: a permutation drawn from the seed, the kernel's name,
/// the block count and how many launches this thread ran before, never the identity.
std::vector<uint32_t> block_order(const char* kernel, uint32_t blockDim)
{
    thread_local uint64_t launches = 0;
    uint64_t state = block_seed().first ^ (static_cast<uint64_t>(blockDim) << 32) ^ (launches++ * 0x2545f4914f6cdd1dull);
    for (const char* c = kernel; *c != '\0'; ++c) {
        state = (state ^ static_cast<uint8_t>(*c)) * 0x100000001b3ull;
    }
    std::vector<uint32_t> order(blockDim);
    std::iota(order.begin(), order.end(), 0u);
    for (uint32_t i = blockDim; i > 1; --i) {
        std::swap(order[i - 1], order[splitmix(state) % i]);
    }
    if (blockDim > 1 && std::is_sorted(order.begin(), order.end())) {
        std::rotate(order.begin(), order.begin() + 1, order.end());
    }
    return order;
}

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

thread_local CoreState* t_running_core = nullptr;

void outside_kernel()
{
    // Not catchable by a runner: an Ascend C API was called from host code.
    throw RuleViolation("an Ascend C API was called outside ascendc_emu_run");
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

void note_gm(uint64_t addr, uint64_t len, GmAccess kind, const char* api)
{
    if (len == 0) {
        return;
    }
    const uint64_t end = addr + len;
    // Plain writes race with everything; atomics only with reads and plain writes; reads with writes.
    for (GmAccess other : {GmAccess::Write, GmAccess::Atomic, GmAccess::Read}) {
        const bool races = kind == GmAccess::Write || other == GmAccess::Write ||
                           (kind == GmAccess::Atomic) != (other == GmAccess::Atomic);
        if (!races) {
            continue;
        }
        if (const auto* hit = t_launch.of(other).overlap(addr, end)) {
            const uint64_t from = std::max(addr, hit->start);
            const uint64_t to = std::min(end, hit->end);
            fail("%s: block %" PRId64 " %s GM [0x%" PRIx64 ", +%" PRIu64 ") that block %" PRId64
                 " %s in the same launch: blocks run concurrently on the NPU, so the result depends on their "
                 "timing (a race between blocks%s)",
                 api, core().blockIdx, verb(kind), from, to - from, hit->block, verb(other),
                 kind == GmAccess::Write && other == GmAccess::Write ? "; give each block its own bytes or use atomics"
                                                                     : "");
        }
    }
    t_block.add(kind, addr, end);
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
                                   AscendcEmuStats* stats, AscendcEmuBlockStats* per_block, char* err, size_t err_len)
{
    using namespace ascendc_emu;
    AscendcEmuStats total = {};
    write_message(err, err_len, "");
    if (per_block != nullptr) {
        std::fill_n(per_block, block_dim, AscendcEmuBlockStats{});
    }
    const char* kernel = name != nullptr ? name : "?";
    int32_t status = 0;
    if (t_running_core != nullptr || entry == nullptr) {
        write_message(err, err_len,
                      std::string("kernel ") + kernel + (entry == nullptr ? ": no entry function"
                                                                          : ": launched from inside a running kernel"));
        status = kAicoreException;
    }
    if (status == 0 && !block_seed().second.empty()) {
        write_message(err, err_len, std::string("kernel ") + kernel + ": " + block_seed().second);
        status = kAicoreException;
    }
    if (status == 0 && !t_ub) {
        t_ub = std::make_unique<UnifiedBuffer>();
    }
    t_launch.clear();
    const std::vector<uint32_t> order = status == 0 ? block_order(kernel, block_dim) : std::vector<uint32_t>();
    for (size_t i = 0; status == 0 && i < order.size(); ++i) {
        const uint32_t b = order[i];
        t_block.clear();
        t_core = CoreState{};
        t_core.blockIdx = b;
        t_core.blockNum = block_dim;
        t_core.ub = t_ub->bytes;
        std::memset(t_core.ub, kPoison, kUbBytes);  // UB contents are garbage at kernel start

        std::string failure;
        t_running_core = &t_core;
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
        t_running_core = nullptr;

        total.gm_bytes_read += t_core.gmRead;
        total.gm_bytes_written += t_core.gmWritten;
        total.data_copies += t_core.dataCopies;
        total.ub_peak_bytes = std::max(total.ub_peak_bytes, t_core.ubPeak);
        total.vector_instructions += t_core.vecInstrs;
        total.vector_repeats += t_core.vecRepeats;
        if (per_block != nullptr) {
            per_block[b] = AscendcEmuBlockStats{t_core.gmRead + t_core.gmWritten, t_core.vecInstrs, t_core.vecRepeats};
        }
        if (!failure.empty()) {
            write_message(err, err_len, "kernel " + std::string(kernel) + ", block " + std::to_string(b) + ": " + failure);
            status = kAicoreException;
        } else {
            t_block.merge_into(t_launch, b);
            if (!t_core.printed.empty()) {
                // The NPU prints a kernel's printf output after the kernel; here, after its block.
                std::fprintf(stderr, "[%s, block %u] %s", kernel, b, t_core.printed.c_str());
            }
        }
    }
    t_launch.clear();
    t_block.clear();
    if (stats != nullptr) {
        *stats = total;
    }
    return status;
}
