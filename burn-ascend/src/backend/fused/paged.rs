//! The paged KV-cache ops of [`FusedOps`]: `alloc_extend`, split-KV `decode_attention` and
//! `paged_prefill_attention`, their results, their composed defaults and their tensor-level
//! functions.
//!
//! The composed defaults never read device values on the host: which request (and split) an
//! output position or a key belongs to comes from device comparisons against running sums of
//! the lengths, and gathers are `select`s. They build `[positions, requests]` and `[requests,
//! heads, splits, keys]` intermediates, O(B * N) memory, which suits a reference, not a server.
//!
//! The composed `paged_prefill_attention` takes its request boundaries from host lengths (the
//! scheduler's, not tensor data) and gathers each request's keys: O(chunk x keys) scores per
//! request, a reference.
//!
//! The ops are inference-only: no gradient is defined for them. `Autodiff<B>` keeps the composed
//! defaults, so what autodiff would derive through them is not part of the contract.

use burn_tensor::{activation::softmax, Bool, Int, Tensor};

use super::{float, int, prim, Backend, DType, FloatTensor, FusedOps, IntTensor, Ints};
use crate::ops::fused::ExtendLens;
pub use crate::ops::fused::{DecodeAttentionOptions, DecodePath};

/// The results of [`FusedOps::alloc_extend`], in the index dtype of the inputs.
pub struct AllocExtendOutput<B: Backend> {
    /// `[extend_total]`: the cache slot of each new token, request after request.
    pub slots: IntTensor<B>,
    /// `[2]`: new pages taken and tokens extended.
    pub totals: IntTensor<B>,
}

/// The results of [`FusedOps::decode_attention`].
pub struct DecodeAttentionOutput<B: Backend> {
    /// `[B, HQ, Dv]`, q's dtype.
    pub out: FloatTensor<B>,
    /// `[B, HQ]` f32: log-sum-exp of each head's scores.
    pub lse: FloatTensor<B>,
    /// `[B, HQ, max_kv_splits, Dv]` f32: each split's normalised output (zeros when empty).
    pub part_out: FloatTensor<B>,
    /// `[B, HQ, max_kv_splits]` f32: each split's log-sum-exp (-inf when empty).
    pub part_lse: FloatTensor<B>,
}

/// The composed `alloc_extend` (the reference): contract 4's formula per output position.
pub fn composed_alloc_extend<B: Backend>(
    prefix_lens: IntTensor<B>,
    seq_lens: IntTensor<B>,
    last_loc: IntTensor<B>,
    free_pages: IntTensor<B>,
    page_size: usize,
    extend_total: usize,
) -> AllocExtendOutput<B> {
    let prefix: Ints<B> = int(prefix_lens);
    let (dtype, device) = (prefix.dtype(), prefix.device());
    let seq = int::<B, 1>(seq_lens).cast(dtype);
    let last = int::<B, 1>(last_loc).cast(dtype);
    let free = int::<B, 1>(free_pages).cast(dtype);
    let ([batch], [pages]) = (prefix.dims(), free.dims());
    let ps = page_size.max(1) as i64;
    let pages_of = |lens: Ints<B>| (lens + (ps - 1)).div_scalar(ps);
    let filled = pages_of(prefix.clone());
    let new_pages = pages_of(seq.clone()) - filled.clone();
    let extend = seq - prefix.clone();
    let out_end = extend.clone().cumsum(0);
    let out_base = out_end.clone() - extend.clone();
    let page_base = new_pages.clone().cumsum(0) - new_pages.clone();
    let totals = Tensor::cat(vec![new_pages.sum(), extend.sum()], 0).into_primitive();
    let none = || Ints::<B>::full([extend_total], -1, (&device, dtype));
    if batch == 0 || extend_total == 0 {
        return AllocExtendOutput {
            slots: none().into_primitive(),
            totals,
        };
    }
    let position = Ints::<B>::arange(0..extend_total as i64, (&device, dtype));
    // The request of each output position: how many requests end at or before it.
    let owner = position
        .clone()
        .unsqueeze_dim::<2>(1)
        .expand([extend_total, batch])
        .greater_equal(out_end.unsqueeze_dim::<2>(0).expand([extend_total, batch]))
        .int()
        .sum_dim(1)
        .reshape([extend_total])
        .cast(dtype);
    let reached = owner.clone().lower_elem(batch as i64);
    let owner = owner.clamp_max(batch as i64 - 1);
    let of_owner = |per_request: Ints<B>| per_request.select(0, owner.clone());
    let p = of_owner(prefix);
    let filled = of_owner(filled);
    let j = p.clone() + position - of_owner(out_base);
    let in_last_page = j.clone().lower(filled.clone() * ps);
    let after_last = of_owner(last) + (j.clone() - p + 1);
    let at = of_owner(page_base) + j.clone().div_scalar(ps) - filled;
    let in_list = at
        .clone()
        .greater_equal_elem(0)
        .bool_and(at.clone().lower_elem(pages as i64));
    let from_pages = if pages == 0 {
        none()
    } else {
        free.select(0, at.clamp(0, pages as i64 - 1)) * ps + j.remainder_scalar(ps)
    };
    let slots = from_pages
        .mask_fill(in_list.bool_not(), -1)
        .mask_where(in_last_page, after_last)
        .mask_fill(reached.bool_not(), -1);
    AllocExtendOutput {
        slots: slots.into_primitive(),
        totals,
    }
}

