//! The composed defaults of the fused ops: each written with standard Burn ops only, so it
//! runs on any backend. [`FusedOps`]'s default methods call them; tests and benchmarks call them
//! directly to run the reference composition on the same device as the kernel it checks.

use super::*;
use burn_tensor::activation::silu;

pub use super::paged::{
    composed_alloc_extend as alloc_extend, composed_decode_attention as decode_attention,
    composed_extend_attention as extend_attention,
    composed_paged_prefill_attention as paged_prefill_attention,
};

/// The composed default of [`FusedOps::layer_norm`].
pub fn layer_norm<B: Backend>(
    x: FloatTensor<B>,
    gamma: Option<FloatTensor<B>>,
    beta: Option<FloatTensor<B>>,
    eps: f64,
) -> LayerNormOutput<B> {
    let shape = x.shape();
    let (m, n) = rows_cols(&shape);
    let dtype = x.dtype();
    if n == 0 {
        return LayerNormOutput {
            mean: nan_rows::<B>(&x, m),
            rstd: nan_rows::<B>(&x, m),
            y: x,
        };
    }
    let x: Float2<B> = float::<B, 2>(B::float_reshape(x, [m, n].into())).cast(DType::F32);
    let mean = x.clone().mean_dim(1);
    let centred = x - mean.clone();
    let var = centred.clone().powi_scalar(2).mean_dim(1);
    let rstd = (var + eps).sqrt().recip();
    let mut y = centred * rstd.clone();
    if let Some(g) = gamma {
        y = y * float::<B, 1>(g).cast(DType::F32).unsqueeze();
    }
    if let Some(b) = beta {
        y = y + float::<B, 1>(b).cast(DType::F32).unsqueeze();
    }
    LayerNormOutput {
        y: B::float_reshape(prim(y.cast(dtype)), shape),
        mean: prim(mean.flatten::<1>(0, 1)),
        rstd: prim(rstd.flatten::<1>(0, 1)),
    }
}

/// The composed default of [`FusedOps::layer_norm_backward`].
pub fn layer_norm_backward<B: Backend>(
    dy: FloatTensor<B>,
    x: FloatTensor<B>,
    mean: FloatTensor<B>,
    rstd: FloatTensor<B>,
    gamma: Option<FloatTensor<B>>,
) -> LayerNormGrads<B> {
    let shape = x.shape();
    let (m, n) = rows_cols(&shape);
    let dtype = x.dtype();
    let as2 =
        |t: FloatTensor<B>| float::<B, 2>(B::float_reshape(t, [m, n].into())).cast(DType::F32);
    let (dy, x) = (as2(dy), as2(x));
    let (mean, rstd): (Float2<B>, Float2<B>) = (
        float::<B, 1>(mean).cast(DType::F32).unsqueeze_dim(1),
        float::<B, 1>(rstd).cast(DType::F32).unsqueeze_dim(1),
    );
    let xhat = (x - mean) * rstd.clone();
    let g = match gamma {
        Some(gamma) => dy.clone() * float::<B, 1>(gamma).cast(DType::F32).unsqueeze(),
        None => dy.clone(),
    };
    let dx =
        (g.clone() - g.clone().mean_dim(1) - xhat.clone() * (g * xhat.clone()).mean_dim(1)) * rstd;
    LayerNormGrads {
        dx: B::float_reshape(prim(dx.cast(dtype)), shape),
        dgamma: prim(
            (dy.clone() * xhat)
                .sum_dim(0)
                .flatten::<1>(0, 1)
                .cast(dtype),
        ),
        dbeta: prim(dy.sum_dim(0).flatten::<1>(0, 1).cast(dtype)),
    }
}

/// `(rows, cols)` of a norm's input: the last dim and the product of the others (also when
/// there are no columns).
fn rows_cols(shape: &Shape) -> (usize, usize) {
    let dims = shape.as_slice();
    let (cols, leading) = dims.split_last().unwrap_or((&0, &[]));
    (leading.iter().product(), *cols)
}

