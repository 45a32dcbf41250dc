//! Quantized matrix products on Atlas A2's int8 paths:
//!
//! - [`weight_quant_matmul`] (W8A16): f16/bf16 activations times an int8 weight with per-tensor,
//!   per-channel or per-group scales, through aclnnWeightQuantBatchMatmulV2;
//! - [`quant_matmul`] (W8A8): int8 x int8 with int32 accumulation, a per-channel (or
//!   per-tensor) weight scale and a per-token activation scale, through aclnnQuantMatmulV4;
//! - [`dynamic_quant`]: per-token symmetric int8 quantization of activations
//!   (`scale = rowmax|x| / 127`), through aclnnDynamicQuant.
//!
//! Weights are quantized by `fused::quantize_weight_per_channel` (Burn ops).
//!
//! All three operators exist from CANN 8.0.0 on.

use super::broadcast::invalid_input;
use super::copy::{cast, contiguous, reshape};
use super::fused::Operand;
use super::layout::Layout;
use super::tensor::AscendTensor;
use crate::acl::aclnn;
use crate::acl::handles::Absent;
use crate::acl::{AclResult, DataType};

fn half(op: &str, t: &AscendTensor) -> AclResult<()> {
    if matches!(t.dtype, DataType::F16 | DataType::BF16) {
        Ok(())
    } else {
        Err(invalid_input(
            op,
            format!("{} must be F16 or BF16", t.describe()),
        ))
    }
}

fn int8_matrix(op: &str, name: &str, t: &AscendTensor) -> AclResult<()> {
    if t.dtype == DataType::I8 && t.shape().len() == 2 {
        Ok(())
    } else {
        Err(invalid_input(
            op,
            format!("{name} must be a 2-D I8 matrix, got {}", t.describe()),
        ))
    }
}

/// Per-token int8 quantization of `x [.., K]` (F16 or BF16), each column first multiplied by
/// `smooth [K]` (x's type) if given, in f32: I8 values of x's shape and F32 scales of x's shape
/// without its last dim, `scale = rowmax|x| / 127` and `q = rint(x / scale)` (a row of zeros
/// gets scale 0 and values 0).
pub fn dynamic_quant(
    x: &AscendTensor,
    smooth: Option<&AscendTensor>,
) -> AclResult<(AscendTensor, AscendTensor)> {
    const OP: &str = "dynamic_quant";
    half(OP, x)?;
    check_smooth(OP, x, smooth)?;
    let smooth = smooth.map(contiguous).transpose()?;
    let smooth_desc = smooth.as_ref().map(|s| s.desc()).transpose()?;
    let r = x.shape().len();
    if !(2..=8).contains(&r) {
        return Err(invalid_input(
            OP,
            format!("x {} must have 2 to 8 dims", x.describe()),
        ));
    }
    let values = AscendTensor::empty(x.ctx(), x.shape().to_vec(), DataType::I8)?;
    let scales = AscendTensor::empty(x.ctx(), x.shape()[..r - 1].to_vec(), DataType::F32)?;
    let launch = match &smooth_desc {
        Some(s) => aclnn!(
            &**x.ctx(),
            aclnnDynamicQuant(x.desc()?, s, values.desc()?, scales.desc()?)
        ),
        None => aclnn!(
            &**x.ctx(),
            aclnnDynamicQuant(x.desc()?, Absent, values.desc()?, scales.desc()?)
        ),
    };
    launch
        .map_err(|e| e.with_context(|| format!("{OP}: aclnnDynamicQuant of {}", x.describe())))?;
    Ok((values, scales))
}

/// aclnnDynamicQuant's smooth scales are `[K]` of x's type (op doc).
fn check_smooth<T: Operand>(op: &str, x: &T, smooth: Option<&T>) -> AclResult<()> {
    let Some(s) = smooth else { return Ok(()) };
    let k = x.dims().last().copied().unwrap_or(0);
    if s.dims() != [k] || s.data_type() != x.data_type() {
        return Err(invalid_input(
            op,
            format!(
                "smooth scales {} must be [{k}] of x's type (x {})",
                s.describe(),
                x.describe()
            ),
        ));
    }
    Ok(())
}

