// Host emulation of Ascend C: the block runner (ascendc_emu_run) and the emulator's
// out-of-line pieces (core state, rule violations, GM translation, the race check).
//
// A launch is decided in a shuffled block order (never block order when there are two or more):
// on the NPU blocks run concurrently, so nothing may depend on their order. Blocks run on the
// calling thread or on helper threads (BURN_ASCEND_EMU_THREADS), each starting with a fresh
// vector core (poisoned unified buffer, no TPipe, no flags, atomic mode off), which
// KERNEL_TYPE_AIC_ONLY turns into a fresh cube core (poisoned L1/L0A/L0B/L0C). A rule violation is a
// C++ exception inside the block; it is caught here and returned as an AI Core error, so a broken
// kernel never aborts the process. Every GM byte range a block touches is recorded, and a block
// touching bytes an earlier block (in the order) touched in a racing way (a plain write beside any
// other access, an atomic beside a read) is an AI Core error naming both blocks.
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
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "ascendc_emu_abi.h"
#include "kernel_operator.h"

namespace ascendc_emu {
namespace {

constexpr int32_t kAicoreException = 507015;  // ACL_ERROR_RT_AICORE_EXCEPTION

struct alignas(64) UnifiedBuffer {
    uint8_t bytes[kUbBytes];
};

/// The local memories of a cube core, and the L0C shadow of what Mmad defined.
struct alignas(64) CubeMemory {
    uint8_t l1[kL1Bytes];
    uint8_t l0a[kL0aBytes];
    uint8_t l0b[kL0bBytes];
    uint8_t l0c[kL0cBytes];
    L0cTag l0cTags[kL0cBytes / sizeof(float)];
};

thread_local CoreState t_core;
thread_local std::unique_ptr<UnifiedBuffer> t_ub;
thread_local std::unique_ptr<CubeMemory> t_cube;

/// Byte ranges of global memory, each owned by the first block that touched it. Kept as a few
/// runs of disjoint spans sorted by address, oldest first, of roughly halving sizes (a finished
/// block adds a run; runs of similar size merge), so recording a block costs a merge of about
/// its own size and a lookup checks a handful of runs.
class SpanSet {
public:
    struct Span {
        uint64_t start;
        uint64_t end;
        int64_t block;
    };

    /// The first recorded span overlapping [a, b) (by address, owned by the block that touched its
    /// bytes first), or nullptr.
    const Span* overlap(uint64_t a, uint64_t b)
    {
        bool any = false;
        for (const auto& run : runs_) {
            any = any || first_overlap(run, a, b) != nullptr;
        }
        if (!any) {
            return nullptr;
        }
        // A race (the block fails): one run, so the answer is the first overlapping span.
        while (runs_.size() > 1) {
            merge_last();
        }
        return first_overlap(runs_[0], a, b);
    }

    /// Adds the bytes of `ranges` (sorted, disjoint) not recorded yet, owned by `block`.
    void add_sorted(const std::vector<std::pair<uint64_t, uint64_t>>& ranges, int64_t block)
    {
        if (ranges.empty()) {
            return;
        }
        std::vector<Span> run;
        run.reserve(ranges.size());
        for (const auto& r : ranges) {
            run.push_back(Span{r.first, r.second, block});
        }
        runs_.push_back(std::move(run));
        while (runs_.size() > 1 && runs_[runs_.size() - 2].size() <= 2 * runs_.back().size()) {
            merge_last();
        }
    }

    void clear() { runs_.clear(); }

private:
    static const Span* first_overlap(const std::vector<Span>& run, uint64_t a, uint64_t b)
    {
        auto it = std::upper_bound(run.begin(), run.end(), a, [](uint64_t v, const Span& s) { return v < s.start; });
        if (it != run.begin() && std::prev(it)->end > a) {
            return &*std::prev(it);
        }
        return it != run.end() && it->start < b ? &*it : nullptr;
    }

    /// Merges the newest run into the one before it: the older spans keep their owners, the newer
    /// ones add only the bytes not recorded yet.
    void merge_last()
    {
        std::vector<Span> newer = std::move(runs_.back());
        runs_.pop_back();
        std::vector<Span>& older = runs_.back();
        merged_.clear();
        merged_.reserve(older.size() + newer.size());
        size_t i = 0;
        for (const Span& r : newer) {
            uint64_t at = r.start;
            // Older spans before this one stay as they are.
            while (i < older.size() && older[i].end <= at) {
                push(older[i++]);
            }
            // Older spans overlapping it keep their owner; the gaps between them are its block's.
            while (i < older.size() && older[i].start < r.end) {
                if (older[i].start > at) {
                    push(Span{at, older[i].start, r.block});
                }
                at = std::max(at, older[i].end);
                if (older[i].end > r.end) {
                    break;  // it also overlaps the next span: keep it for that one
                }
                push(older[i++]);
            }
            if (at < r.end) {
                push(Span{at, r.end, r.block});
            }
        }
        while (i < older.size()) {
            push(older[i++]);
        }
        older.swap(merged_);
    }

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