/// The f32 statistic `[m]` of rows without columns: NaN, the mean of no values (some backends
/// refuse a mean over an empty dim).
fn nan_rows<B: Backend>(x: &FloatTensor<B>, m: usize) -> FloatTensor<B> {
    let device = B::float_device(x);
    prim(Tensor::<B, 1>::full([m], f32::NAN, (&device, DType::F32)))
}

/// The composed default of [`FusedOps::rms_norm`].
pub fn rms_norm<B: Backend>(
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    eps: f64,
) -> RmsNormOutput<B> {
    let shape = x.shape();
    let (m, n) = rows_cols(&shape);
    let dtype = x.dtype();
    if n == 0 {
        return RmsNormOutput {
            rstd: nan_rows::<B>(&x, m),
            y: x,
        };
    }
    let x: Float2<B> = float::<B, 2>(B::float_reshape(x, [m, n].into())).cast(DType::F32);
    let rstd = (x.clone().powi_scalar(2).mean_dim(1) + eps).sqrt().recip();
    let y = x * rstd.clone() * float::<B, 1>(gamma).cast(DType::F32).unsqueeze();
    RmsNormOutput {
        y: B::float_reshape(prim(y.cast(dtype)), shape),
        rstd: prim(rstd.flatten::<1>(0, 1)),
    }
}

/// The composed default of [`FusedOps::add_rms_norm`]: the add in x1's dtype, then
/// [`FusedOps::rms_norm`] of the sum (so `Autodiff` differentiates through both).
pub fn add_rms_norm<B: FusedOps>(
    x1: FloatTensor<B>,
    x2: FloatTensor<B>,
    gamma: FloatTensor<B>,
    eps: f64,
) -> AddRmsNormOutput<B> {
    let x = B::float_add(x1, x2);
    let out = B::rms_norm(x.clone(), gamma, eps);
    AddRmsNormOutput {
        y: out.y,
        rstd: out.rstd,
        x,
    }
}

/// The composed default of [`FusedOps::rms_norm_backward`].
pub fn rms_norm_backward<B: Backend>(
    dy: FloatTensor<B>,
    x: FloatTensor<B>,
    rstd: FloatTensor<B>,
    gamma: FloatTensor<B>,
) -> RmsNormGrads<B> {
    let shape = x.shape();
    let (m, n) = rows_cols(&shape);
    let dtype = x.dtype();
    let device = B::float_device(&x);
    if m * n == 0 {
        // No element contributes to dgamma (and dx has none).
        return RmsNormGrads {
            dx: B::float_zeros(shape, &device, dtype.into()),
            dgamma: prim(Tensor::<B, 1>::zeros([n], (&device, DType::F32))),
        };
    }
    let as2 =
        |t: FloatTensor<B>| float::<B, 2>(B::float_reshape(t, [m, n].into())).cast(DType::F32);
    let (dy, x) = (as2(dy), as2(x));
    let rstd: Float2<B> = float::<B, 1>(rstd).cast(DType::F32).unsqueeze_dim(1);
    let xhat = x * rstd.clone();
    let g = dy.clone() * float::<B, 1>(gamma).cast(DType::F32).unsqueeze();
    let dx = (g.clone() - xhat.clone() * (g * xhat.clone()).mean_dim(1)) * rstd;
    RmsNormGrads {
        dx: B::float_reshape(prim(dx.cast(dtype)), shape),
        dgamma: prim((dy * xhat).sum_dim(0).flatten::<1>(0, 1)),
    }
}

/// The composed default of [`FusedOps::moe_gather`].
pub fn moe_gather<B: Backend>(
    x: FloatTensor<B>,
    indices: IntTensor<B>,
    top_k: usize,
) -> FloatTensor<B> {
    let rows = int::<B, 1>(indices) / (top_k as i64);
    prim(float::<B, 2>(x).select(0, rows))
}