/// The composed `decode_attention` (the reference): contract 5's two stages over dense scores
/// of every query head against every key, masked to each (request, split).
pub fn composed_decode_attention<B: Backend>(
    q: FloatTensor<B>,
    k_cache: FloatTensor<B>,
    v_cache: Option<FloatTensor<B>>,
    kv_indptr: IntTensor<B>,
    kv_indices: IntTensor<B>,
    num_kv_splits: IntTensor<B>,
    options: DecodeAttentionOptions,
) -> DecodeAttentionOutput<B> {
    let q: Tensor<B, 3> = float(q);
    let (dtype, device) = (q.dtype(), q.device());
    let [batch, q_heads, dim_k] = q.dims();
    let keys = float::<B, 3>(k_cache).cast(DType::F32);
    let kv_heads = keys.dims()[1].max(1);
    let (group, splits, dim_v) = (
        q_heads / kv_heads,
        options.max_kv_splits.max(1),
        options.value_dim,
    );
    let values = match v_cache {
        Some(v) => float::<B, 3>(v).cast(DType::F32),
        None => keys.clone().narrow(2, 0, dim_v),
    };
    let indices: Ints<B> = int(kv_indices);
    let [n] = indices.dims();
    let indptr: Ints<B> = int(kv_indptr);
    let idt = indptr.dtype();
    let counts = int::<B, 1>(num_kv_splits).cast(idt);
    if batch == 0 || q_heads == 0 || n == 0 {
        let f32s = (&device, DType::F32);
        return DecodeAttentionOutput {
            out: prim(Tensor::<B, 3>::zeros(
                [batch, q_heads, dim_v],
                (&device, dtype),
            )),
            lse: prim(Tensor::<B, 2>::full(
                [batch, q_heads],
                f32::NEG_INFINITY,
                f32s,
            )),
            part_out: prim(Tensor::<B, 4>::zeros([batch, q_heads, splits, dim_v], f32s)),
            part_lse: prim(Tensor::<B, 3>::full(
                [batch, q_heads, splits],
                f32::NEG_INFINITY,
                f32s,
            )),
        };
    }

    // The request, and the split within it, of each key position.
    let position = Ints::<B>::arange(0..n as i64, (&device, idt));
    let starts = indptr.clone().narrow(0, 0, batch);
    let ends = indptr.narrow(0, 1, batch);
    let owner = position
        .clone()
        .unsqueeze_dim::<2>(1)
        .expand([n, batch])
        .greater_equal(ends.clone().unsqueeze_dim::<2>(0).expand([n, batch]))
        .int()
        .sum_dim(1)
        .reshape([n])
        .cast(idt);
    let known = owner.clone().lower_elem(batch as i64);
    let owner = owner.clamp_max(batch as i64 - 1);
    let start = starts.select(0, owner.clone());
    let len = ends.select(0, owner.clone()) - start.clone();
    let count = counts.select(0, owner.clone()).clamp(1, splits as i64);
    let per = ((len + count.clone() - 1) / count).clamp_min(1);
    let local = position - start;
    let known = known.bool_and(local.clone().greater_equal_elem(0));
    let split = local / per;
    let cube = [batch, splits, n];
    let along = |t: Ints<B>, shape: [usize; 3]| t.reshape(shape).expand(cube);
    let requests = Ints::<B>::arange(0..batch as i64, (&device, idt));
    let split_ids = Ints::<B>::arange(0..splits as i64, (&device, idt));
    let member = along(owner, [1, 1, n])
        .equal(along(requests, [batch, 1, 1]))
        .bool_and(along(split, [1, 1, n]).equal(along(split_ids, [1, splits, 1])))
        .bool_and(known.reshape([1, 1, n]).expand(cube));

    // Stage 1: scores [HKV, B*G, N] per key/value head, then each split's softmax.
    let k = keys.select(0, indices.clone());
    let v = values.select(0, indices);
    let qh = q
        .cast(DType::F32)
        .reshape([batch, kv_heads, group, dim_k])
        .swap_dims(0, 1)
        .reshape([kv_heads, batch * group, dim_k]);
    let mut scores = qh.matmul(k.permute([1, 2, 0])) * options.sm_scale;
    if let Some(cap) = options.logit_cap {
        scores = (scores / cap).tanh() * cap;
    }
    let full = [batch, q_heads, splits, n];
    let scores = scores
        .reshape([kv_heads, batch, group, n])
        .swap_dims(0, 1)
        .reshape([batch, q_heads, 1, n])
        .expand(full);
    let mask = member.unsqueeze_dim::<4>(1).expand(full);
    let empty = mask.clone().int().sum_dim(3).equal_elem(0);
    let masked = scores.mask_fill(mask.bool_not(), f32::NEG_INFINITY);
    let m = masked.clone().max_dim(3).mask_fill(empty.clone(), 0.0);
    let e = (masked - m.clone()).exp();
    let z = e.clone().sum_dim(3);
    let weighted = e
        .reshape([batch, kv_heads, group * splits, n])
        .swap_dims(0, 1)
        .reshape([kv_heads, batch * group * splits, n])
        .matmul(v.swap_dims(0, 1))
        .reshape([kv_heads, batch, group * splits, dim_v])
        .swap_dims(0, 1)
        .reshape([batch, q_heads, splits, dim_v]);
    let part_out = weighted / z.clone().mask_fill(empty.clone(), 1.0);
    let part_lse = (m + z.log())
        .mask_fill(empty, f32::NEG_INFINITY)
        .reshape([batch, q_heads, splits]);

    // Stage 2: merge the splits by their log-sum-exp.
    let top = part_lse.clone().max_dim(2);
    let top = top
        .clone()
        .mask_fill(top.equal_elem(f32::NEG_INFINITY), 0.0);
    let w = (part_lse.clone() - top.clone()).exp();
    let total = w.clone().sum_dim(2);
    let out = (part_out.clone() * w.unsqueeze_dim::<4>(3))
        .sum_dim(2)
        .reshape([batch, q_heads, dim_v])
        / total
            .clone()
            .mask_fill(total.clone().equal_elem(0.0), 1.0)
            .reshape([batch, q_heads, 1]);
    let lse = (top + total.log()).reshape([batch, q_heads]);
    DecodeAttentionOutput {
        out: prim(out.cast(dtype)),
        lse: prim(lse),
        part_out: prim(part_out),
        part_lse: prim(part_lse),
    }
}

