//! Paged extend (prefill) attention by the Ascend C kernels on the cube
//! (`kernels/extend_attention_*.cpp`): each request's chunk attends causally to its cached
//! pages through its block-table row, per window of key positions scores (cube), online softmax
//! (vector, folding the previous window's value product into a rescaled f32 accumulator) and
//! values (cube), then one more softmax launch for the last fold and the normalisation. Unlike
//! `aclnnFusedInferAttentionScoreV3` it takes any page size, the MLA layout (values = the first
//! `value_dim` dims of the key rows) and value dims other than the key dim. Float runs
//! decode_attention's vector stage 1 in its extend form (keys through the block table), as
//! decode keeps float on the vector path.

use burn_ascend_kernels::launch;
use burn_ascend_kernels::tiling::{self, ExtendKernels, ExtendPlan, ExtendShape};

use super::{data_ptr, device_props, norm_type, same_device, Operand};
use crate::acl::{AclResult, DataType};
use crate::ops::broadcast::invalid_input;
use crate::ops::copy::contiguous;
use crate::ops::creation::from_bytes;
use crate::ops::tensor::AscendTensor;

const OP: &str = "extend_attention";

/// The sizes of an extend-attention call: per request its chunk and its cached tokens (the
/// chunk included), the page size, and the value dim.
#[derive(Debug, Clone, Copy)]
pub struct ExtendLens<'a> {
    /// Each request's chunk rows, one after another in q.
    pub q_lens: &'a [usize],
    /// Each request's cached tokens, its chunk included.
    pub kv_lens: &'a [usize],
    /// Slots per page.
    pub page_size: usize,
    /// Dv: v_cache's last dim, or without v_cache the leading dims of the key rows.
    pub value_dim: usize,
}

/// The contract of [`extend_attention`]: `q [T, HQ, Dk]`, `k_cache [N, HKV, Dk]`, `v_cache [N,
/// HKV, Dv]` (or none, `Dv <= Dk`) of q's float dtype, HQ a multiple of HKV, N a multiple of the
/// page size, `block_table [R, W]` int32, one chunk and one cached length per row, the chunks
/// covering T, each chunk at most its cached length and the cached lengths within W pages.
/// Returns the kernels' shape.
pub fn check_extend_attention<T: Operand>(
    q: &T,
    k_cache: &T,
    v_cache: Option<&T>,
    block_table: &T,
    lens: &ExtendLens<'_>,
) -> AclResult<ExtendShape> {
    let inputs = || {
        format!(
            "q {}, k_cache {}, v_cache {}, block_table {}, q_lens {:?}, kv_lens {:?}, page_size {}, value_dim {}",
            q.describe(),
            k_cache.describe(),
            v_cache.map_or("None".into(), Operand::describe),
            block_table.describe(),
            lens.q_lens,
            lens.kv_lens,
            lens.page_size,
            lens.value_dim
        )
    };
    let fail = |what: &str| Err(invalid_input(OP, format!("{what}; got {}", inputs())));
    norm_type(OP, q)?;
    let (qd, kd, td) = (q.dims(), k_cache.dims(), block_table.dims());
    let dv = lens.value_dim;
    if qd.len() != 3 || kd.len() != 3 || td.len() != 2 || kd[1] == 0 || kd[2] != qd[2] {
        return fail("needs q [T, HQ, Dk], k_cache [N, HKV, Dk], block_table [R, W]");
    }
    if !qd[1].is_multiple_of(kd[1]) || qd[2] == 0 {
        return fail("HQ must be a multiple of HKV and Dk at least 1");
    }
    if k_cache.data_type() != q.data_type()
        || v_cache.is_some_and(|v| v.data_type() != q.data_type())
    {
        return fail("q, k_cache and v_cache must have one dtype");
    }
    match v_cache {
        Some(v) if v.dims() != [kd[0], kd[1], dv] => {
            return fail("v_cache must be [N, HKV, value_dim]");
        }
        None if dv > kd[2] => {
            return fail("without v_cache the values are the first value_dim dims of the key rows, so value_dim must be at most Dk");
        }
        _ if dv == 0 => return fail("value_dim must be at least 1"),
        _ => {}
    }
    if block_table.data_type() != DataType::I32 {
        return fail("block_table must be int32");
    }
    let page = lens.page_size;
    if page == 0 || !kd[0].is_multiple_of(page) {
        return fail("the page size must be at least 1 and divide the cache rows N");
    }
    let capacity = td[1] * page;
    let lens_fit = lens.q_lens.len() == td[0]
        && lens.kv_lens.len() == td[0]
        && lens.q_lens.iter().sum::<usize>() == qd[0]
        && lens
            .q_lens
            .iter()
            .zip(lens.kv_lens)
            .all(|(&q, &kv)| q <= kv && kv <= capacity);
    if !lens_fit {
        return fail(&format!(
            "needs one chunk length and one cached length per block-table row, chunks adding up to T, each chunk at most its cached length, cached lengths at most W x page_size = {capacity}"
        ));
    }
    if capacity > i32::MAX as usize || qd[0] > i32::MAX as usize {
        return fail("the kernels keep positions and rows in int32");
    }
    Ok(ExtendShape {
        lens: lens
            .q_lens
            .iter()
            .zip(lens.kv_lens)
            .map(|(&q, &kv)| (q as u64, kv as u64))
            .collect(),
        q_heads: qd[1] as u64,
        kv_heads: kd[1] as u64,
        head_dim_k: kd[2] as u64,
        head_dim_v: dv as u64,
        slots: kd[0] as u64,
        page_size: page as u64,
        width: td[1] as u64,
        value_from_key: v_cache.is_none(),
    })
}

