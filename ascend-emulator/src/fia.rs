//! Emulated `aclnnFusedInferAttentionScoreV3` (Atlas A2): the paged-KV prefill form the server's
//! chunked prefill uses, as vllm-ascend calls it for chunked prefill (`attention_v1.py`): query
//! `[T, N, D]` in layout "TND" (requests' tokens one after another, `actualSeqLengths` their
//! running totals), one key and one value cache `[blocks, blockSize, HKV * D]` reached through
//! `blockTable [B, maxBlocks]` (int32 block ids), `actualSeqLengthsKv` each request's cached
//! length (its chunk included), and `sparseMode` 3 (rightDownCausal: query row `i` of a request
//! with `q` rows and `kv` keys sees keys `j <= kv - q + i`) with the compressed 2048 x 2048 mask.
//!
//! The kernel runs blockwise as the operator does: per request, key/value block after block
//! through an online softmax (scores in f32, the probabilities rounded to the input type before
//! the second matmul, as the cube takes them); it never builds a request's whole score matrix.
//!
//! The emulation implements that form only: other layouts and sparse modes, quantisation,
//! pseShift, padding sizes, shared prefixes, rope inputs and the softmax LSE output are refused
//! as not emulated rather than computed. Rules and their sources: `../shared/ascend/
//! aclnn-ops.tsv` (aclnnFusedInferAttentionScoreV3: F16/BF16/I8, contiguous inputs) and
//! `aclnn-quant-attention-norm.md` (the prototype); where CANN's text is uncertain the stricter
//! reading is taken and said so below.
#![allow(
    missing_docs,
    non_snake_case,
    clippy::missing_safety_doc,
    clippy::too_many_arguments
)]

use std::ffi::{c_char, c_void, CStr};
use std::sync::Arc;

use super::fault::{fault, Fault};
use super::meta::Kernel;
use super::meta::{int_array_arg, tensor_arg, tensor_list_arg, TensorDesc};
use super::numerics::round_to;
use super::ops::{check_dtype, invalid, phase1, phase2_entry_points, Ex, Ws, SCRATCH_WORKSPACE};
use super::view::{map, put_f32, take_f32, Walk};
use ascend_acl::dtype::DataType::{self, *};
use ascend_acl::types::status::*;
use ascend_acl::types::*;

phase2_entry_points!(aclnnFusedInferAttentionScoreV3);

/// query, key, value and attentionOut of the float path on Atlas A2 (aclnn-ops.tsv lists
/// F16, BF16 and I8; I8 is the quantised path, not emulated). f32 is refused.
const FIA: &[DataType] = &[F16, BF16];
const BLOCK_TABLE: &[DataType] = &[I32];
const MASK: &[DataType] = &[Bool, I8, U8];
/// sparseMode 3: rightDownCausal with the compressed mask.
const RIGHT_DOWN_CAUSAL: i64 = 3;
/// The compressed mask of sparse modes 2 to 4 is `[2048, 2048]`.
const MASK_SIDE: usize = 2048;
/// blockSize in the paged form: a multiple of 128, at most 512. ASSUMPTION (stricter reading):
/// CANN's text asks 16-alignment for f16/bf16 in the incremental branch and 128-alignment for
/// the prompt branch a prefill chunk takes; the emulation demands 128 for every call.
const BLOCK_ALIGN: usize = 128;
const MAX_BLOCK: usize = 512;
/// Head dims of the paged form: 16-aligned, at most 512. ASSUMPTION (stricter reading of the
/// prompt branch's "D 16 对齐" and its 512 limit in the paged-KV scenario).
const HEAD_ALIGN: usize = 16;
const MAX_HEAD: usize = 512;

/// The checked call.
struct Plan {
    query: TensorDesc,
    key: TensorDesc,
    value: TensorDesc,
    mask: TensorDesc,
    table: TensorDesc,
    out: TensorDesc,
    /// Per request: first query row, query rows, keys.
    requests: Vec<(usize, usize, usize)>,
    heads: usize,
    kv_heads: usize,
    dim: usize,
    block: usize,
    scale: f32,
}

