// Host emulation of Ascend C: DataCopy and DataCopyPad (ascendc-api.md §4, §9.2-9.4). On a cube
// core the plain GM -> local forms fill L1 (A1/B1/C1) instead of the UB (cube-api.md §2.3); the
// other forms need a unified buffer, which a cube core does not have.
//
// Copies run synchronously when issued: the MTE2/MTE3 pipes are not modelled as asynchronous, so
// a missing SetFlag/WaitFlag between a copy and its consumer is not detected (README).
// UB->GM copies add/max/min into GM while an atomic mode is set (sync.h).
#ifndef ASCENDC_EMU_DATA_COPY_H
#define ASCENDC_EMU_DATA_COPY_H

#include <cinttypes>
#include <cstring>

#include "ascendc_emu/tensor.h"

namespace ascendc_emu {

inline uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

/// Count forms move whole 32-byte blocks: the NPU rounds the length down silently.
template <class T>
void check_copy_count(const char* api, uint32_t count)
{
    const uint64_t bytes = static_cast<uint64_t>(count) * sizeof(T);
    if (bytes % kBlockBytes != 0) {
        fail("%s: count %" PRIu32 " of %s is %" PRIu64 " bytes, not a multiple of 32 (the NPU silently rounds it "
             "down to %" PRIu64 " bytes and moves nothing else); use DataCopyPad for the tail",
             api, count, type_name<T>(), bytes, bytes / kBlockBytes * kBlockBytes);
    }
}

inline void check_block_count(const char* api, uint32_t blockCount)
{
    if (blockCount > kMaxBlockCount) {
        fail("%s: blockCount %" PRIu32 " exceeds %u", api, blockCount, kMaxBlockCount);
    }
}

/// How a UB -> GM copy touches GM: atomically while an atomic mode is on.
inline GmAccess store_access() { return core().atomicApply != nullptr ? GmAccess::Atomic : GmAccess::Write; }

/// Records `rows` rows of `rowBytes` bytes, `pitch` bytes apart from `addr`, for the race check.
inline void note_rows(uint64_t addr, uint64_t rows, uint64_t rowBytes, uint64_t pitch, GmAccess kind, const char* api)
{
    if (pitch == rowBytes) {
        note_gm(addr, rows * rowBytes, kind, api);
        return;
    }
    for (uint64_t i = 0; i < rows; ++i) {
        note_gm(addr + i * pitch, rowBytes, kind, api);
    }
}

/// Writes `bytes` of UB data to GM: a plain store, or (while atomic mode is on) the atomic
/// combine, applied when the launch ends.
inline void gm_store(uint8_t* gm, const uint8_t* ub, uint64_t bytes)
{
    const CoreState& c = core();
    if (c.atomicApply != nullptr) {
        defer_atomic(gm, ub, bytes);
    } else {
        std::memmove(gm, ub, bytes);
    }
}

/// A strided block copy: `rows` rows of `rowBytes`, the source rows `srcPitch` apart and the
/// destination rows `dstPitch` apart (pitches in bytes).
struct Rows {
    uint64_t rows;
    uint64_t rowBytes;
    uint64_t srcPitch;
    uint64_t dstPitch;

