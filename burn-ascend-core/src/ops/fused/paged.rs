//! The paged KV-cache kernels: `alloc_extend` (slot allocation for growing requests),
//! `kv_cache_write` (a step's key and value rows into their slots, one launch) and split-KV
//! `decode_attention` (one query token per request over a slot-indexed cache). All read every
//! length, slot, index and split count on the device; nothing here waits for the host.

use burn_ascend_kernels::launch;
use burn_ascend_kernels::tiling::{self, DecodePlan, DecodeShape, DecodeStage1};

pub use burn_ascend_kernels::tiling::DecodePath;

use super::{check_index, data_ptr, device_props, norm_type, Operand};
use crate::acl::{AclResult, DataType};
use crate::ops::broadcast::invalid_input;
use crate::ops::copy::{cast, contiguous};
use crate::ops::tensor::AscendTensor;

/// The kernels keep token positions and key counts in int32 on the scalar unit.
const I32_LIMIT: usize = i32::MAX as usize;

/// The operands of an `alloc_extend` call, for its errors.
fn alloc_inputs<T: Operand>(prefix_lens: &T, seq_lens: &T, last_loc: &T, free_pages: &T) -> String {
    format!(
        "prefix_lens {}, seq_lens {}, last_loc {}, free_pages {}",
        prefix_lens.describe(),
        seq_lens.describe(),
        last_loc.describe(),
        free_pages.describe()
    )
}

/// The operands of a `decode_attention` call, for its errors.
fn decode_inputs<T: Operand>(
    q: &T,
    k_cache: &T,
    v_cache: Option<&T>,
    kv_indptr: &T,
    kv_indices: &T,
    num_kv_splits: &T,
) -> String {
    format!(
        "q {}, k_cache {}, v_cache {}, kv_indptr {}, kv_indices {}, num_kv_splits {}",
        q.describe(),
        k_cache.describe(),
        v_cache.map_or("None".into(), Operand::describe),
        kv_indptr.describe(),
        kv_indices.describe(),
        num_kv_splits.describe()
    )
}

/// The contract of [`alloc_extend`]: `[B]` lengths and last slots and a `[P]` free list, all
/// int32 or all int64; sizes within the kernel's int32 positions.
pub fn check_alloc_extend<T: Operand>(
    prefix_lens: &T,
    seq_lens: &T,
    last_loc: &T,
    free_pages: &T,
    page_size: usize,
    extend_total: usize,
) -> AclResult<()> {
    const OP: &str = "alloc_extend";
    let inputs = || alloc_inputs(prefix_lens, seq_lens, last_loc, free_pages);
    let dtype = prefix_lens.data_type();
    if !matches!(dtype, DataType::I32 | DataType::I64)
        || [seq_lens, last_loc, free_pages]
            .iter()
            .any(|t| t.data_type() != dtype)
    {
        return Err(invalid_input(
            OP,
            format!(
                "the index tensors must be all int32 or all int64, got {}",
                inputs()
            ),
        ));
    }
    let batch_shape = prefix_lens.dims();
    if batch_shape.len() != 1
        || seq_lens.dims() != batch_shape
        || last_loc.dims() != batch_shape
        || free_pages.dims().len() != 1
    {
        return Err(invalid_input(
            OP,
            format!(
                "prefix_lens, seq_lens and last_loc must be [B] and free_pages [P], got {}",
                inputs()
            ),
        ));
    }
    let (batch, pages) = (batch_shape[0], free_pages.dims()[0]);
    if page_size == 0 || page_size > I32_LIMIT {
        return Err(invalid_input(
            OP,
            format!("page_size must be in 1..=2^31-1, got {page_size}"),
        ));
    }
    if extend_total > I32_LIMIT || batch > I32_LIMIT || pages > u32::MAX as usize {
        return Err(invalid_input(
            OP,
            format!(
                "extend_total {extend_total} and B must be below 2^31 and P below 2^32, got {}",
                inputs()
            ),
        ));
    }
    Ok(())
}

