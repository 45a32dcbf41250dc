// nnopbase's aclGetViewShape (and its siblings) returns an array the caller must free with C++
// delete[] (acl-abi.md 6.2): Rust cannot call delete[], so these functions do it on its behalf.
// The emulated nnopbase allocates its arrays here too, so new[] and delete[] pair up in both
// cases; the arrays allocated here are remembered until deleted, so a test can prove that
// nothing leaks.
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_set>

namespace {
std::mutex g_lock;
std::unordered_set<const int64_t*>& live()
{
    static std::unordered_set<const int64_t*> set;
    return set;
}
}  // namespace

extern "C" int64_t* ascend_acl_new_i64_array(size_t n)
{
    int64_t* p = new int64_t[n == 0 ? 1 : n];
    std::lock_guard<std::mutex> guard(g_lock);
    live().insert(p);
    return p;
}

extern "C" void ascend_acl_delete_i64_array(int64_t* p)
{
    {
        std::lock_guard<std::mutex> guard(g_lock);
        live().erase(p);
    }
    delete[] p;
}

extern "C" size_t ascend_acl_i64_arrays_live()
{
    std::lock_guard<std::mutex> guard(g_lock);
    return live().size();
}