    uint64_t src_span() const { return rows == 0 ? 0 : (rows - 1) * srcPitch + rowBytes; }
    uint64_t dst_span() const { return rows == 0 ? 0 : (rows - 1) * dstPitch + rowBytes; }
    uint64_t moved() const { return rows * rowBytes; }
};

inline Rows params_rows(const AscendC::DataCopyParams& p)
{
    const uint64_t len = static_cast<uint64_t>(p.blockLen) * kBlockBytes;
    if (p.blockCount == 0 || p.blockLen == 0) {  // a NOP on A2/A3
        return Rows{0, 0, 0, 0};
    }
    return Rows{p.blockCount, len, len + static_cast<uint64_t>(p.srcStride) * kBlockBytes,
                len + static_cast<uint64_t>(p.dstStride) * kBlockBytes};
}

/// The name of a GM -> local copy on the running core: into the UB (vector core) or L1 (cube core).
inline const char* gm_in_api(const char* toUb, const char* toL1)
{
    return core().kind == CoreKind::Cube ? toL1 : toUb;
}

/// GM -> UB on a vector core, GM -> L1 (MTE2, 32-byte aligned destination) on a cube core.
template <class T>
void copy_gm_in(const char* api, const AscendC::LocalTensor<T>& dst, const AscendC::GlobalTensor<T>& src,
                const Rows& r)
{
    uint8_t* local = core().kind == CoreKind::Cube ? local_operand(api, "dst", dst, r.dst_span(), Phys::L1, kBlockBytes)
                                                : ub_operand(api, "dst", dst, r.dst_span());
    const uint8_t* gm = TensorAccess::gm_span(src, 0, r.src_span(), true, api);
    note_rows(TensorAccess::gm_addr(src), r.rows, r.rowBytes, r.srcPitch, GmAccess::Read, api);
    for (uint64_t i = 0; i < r.rows; ++i) {
        std::memmove(local + i * r.dstPitch, gm + i * r.srcPitch, r.rowBytes);
    }
    count_copy(r.moved(), false);
}

template <class T>
void copy_ub_to_gm(const char* api, const AscendC::GlobalTensor<T>& dst, const AscendC::LocalTensor<T>& src,
                   const Rows& r)
{
    const uint8_t* ub = ub_operand(api, "src", src, r.src_span());
    uint8_t* gm = TensorAccess::gm_span(dst, 0, r.dst_span(), true, api);
    note_rows(TensorAccess::gm_addr(dst), r.rows, r.rowBytes, r.dstPitch, store_access(), api);
    for (uint64_t i = 0; i < r.rows; ++i) {
        gm_store(gm + i * r.dstPitch, ub + i * r.srcPitch, r.rowBytes);
    }
    count_copy(r.moved(), true);
}

template <class T>
void copy_ub_to_ub(const char* api, const AscendC::LocalTensor<T>& dst, const AscendC::LocalTensor<T>& src,
                   const Rows& r)
{
    uint8_t* d = ub_operand(api, "dst", dst, r.dst_span());
    const uint8_t* s = ub_operand(api, "src", src, r.src_span());
    for (uint64_t i = 0; i < r.rows; ++i) {
        std::memmove(d + i * r.dstPitch, s + i * r.srcPitch, r.rowBytes);
    }
}

template <class T>
Rows count_rows(const char* api, uint32_t count)
{
    check_copy_count<T>(api, count);
    const uint64_t bytes = static_cast<uint64_t>(count) * sizeof(T);
    return Rows{bytes == 0 ? 0u : 1u, bytes, bytes, bytes};
}

template <class T>
Rows checked_params_rows(const char* api, const AscendC::DataCopyParams& p)
{
    check_block_count(api, p.blockCount);
    return params_rows(p);
}

/// DataCopyPad's common checks: byte length in whole elements, range limits.
template <class T>
void check_pad_params(const char* api, const AscendC::DataCopyExtParams& p)
{
    check_block_count(api, p.blockCount);
    if (p.blockLen > kMaxPadBlockLen) {
        fail("%s: blockLen %" PRIu32 " bytes exceeds %" PRIu32, api, p.blockLen, kMaxPadBlockLen);
    }
    if (p.blockLen % sizeof(T) != 0) {
        fail("%s: blockLen %" PRIu32 " bytes is not a whole number of %s elements", api, p.blockLen, type_name<T>());
    }
}

}  // namespace ascendc_emu

namespace AscendC {

// ---- DataCopy: count forms (count * sizeof(T) must be a multiple of 32 bytes) ----

/// GM -> UB, or GM -> L1 on a cube core (MTE2).
template <typename T>
ascendc_emu::Requires<ascendc_emu::copy_type<T>> DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src,
                                                           const uint32_t count)
{
    const char* api = ascendc_emu::gm_in_api("DataCopy(GM->UB)", "DataCopy(GM->L1)");
    ascendc_emu::copy_gm_in(api, dst, src, ascendc_emu::count_rows<T>(api, count));
}

/// UB -> GM (MTE3).
template <typename T>
ascendc_emu::Requires<ascendc_emu::copy_type<T>> DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src,
                                                           const uint32_t count)
{
    const char* api = "DataCopy(UB->GM)";
    ascendc_emu::copy_ub_to_gm(api, dst, src, ascendc_emu::count_rows<T>(api, count));
}

/// UB -> UB.
template <typename T>
ascendc_emu::Requires<ascendc_emu::copy_type<T>> DataCopy(const LocalTensor<T>& dst, const LocalTensor<T>& src,
                                                           const uint32_t count)
{
    const char* api = "DataCopy(UB->UB)";
    ascendc_emu::copy_ub_to_ub(api, dst, src, ascendc_emu::count_rows<T>(api, count));
}

// ---- DataCopy: block forms (blockLen and strides in 32-byte blocks on both sides) ----

template <typename T>
ascendc_emu::Requires<ascendc_emu::copy_type<T>> DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src,
                                                           const DataCopyParams& params)
{
    const char* api = ascendc_emu::gm_in_api("DataCopy(GM->UB, DataCopyParams)", "DataCopy(GM->L1, DataCopyParams)");
    ascendc_emu::copy_gm_in(api, dst, src, ascendc_emu::checked_params_rows<T>(api, params));
}

template <typename T>
ascendc_emu::Requires<ascendc_emu::copy_type<T>> DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src,
                                                           const DataCopyParams& params)
{
    const char* api = "DataCopy(UB->GM, DataCopyParams)";
    ascendc_emu::copy_ub_to_gm(api, dst, src, ascendc_emu::checked_params_rows<T>(api, params));
}