impl Plan {
    fn run(&self, op: &str) -> Result<(), Fault> {
        let (n, hkv, d, bs) = (self.heads, self.kv_heads, self.dim, self.block);
        let group = n / hkv;
        let dtype = self.query.dtype;
        let (mq, mk, mv, mm, mt, mo) = (
            map(op, "query", &self.query)?,
            map(op, "key", &self.key)?,
            map(op, "value", &self.value)?,
            map(op, "attenMaskOptional", &self.mask)?,
            map(op, "blockTableOptional", &self.table)?,
            map(op, "attentionOut", &self.out)?,
        );
        // The compressed mask is read as the operator tiles it: the mask of a key `d` past the
        // query's diagonal is row 0's entry `d` (d >= 0) or column 0's entry `-d` (d < 0).
        let mask_at = {
            let get = mm.getter::<i128>();
            let at = self.mask.offset;
            let row: Vec<bool> = (0..MASK_SIDE).map(|c| get(at + c) != 0).collect();
            let col: Vec<bool> = (0..MASK_SIDE)
                .map(|r| get(at + r * MASK_SIDE) != 0)
                .collect();
            move |d: i64| match d {
                d if d >= MASK_SIDE as i64 => true,
                d if d <= -(MASK_SIDE as i64) => false,
                d if d >= 0 => row[d as usize],
                d => col[(-d) as usize],
            }
        };
        let blocks = self.key.shape[0];
        let width = self.table.shape[1];
        let table_get = mt.getter::<i128>();
        let mut q = Vec::new();
        take_f32(&mut q, &mq, &mut Walk::of(&self.query), self.query.numel());
        let (mut kb, mut vb) = (Vec::new(), Vec::new());
        for (b, &(first, rows, kv)) in self.requests.iter().enumerate() {
            if rows == 0 {
                continue;
            }
            // Online-softmax state per (row, head): running max, sum and unnormalised output.
            let mut top = vec![f32::NEG_INFINITY; rows * n];
            let mut sum = vec![0f32; rows * n];
            let mut acc = vec![0f32; rows * n * d];
            for k in 0..kv.div_ceil(bs) {
                let id = table_get(self.table.offset + b * width + k);
                if id < 0 || id >= blocks as i128 {
                    return Err(fault(
                        ACL_ERROR_RT_AICORE_EXCEPTION,
                        format!("{op}: blockTable[{b}][{k}] = {id} is outside the {blocks} blocks of the key and value caches"),
                    ));
                }
                let keys = (kv - k * bs).min(bs);
                let rows_of = |t: &TensorDesc| {
                    let mut v = t.clone();
                    v.offset += id as usize * t.strides[0];
                    v.shape = vec![keys, hkv * d];
                    v.strides = vec![t.strides[1], 1];
                    v
                };
                let (kd, vd) = (rows_of(&self.key), rows_of(&self.value));
                take_f32(&mut kb, &mk, &mut Walk::of(&kd), kd.numel());
                take_f32(&mut vb, &mv, &mut Walk::of(&vd), vd.numel());
                let mut p = vec![0f32; keys];
                for i in 0..rows {
                    let diagonal = (kv - rows + i) as i64;
                    for h in 0..n {
                        let qr = &q[((first + i) * n + h) * d..][..d];
                        let kh = h / group;
                        let mut block_top = f32::NEG_INFINITY;
                        for (j, pj) in p.iter_mut().enumerate() {
                            let pos = (k * bs + j) as i64;
                            *pj = if mask_at(pos - diagonal) {
                                f32::NEG_INFINITY
                            } else {
                                let kr = &kb[(j * hkv + kh) * d..][..d];
                                qr.iter().zip(kr).map(|(a, b)| a * b).sum::<f32>() * self.scale
                            };
                            block_top = block_top.max(*pj);
                        }
                        let s = i * n + h;
                        let new_top = top[s].max(block_top);
                        if new_top == f32::NEG_INFINITY {
                            continue;
                        }
                        let decay = (top[s] - new_top).exp();
                        let out = &mut acc[s * d..][..d];
                        out.iter_mut().for_each(|o| *o *= decay);
                        sum[s] *= decay;
                        for (j, &pj) in p.iter().enumerate() {
                            let e = (pj - new_top).exp();
                            sum[s] += e;
                            // The cube takes the probabilities in the input type.
                            let e = round_to(dtype, e as f64) as f32;
                            let vr = &vb[(j * hkv + kh) * d..][..d];
                            out.iter_mut().zip(vr).for_each(|(o, v)| *o += e * v);
                        }
                        top[s] = new_top;
                    }
                }
            }
            for (s, l) in sum.iter().enumerate() {
                let inv = if *l > 0.0 { 1.0 / l } else { 0.0 };
                acc[s * d..][..d].iter_mut().for_each(|o| *o *= inv);
            }
            let mut part = self.out.clone();
            part.offset += first * self.out.strides[0];
            part.shape[0] = rows;
            put_f32(&mo, &mut Walk::of(&part), &acc);
        }
        Ok(())
    }
}