/// The composed default of [`FusedOps::moe_gating_softmax`]: transformers' routing (softmax
/// and choice in f32, the weights rounded once to the logits' dtype).
pub fn moe_gating_softmax<B: Backend>(
    logits: FloatTensor<B>,
    top_k: usize,
    renormalize: bool,
) -> MoeGating<B> {
    let logits: Float2<B> = float(logits);
    let dtype = logits.dtype();
    let probs = burn_tensor::activation::softmax(logits.cast(DType::F32), 1);
    let (top, ids) = probs.clone().topk_with_indices(top_k, 1);
    let weights = if renormalize {
        top.clone() / top.sum_dim(1)
    } else {
        top
    };
    MoeGating {
        weights: prim(weights.cast(dtype)),
        ids: ids.into_primitive(),
        probs: Some(prim(probs)),
    }
}

/// The composed default of [`FusedOps::moe_group_topk`]: transformers' DeepSeek routers, in
/// f32, the weights rounded once to `weights_dtype`.
pub fn moe_group_topk<B: Backend>(
    logits: FloatTensor<B>,
    bias: Option<FloatTensor<B>>,
    choice: GroupTopk,
    weights_dtype: DType,
) -> MoeGating<B> {
    let logits = float::<B, 2>(logits).cast(DType::F32);
    let scores = match choice.sigmoid {
        true => burn_tensor::activation::sigmoid(logits),
        false => burn_tensor::activation::softmax(logits, 1),
    };
    let [t, e] = scores.dims();
    let mut selection = match bias {
        Some(b) => scores.clone() + float::<B, 1>(b).cast(DType::F32).reshape([1, e]),
        None => scores.clone(),
    };
    if choice.keep_groups < choice.groups {
        // Each group's score, the best groups kept, every other expert's value set to 0 (as
        // transformers masks them: a kept expert with a negative biased value ranks below them).
        let (groups, per) = (choice.groups, e / choice.groups);
        let grouped = selection.clone().reshape([t, groups, per]);
        let group_scores = match choice.group_top_two {
            true => grouped.topk_with_indices(2, 2).0.sum_dim(2),
            false => grouped.max_dim(2),
        };
        let (_, kept) = group_scores
            .reshape([t, groups])
            .topk_with_indices(choice.keep_groups, 1);
        let all = Tensor::<B, 1, Int>::arange(0..groups as i64, &kept.device());
        let kept: Tensor<B, 3, burn_tensor::Bool> = kept
            .reshape([t, choice.keep_groups, 1])
            .equal(all.reshape([1, 1, groups]))
            .any_dim(1);
        let kept = kept
            .reshape([t, groups, 1])
            .expand([t, groups, per])
            .reshape([t, e]);
        selection = selection.mask_fill(kept.bool_not(), 0.0);
    }
    let (top, ids) = selection.topk_with_indices(choice.top_k, 1);
    let mut weights = match choice.gather_scores {
        true => scores.clone().gather(1, ids.clone()),
        false => top,
    };
    if choice.renormalize {
        weights = weights.clone() / (weights.sum_dim(1) + 1e-20);
    }
    if choice.scale != 1.0 {
        weights = weights * choice.scale;
    }
    MoeGating {
        weights: prim(weights.cast(weights_dtype)),
        ids: ids.into_primitive(),
        probs: Some(prim(scores)),
    }
}

/// The composed default of [`FusedOps::rotary_embedding`]: transformers' `apply_rotary_pos_emb`
/// (or, `interleaved`, DeepSeek's pairs `(2i, 2i + 1)` turned in place) in q's dtype, each
/// token's cos and sin rows broadcast to its heads.
pub fn rotary_embedding<B: Backend>(
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    cos_sin: FloatTensor<B>,
    rows: IntTensor<B>,
    interleaved: bool,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let picked = float::<B, 2>(cos_sin).select(0, int::<B, 1>(rows));
    let [t, d] = picked.dims();
    let half = d / 2;
    let (cos, sin) = (
        picked.clone().narrow(1, 0, half),
        picked.narrow(1, half, half),
    );
    if interleaved {
        let (cos, sin) = (cos.reshape([t, 1, half, 1]), sin.reshape([t, 1, half, 1]));
        let turn = |x: FloatTensor<B>| {
            let x = float::<B, 3>(x);
            let n = x.dims()[1];
            let pairs = x.reshape([t, n, half, 2]);
            let (even, odd) = (pairs.clone().narrow(3, 0, 1), pairs.narrow(3, 1, 1));
            let turned = Tensor::cat(
                vec![
                    even.clone() * cos.clone() - odd.clone() * sin.clone(),
                    odd * cos.clone() + even * sin.clone(),
                ],
                3,
            );
            prim(turned.reshape([t, n, d]))
        };
        return (turn(q), turn(k));
    }
    let both = |x: Float2<B>| Tensor::cat(vec![x.clone(), x], 1).reshape([t, 1, d]);
    let (cos, sin) = (both(cos), both(sin));
    let turn = |x: FloatTensor<B>| {
        let x = float::<B, 3>(x);
        let x1 = x.clone().narrow(2, 0, half);
        let x2 = x.clone().narrow(2, half, half);
        let rotated = Tensor::cat(vec![x2.neg(), x1], 2);
        prim(x * cos.clone() + rotated * sin.clone())
    };
    (turn(q), turn(k))
}