/// The slots [`alloc_extend`] allocated, on the device.
pub struct AllocatedSlots<B: Backend> {
    /// `[extend_total]`: the cache slot of each new token, request after request.
    pub slots: Tensor<B, 1, Int>,
    /// `[2]`: new pages needed and tokens extended.
    pub totals: Tensor<B, 1, Int>,
}

/// Cache slots for the new tokens of requests growing from `prefix_lens[b]` to `seq_lens[b]`
/// tokens in pages of `page_size` slots (see [`FusedOps::alloc_extend`]). Inference-only.
pub fn alloc_extend<B: FusedOps>(
    prefix_lens: Tensor<B, 1, Int>,
    seq_lens: Tensor<B, 1, Int>,
    last_loc: Tensor<B, 1, Int>,
    free_pages: Tensor<B, 1, Int>,
    page_size: usize,
    extend_total: usize,
) -> AllocatedSlots<B> {
    let out = B::alloc_extend(
        prefix_lens.into_primitive(),
        seq_lens.into_primitive(),
        last_loc.into_primitive(),
        free_pages.into_primitive(),
        page_size,
        extend_total,
    );
    AllocatedSlots {
        slots: int(out.slots),
        totals: int(out.totals),
    }
}

/// Split-KV decode attention over a paged cache (see [`FusedOps::decode_attention`]): `(out [B,
/// HQ, Dv] in q's dtype, lse [B, HQ] f32)`. Inference-only.
pub fn decode_attention<B: FusedOps>(
    q: Tensor<B, 3>,
    k_cache: Tensor<B, 3>,
    v_cache: Option<Tensor<B, 3>>,
    kv_indptr: Tensor<B, 1, Int>,
    kv_indices: Tensor<B, 1, Int>,
    num_kv_splits: Tensor<B, 1, Int>,
    options: DecodeAttentionOptions,
) -> (Tensor<B, 3>, Tensor<B, 2>) {
    let out = B::decode_attention(
        prim(q),
        prim(k_cache),
        v_cache.map(prim),
        kv_indptr.into_primitive(),
        kv_indices.into_primitive(),
        num_kv_splits.into_primitive(),
        options,
    );
    (float(out.out), float(out.lse))
}