/// Cache slots for the new tokens of a batch of requests growing from `prefix_lens[b]` to
/// `seq_lens[b]` tokens in pages of `page_size` slots (fused-ops contract 4), by the
/// `alloc_extend` kernel: `(out_slots [extend_total], totals [2])`, both of the index dtype.
///
/// `prefix_lens`, `seq_lens`, `last_loc` are `[B]` and `free_pages` is `[P]`, all int32 or all
/// int64 (int64 when the cache holds 2^31 slots or more). `extend_total` must be
/// `sum(seq_lens - prefix_lens)`, which the scheduler knows on the host. The kernel writes the
/// totals on the device: pages taken and tokens extended.
///
/// Invalid input is checked by the kernel on the device and reported at the next
/// synchronisation or read as an AI Core error naming `alloc_extend` and the bad value: a
/// request with `prefix_lens < 0`, `seq_lens < prefix_lens` or `seq_lens >= 2^31`; a `last_loc`
/// that is not at the page offset of token `prefix_lens - 1` (when the request fills its partly
/// filled last page); a batch needing more pages than `free_pages` lists (the list is never read
/// past its end); a page id below 0 or too large for its slots to fit the index type; lengths
/// that do not add up to `extend_total`. Shapes and dtypes are checked here, before launch.
pub fn alloc_extend(
    prefix_lens: &AscendTensor,
    seq_lens: &AscendTensor,
    last_loc: &AscendTensor,
    free_pages: &AscendTensor,
    page_size: usize,
    extend_total: usize,
) -> AclResult<(AscendTensor, AscendTensor)> {
    const OP: &str = "alloc_extend";
    super::same_device(
        OP,
        &[
            Some(prefix_lens),
            Some(seq_lens),
            Some(last_loc),
            Some(free_pages),
        ],
    )?;
    check_alloc_extend(
        prefix_lens,
        seq_lens,
        last_loc,
        free_pages,
        page_size,
        extend_total,
    )?;
    let inputs = || alloc_inputs(prefix_lens, seq_lens, last_loc, free_pages);
    let dtype = prefix_lens.dtype;
    let (batch, pages) = (prefix_lens.shape()[0], free_pages.shape()[0]);
    let (prefix, seq) = (contiguous(prefix_lens)?, contiguous(seq_lens)?);
    let (last, free) = (contiguous(last_loc)?, contiguous(free_pages)?);
    let ctx = prefix.ctx();
    let slots = AscendTensor::empty(ctx, vec![extend_total], dtype)?;
    let totals = AscendTensor::empty(ctx, vec![2], dtype)?;
    let plan = tiling::alloc_extend(
        batch as u64,
        pages as u64,
        page_size as u64,
        extend_total as u64,
        dtype.size() as u64,
        &device_props(ctx)?,
    );
    let buffers = launch::AllocExtendBuffers {
        prefix_lens: data_ptr(&prefix),
        seq_lens: data_ptr(&seq),
        last_loc: data_ptr(&last),
        free_pages: data_ptr(&free),
        out_slots: data_ptr(&slots),
        totals: data_ptr(&totals),
    };
    // SAFETY: every buffer holds what the tiling describes and outlives the kernel in stream
    // order; the kernel never reads past free_pages nor writes past out_slots.
    ctx.launch_kernel(OP, |kernels, stream| unsafe {
        kernels.alloc_extend(stream, plan, buffers)
    })
    .map_err(|e| e.with_context(|| format!("{OP} of {}", inputs())))?;
    Ok((slots, totals))
}

/// One part of a [`kv_cache_write`]: `rows [T, cols]` go to columns `offset..offset + cols` of
/// the rows of `cache [S, stride]`, which is written in place.
#[derive(Debug, Clone, Copy)]
pub struct CachePart<'a, T> {
    /// The cache `[S, stride]`.
    pub cache: &'a T,
    /// The step's rows `[T, cols]`.
    pub rows: &'a T,
    /// The first column written.
    pub offset: usize,
}