/// The composed default of [`FusedOps::swiglu`]: x's rows as a matrix, silu of the first
/// half of each times the second.
pub fn swiglu<B: Backend>(x: FloatTensor<B>) -> FloatTensor<B> {
    let mut shape = x.shape().to_vec();
    let n = shape.pop().unwrap_or(0);
    let rows = shape.iter().product::<usize>();
    let x = float::<B, 2>(x).reshape([rows, n]);
    let half = n / 2;
    let y = silu(x.clone().narrow(1, 0, half)) * x.narrow(1, half, half);
    shape.push(half);
    B::float_reshape(prim(y), shape.into())
}

/// The composed default of [`FusedOps::moe_scatter`].
pub fn moe_scatter<B: Backend>(
    y: FloatTensor<B>,
    indices: IntTensor<B>,
    weights: Option<FloatTensor<B>>,
    top_k: usize,
) -> FloatTensor<B> {
    let y: Float2<B> = float(y);
    let dtype = y.dtype();
    let [slots, h] = y.dims();
    let idx: Ints<B> = int(indices);
    let mut terms = y.cast(DType::F32);
    if let Some(w) = weights {
        let w = float::<B, 1>(w).cast(DType::F32).select(0, idx.clone());
        terms = terms * w.unsqueeze_dim(1);
    }
    let tokens = slots / top_k.max(1);
    let out = Float2::<B>::zeros([tokens, h], (&terms.device(), DType::F32));
    prim(
        out.select_assign(
            0,
            idx / (top_k as i64),
            terms,
            burn_tensor::IndexingUpdateOp::Add,
        )
        .cast(dtype),
    )
}

/// The composed default of [`FusedOps::token_rearrange`].
pub fn token_rearrange<B: Backend>(x: FloatTensor<B>, perm: IntTensor<B>) -> FloatTensor<B> {
    prim(float::<B, 2>(x).select(0, int(perm)))
}

/// The composed default of [`FusedOps::grouped_matmul`].
pub fn grouped_matmul<B: Backend>(
    x: FloatTensor<B>,
    weights: FloatTensor<B>,
    group_sizes: IntTensor<B>,
) -> FloatTensor<B> {
    let x: Float2<B> = float(x);
    let weights: Tensor<B, 3> = float(weights);
    let [rows, _] = x.dims();
    let [groups, _, n] = weights.dims();
    let masks = group_masks::<B>(group_sizes, rows, x.dtype());
    let zeros = Float2::<B>::zeros([rows, n], (&x.device(), x.dtype()));
    prim((0..groups).fold(zeros, |out, e| {
        let rows_e = x.clone() * masks.clone().narrow(1, e, 1);
        out + rows_e.matmul(weights.clone().narrow(0, e, 1).squeeze_dim::<2>(0))
    }))
}

