//! Paged prefill attention through `aclnnFusedInferAttentionScoreV3` (Atlas A2): each request's
//! chunk of new tokens attends to the request's cached pages, itself included, through a block
//! table, without listing each token's keys or gathering them. The operator's paged form (as
//! vllm-ascend calls it for chunked prefill): query `[T, HQ, D]` in layout "TND" with the chunk
//! lengths as running totals, the key and value caches viewed as `[blocks, page_size, HKV * D]`,
//! sparseMode 3 (rightDownCausal) with the compressed `[2048, 2048]` mask. Its contract (f16/bf16,
//! page sizes, head dims) is `../shared/ascend/aclnn-ops.tsv` (aclnnFusedInferAttentionScoreV3)
//! with the emulation's stricter readings (see `ascend-emulator/src/fia.rs`).

use std::ffi::CStr;

use super::{same_device, Operand};
use crate::acl::aclnn;
use crate::acl::handles::{Absent, IntArrayDesc, TensorListDesc};
use crate::acl::{AclApi, AclResult, DataType};
use crate::ops::broadcast::invalid_input;
use crate::ops::copy::{contiguous, reshape};
use crate::ops::tensor::AscendTensor;

const LAYOUT: &CStr = c"TND";
/// sparseMode 3: rightDownCausal, a chunk's row `i` sees the keys up to `kv - q + i`.
const RIGHT_DOWN_CAUSAL: i64 = 3;
/// innerPrecise 0: the high-precision softmax.
const HIGH_PRECISION: i64 = 0;
/// The side of the compressed causal mask sparseMode 3 takes (1 above the diagonal).
pub const CAUSAL_MASK_SIDE: usize = 2048;
/// Page sizes the operator's paged prompt branch takes: multiples of 128 up to 512 (the
/// stricter reading, see `ascend-emulator/src/fia.rs`).
const PAGE_ALIGN: usize = 128;
const MAX_PAGE: usize = 512;
/// Head dims: multiples of 16 up to 512.
const HEAD_ALIGN: usize = 16;
const MAX_HEAD: usize = 512;

/// Why the operator cannot run a paged prefill of these sizes, or `None` when it can: the
/// rules the server checks before choosing it (it keeps `decode_attention` otherwise).
pub fn paged_prefill_refusal(
    dtype: DataType,
    page_size: usize,
    key_dim: usize,
    value_dim: Option<usize>,
) -> Option<String> {
    if !matches!(dtype, DataType::F16 | DataType::BF16) {
        return Some(format!(
            "aclnnFusedInferAttentionScoreV3 takes f16 or bf16 on Atlas A2, not {dtype}"
        ));
    }
    if !page_size.is_multiple_of(PAGE_ALIGN) || page_size > MAX_PAGE {
        return Some(format!(
            "page size {page_size}: the paged form takes a multiple of {PAGE_ALIGN}, at most {MAX_PAGE}"
        ));
    }
    if !key_dim.is_multiple_of(HEAD_ALIGN) || key_dim == 0 || key_dim > MAX_HEAD {
        return Some(format!(
            "head dim {key_dim}: the paged form takes a multiple of {HEAD_ALIGN}, at most {MAX_HEAD}"
        ));
    }
    match value_dim {
        Some(v) if v == key_dim => None,
        Some(v) => Some(format!("value dim {v} differs from the key dim {key_dim}")),
        None => Some("the cache has no value rows (multi-head latent attention)".into()),
    }
}

/// Why `api`'s CANN cannot run the paged prefill, or `None` when it exports
/// aclnnFusedInferAttentionScoreV3: the operator is newer than CANN 8.0 (`ascend_acl::release`),
/// and a release without it does not export it (a call would fail with `MissingOp`).
pub fn paged_prefill_missing(api: &AclApi) -> Option<String> {
    ascend_acl::aclnn_exported!(api, aclnnFusedInferAttentionScoreV3)
        .err()
        .map(|e| format!("{}: {e}", api.source().describe()))
}