/// The contract of [`kv_cache_write`]: one or two parts, `slots [T]` int32 or int64, each part's
/// `rows [T, cols]` and `cache [S, stride]` 2-D of one 2- or 4-byte float type (the caches all of
/// one), `offset + cols <= stride`, sizes within the kernel's 32-bit fields, and two parts of one
/// cache on columns apart (checked by [`kv_cache_write`], which sees the buffers).
pub fn check_kv_cache_write<T: Operand>(slots: &T, parts: &[CachePart<'_, T>]) -> AclResult<()> {
    const OP: &str = "kv_cache_write";
    let inputs = || {
        let parts: Vec<String> = parts
            .iter()
            .map(|p| {
                format!(
                    "rows {} into cache {} at column {}",
                    p.rows.describe(),
                    p.cache.describe(),
                    p.offset
                )
            })
            .collect();
        format!("slots {}, {}", slots.describe(), parts.join(", "))
    };
    let bad = |why: &str| Err(invalid_input(OP, format!("{why}, got {}", inputs())));
    if !(1..=2).contains(&parts.len()) {
        return bad("it writes one or two parts");
    }
    let tokens = slots.dims().first().copied().unwrap_or(0);
    check_index(OP, "slots", slots, tokens, true)?;
    let dtype = parts[0].cache.data_type();
    for p in parts {
        let (c, r) = (p.cache.dims(), p.rows.dims());
        if c.len() != 2 || r.len() != 2 || r[0] != tokens {
            return bad(
                "each part is rows [T, cols] into a cache [S, stride], T the slots' length",
            );
        }
        if p.cache.data_type() != dtype
            || !matches!(dtype, DataType::F32 | DataType::F16 | DataType::BF16)
            || !matches!(
                p.rows.data_type(),
                DataType::F32 | DataType::F16 | DataType::BF16
            )
        {
            return bad("the caches are all f32, f16 or bf16 of one type, and the rows float");
        }
        if p.offset + r[1] > c[1] {
            return bad("a part's columns lie inside its cache's rows");
        }
        if c[0] > I32_LIMIT || c[1] > I32_LIMIT || tokens > I32_LIMIT {
            return bad("the caches' rows and widths and the tokens stay below 2^31");
        }
    }
    Ok(())
}

/// Writes each token's rows of every part into row `slots[t]` of the part's cache, at the part's
/// columns, in place and in one launch of the `kv_cache_write` kernel (rows of another float
/// type are cast to the caches' first). Two parts may name one cache (MLA's latent and rotary
/// rows, written side by side without joining them first). A slot outside a cache's rows is an
/// AI Core error naming it; slots must be distinct (the scheduler's), as two tokens of one slot
/// race. The caches must be dense tensors of their own (not views that skip elements).
pub fn kv_cache_write(
    slots: &AscendTensor,
    parts: &[CachePart<'_, AscendTensor>],
) -> AclResult<()> {
    const OP: &str = "kv_cache_write";
    let mut all: Vec<Option<&AscendTensor>> = vec![Some(slots)];
    all.extend(parts.iter().flat_map(|p| [Some(p.cache), Some(p.rows)]));
    super::same_device(OP, &all)?;
    check_kv_cache_write(slots, parts)?;
    if let Some(view) = parts.iter().find(|p| !p.cache.layout.is_contiguous()) {
        return Err(invalid_input(
            OP,
            format!(
                "the cache {} is a strided view: the kernel writes whole rows of a dense cache",
                view.cache.describe()
            ),
        ));
    }
    if let [a, b] = parts {
        let start = |p: &CachePart<'_, AscendTensor>| p.cache.layout.offset + p.offset;
        let (sa, sb) = (start(a), start(b));
        let apart = sa + a.rows.shape()[1] <= sb || sb + b.rows.shape()[1] <= sa;
        if a.cache.storage_ptr() == b.cache.storage_ptr() && !apart {
            return Err(invalid_input(
                OP,
                format!(
                    "two parts of one cache must write columns apart, got {} at column {} and {} at column {} of {}",
                    a.rows.describe(),
                    a.offset,
                    b.rows.describe(),
                    b.offset,
                    a.cache.describe()
                ),
            ));
        }
    }
    let tokens = slots.shape()[0];
    if tokens == 0 {
        return Ok(());
    }
    let dtype = parts[0].cache.dtype;
    let rows: Vec<AscendTensor> = parts
        .iter()
        .map(|p| contiguous(&cast(p.rows, dtype)?))
        .collect::<AclResult<_>>()?;
    let slots = contiguous(slots)?;
    let ctx = slots.ctx();
    let shape: Vec<tiling::CachePart> = parts
        .iter()
        .map(|p| tiling::CachePart {
            cache_rows: p.cache.shape()[0] as u64,
            stride: p.cache.shape()[1] as u64,
            offset: p.offset as u64,
            cols: p.rows.shape()[1] as u64,
        })
        .collect();
    let plan = tiling::kv_cache_write(
        tokens as u64,
        &shape,
        dtype.size() as u64,
        slots.dtype.size() as u64,
        &device_props(ctx)?,
    );
    let second = |t: Option<&AscendTensor>| t.map_or(std::ptr::null_mut(), data_ptr);
    let buffers = launch::KvCacheWriteBuffers {
        slots: data_ptr(&slots),
        k: data_ptr(&rows[0]),
        v: second(rows.get(1)),
        k_cache: data_ptr(parts[0].cache),
        v_cache: second(parts.get(1).map(|p| p.cache)),
    };
    // SAFETY: as in `alloc_extend`; the kernel checks every slot before it writes.
    ctx.launch_kernel(OP, |kernels, stream| unsafe {
        kernels.kv_cache_write(stream, plan, buffers)
    })
    .map_err(|e| {
        let parts: Vec<String> = parts
            .iter()
            .map(|p| format!("{} into {}", p.rows.describe(), p.cache.describe()))
            .collect();
        e.with_context(|| format!("{OP} at slots {} of {}", slots.describe(), parts.join(", ")))
    })
}

/// The scalar parameters of [`decode_attention`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecodeAttentionOptions {
    /// Splits per request at most: the split dim of the stage-1 results. Every
    /// `num_kv_splits[b]` must lie in `1..=max_kv_splits`.
    pub max_kv_splits: usize,
    /// The softmax scale applied to `q . k`.
    pub sm_scale: f32,
    /// Soft cap: scores become `cap * tanh(s / cap)` (cap > 0).
    pub logit_cap: Option<f32>,
    /// The value head dim Dv: `v_cache`'s last dim, or, with no `v_cache` (the MLA layouts,
    /// Dk = 576 / Dv = 512 and 288 / 256), how many leading dims of each key row are its value.
    pub value_dim: usize,
    /// The kernels to run: `None` lets the device model choose the faster path for the shape
    /// ([`decode_attention_plan`] shows its estimates); `Some` takes that path, and fails if it
    /// cannot run the shape (the cube path takes half and bf16 with at least 2 query heads per
    /// key/value head). Both give the same results up to rounding; the composed default
    /// ignores it.
    pub path: Option<DecodePath>,
}

/// The results of [`decode_attention`].
#[derive(Debug, Clone)]
pub struct DecodeAttentionTensors {
    /// `[B, HQ, Dv]`, q's dtype: the attention output.
    pub out: AscendTensor,
    /// `[B, HQ]` f32: the log-sum-exp of each head's scores.
    pub lse: AscendTensor,
    /// `[B, HQ, max_kv_splits, Dv]` f32: stage 1's normalised output of each split (zeros for
    /// an empty split).
    pub part_out: AscendTensor,
    /// `[B, HQ, max_kv_splits]` f32: stage 1's log-sum-exp of each split (-inf when empty).
    pub part_lse: AscendTensor,
}

/// The sizes of a decode-attention call, as its contract found them.
pub struct DecodeDims {
    pub(super) batch: usize,
    pub(super) q_heads: usize,
    dim_k: usize,
    pub(super) slots: usize,
    kv_heads: usize,
    dim_v: usize,
    pub(super) keys: usize,
}

/// The contract of [`decode_attention`] (its shapes, dtypes and options; whether a head's rows
/// fit the unified buffer depends on the device and is checked at launch).
pub fn check_decode_attention<T: Operand>(
    q: &T,
    k_cache: &T,
    v_cache: Option<&T>,
    kv_indptr: &T,
    kv_indices: &T,
    num_kv_splits: &T,
    options: &DecodeAttentionOptions,
) -> AclResult<DecodeDims> {
    const OP: &str = "decode_attention";
    let inputs = || decode_inputs(q, k_cache, v_cache, kv_indptr, kv_indices, num_kv_splits);
    let fail = |what: String| Err(invalid_input(OP, format!("{what}; got {}", inputs())));
    norm_type(OP, q)?;
    let (&[batch, q_heads, dim_k], &[slots, kv_heads, key_dim]) = (q.dims(), k_cache.dims()) else {
        return fail("q must be [B, HQ, Dk] and k_cache [N, HKV, Dk]".into());
    };
    let dim_v = options.value_dim;
    if k_cache.data_type() != q.data_type()
        || v_cache.is_some_and(|v| v.data_type() != q.data_type())
    {
        return fail("q, k_cache and v_cache must have one dtype".into());
    }
    if key_dim != dim_k || dim_k == 0 {
        return fail(format!(
            "k_cache's head dim {key_dim} must equal q's Dk = {dim_k} (at least 1)"
        ));
    }
    if kv_heads == 0 || !q_heads.is_multiple_of(kv_heads) {
        return fail(format!(
            "HQ = {q_heads} must be a multiple of HKV = {kv_heads}"
        ));
    }
    match v_cache {
        Some(v) if v.dims() != [slots, kv_heads, dim_v] => {
            return fail(format!(
                "v_cache must be [{slots}, {kv_heads}, Dv] with Dv = value_dim = {dim_v}"
            ));
        }
        None if dim_v > dim_k => {
            return fail(format!(
                "without v_cache the values are the first value_dim dims of the key rows, so \
                 value_dim = {dim_v} must be at most Dk = {dim_k}"
            ));
        }
        _ => {}
    }
    if dim_v == 0 {
        return fail("value_dim must be at least 1".into());
    }
    let splits = options.max_kv_splits;
    if splits == 0 || !options.sm_scale.is_finite() {
        return fail(format!(
            "max_kv_splits ({splits}) must be at least 1 and sm_scale ({}) finite",
            options.sm_scale
        ));
    }
    let cap = options.logit_cap.unwrap_or(0.0);
    if options.logit_cap.is_some() && !(cap > 0.0 && cap.is_finite()) {
        return fail(format!("logit_cap must be positive and finite, got {cap}"));
    }
    let Some(&keys) = kv_indices
        .dims()
        .first()
        .filter(|_| kv_indices.dims().len() == 1)
    else {
        return fail("kv_indices must be 1-D".into());
    };
    if keys > I32_LIMIT || slots > u32::MAX as usize || batch > I32_LIMIT {
        return fail(
            "kv_indices and B must hold fewer than 2^31 entries, N fewer than 2^32".into(),
        );
    }
    check_index(OP, "kv_indptr", kv_indptr, batch + 1, false)?;
    check_index(OP, "kv_indices", kv_indices, keys, false)?;
    check_index(OP, "num_kv_splits", num_kv_splits, batch, false)?;
    Ok(DecodeDims {
        batch,
        q_heads,
        dim_k,
        slots,
        kv_heads,
        dim_v,
        keys,
    })
}

/// The launch plan of a checked call; `None` when there is nothing to compute (B or HQ is 0).
fn plan_checked(
    q: &AscendTensor,
    mla: bool,
    dims: &DecodeDims,
    options: &DecodeAttentionOptions,
    inputs: impl Fn() -> String,
) -> AclResult<Option<DecodePlan>> {
    const OP: &str = "decode_attention";
    if dims.batch == 0 || dims.q_heads == 0 {
        return Ok(None);
    }
    let shape = DecodeShape {
        batch: dims.batch as u64,
        q_heads: dims.q_heads as u64,
        kv_heads: dims.kv_heads as u64,
        head_dim_k: dims.dim_k as u64,
        head_dim_v: dims.dim_v as u64,
        max_splits: options.max_kv_splits as u64,
        slots: dims.slots as u64,
        indices: dims.keys as u64,
        value_from_key: mla,
    };
    tiling::decode_attention(
        &shape,
        norm_type(OP, q)?,
        options.sm_scale,
        options.logit_cap.unwrap_or(0.0),
        options.path,
        &device_props(q.ctx())?,
    )
    .map(Some)
    .map_err(|why| invalid_input(OP, format!("{why}; got {}", inputs())))
}

/// The plan [`decode_attention`] launches for these operands, without launching it: the path
/// (`plan.path()`), the kernels' tilings and both paths' modelled times (`plan.estimate`).
/// `None` when B or HQ is 0 (no kernel runs). Errors as [`decode_attention`]'s checks.
pub fn decode_attention_plan(
    q: &AscendTensor,
    k_cache: &AscendTensor,
    v_cache: Option<&AscendTensor>,
    kv_indptr: &AscendTensor,
    kv_indices: &AscendTensor,
    num_kv_splits: &AscendTensor,
    options: &DecodeAttentionOptions,
) -> AclResult<Option<DecodePlan>> {
    let dims = check_decode_attention(
        q,
        k_cache,
        v_cache,
        kv_indptr,
        kv_indices,
        num_kv_splits,
        options,
    )?;
    let inputs = || decode_inputs(q, k_cache, v_cache, kv_indptr, kv_indices, num_kv_splits);
    plan_checked(q, v_cache.is_none(), &dims, options, inputs)
}

/// Split-KV grouped decode attention over a paged cache (fused-ops contract 5) by the
/// `decode_attention` kernels: stage 1 on the vector cores, or (half and bf16, chosen by the
/// device model or [`DecodeAttentionOptions::path`]) scores and values on the cube cores with
/// the softmax between them on the vector cores; then stage 2, which merges the splits.
///
/// `q [B, HQ, Dk]`, `k_cache [N, HKV, Dk]`, `v_cache [N, HKV, Dv]` (or `None`: values are the
/// first `value_dim` dims of the key rows), all f32, f16 or bf16 alike, with `HQ % HKV == 0`;
/// `kv_indptr [B + 1]`, `kv_indices [T]` and `num_kv_splits [B]` int32. Request b's keys are
/// the slots `kv_indices[kv_indptr[b] .. kv_indptr[b + 1]]` and must be at least one.
///
/// Invalid index input is checked by the stage-1 kernel on the device and reported at the next
/// synchronisation or read as an AI Core error naming `decode_attention` and the bad value: a
/// `kv_indptr` entry below 0 or past `kv_indices`, a decreasing `kv_indptr`, a request without
/// keys (the contract has none: a request's own token is cached before attention, so an empty
/// one is the caller's bug, not a zero result), a `num_kv_splits[b]` outside
/// `1..=max_kv_splits`, a slot of `kv_indices` that is not a row of the caches. Shapes, dtypes
/// and options are checked here, before launch.
pub fn decode_attention(
    q: &AscendTensor,
    k_cache: &AscendTensor,
    v_cache: Option<&AscendTensor>,
    kv_indptr: &AscendTensor,
    kv_indices: &AscendTensor,
    num_kv_splits: &AscendTensor,
    options: DecodeAttentionOptions,
) -> AclResult<DecodeAttentionTensors> {
    const OP: &str = "decode_attention";
    super::same_device(
        OP,
        &[
            Some(q),
            Some(k_cache),
            v_cache,
            Some(kv_indptr),
            Some(kv_indices),
            Some(num_kv_splits),
        ],
    )?;
    let dims = check_decode_attention(
        q,
        k_cache,
        v_cache,
        kv_indptr,
        kv_indices,
        num_kv_splits,
        &options,
    )?;
    let (batch, q_heads, dim_v) = (dims.batch, dims.q_heads, dims.dim_v);
    let splits = options.max_kv_splits;
    let inputs = || decode_inputs(q, k_cache, v_cache, kv_indptr, kv_indices, num_kv_splits);
    let (indptr, indices) = (contiguous(kv_indptr)?, contiguous(kv_indices)?);
    let split_counts = contiguous(num_kv_splits)?;

    let ctx = q.ctx();
    let result = DecodeAttentionTensors {
        out: AscendTensor::empty(ctx, vec![batch, q_heads, dim_v], q.dtype)?,
        lse: AscendTensor::empty(ctx, vec![batch, q_heads], DataType::F32)?,
        part_out: AscendTensor::empty(ctx, vec![batch, q_heads, splits, dim_v], DataType::F32)?,
        part_lse: AscendTensor::empty(ctx, vec![batch, q_heads, splits], DataType::F32)?,
    };
    let Some(plan) = plan_checked(q, v_cache.is_none(), &dims, &options, inputs)? else {
        return Ok(result);
    };
    // The cube path's workspaces, freed in stream order after the kernels that use them.
    let workspaces = match plan.stage1 {
        DecodeStage1::Cube(c) => Some((
            AscendTensor::empty(ctx, vec![c.scores_elems as usize], DataType::F32)?,
            AscendTensor::empty(ctx, vec![c.probs_elems as usize], q.dtype)?,
        )),
        DecodeStage1::Vector(_) => None,
    };
    let (q, k) = (contiguous(q)?, contiguous(k_cache)?);
    let v = v_cache.map(contiguous).transpose()?;
    let buffers = launch::DecodeBuffers {
        q: data_ptr(&q),
        k: data_ptr(&k),
        v: v.as_ref().map_or(std::ptr::null_mut(), data_ptr),
        indptr: data_ptr(&indptr),
        kv_indices: data_ptr(&indices),
        splits: data_ptr(&split_counts),
        part_out: data_ptr(&result.part_out),
        part_lse: data_ptr(&result.part_lse),
        out: data_ptr(&result.out),
        lse: data_ptr(&result.lse),
        scores: workspaces
            .as_ref()
            .map_or(std::ptr::null_mut(), |(s, _)| data_ptr(s)),
        probs: workspaces
            .as_ref()
            .map_or(std::ptr::null_mut(), |(_, p)| data_ptr(p)),
    };
    // SAFETY: every buffer holds what the tilings describe and outlives the kernels in stream
    // order; v is null only when the tiling reads values from the key rows, the workspaces
    // only on the vector path, which does not use them.
    ctx.launch_kernel(OP, |kernels, stream| unsafe {
        kernels.decode_attention(stream, &plan, buffers)
    })
    .map_err(|e| e.with_context(|| format!("{OP} of {}", inputs())))?;
    Ok(result)
}