/// The composed default of [`FusedOps::grouped_matmul_weight_grad`].
pub fn grouped_matmul_weight_grad<B: Backend>(
    x: FloatTensor<B>,
    dy: FloatTensor<B>,
    group_sizes: IntTensor<B>,
) -> FloatTensor<B> {
    let (x, dy): (Float2<B>, Float2<B>) = (float(x), float(dy));
    let [rows, _] = x.dims();
    let groups = group_sizes.shape()[0];
    let masks = group_masks::<B>(group_sizes, rows, x.dtype());
    let per_group = (0..groups)
        .map(|e| {
            (x.clone() * masks.clone().narrow(1, e, 1))
                .transpose()
                .matmul(dy.clone())
        })
        .collect();
    prim(Tensor::<B, 2>::stack::<3>(per_group, 0))
}

/// `v` (f32) quantised symmetrically to int8 along `dim`: `scale = max|v| / 127` (kept as a
/// dim of 1) and `q = round_ties_even(v / scale)`, 0 where that is NaN (an all-zero slice,
/// 0 / 0), saturated to int8's range. The one symmetric int8 quantisation: weights per output
/// channel (`fused::quantize_weight_per_channel`) and the composed per-row activations.
///
/// An all-zero slice keeps scale 0 (not Burn's smallest-normal fallback): every consumer
/// dequantises by multiplying (aclnnWeightQuantBatchMatmulV2's antiquantScale,
/// aclnnQuantMatmulV4's and GroupedMatmulV4's per-channel and per-token scales, the saved
/// dequantised weights), so `0 * 0` gives the exact zeros; nothing divides by a scale but this
/// quantisation itself, whose `0 / 0` is masked here before the int8 cast. It is also what
/// aclnnDynamicQuant and MoeInitRoutingQuantV2 give a zero row (the emulator's stricter
/// reading), so weights and activations follow one convention.
pub fn quantize_along<B: Backend, const D: usize>(
    v: Tensor<B, D>,
    dim: usize,
) -> (Tensor<B, D, Int>, Tensor<B, D>) {
    let scale = v.clone().abs().max_dim(dim) / 127.0;
    let q = (v / scale.clone()).round();
    let q = q.clone().mask_fill(q.is_nan(), 0.0).clamp(-128.0, 127.0);
    (q.int().cast(DType::I8), scale)
}

/// The composed default of [`FusedOps::moe_gather_quant`].
pub fn moe_gather_quant<B: Backend>(
    x: FloatTensor<B>,
    expert_ids: IntTensor<B>,
    top_k: usize,
    num_experts: usize,
) -> MoeQuantRows<B> {
    let p = moe_permute::<B>(x, expert_ids, top_k, num_experts);
    let rows = float::<B, 2>(p.rows).cast(DType::F32);
    let slots = rows.dims()[0];
    let (q, scales) = quantize_along(rows, 1);
    MoeQuantRows {
        rows: q.into_primitive(),
        scales: prim(scales.reshape([slots])),
        row_idx: p.row_idx,
        group_sizes: int::<B, 1>(p.group_sizes).cast(DType::I32).into_primitive(),
    }
}

/// The composed default of [`FusedOps::moe_permute`]: a sort by a key unique per slot, a
/// gather, a one-hot count.
pub fn moe_permute<B: Backend>(
    x: FloatTensor<B>,
    expert_ids: IntTensor<B>,
    top_k: usize,
    num_experts: usize,
) -> MoePermuted<B> {
    let ids: Ints<B> = int::<B, 1>(expert_ids).cast(DType::I64);
    let slots = ids.dims()[0];
    let device = ids.device();
    let slot = Ints::<B>::arange(0..slots as i64, &device).cast(DType::I64);
    // A key unique per slot, expert-major and in slot order within an expert: any sort of it
    // is the stable sort by expert.
    let order = (ids.clone() * slots as i64 + slot).argsort(0);
    let rows = float::<B, 2>(x).select(0, order.clone() / top_k as i64);
    let experts = Ints::<B>::arange(0..num_experts as i64, &device).cast(DType::I64);
    let group_sizes = ids
        .reshape([slots, 1])
        .equal(experts.reshape([1, num_experts]))
        .int()
        .sum_dim(0)
        .reshape([num_experts])
        .cast(DType::I64);
    MoePermuted {
        rows: prim(rows),
        // The inverse of a permutation is its argsort.
        row_idx: order.argsort(0).cast(DType::I32).into_primitive(),
        group_sizes: group_sizes.into_primitive(),
    }
}