fn contiguous(op: &str, name: &str, t: &TensorDesc) -> Result<(), Fault> {
    if t.is_contiguous() {
        Ok(())
    } else {
        Err(invalid(
            op,
            format!("{name} {} must be contiguous", t.describe()),
        ))
    }
}

pub unsafe extern "C" fn aclnnFusedInferAttentionScoreV3GetWorkspaceSize(
    query: *const aclTensor,
    key: *const aclTensorList,
    value: *const aclTensorList,
    pse_shift_optional: *const aclTensor,
    atten_mask_optional: *const aclTensor,
    actual_seq_lengths_optional: *const aclIntArray,
    actual_seq_lengths_kv_optional: *const aclIntArray,
    deq_scale1_optional: *const aclTensor,
    quant_scale1_optional: *const aclTensor,
    deq_scale2_optional: *const aclTensor,
    quant_scale2_optional: *const aclTensor,
    quant_offset2_optional: *const aclTensor,
    antiquant_scale_optional: *const aclTensor,
    antiquant_offset_optional: *const aclTensor,
    block_table_optional: *const aclTensor,
    query_padding_size_optional: *const aclTensor,
    kv_padding_size_optional: *const aclTensor,
    key_antiquant_scale_optional: *const aclTensor,
    key_antiquant_offset_optional: *const aclTensor,
    value_antiquant_scale_optional: *const aclTensor,
    value_antiquant_offset_optional: *const aclTensor,
    key_shared_prefix_optional: *const aclTensor,
    value_shared_prefix_optional: *const aclTensor,
    actual_shared_prefix_len_optional: *const aclIntArray,
    query_rope_optional: *const aclTensor,
    key_rope_optional: *const aclTensor,
    key_rope_antiquant_scale_optional: *const aclTensor,
    num_heads: i64,
    scale_value: f64,
    _pre_tokens: i64,
    _next_tokens: i64,
    input_layout: *mut c_char,
    num_key_value_heads: i64,
    sparse_mode: i64,
    inner_precise: i64,
    block_size: i64,
    antiquant_mode: i64,
    softmax_lse_flag: bool,
    key_antiquant_mode: i64,
    value_antiquant_mode: i64,
    attention_out: *const aclTensor,
    softmax_lse: *const aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnFusedInferAttentionScoreV3";
    phase1(OP, ws, ex, || {
        let optional: [(&str, *const c_void); 20] = [
            ("pseShiftOptional", pse_shift_optional.cast()),
            ("deqScale1Optional", deq_scale1_optional.cast()),
            ("quantScale1Optional", quant_scale1_optional.cast()),
            ("deqScale2Optional", deq_scale2_optional.cast()),
            ("quantScale2Optional", quant_scale2_optional.cast()),
            ("quantOffset2Optional", quant_offset2_optional.cast()),
            ("antiquantScaleOptional", antiquant_scale_optional.cast()),
            ("antiquantOffsetOptional", antiquant_offset_optional.cast()),
            (
                "queryPaddingSizeOptional",
                query_padding_size_optional.cast(),
            ),
            ("kvPaddingSizeOptional", kv_padding_size_optional.cast()),
            (
                "keyAntiquantScaleOptional",
                key_antiquant_scale_optional.cast(),
            ),
            (
                "keyAntiquantOffsetOptional",
                key_antiquant_offset_optional.cast(),
            ),
            (
                "valueAntiquantScaleOptional",
                value_antiquant_scale_optional.cast(),
            ),
            (
                "valueAntiquantOffsetOptional",
                value_antiquant_offset_optional.cast(),
            ),
            ("keySharedPrefixOptional", key_shared_prefix_optional.cast()),
            (
                "valueSharedPrefixOptional",
                value_shared_prefix_optional.cast(),
            ),
            (
                "actualSharedPrefixLenOptional",
                actual_shared_prefix_len_optional.cast(),
            ),
            ("queryRopeOptional", query_rope_optional.cast()),
            ("keyRopeOptional", key_rope_optional.cast()),
            (
                "keyRopeAntiquantScaleOptional",
                key_rope_antiquant_scale_optional.cast(),
            ),
        ];
        for (name, p) in optional {
            if !p.is_null() {
                return Err(invalid(
                    OP,
                    format!("{name} is given: only the float paged-KV prefill form is emulated"),
                ));
            }
        }
        if softmax_lse_flag || !softmax_lse.is_null() {
            return Err(invalid(
                OP,
                "softmaxLseFlag / softmaxLse: the LSE output is not emulated",
            ));
        }
        if antiquant_mode != 0 || key_antiquant_mode != 0 || value_antiquant_mode != 0 {
            return Err(invalid(OP, "antiquant modes other than 0 are not emulated"));
        }
        if input_layout.is_null() {
            return Err(fault(
                ACLNN_ERR_PARAM_NULLPTR,
                format!("{OP}: inputLayout is NULL"),
            ));
        }
        let layout = CStr::from_ptr(input_layout).to_string_lossy();
        if layout != "TND" {
            return Err(invalid(
                OP,
                format!("inputLayout {layout:?}: only \"TND\" with a block table is emulated"),
            ));
        }
        if sparse_mode != RIGHT_DOWN_CAUSAL {
            return Err(invalid(
                OP,
                format!("sparseMode {sparse_mode}: only 3 (rightDownCausal) is emulated"),
            ));
        }
        // innerPrecise 0 (high precision) and 1 (high performance) compute alike here; 2 and 3
        // add the row-invalid correction, which the causal form never needs and is not emulated.
        if !(0..=1).contains(&inner_precise) {
            return Err(invalid(
                OP,
                format!("innerPrecise {inner_precise}: only 0 and 1 are emulated"),
            ));
        }
        let query = tensor_arg(OP, "query", query)?;
        let (keys, values) = (
            tensor_list_arg(OP, "key", key)?,
            tensor_list_arg(OP, "value", value)?,
        );
        let out = tensor_arg(OP, "attentionOut", attention_out)?;
        if keys.len() != 1 || values.len() != 1 {
            return Err(invalid(
                OP,
                format!(
                    "key and value hold {} and {} tensors: a paged cache is one tensor each",
                    keys.len(),
                    values.len()
                ),
            ));
        }
        let (key, value) = (keys[0].clone(), values[0].clone());
        for (name, t) in [
            ("query", &query),
            ("key", &key),
            ("value", &value),
            ("attentionOut", &out),
        ] {
            check_dtype(OP, name, t, FIA)?;
            contiguous(OP, name, t)?;
        }
        if [key.dtype, value.dtype, out.dtype]
            .iter()
            .any(|&d| d != query.dtype)
        {
            return Err(invalid(
                OP,
                format!(
                    "query {}, key {}, value {} and attentionOut {} must share one type",
                    query.dtype, key.dtype, value.dtype, out.dtype
                ),
            ));
        }
        if block_table_optional.is_null() {
            return Err(invalid(
                OP,
                "blockTableOptional is NULL: only the paged-KV form (key/value caches through a block table) is emulated",
            ));
        }
        let table = tensor_arg(OP, "blockTableOptional", block_table_optional)?;
        check_dtype(OP, "blockTableOptional", &table, BLOCK_TABLE)?;
        contiguous(OP, "blockTableOptional", &table)?;
        if atten_mask_optional.is_null() {
            return Err(invalid(
                OP,
                "sparseMode 3 needs attenMaskOptional (the compressed [2048, 2048] mask)",
            ));
        }
        let mask = tensor_arg(OP, "attenMaskOptional", atten_mask_optional)?;
        check_dtype(OP, "attenMaskOptional", &mask, MASK)?;
        contiguous(OP, "attenMaskOptional", &mask)?;
        if mask.shape != [MASK_SIDE, MASK_SIDE] {
            return Err(invalid(
                OP,
                format!(
                    "attenMaskOptional {}: sparseMode 3 takes the compressed [2048, 2048] mask",
                    mask.describe()
                ),
            ));
        }
        if query.shape.len() != 3
            || key.shape.len() != 3
            || value.shape.len() != 3
            || table.shape.len() != 2
        {
            return Err(invalid(
                OP,
                format!(
                    "TND with a block table takes query [T, N, D], key and value [blocks, blockSize, HKV * D] and blockTable [B, maxBlocks]; got query {}, key {}, value {}, blockTable {}",
                    query.describe(), key.describe(), value.describe(), table.describe()
                ),
            ));
        }
        let [t, n, d] = [query.shape[0], query.shape[1], query.shape[2]];
        let hkv = if num_key_value_heads == 0 {
            num_heads
        } else {
            num_key_value_heads
        };
        if num_heads <= 0 || num_heads as usize != n || hkv <= 0 || !n.is_multiple_of(hkv as usize)
        {
            return Err(invalid(
                OP,
                format!("numHeads {num_heads} and numKeyValueHeads {num_key_value_heads}: numHeads must be query's N ({n}) and a multiple of the key/value heads"),
            ));
        }
        let hkv = hkv as usize;
        if d == 0 || !d.is_multiple_of(HEAD_ALIGN) || d > MAX_HEAD {
            return Err(invalid(
                OP,
                format!("head dim {d}: the paged form takes D a multiple of {HEAD_ALIGN}, at most {MAX_HEAD}"),
            ));
        }
        let bs = block_size.max(0) as usize;
        if bs == 0 || !bs.is_multiple_of(BLOCK_ALIGN) || bs > MAX_BLOCK {
            return Err(invalid(
                OP,
                format!("blockSize {block_size}: the paged form takes a multiple of {BLOCK_ALIGN}, at most {MAX_BLOCK}"),
            ));
        }
        if key.shape != [key.shape[0], bs, hkv * d] || value.shape != key.shape {
            return Err(invalid(
                OP,
                format!(
                    "key {} and value {} must both be [blocks, blockSize {bs}, HKV * D = {}]",
                    key.describe(),
                    value.describe(),
                    hkv * d
                ),
            ));
        }
        if out.shape != query.shape {
            return Err(invalid(
                OP,
                format!(
                    "attentionOut {} must be query's shape {}",
                    out.describe(),
                    query.describe()
                ),
            ));
        }
        if actual_seq_lengths_optional.is_null() || actual_seq_lengths_kv_optional.is_null() {
            return Err(invalid(
                OP,
                "TND takes actualSeqLengthsOptional and actualSeqLengthsKvOptional",
            ));
        }
        let q_ends = int_array_arg(OP, "actualSeqLengthsOptional", actual_seq_lengths_optional)?;
        let kv_lens = int_array_arg(
            OP,
            "actualSeqLengthsKvOptional",
            actual_seq_lengths_kv_optional,
        )?;
        let batch = table.shape[0];
        if q_ends.len() != batch || kv_lens.len() != batch {
            return Err(invalid(
                OP,
                format!(
                    "actualSeqLengths ({}) and actualSeqLengthsKv ({}) must have one entry per blockTable row ({batch})",
                    q_ends.len(), kv_lens.len()
                ),
            ));
        }
        let capacity = table.shape[1] * bs;
        let mut requests = Vec::with_capacity(batch);
        let mut start = 0i64;
        for (b, (&end, &kv)) in q_ends.iter().zip(&kv_lens).enumerate() {
            let rows = end - start;
            // ASSUMPTION (stricter reading): a chunk with more rows than keys would leave rows
            // fully masked under rightDownCausal; the emulation refuses it.
            if rows < 0 || kv < rows || kv as usize > capacity {
                return Err(invalid(
                    OP,
                    format!(
                        "request {b}: actualSeqLengths must be non-decreasing running totals (TND) and each request's {rows} query rows at most its {kv} keys, at most maxBlocks x blockSize = {capacity}"
                    ),
                ));
            }
            requests.push((start as usize, rows as usize, kv as usize));
            start = end;
        }
        if start as usize != t {
            return Err(invalid(
                OP,
                format!("actualSeqLengths ends at {start}, but query has {t} rows (TND: running totals ending at T)"),
            ));
        }
        let plan = Plan {
            query,
            key,
            value,
            mask,
            table,
            out,
            requests,
            heads: n,
            kv_heads: hkv,
            dim: d,
            block: bs,
            scale: scale_value as f32,
        };
        Ok((SCRATCH_WORKSPACE, Arc::new(move || plan.run(OP)) as Kernel))
    })
}