template <typename T>
ascendc_emu::Requires<ascendc_emu::copy_type<T>> DataCopy(const LocalTensor<T>& dst, const LocalTensor<T>& src,
                                                           const DataCopyParams& params)
{
    const char* api = "DataCopy(UB->UB, DataCopyParams)";
    ascendc_emu::copy_ub_to_ub(api, dst, src, ascendc_emu::checked_params_rows<T>(api, params));
}

// ---- DataCopyPad: byte lengths, any GM address ----

/// GM -> UB. Each row lands as [left padding][blockLen bytes][right padding][dummy to 32 B];
/// padding holds paddingValue when isPad, garbage otherwise; the dummy bytes are garbage.
template <typename T>
ascendc_emu::Requires<ascendc_emu::copy_type<T>> DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src,
                                                              const DataCopyExtParams& params,
                                                              const DataCopyPadExtParams<T>& padParams)
{
    using namespace ascendc_emu;
    const char* api = "DataCopyPad(GM->UB)";
    check_pad_params<T>(api, params);
    const uint64_t left = padParams.leftPadding * sizeof(T);
    const uint64_t right = padParams.rightPadding * sizeof(T);
    if (left > kBlockBytes || right > kBlockBytes) {
        fail("%s: padding of %u + %u elements of %s exceeds 32 bytes per side", api, padParams.leftPadding,
             padParams.rightPadding, type_name<T>());
    }
    if constexpr (sizeof(T) == 8) {
        if (padParams.paddingValue != 0) {
            fail("%s: paddingValue must be 0 for 64-bit types", api);
        }
    }
    if (params.blockCount == 0 || params.blockLen == 0) {  // a NOP on A2/A3
        ub_operand(api, "dst", dst, 0);
        count_copy(0, false);
        return;
    }
    const uint64_t rowUb = align_up(params.blockLen + left + right, kBlockBytes);
    const Rows gmRows{params.blockCount, params.blockLen, params.blockLen + static_cast<uint64_t>(params.srcStride), 0};
    const uint64_t ubPitch = rowUb + static_cast<uint64_t>(params.dstStride) * kBlockBytes;
    const uint64_t footprint = params.blockCount * rowUb + (params.blockCount - 1ull) * params.dstStride * kBlockBytes;
    uint8_t* ub = ub_operand(api, "dst", dst, footprint);
    const uint8_t* gm = TensorAccess::gm_span(src, 0, gmRows.src_span(), false, api);
    note_rows(TensorAccess::gm_addr(src), gmRows.rows, gmRows.rowBytes, gmRows.srcPitch, GmAccess::Read, api);
    for (uint64_t i = 0; i < gmRows.rows; ++i) {
        uint8_t* row = ub + i * ubPitch;
        std::memset(row, kPoison, rowUb);
        std::memcpy(row + left, gm + i * gmRows.srcPitch, params.blockLen);
        if (padParams.isPad) {
            for (uint64_t k = 0; k < padParams.leftPadding; ++k) {
                store<T>(row, k, padParams.paddingValue);
            }
            for (uint64_t k = 0; k < padParams.rightPadding; ++k) {
                store<T>(row + left + params.blockLen, k, padParams.paddingValue);
            }
        }
    }
    count_copy(gmRows.moved(), false);
}

/// UB -> GM. Exactly blockLen bytes per row reach GM; the UB rows are 32-byte padded.
template <typename T>
ascendc_emu::Requires<ascendc_emu::copy_type<T>> DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src,
                                                              const DataCopyExtParams& params)
{
    using namespace ascendc_emu;
    const char* api = "DataCopyPad(UB->GM)";
    check_pad_params<T>(api, params);
    if (params.blockCount == 0 || params.blockLen == 0) {  // a NOP on A2/A3
        ub_operand(api, "src", src, 0);
        count_copy(0, true);
        return;
    }
    const Rows r{params.blockCount, params.blockLen,
                 align_up(params.blockLen, kBlockBytes) + static_cast<uint64_t>(params.srcStride) * kBlockBytes,
                 params.blockLen + static_cast<uint64_t>(params.dstStride)};
    const uint8_t* ub = ub_operand(api, "src", src, r.src_span());
    uint8_t* gm = TensorAccess::gm_span(dst, 0, r.dst_span(), false, api);
    note_rows(TensorAccess::gm_addr(dst), r.rows, r.rowBytes, r.dstPitch, store_access(), api);
    for (uint64_t i = 0; i < r.rows; ++i) {
        gm_store(gm + i * r.dstPitch, ub + i * r.srcPitch, r.rowBytes);
    }
    count_copy(r.moved(), true);
}

}  // namespace AscendC

#endif