    std::vector<std::vector<Span>> runs_;
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

/// One GM access of a block, in program order.
struct Access {
    uint64_t start;
    uint64_t end;
    GmAccess kind;
    const char* api;
};

/// An atomic store, applied when the launch ends (see ascendc_emu_run).
struct DeferredAtomic {
    uint8_t* gm;
    size_t at;  // its UB bytes in BlockRun::atomicBytes
    uint64_t bytes;
    AtomicApply apply;
};

/// What one block did, kept until its launch ends: the launch's outcome is decided from these in
/// the block order, whatever thread ran them and when.
struct BlockRun {
    std::string failure;
    CoreState core;  // the counters and printf text once the block ended
    std::vector<Access> log;
    std::vector<DeferredAtomic> atomics;
    std::vector<uint8_t> atomicBytes;

    void note(GmAccess kind, uint64_t a, uint64_t b, const char* api)
    {
        if (!log.empty() && log.back().end == a && log.back().kind == kind && log.back().api == api) {
            log.back().end = b;  // consecutive rows of one stream of copies
        } else {
            log.push_back(Access{a, b, kind, api});
        }
    }

    /// The block's ranges of one kind, sorted and merged.
    std::vector<std::pair<uint64_t, uint64_t>> ranges(GmAccess kind) const
    {
        std::vector<std::pair<uint64_t, uint64_t>> v;
        for (const Access& a : log) {
            if (a.kind == kind) {
                v.emplace_back(a.start, a.end);
            }
        }
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
        return v;
    }
};

thread_local BlockRun* t_run = nullptr;  // the block running on this thread
thread_local void* t_gm_ctx = nullptr;   // the host's context of the running launch

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

namespace {

std::string vformat(const char* fmt, va_list args)
{
    va_list copy;
    va_copy(copy, args);
    const int n = std::vsnprintf(nullptr, 0, fmt, copy);
    va_end(copy);
    std::string message(n > 0 ? static_cast<size_t>(n) : 0, '\0');
    if (n > 0) {
        std::vsnprintf(message.data(), message.size() + 1, fmt, args);
    }
    return message;
}

__attribute__((format(printf, 1, 2))) std::string format(const char* fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    std::string message = vformat(fmt, args);
    va_end(args);
    return message;
}

}  // namespace

void fail(const char* fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    std::string message = vformat(fmt, args);
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

void become_cube_core()
{
    if (!t_cube) {
        t_cube = std::make_unique<CubeMemory>();
    }
    CubeMemory& m = *t_cube;
    // Contents are garbage at kernel start, as the UB's: NaN in every float type.
    std::memset(m.l1, kPoison, sizeof m.l1);
    std::memset(m.l0a, kPoison, sizeof m.l0a);
    std::memset(m.l0b, kPoison, sizeof m.l0b);
    std::memset(m.l0c, kPoison, sizeof m.l0c);
    std::memset(m.l0cTags, 0, sizeof m.l0cTags);
    CoreState& c = t_core;
    c.kind = CoreKind::Cube;
    c.kindFixed = true;
    c.mem[static_cast<size_t>(Phys::UB)] = nullptr;
    c.mem[static_cast<size_t>(Phys::L1)] = m.l1;
    c.mem[static_cast<size_t>(Phys::L0A)] = m.l0a;
    c.mem[static_cast<size_t>(Phys::L0B)] = m.l0b;
    c.mem[static_cast<size_t>(Phys::L0C)] = m.l0c;
    c.l0cTags = m.l0cTags;
}

uint8_t* gm_map(uint64_t addr, uint64_t len, const char* api)
{
    char reason[256] = {};
    void* p = ascendc_emu_gm(t_gm_ctx, addr, len, reason, sizeof reason);
    if (p == nullptr) {
        fail("%s: out-of-bounds GM access [0x%" PRIx64 ", +%" PRIu64 "): %s", api, addr, len,
             reason[0] ? reason : "rejected by the device memory");
    }
    return static_cast<uint8_t*>(p);
}

void note_gm(uint64_t addr, uint64_t len, GmAccess kind, const char* api)
{
    if (len != 0) {
        core();  // only a running block touches GM
        t_run->note(kind, addr, addr + len, api);
    }
}

void defer_atomic(uint8_t* gm, const uint8_t* ub, uint64_t bytes)
{
    const CoreState& c = core();
    if (bytes % c.atomicElemBytes != 0) {
        fail("%s: a %" PRIu64 "-byte store is not a whole number of %s elements", c.atomicName, bytes, c.atomicType);
    }
    BlockRun& r = *t_run;
    r.atomics.push_back(DeferredAtomic{gm, r.atomicBytes.size(), bytes, c.atomicApply});
    r.atomicBytes.insert(r.atomicBytes.end(), ub, ub + bytes);
}

namespace {

/// The first access of `run` (block `b`) that races with what the blocks before it in the launch
/// order touched (`launch`), or with its own earlier atomic stores, as a message; empty if none.
std::string first_race(const BlockRun& run, uint32_t b, Touched& launch)
{
    SpanSet ownAtomics;
    for (const Access& a : run.log) {
        // Plain writes race with everything; atomics only with reads and plain writes; reads with writes.
        for (GmAccess other : {GmAccess::Write, GmAccess::Atomic, GmAccess::Read}) {
            const bool races = a.kind == GmAccess::Write || other == GmAccess::Write ||
                               (a.kind == GmAccess::Atomic) != (other == GmAccess::Atomic);
            if (!races) {
                continue;
            }
            if (const auto* hit = launch.of(other).overlap(a.start, a.end)) {
                const uint64_t from = std::max(a.start, hit->start);
                const uint64_t to = std::min(a.end, hit->end);
                return format("%s: block %u %s GM [0x%" PRIx64 ", +%" PRIu64 ") that block %" PRId64
                              " %s in the same launch: blocks run concurrently on the NPU, so the result depends "
                              "on their timing (a race between blocks%s)",
                              a.api, b, verb(a.kind), from, to - from, hit->block, verb(other),
                              a.kind == GmAccess::Write && other == GmAccess::Write
                                  ? "; give each block its own bytes or use atomics"
                                  : "");
            }
        }
        if (a.kind != GmAccess::Atomic) {
            if (const auto* hit = ownAtomics.overlap(a.start, a.end)) {
                const uint64_t from = std::max(a.start, hit->start);
                return format("%s: block %u %s GM [0x%" PRIx64 ", +%" PRIu64 ") it added into atomically earlier "
                              "in the launch: other blocks' atomic stores to those bytes may still be in flight, "
                              "so the emulation keeps atomic targets untouched until the launch ends (stricter "
                              "than one-block launches need)",
                              a.api, b, verb(a.kind), from, std::min(a.end, hit->end) - from);
            }
        } else {
            ownAtomics.add_sorted({{a.start, a.end}}, b);
        }
    }
    return std::string();
}

}  // namespace

}  // namespace ascendc_emu

extern "C" void ascendc_emu_bind(const AscendcEmuHost* host) { ascendc_emu::g_host.store(host); }

extern "C" void* ascendc_emu_gm(void* ctx, uint64_t addr, uint64_t len, char* err, size_t err_len)
{
    const AscendcEmuHost* host = ascendc_emu::g_host.load();
    if (host == nullptr) {
        ascendc_emu::write_message(err, err_len, "the kernel library is bound to no emulated device");
        return nullptr;
    }
    return host->gm(ctx, addr, len, err, err_len);
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

namespace ascendc_emu {
namespace {

/// Runs block `b` of a launch on this thread, as a fresh vector core (a cube core once the kernel
/// declares KERNEL_TYPE_AIC_ONLY), into `run`.
void run_block(const char* /*kernel*/, uint32_t b, uint32_t blockDim, void (*entry)(void*), void* args, void* gmCtx,
               BlockRun& run)
{
    if (!t_ub) {
        t_ub = std::make_unique<UnifiedBuffer>();
    }
    t_core = CoreState{};
    t_core.blockIdx = b;
    t_core.blockNum = blockDim;
    t_core.mem[static_cast<size_t>(Phys::UB)] = t_ub->bytes;
    std::memset(t_ub->bytes, kPoison, kUbBytes);  // UB contents are garbage at kernel start
    t_run = &run;
    t_gm_ctx = gmCtx;
    t_running_core = &t_core;
    try {
        entry(args);
        check_kernel_end();
    } catch (const RuleViolation& e) {
        run.failure = e.what();
    } catch (const std::exception& e) {
        run.failure = std::string("C++ exception in the kernel: ") + e.what();
    } catch (...) {
        run.failure = "unknown C++ exception in the kernel";
    }
    t_running_core = nullptr;
    t_run = nullptr;
    t_gm_ctx = nullptr;
    run.core.gmRead = t_core.gmRead;
    run.core.gmWritten = t_core.gmWritten;
    run.core.dataCopies = t_core.dataCopies;
    run.core.ubPeak = t_core.ubPeak;
    run.core.vecInstrs = t_core.vecInstrs;
    run.core.vecRepeats = t_core.vecRepeats;
    run.core.cubeCycles = t_core.cubeCycles;
    run.core.mmadCalls = t_core.mmadCalls;
    run.core.kind = t_core.kind;
    run.core.printed = std::move(t_core.printed);
}

/// The environment variable of the emulation's block threads.
constexpr const char* kThreadsEnv = "BURN_ASCEND_EMU_THREADS";

/// Host threads that run the blocks of one launch (read once): BURN_ASCEND_EMU_THREADS, default
/// the host's hardware threads; 1 runs every block on the launching thread. A value that does not
/// parse is an error of every launch (the reason is the string).
const std::pair<unsigned, std::string>& block_threads()
{
    static const std::pair<unsigned, std::string> threads = [] {
        const char* v = std::getenv(kThreadsEnv);
        if (v == nullptr) {
            return std::make_pair(std::max(1u, std::thread::hardware_concurrency()), std::string());
        }
        char* end = nullptr;
        errno = 0;
        const unsigned long n = std::strtoul(v, &end, 10);
        if (*v == '\0' || *v == '-' || *end != '\0' || errno != 0 || n == 0 || n > 1024) {
            return std::make_pair(1u, std::string(kThreadsEnv) + "=\"" + v + "\" is not a thread count (1 to 1024)");
        }
        return std::make_pair(static_cast<unsigned>(n), std::string());
    }();
    return threads;
}

/// Helper threads shared by every launch of the process; one launch uses them at a time (another
/// launching meanwhile runs its blocks on its own thread alone).
class BlockPool {
public:
    static BlockPool& get()
    {
        static BlockPool* pool = new BlockPool(block_threads().first - 1);  // never destroyed: exit order
        return *pool;
    }

    /// Calls task(i) for every i in [0, n), on this thread and the pool's; returns when all ran.
    /// `task` takes the next index itself (see ascendc_emu_run), so helpers only join in.
    void run(const std::function<void()>& task)
    {
        std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
        if (!busy.owns_lock() || helpers_.empty()) {
            task();
            return;
        }
        {
            std::lock_guard<std::mutex> g(m_);
            task_ = &task;
            ++generation_;
            active_ = helpers_.size();
        }
        wake_.notify_all();
        task();
        std::unique_lock<std::mutex> g(m_);
        done_.wait(g, [&] { return active_ == 0; });
        task_ = nullptr;
    }

private:
    explicit BlockPool(unsigned helpers)
    {
        for (unsigned i = 0; i < helpers; ++i) {
            helpers_.emplace_back([this] { loop(); });
            helpers_.back().detach();
        }
    }

    void loop()
    {
        uint64_t seen = 0;
        for (;;) {
            const std::function<void()>* task;
            {
                std::unique_lock<std::mutex> g(m_);
                wake_.wait(g, [&] { return generation_ != seen; });
                seen = generation_;
                task = task_;
            }
            (*task)();
            std::lock_guard<std::mutex> g(m_);
            if (--active_ == 0) {
                done_.notify_one();
            }
        }
    }

    std::mutex busy_;
    std::mutex m_;
    std::condition_variable wake_, done_;
    const std::function<void()>* task_ = nullptr;
    uint64_t generation_ = 0;
    size_t active_ = 0;
    std::vector<std::thread> helpers_;
};

}  // namespace
}  // namespace ascendc_emu

// Blocks may run on several host threads at once (BURN_ASCEND_EMU_THREADS), each a fresh vector
// core with its own unified buffer; each block only records what it touched in GM, and atomic
// stores wait. When all have run, the launch is decided in the shuffled block order as if the
// blocks had run one after another in it: the first block (in that order) that broke a rule or
// touched bytes an earlier block touched in a racing way fails the launch with that message, the
// blocks before it count as run (their atomic stores applied in that order, their printf text
// printed), and nothing after it does. So results, messages and atomic summation order depend on
// the seed, never on the threads' timing.
extern "C" int32_t ascendc_emu_run(void* gm_ctx, const char* name, uint32_t block_dim, void (*entry)(void* args),
                                   void* args, AscendcEmuStats* stats, AscendcEmuBlockStats* per_block, char* err,
                                   size_t err_len)
{
    using namespace ascendc_emu;
    AscendcEmuStats total = {};
    write_message(err, err_len, "");
    if (per_block != nullptr) {
        std::fill_n(per_block, block_dim, AscendcEmuBlockStats{});
    }
    const char* kernel = name != nullptr ? name : "?";
    std::string refused;
    if (t_running_core != nullptr || entry == nullptr) {
        refused = entry == nullptr ? "no entry function" : "launched from inside a running kernel";
    } else if (!block_seed().second.empty()) {
        refused = block_seed().second;
    } else if (!block_threads().second.empty()) {
        refused = block_threads().second;
    }
    if (!refused.empty()) {
        write_message(err, err_len, std::string("kernel ") + kernel + ": " + refused);
        if (stats != nullptr) {
            *stats = total;
        }
        return kAicoreException;
    }
    const std::vector<uint32_t> order = block_order(kernel, block_dim);
    std::vector<BlockRun> runs(order.size());
    // Blocks are taken in the launch order; once one has failed, later ones need not run.
    std::atomic<size_t> next{0};
    std::atomic<size_t> firstFailure{order.size()};
    const std::function<void()> task = [&] {
        for (size_t i = next++; i < order.size() && i < firstFailure.load(); i = next++) {
            run_block(kernel, order[i], block_dim, entry, args, gm_ctx, runs[i]);
            if (!runs[i].failure.empty()) {
                size_t f = firstFailure.load();
                while (i < f && !firstFailure.compare_exchange_weak(f, i)) {
                }
            }
        }
    };
    if (order.size() > 1) {
        BlockPool::get().run(task);
    } else {
        task();
    }

    int32_t status = 0;
    Touched launch;
    // The launch's kind of core: the first block's (in the launch order); every block must agree.
    const CoreKind kind = order.empty() ? CoreKind::Vector : runs[0].core.kind;
    total.core_kind = kind == CoreKind::Cube ? ASCENDC_EMU_CORE_CUBE : ASCENDC_EMU_CORE_VECTOR;
    for (size_t i = 0; status == 0 && i < order.size(); ++i) {
        const uint32_t b = order[i];
        BlockRun& run = runs[i];
        std::string failure = first_race(run, b, launch);
        if (failure.empty()) {
            failure = run.failure;
        }
        if (failure.empty() && run.core.kind != kind) {
            failure = format("the block ran on a %s core but block %u on a %s core: KERNEL_TASK_TYPE_DEFAULT must "
                             "give every block of a launch the same kind of core",
                             run.core.kind == CoreKind::Cube ? "cube" : "vector", order[0],
                             kind == CoreKind::Cube ? "cube" : "vector");
        }
        total.gm_bytes_read += run.core.gmRead;
        total.gm_bytes_written += run.core.gmWritten;
        total.data_copies += run.core.dataCopies;
        total.ub_peak_bytes = std::max(total.ub_peak_bytes, run.core.ubPeak);
        total.vector_instructions += run.core.vecInstrs;
        total.vector_repeats += run.core.vecRepeats;
        total.cube_cycles += run.core.cubeCycles;
        total.mmad_calls += run.core.mmadCalls;
        if (per_block != nullptr) {
            per_block[b] = AscendcEmuBlockStats{run.core.gmRead + run.core.gmWritten, run.core.vecInstrs,
                                                run.core.vecRepeats, run.core.cubeCycles, run.core.mmadCalls};
        }
        if (!failure.empty()) {
            write_message(err, err_len, "kernel " + std::string(kernel) + ", block " + std::to_string(b) + ": " + failure);
            status = kAicoreException;
            break;
        }
        for (GmAccess kind : {GmAccess::Read, GmAccess::Write, GmAccess::Atomic}) {
            launch.of(kind).add_sorted(run.ranges(kind), b);
        }
        for (const DeferredAtomic& a : run.atomics) {
            a.apply(a.gm, run.atomicBytes.data() + a.at, a.bytes);
        }
        if (!run.core.printed.empty()) {
            // The NPU prints a kernel's printf output after the kernel; here, after its block.
            std::fprintf(stderr, "[%s, block %u] %s", kernel, b, run.core.printed.c_str());
        }
    }
    if (stats != nullptr) {
        *stats = total;
    }
    return status;
}