/// The composed `paged_prefill_attention` (the reference): per request, the keys and values of
/// its cached positions gathered through its block-table row, dense causal scores of its chunk
/// against them (row `i` of a chunk of `q` rows sees keys `0..=kv - q + i`), softmax in f32.
#[allow(clippy::too_many_arguments)]
pub fn composed_paged_prefill_attention<B: Backend>(
    q: FloatTensor<B>,
    k_cache: FloatTensor<B>,
    v_cache: FloatTensor<B>,
    block_table: IntTensor<B>,
    q_lens: &[usize],
    kv_lens: &[usize],
    page_size: usize,
    sm_scale: f32,
) -> FloatTensor<B> {
    let q: Tensor<B, 3> = float(q);
    let (dtype, device) = (q.dtype(), q.device());
    let [tokens, q_heads, dim_k] = q.dims();
    let keys = float::<B, 3>(k_cache).cast(DType::F32);
    let values = float::<B, 3>(v_cache).cast(DType::F32);
    let (kv_heads, dim_v) = (keys.dims()[1].max(1), values.dims()[2]);
    let group = q_heads / kv_heads;
    let table: Tensor<B, 2, Int> = int(block_table);
    let [rows, width] = table.dims();
    let table = table.reshape([rows * width]);
    let idt = table.dtype();
    let ps = page_size.max(1) as i64;
    let mut outs = Vec::new();
    let mut start = 0;
    for (r, (&ql, &kvl)) in q_lens.iter().zip(kv_lens).enumerate() {
        if ql == 0 {
            continue;
        }
        let position = Ints::<B>::arange(0..kvl as i64, (&device, idt));
        let slots = table
            .clone()
            .select(0, position.clone().div_scalar(ps) + (r * width) as i64)
            * ps
            + position.clone().remainder_scalar(ps);
        let k = keys.clone().select(0, slots.clone());
        let v = values.clone().select(0, slots);
        let qh = q
            .clone()
            .narrow(0, start, ql)
            .cast(DType::F32)
            .reshape([ql, kv_heads, group, dim_k])
            .permute([1, 2, 0, 3])
            .reshape([kv_heads, group * ql, dim_k]);
        let scores =
            (qh.matmul(k.permute([1, 2, 0])) * sm_scale).reshape([kv_heads, group, ql, kvl]);
        let diagonal = Ints::<B>::arange((kvl - ql) as i64..kvl as i64, (&device, idt));
        let future: Tensor<B, 2, Bool> = position
            .unsqueeze_dim::<2>(0)
            .expand([ql, kvl])
            .greater(diagonal.unsqueeze_dim::<2>(1).expand([ql, kvl]));
        let scores = scores.mask_fill(
            future.unsqueeze::<4>().expand([kv_heads, group, ql, kvl]),
            f32::NEG_INFINITY,
        );
        let out = softmax(scores, 3)
            .reshape([kv_heads, group * ql, kvl])
            .matmul(v.swap_dims(0, 1))
            .reshape([kv_heads, group, ql, dim_v])
            .permute([2, 0, 1, 3])
            .reshape([ql, q_heads, dim_v]);
        outs.push(out);
        start += ql;
    }
    if outs.is_empty() {
        return prim(Tensor::<B, 3>::zeros(
            [tokens, q_heads, dim_v],
            (&device, dtype),
        ));
    }
    prim(Tensor::cat(outs, 0).cast(dtype))
}