/// The composed default of [`FusedOps::moe_unpermute`]: each slot's row gathered, weighted and
/// summed per token in f32, the addend added there.
pub fn moe_unpermute<B: Backend>(
    rows: FloatTensor<B>,
    row_idx: IntTensor<B>,
    weights: FloatTensor<B>,
    top_k: usize,
    add: Option<FloatTensor<B>>,
) -> FloatTensor<B> {
    let rows: Float2<B> = float(rows);
    let (dtype, h) = (rows.dtype(), rows.dims()[1]);
    let idx: Ints<B> = int(row_idx);
    let slots = idx.dims()[0];
    let weights = float::<B, 1>(weights).cast(DType::F32).reshape([slots, 1]);
    let picked = rows.select(0, idx).cast(DType::F32) * weights;
    let tokens = slots / top_k;
    let summed = picked
        .reshape([tokens, top_k, h])
        .sum_dim(1)
        .reshape([tokens, h]);
    let summed = match add {
        Some(add) => summed + float::<B, 2>(add).cast(DType::F32),
        None => summed,
    };
    prim(summed.cast(dtype))
}

/// The composed default of [`FusedOps::grouped_matmul_quant`]: the int32 products by Burn's
/// int matmul, each row's scales picked by its group's one-hot mask.
pub fn grouped_matmul_quant<B: Backend>(
    x: IntTensor<B>,
    weights: IntTensor<B>,
    w_scale: FloatTensor<B>,
    x_scale: Option<FloatTensor<B>>,
    group_sizes: IntTensor<B>,
    out: DType,
) -> FloatTensor<B> {
    let x = int::<B, 2>(x).cast(DType::I32);
    let w = int::<B, 3>(weights).cast(DType::I32);
    let ([rows, _], [groups, _, n]) = (x.dims(), w.dims());
    let masks = group_masks::<B>(group_sizes, rows, DType::F32);
    let int_masks = masks.clone().int().cast(DType::I32);
    let zeros = Tensor::<B, 2, Int>::zeros([rows, n], (&x.device(), DType::I32));
    let acc = (0..groups).fold(zeros, |acc, e| {
        let rows_e = x.clone() * int_masks.clone().narrow(1, e, 1);
        acc + rows_e.matmul(w.clone().narrow(0, e, 1).squeeze_dim::<2>(0))
    });
    let mut scale: Float2<B> = float::<B, 2>(w_scale).cast(DType::F32);
    if out == DType::BF16 {
        scale = scale.cast(DType::BF16).cast(DType::F32);
    }
    // One-hot rows pick their group's scales exactly (0 past the groups).
    let mut y = acc.float().cast(DType::F32) * masks.matmul(scale);
    if let Some(s) = x_scale {
        y = y * float::<B, 1>(s).cast(DType::F32).unsqueeze_dim(1);
    }
    prim(y.cast(out))
}

/// The composed default of [`FusedOps::grouped_matmul_antiquant`]: the weights dequantised in
/// x's dtype, then the float grouped matmul.
pub fn grouped_matmul_antiquant<B: Backend>(
    x: FloatTensor<B>,
    weights: IntTensor<B>,
    w_scale: FloatTensor<B>,
    w_offset: Option<FloatTensor<B>>,
    group_sizes: IntTensor<B>,
) -> FloatTensor<B> {
    let x: Float2<B> = float(x);
    let dtype = x.dtype();
    let mut w: Tensor<B, 3> = int::<B, 3>(weights).float().cast(dtype);
    if let Some(o) = w_offset {
        w = w + float::<B, 2>(o).unsqueeze_dim(1);
    }
    let w = w * float::<B, 2>(w_scale).unsqueeze_dim(1);
    grouped_matmul::<B>(prim(x), prim(w), group_sizes)
}