/// `x @ dequant(weight)` (W8A16): `x [M, K]` F16/BF16, `weight [K, N]` I8 (dense or a
/// transposed view of `[N, K]`), `scale` F32 or x's type shaped `[1]` (per tensor), `[N]` (per
/// output channel) or `[ceil(K / group), N]` (per group of `group` rows of the weight, `group`
/// a multiple of 32 below K; 0 for the other two), `bias` `[N]` (cast to F16 for F16 x, F32 for
/// BF16 x). The weight is dequantized in x's type, `(w * scale)` rounded once, then multiplied
/// with f32 accumulation; the result is `[M, N]` in x's type.
pub fn weight_quant_matmul(
    x: &AscendTensor,
    weight: &AscendTensor,
    scale: &AscendTensor,
    bias: Option<&AscendTensor>,
    group: usize,
) -> AclResult<AscendTensor> {
    const OP: &str = "weight_quant_matmul";
    half(OP, x)?;
    int8_matrix(OP, "weight", weight)?;
    if x.shape().len() != 2 || x.shape()[1] != weight.shape()[0] {
        return Err(invalid_input(
            OP,
            format!(
                "needs x [M, K] and weight [K, N], got {} and {}",
                x.describe(),
                weight.describe()
            ),
        ));
    }
    let (m, n) = (x.shape()[0], weight.shape()[1]);
    let x = contiguous(x)?;
    // Per-group scales may come flattened ([groups * N], row-major [groups, N]).
    let scale = if group > 0 && scale.shape().len() == 1 {
        reshape(scale, vec![scale.layout.numel() / n.max(1), n])?
    } else {
        scale.clone()
    };
    let scale = contiguous(&cast(&scale, x.dtype)?)?;
    let bias_dtype = if x.dtype == DataType::F16 {
        DataType::F16
    } else {
        DataType::F32
    };
    let bias = bias
        .map(|b| contiguous(&cast(b, bias_dtype)?))
        .transpose()?;
    let out = AscendTensor::empty(x.ctx(), vec![m, n], x.dtype)?;
    let bias_desc = bias.as_ref().map(|b| b.desc()).transpose()?;
    let group = i32::try_from(group)
        .map_err(|_| invalid_input(OP, format!("group {group} does not fit an i32")))?;
    let launch = match &bias_desc {
        Some(b) => aclnn!(
            &**x.ctx(),
            aclnnWeightQuantBatchMatmulV2(
                x.desc()?,
                weight.desc()?,
                scale.desc()?,
                Absent,
                Absent,
                Absent,
                b,
                group,
                out.desc()?
            )
        ),
        None => aclnn!(
            &**x.ctx(),
            aclnnWeightQuantBatchMatmulV2(
                x.desc()?,
                weight.desc()?,
                scale.desc()?,
                Absent,
                Absent,
                Absent,
                Absent,
                group,
                out.desc()?
            )
        ),
    };
    launch.map_err(|e| {
        e.with_context(|| {
            format!(
                "{OP}: aclnnWeightQuantBatchMatmulV2 of {} and {} (scale {}, group {group})",
                x.describe(),
                weight.describe(),
                scale.describe()
            )
        })
    })?;
    Ok(out)
}

/// `(x @ weight) * weight_scale * x_scale` (W8A8): `x [M, K]` I8, `weight [K, N]` I8 (dense, or
/// a transposed view of a dense `[N, K]`), `weight_scale` F32 `[1]` or `[N]`, `x_scale` F32
/// `[M]` (per token) or `[1]` (per tensor, broadcast to the rows); int32 accumulation, f32
/// dequantization, out `[M, N]` in `out_dtype` (F16 or BF16).
pub fn quant_matmul(
    x: &AscendTensor,
    weight: &AscendTensor,
    weight_scale: &AscendTensor,
    x_scale: &AscendTensor,
    out_dtype: DataType,
) -> AclResult<AscendTensor> {
    const OP: &str = "quant_matmul";
    int8_matrix(OP, "x", x)?;
    int8_matrix(OP, "weight", weight)?;
    let (m, k, n) = (x.shape()[0], x.shape()[1], weight.shape()[1]);
    if weight.shape()[0] != k {
        return Err(invalid_input(
            OP,
            format!(
                "needs x [M, K] and weight [K, N], got {} and {}",
                x.describe(),
                weight.describe()
            ),
        ));
    }
    if !matches!(out_dtype, DataType::F16 | DataType::BF16) {
        return Err(invalid_input(
            OP,
            format!("out_dtype {out_dtype} must be F16 or BF16"),
        ));
    }
    let f32_vector = |t: &AscendTensor, ok: &[usize]| {
        t.dtype == DataType::F32 && t.shape().len() == 1 && ok.contains(&t.shape()[0])
    };
    if !f32_vector(weight_scale, &[1, n]) || !f32_vector(x_scale, &[1, m]) {
        return Err(invalid_input(
            OP,
            format!(
                "needs F32 weight_scale [1] or [{n}] and x_scale [1] or [{m}], got {} and {}",
                weight_scale.describe(),
                x_scale.describe()
            ),
        ));
    }
    let x = contiguous(x)?;
    // A transposed view of a dense [N, K] is passed as that matrix with transposeX2.
    let w_t = weight.layout.strides == [1, k] && !weight.layout.is_contiguous();
    let w = if w_t {
        weight.with_layout(Layout {
            shape: vec![n, k],
            strides: vec![k, 1],
            offset: weight.layout.offset,
        })
    } else {
        contiguous(weight)?
    };
    let per_token = contiguous(&x_scale.with_layout(Layout {
        shape: vec![m],
        strides: vec![usize::from(x_scale.shape()[0] != 1)],
        offset: x_scale.layout.offset,
    }))?;
    let w_scale = contiguous(weight_scale)?;
    let out = AscendTensor::empty(x.ctx(), vec![m, n], out_dtype)?;
    aclnn!(
        &**x.ctx(),
        aclnnQuantMatmulV4(
            x.desc()?,
            w.desc()?,
            w_scale.desc()?,
            Absent,
            per_token.desc()?,
            Absent,
            false,
            w_t,
            out.desc()?
        )
    )
    .map_err(|e| {
        e.with_context(|| {
            format!(
                "{OP}: aclnnQuantMatmulV4 of {} and {} (scales {} and {})",
                x.describe(),
                weight.describe(),
                weight_scale.describe(),
                x_scale.describe()
            )
        })
    })?;
    Ok(out)
}