/// The contract of [`paged_prefill_attention`]: `q [T, HQ, D]`, caches `[N, HKV, D]` of q's
/// dtype with N a multiple of `page_size`, HQ a multiple of HKV, `block_table [B, W]` int32,
/// one chunk and one cached length per row, the chunks covering T, each chunk at most its
/// cached length (which includes it) and the cached lengths within W pages; `mask` the
/// `[2048, 2048]` causal mask (`None` when the caller passes none: `Fusion<Ascend>` records the
/// call without it, `Ascend` adds it when the call runs); the operator's dtype, page-size and
/// head-dim rules.
#[allow(clippy::too_many_arguments)]
pub fn check_paged_prefill_attention<T: Operand>(
    q: &T,
    k_cache: &T,
    v_cache: &T,
    block_table: &T,
    mask: Option<&T>,
    q_lens: &[usize],
    kv_lens: &[usize],
    page_size: usize,
) -> AclResult<()> {
    const OP: &str = "paged_prefill_attention";
    let inputs = || {
        format!(
            "q {}, k_cache {}, v_cache {}, block_table {}, q_lens {q_lens:?}, kv_lens {kv_lens:?}, page_size {page_size}",
            q.describe(),
            k_cache.describe(),
            v_cache.describe(),
            block_table.describe()
        )
    };
    let (qd, kd, vd, td) = (q.dims(), k_cache.dims(), v_cache.dims(), block_table.dims());
    let shapes_fit = qd.len() == 3
        && kd.len() == 3
        && vd.len() == 3
        && td.len() == 2
        && kd[1] > 0
        && qd[1].is_multiple_of(kd[1])
        && kd[2] == qd[2]
        && vd[..2] == kd[..2]
        && page_size > 0
        && kd[0].is_multiple_of(page_size);
    if !shapes_fit {
        return Err(invalid_input(
            OP,
            format!("needs q [T, HQ, D], k_cache [N, HKV, D], v_cache [N, HKV, Dv] with HQ a multiple of HKV and N of page_size, block_table [B, W]; got {}", inputs()),
        ));
    }
    let dtype = q.data_type();
    if k_cache.data_type() != dtype || v_cache.data_type() != dtype {
        return Err(invalid_input(
            OP,
            format!("q and the caches must share a dtype: {}", inputs()),
        ));
    }
    let mask_type = |m: &T| matches!(m.data_type(), DataType::Bool | DataType::U8 | DataType::I8);
    if block_table.data_type() != DataType::I32 || !mask.is_none_or(mask_type) {
        return Err(invalid_input(
            OP,
            format!(
                "block_table must be int32 and mask bool or 8-bit, got {} and {}",
                block_table.describe(),
                mask.map_or("no mask".into(), |m| m.describe())
            ),
        ));
    }
    if let Some(m) = mask.filter(|m| m.dims() != [CAUSAL_MASK_SIDE, CAUSAL_MASK_SIDE]) {
        return Err(invalid_input(
            OP,
            format!("mask must be [2048, 2048], got {}", m.describe()),
        ));
    }
    if let Some(why) = paged_prefill_refusal(dtype, page_size, qd[2], Some(vd[2])) {
        return Err(invalid_input(OP, format!("{why}: {}", inputs())));
    }
    let capacity = td[1] * page_size;
    let lens_fit = q_lens.len() == td[0]
        && kv_lens.len() == td[0]
        && q_lens.iter().sum::<usize>() == qd[0]
        && q_lens
            .iter()
            .zip(kv_lens)
            .all(|(&q, &kv)| q <= kv && kv <= capacity);
    if !lens_fit {
        return Err(invalid_input(
            OP,
            format!(
                "needs one chunk length and one cached length per block-table row, chunks adding up to T, each chunk at most its cached length, cached lengths at most W x page_size = {capacity}: {}",
                inputs()
            ),
        ));
    }
    Ok(())
}

/// Paged prefill attention (see `FusedOps::paged_prefill_attention`): `[T, HQ, D]` in q's
/// dtype. `mask` is the `[2048, 2048]` bool causal mask (true above the diagonal).
#[allow(clippy::too_many_arguments)]
pub fn paged_prefill_attention(
    q: &AscendTensor,
    k_cache: &AscendTensor,
    v_cache: &AscendTensor,
    block_table: &AscendTensor,
    mask: &AscendTensor,
    q_lens: &[usize],
    kv_lens: &[usize],
    page_size: usize,
    sm_scale: f32,
) -> AclResult<AscendTensor> {
    const OP: &str = "paged_prefill_attention";
    same_device(
        OP,
        &[
            Some(q),
            Some(k_cache),
            Some(v_cache),
            Some(block_table),
            Some(mask),
        ],
    )?;
    check_paged_prefill_attention(
        q,
        k_cache,
        v_cache,
        block_table,
        Some(mask),
        q_lens,
        kv_lens,
        page_size,
    )?;
    let ctx = q.ctx();
    let out = AscendTensor::empty(ctx, q.shape().to_vec(), q.dtype)?;
    if q.shape()[0] == 0 || q.shape()[1] == 0 {
        return Ok(out);
    }
    let [slots, kv_heads, dim] = [k_cache.shape()[0], k_cache.shape()[1], k_cache.shape()[2]];
    let paged = |t: &AscendTensor| {
        reshape(
            &contiguous(t)?,
            vec![slots / page_size, page_size, kv_heads * dim],
        )
    };
    let (k, v) = (paged(k_cache)?, paged(v_cache)?);
    let (query, table, mask) = (contiguous(q)?, contiguous(block_table)?, contiguous(mask)?);
    let api = ctx.bind();
    let keys = TensorListDesc::new(api, vec![k.desc_owned()?])?;
    let values = TensorListDesc::new(api, vec![v.desc_owned()?])?;
    let mut ends = Vec::with_capacity(q_lens.len());
    let mut total = 0i64;
    for &n in q_lens {
        total += n as i64;
        ends.push(total);
    }
    let kv: Vec<i64> = kv_lens.iter().map(|&n| n as i64).collect();
    let (ends, kv) = (IntArrayDesc::new(api, &ends)?, IntArrayDesc::new(api, &kv)?);
    let heads = q.shape()[1] as i64;
    aclnn!(
        &**ctx,
        aclnnFusedInferAttentionScoreV3(
            query.desc()?,
            &keys,
            &values,
            Absent,
            mask.desc()?,
            &ends,
            &kv,
            Absent,
            Absent,
            Absent,
            Absent,
            Absent,
            Absent,
            Absent,
            table.desc()?,
            Absent,
            Absent,
            Absent,
            Absent,
            Absent,
            Absent,
            Absent,
            Absent,
            Absent,
            Absent,
            Absent,
            Absent,
            heads,
            sm_scale as f64,
            i64::from(i32::MAX),
            0i64,
            LAYOUT,
            kv_heads as i64,
            RIGHT_DOWN_CAUSAL,
            HIGH_PRECISION,
            page_size as i64,
            0i64,
            false,
            0i64,
            0i64,
            out.desc()?,
            Absent
        )
    )
    .map_err(|e| {
        e.with_context(|| {
            format!(
                "{OP}: aclnnFusedInferAttentionScoreV3 of q {} over caches {} in pages of {page_size}",
                q.describe(),
                k_cache.describe()
            )
        })
    })?;
    Ok(out)
}