/// `[R, E]` in `dtype`: 1 where row `r` lies in group `e`, else 0. The groups tile the rows
/// in order, group `e` holding `group_sizes[e]` rows; the bounds come from a running sum on the
/// device.
fn group_masks<B: Backend>(group_sizes: IntTensor<B>, rows: usize, dtype: DType) -> Float2<B> {
    let sizes: Ints<B> = int(group_sizes);
    let groups = sizes.dims()[0];
    let row = Ints::<B>::arange(0..rows as i64, &sizes.device());
    let sizes = sizes.cast(row.dtype());
    let ends = sizes.clone().cumsum(0);
    let starts = ends.clone() - sizes;
    let across = |t: Ints<B>| t.unsqueeze::<2>().expand([rows, groups]);
    let row = row.unsqueeze_dim::<2>(1).expand([rows, groups]);
    row.clone()
        .greater_equal(across(starts))
        .bool_and(row.lower(across(ends)))
        .float()
        .cast(dtype)
}

/// The composed default of [`FusedOps::dynamic_quant`]: [`quantize_along`] the rows in f32
/// (after the smooth scales, multiplied in f32 as the operator does).
pub fn dynamic_quant<B: Backend>(
    x: FloatTensor<B>,
    smooth: Option<FloatTensor<B>>,
) -> (IntTensor<B>, FloatTensor<B>) {
    let mut x: Float2<B> = float::<B, 2>(x).cast(DType::F32);
    if let Some(s) = smooth {
        x = x * float::<B, 1>(s).cast(DType::F32).unsqueeze_dim(0);
    }
    let [m, _] = x.dims();
    let (q, scale) = quantize_along(x, 1);
    (q.into_primitive(), prim(scale.reshape([m])))
}

/// The composed default of [`FusedOps::weight_quant_matmul`].
pub fn weight_quant_matmul<B: Backend>(
    x: FloatTensor<B>,
    weight: IntTensor<B>,
    scale: FloatTensor<B>,
    group: usize,
) -> FloatTensor<B> {
    let x: Float2<B> = float(x);
    let dtype = x.dtype();
    let weight: Tensor<B, 2, Int> = int(weight);
    let [k, n] = weight.dims();
    let scale = float::<B, 1>(scale).cast(dtype);
    let scale: Float2<B> = match (scale.dims()[0], group) {
        (1, _) => scale.reshape([1, 1]).expand([k, n]),
        (_, 0) => scale.reshape([1, n]).expand([k, n]),
        (len, g) => scale
            .reshape([len / n, 1, n])
            .expand([len / n, g, n])
            .reshape([len / n * g, n])
            .narrow(0, 0, k),
    };
    // The weight dequantized in x's type (w * scale rounded once), then a float product.
    let w = (weight.float().cast(DType::F32) * scale.cast(DType::F32)).cast(dtype);
    prim(x.matmul(w))
}

/// The composed default of [`FusedOps::quant_matmul`].
pub fn quant_matmul<B: Backend>(
    x: IntTensor<B>,
    weight: IntTensor<B>,
    weight_scale: FloatTensor<B>,
    x_scale: FloatTensor<B>,
    out_dtype: FloatDType,
) -> FloatTensor<B> {
    let (x, weight): (Tensor<B, 2, Int>, Tensor<B, 2, Int>) = (int(x), int(weight));
    let ([m, _], [_, n]) = (x.dims(), weight.dims());
    // Exact integer sums (in 64 bits), converted to f32 as the accumulator is.
    let acc = x
        .cast(IntDType::I64)
        .matmul(weight.cast(IntDType::I64))
        .float()
        .cast(DType::F32);
    let row = |t: FloatTensor<B>, len: usize, shape: [usize; 2]| {
        let t = float::<B, 1>(t).cast(DType::F32);
        if len == 1 {
            t.reshape([1, 1]).expand(shape)
        } else {
            t.reshape(shape)
        }
    };
    let ws = row(weight_scale.clone(), weight_scale.shape()[0], [1, n]);
    let xs = row(x_scale.clone(), x_scale.shape()[0], [m, 1]);
    prim((acc * ws.expand([m, n]) * xs.expand([m, n])).cast(out_dtype))
}