/// The contract of `FusedOps::dynamic_quant`: float `x [M, K]`, `smooth [K]` of x's type.
pub fn check_dynamic_quant<T: Operand>(x: &T, smooth: Option<&T>) -> AclResult<()> {
    if x.dims().len() != 2 || !x.data_type().is_float() {
        return Err(invalid_input(
            "dynamic_quant",
            format!("needs float x [M, K], got {}", x.describe()),
        ));
    }
    check_smooth("dynamic_quant", x, smooth)
}

/// The contract of `FusedOps::weight_quant_matmul`: float `x [M, K]`, I8 `weight [K, N]`,
/// float `scale` of `[1]`, `[N]` or (with `group > 0`, a multiple of 32 below K)
/// `[ceil(K / group) * N]`.
pub fn check_weight_quant_matmul<T: Operand>(
    x: &T,
    weight: &T,
    scale: &T,
    group: usize,
) -> AclResult<()> {
    const OP: &str = "weight_quant_matmul";
    let (xd, wd, sd) = (x.dims(), weight.dims(), scale.dims());
    let fits = xd.len() == 2
        && x.data_type().is_float()
        && wd.len() == 2
        && weight.data_type() == DataType::I8
        && xd[1] == wd[0]
        && scale.data_type().is_float()
        && sd.len() == 1;
    if !fits {
        return Err(invalid_input(
            OP,
            format!(
                "needs float x [M, K], I8 weight [K, N] and a float 1-D scale, got {}, {} and {}",
                x.describe(),
                weight.describe(),
                scale.describe()
            ),
        ));
    }
    let (k, n) = (wd[0], wd[1]);
    let want = if group == 0 {
        vec![1, n]
    } else {
        if !group.is_multiple_of(32) || group >= k {
            return Err(invalid_input(
                OP,
                format!("group {group} must be a multiple of 32 below K = {k}"),
            ));
        }
        vec![k.div_ceil(group) * n]
    };
    if !want.contains(&sd[0]) {
        return Err(invalid_input(
            OP,
            format!("scale {} must have {want:?} elements", scale.describe()),
        ));
    }
    Ok(())
}

/// The contract of `FusedOps::quant_matmul`: I8 `x [M, K]` and `weight [K, N]`, F32
/// `weight_scale` `[1]` or `[N]`, F32 `x_scale` `[1]` or `[M]`.
pub fn check_quant_matmul<T: Operand>(
    x: &T,
    weight: &T,
    weight_scale: &T,
    x_scale: &T,
) -> AclResult<()> {
    let (xd, wd) = (x.dims(), weight.dims());
    let matrices = xd.len() == 2
        && wd.len() == 2
        && xd[1] == wd[0]
        && x.data_type() == DataType::I8
        && weight.data_type() == DataType::I8;
    let vector = |t: &T, ok: [usize; 2]| {
        t.data_type() == DataType::F32 && t.dims().len() == 1 && ok.contains(&t.dims()[0])
    };
    if !matrices || !vector(weight_scale, [1, wd[1]]) || !vector(x_scale, [1, xd[0]]) {
        return Err(invalid_input(
            "quant_matmul",
            format!(
                "needs I8 x [M, K], I8 weight [K, N], F32 weight_scale [1] or [N] and F32 x_scale [1] or [M], got {}, {}, {} and {}",
                x.describe(),
                weight.describe(),
                weight_scale.describe(),
                x_scale.describe()
            ),
        ));
    }
    Ok(())
}