/// The sizes of a [`paged_prefill_attention`] call, from the scheduler: per request (one row
/// of the block table each), its chunk's tokens and its cached tokens after the chunk.
#[derive(Debug, Clone, Copy)]
pub struct PrefillLens<'a> {
    /// Each request's chunk: its tokens, one after another in q.
    pub q_lens: &'a [usize],
    /// Each request's cached tokens, its chunk included.
    pub kv_lens: &'a [usize],
    /// Slots per page (block-table entries are pages).
    pub page_size: usize,
}

/// Paged prefill attention (see [`FusedOps::paged_prefill_attention`]): `[T, HQ, D]` in q's
/// dtype. Inference-only.
pub fn paged_prefill_attention<B: FusedOps>(
    q: Tensor<B, 3>,
    k_cache: Tensor<B, 3>,
    v_cache: Tensor<B, 3>,
    block_table: Tensor<B, 2, Int>,
    lens: PrefillLens<'_>,
    sm_scale: f32,
) -> Tensor<B, 3> {
    float(B::paged_prefill_attention(
        prim(q),
        prim(k_cache),
        prim(v_cache),
        block_table.into_primitive(),
        lens,
        sm_scale,
    ))
}

/// Which implementation runs [`extend_attention`] on `Ascend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtendPath {
    /// `aclnnFusedInferAttentionScoreV3` with the block table (see
    /// [`FusedOps::paged_prefill_attention`]).
    Fused,
    /// The extend kernels: on the cube for f16/bf16 (`extend_attention_scores`, `_softmax`,
    /// `_values`), on the vector cores for f32 (`decode_attention_stage1`'s extend form and
    /// `decode_attention_stage2`).
    Kernels,
}

/// The composed `extend_attention`: [`composed_paged_prefill_attention`] with the values of an
/// MLA cache (no `v_cache`) taken as the first `value_dim` dims of the key rows.
pub fn composed_extend_attention<B: Backend>(
    q: FloatTensor<B>,
    k_cache: FloatTensor<B>,
    v_cache: Option<FloatTensor<B>>,
    block_table: IntTensor<B>,
    lens: ExtendLens<'_>,
    sm_scale: f32,
) -> FloatTensor<B> {
    let values = v_cache
        .unwrap_or_else(|| prim(float::<B, 3>(k_cache.clone()).narrow(2, 0, lens.value_dim)));
    composed_paged_prefill_attention::<B>(
        q,
        k_cache,
        values,
        block_table,
        lens.q_lens,
        lens.kv_lens,
        lens.page_size,
        sm_scale,
    )
}

/// Paged extend attention (see [`FusedOps::extend_attention`]): `[T, HQ, Dv]` in q's dtype;
/// `path` `None` lets the device model choose. Inference-only.
pub fn extend_attention<B: FusedOps>(
    q: Tensor<B, 3>,
    k_cache: Tensor<B, 3>,
    v_cache: Option<Tensor<B, 3>>,
    block_table: Tensor<B, 2, Int>,
    lens: ExtendLens<'_>,
    sm_scale: f32,
    path: Option<ExtendPath>,
) -> Tensor<B, 3> {
    float(B::extend_attention(
        prim(q),
        prim(k_cache),
        v_cache.map(prim),
        block_table.into_primitive(),
        lens,
        sm_scale,
        path,
    ))
}