/// The plan [`extend_attention`] launches for these operands, without launching it (its
/// `estimate` also models `aclnnFusedInferAttentionScoreV3` on the same call). `Ok(None)`:
/// nothing to compute (T or HQ is 0). Err: the contract's, or why the kernels cannot run it.
pub fn extend_attention_plan(
    q: &AscendTensor,
    k_cache: &AscendTensor,
    v_cache: Option<&AscendTensor>,
    block_table: &AscendTensor,
    lens: &ExtendLens<'_>,
    sm_scale: f32,
) -> AclResult<Option<ExtendPlan>> {
    let shape = check_extend_attention(q, k_cache, v_cache, block_table, lens)?;
    plan_checked(q, &shape, sm_scale)
}

fn plan_checked(
    q: &AscendTensor,
    shape: &ExtendShape,
    sm_scale: f32,
) -> AclResult<Option<ExtendPlan>> {
    if q.shape()[0] == 0 || q.shape()[1] == 0 {
        return Ok(None);
    }
    tiling::extend_attention(shape, norm_type(OP, q)?, sm_scale, &device_props(q.ctx())?)
        .map(Some)
        .map_err(|why| {
            invalid_input(
                OP,
                format!(
                    "{why}; got q {}, {} query rows",
                    q.describe(),
                    shape.lens.len()
                ),
            )
        })
}

/// Paged extend attention by the kernels (see `FusedOps::extend_attention`): `[T, HQ, Dv]` in
/// q's dtype (f16/bf16 on the cube, f32 on the vector path). A block-table entry outside the caches is an
/// AI Core error naming `blockTable[r][k]`, reported at the next synchronisation or read.
pub fn extend_attention(
    q: &AscendTensor,
    k_cache: &AscendTensor,
    v_cache: Option<&AscendTensor>,
    block_table: &AscendTensor,
    lens: &ExtendLens<'_>,
    sm_scale: f32,
) -> AclResult<AscendTensor> {
    same_device(OP, &[Some(q), Some(k_cache), v_cache, Some(block_table)])?;
    let shape = check_extend_attention(q, k_cache, v_cache, block_table, lens)?;
    let ctx = q.ctx();
    let (tokens, q_heads) = (q.shape()[0], q.shape()[1]);
    let dim_v = lens.value_dim;
    let out = AscendTensor::empty(ctx, vec![tokens, q_heads, dim_v], q.dtype)?;
    let Some(plan) = plan_checked(q, &shape, sm_scale)? else {
        return Ok(out);
    };
    // The running chunk starts, then the cached lengths: the kernels' only host-made input,
    // 2R + 1 int32 (no per-token key list).
    let mut meta = Vec::with_capacity(2 * lens.q_lens.len() + 1);
    let mut start = 0i32;
    meta.push(0i32);
    for &n in lens.q_lens {
        start += n as i32;
        meta.push(start);
    }
    meta.extend(lens.kv_lens.iter().map(|&n| n as i32));
    let bytes: Vec<u8> = meta.iter().flat_map(|v| v.to_le_bytes()).collect();
    let meta = from_bytes(ctx, vec![meta.len()], DataType::I32, &bytes)?;
    let passes = plan.passes as usize;
    let f32s = |n: u64| AscendTensor::empty(ctx, vec![n as usize], DataType::F32);
    let null = std::ptr::null_mut();
    let (qc, k) = (contiguous(q)?, contiguous(k_cache)?);
    let v = v_cache.map(contiguous).transpose()?;
    let table = contiguous(block_table)?;
    let mut buffers = launch::ExtendBuffers {
        q: data_ptr(&qc),
        k: data_ptr(&k),
        v: v.as_ref().map_or(null, data_ptr),
        table: data_ptr(&table),
        lens: data_ptr(&meta),
        scores: null,
        probs: null,
        stats: null,
        acc: null,
        pv: null,
        part_out: null,
        part_lse: null,
        lse: null,
        out: data_ptr(&out),
    };
    // The path's workspaces, freed in stream order after the kernels that use them.
    let workspaces = match plan.kernels {
        ExtendKernels::Cube(c) => vec![
            f32s(c.scores_elems)?,
            AscendTensor::empty(ctx, vec![c.probs_elems as usize], q.dtype)?,
            f32s(c.stats_elems)?,
            f32s(c.acc_elems)?,
            f32s(c.acc_elems)?,
        ],
        ExtendKernels::Vector { .. } => vec![
            f32s((tokens * q_heads * passes * dim_v) as u64)?,
            f32s((tokens * q_heads * passes) as u64)?,
            f32s((tokens * q_heads) as u64)?,
        ],
    };
    let ptrs: Vec<_> = workspaces.iter().map(data_ptr).collect();
    match plan.kernels {
        ExtendKernels::Cube(_) => {
            [
                buffers.scores,
                buffers.probs,
                buffers.stats,
                buffers.acc,
                buffers.pv,
            ] = [ptrs[0], ptrs[1], ptrs[2], ptrs[3], ptrs[4]];
        }
        ExtendKernels::Vector { .. } => {
            [buffers.part_out, buffers.part_lse, buffers.lse] = [ptrs[0], ptrs[1], ptrs[2]];
        }
    }
    // SAFETY: every buffer holds what the tilings describe and outlives the kernels in stream
    // order (the workspaces are freed in stream order after them); v is null only when the
    // tiling reads values from the key rows.
    ctx.launch_kernel(OP, |kernels, stream| unsafe {
        kernels.extend_attention(stream, &plan, buffers)
    })
    .map_err(|e| {
        e.with_context(|| {
            format!(
                "{OP} of q {} over caches {} in pages of {}",
                q.describe(),
                k_cache.describe(),
                lens.page_size
            )
        })
    })?;
    Ok(out)
}
