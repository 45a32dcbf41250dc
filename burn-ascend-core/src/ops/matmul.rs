//! Matrix products. Float types the cube unit takes (F32, F16, BF16) go to aclnnMatmul with
//! cubeMathType 0 (no HF32 down-conversion of f32). aclnn has no integer or f64 matmul, so
//! those are composed exactly on the device: a broadcast multiply `[.., m, k, 1] * [.., 1, k, n]`
//! and a sum over k, in chunks of columns that bound the temporary. `linear` (matmul plus bias)
//! is one aclnnAddmm.

use super::arith::{binary, BinaryOp};
use super::broadcast::invalid_input;
use super::copy::copy_into;
use super::layout::Layout;
use super::tensor::AscendTensor;
use crate::acl::cache::{In, Out};
use crate::acl::handles::{HostScalar, IntArrayDesc, ScalarDesc};
use crate::acl::shape::broadcast_dims;
use crate::acl::types::CUBE_MATH_KEEP_DTYPE;
use crate::acl::{aclnn, aclnn_cached};
use crate::acl::{AclResult, DataType};

/// Largest temporary of the composed matmul, in bytes.
const COMPOSED_CHUNK_BYTES: usize = 64 << 20;

/// `a @ b` over the last two dims, with broadcast batch dims.
pub fn matmul(a: &AscendTensor, b: &AscendTensor) -> AclResult<AscendTensor> {
    let (ra, rb) = (a.shape().len(), b.shape().len());
    let bad = |why: &str| {
        invalid_input(
            "matmul",
            format!("{why}: {} @ {}", a.describe(), b.describe()),
        )
    };
    if ra < 2 || rb < 2 {
        return Err(bad("both operands need at least 2 dims"));
    }
    let (m, k) = (a.shape()[ra - 2], a.shape()[ra - 1]);
    let (k2, n) = (b.shape()[rb - 2], b.shape()[rb - 1]);
    if k != k2 {
        return Err(bad("inner dimensions differ"));
    }
    let batch = broadcast_dims(&a.shape()[..ra - 2], &b.shape()[..rb - 2])
        .ok_or_else(|| bad("batch dims do not broadcast"))?;
    let mut shape = batch.clone();
    shape.extend([m, n]);
    let out = AscendTensor::empty(a.ctx(), shape, a.dtype)?;
    if out.layout.numel() == 0 {
        return Ok(out);
    }
    if k == 0 {
        copy_into(&out, &super::creation::zeros(a.ctx(), Vec::new(), a.dtype)?)?;
        return Ok(out);
    }
    if matches!(a.dtype, DataType::F32 | DataType::F16 | DataType::BF16) {
        let b = super::copy::cast(b, a.dtype)?;
        aclnn_cached!(
            &**a.ctx(),
            aclnnMatmul(
                In(a.view()),
                In(b.view()),
                Out(out.view()),
                CUBE_MATH_KEEP_DTYPE
            )
        )
        .map_err(|e| {
            e.with_context(|| format!("aclnnMatmul of {} and {}", a.describe(), b.describe()))
        })?;
    } else {
        composed(a, b, &out, &batch, (m, k, n))?;
    }
    Ok(out)
}

/// Exact matmul for types without a cube path, written into `out`.
fn composed(
    a: &AscendTensor,
    b: &AscendTensor,
    out: &AscendTensor,
    batch: &[usize],
    (m, k, n): (usize, usize, usize),
) -> AclResult<()> {
    let rank = batch.len() + 3;
    let with_unit = |t: &AscendTensor, at: usize| {
        let mut l: Layout = t.layout.clone();
        l.shape.insert(at, 1);
        l.strides.insert(at, 0);
        t.with_layout(l)
    };
    let a4 = with_unit(a, a.shape().len()); // [.., m, k, 1]
    let b4 = with_unit(b, b.shape().len() - 2); // [.., 1, k, n]
    let per_column = batch.iter().product::<usize>() * m * k * a.dtype.size();
    let chunk = (COMPOSED_CHUNK_BYTES / per_column.max(1)).clamp(1, n);
    let dims = IntArrayDesc::new(a.ctx().bind(), &[rank as i64 - 2])?;
    let mut start = 0;
    while start < n {
        let end = (start + chunk).min(n);
        let b_part = b4.with_layout(b4.layout.narrow(b4.shape().len() - 1, start, end, 1));
        let products = binary(BinaryOp::Mul, &a4, &b_part)?;
        let mut sum_shape = batch.to_vec();
        sum_shape.extend([m, end - start]);
        let sums = AscendTensor::empty(a.ctx(), sum_shape, a.dtype)?;
        aclnn!(
            &**a.ctx(),
            aclnnReduceSum(products.desc()?, &dims, false, a.dtype.acl(), sums.desc()?)
        )
        .map_err(|e| {
            e.with_context(|| format!("aclnnReduceSum in the composed {} matmul", a.dtype))
        })?;
        copy_into(
            &out.with_layout(out.layout.narrow(rank - 2, start, end, 1)),
            &sums,
        )?;
        start = end;
    }
    Ok(())
}

/// `x @ weight + bias` in one aclnnAddmm (the bias added in the matmul's epilogue): `x [.., k]`
/// is viewed as `[m, k]` (copied only if its layout does not allow it), `weight [k, n]`,
/// `bias [n]`. Cube float types only (F32, F16, BF16), all of one dtype.
pub fn linear(
    x: &AscendTensor,
    weight: &AscendTensor,
    bias: &AscendTensor,
) -> AclResult<AscendTensor> {
    let bad = |why: &str| {
        invalid_input(
            "linear",
            format!(
                "{why}: {} @ {} + {}",
                x.describe(),
                weight.describe(),
                bias.describe()
            ),
        )
    };
    let rank = x.shape().len();
    if rank < 1 || weight.shape().len() != 2 || bias.shape().len() != 1 {
        return Err(bad("needs x [.., k], weight [k, n] and bias [n]"));
    }
    let (k, n) = (weight.shape()[0], weight.shape()[1]);
    if x.shape()[rank - 1] != k || bias.shape()[0] != n {
        return Err(bad("sizes disagree"));
    }
    let cube = [DataType::F32, DataType::F16, DataType::BF16];
    if !cube.contains(&x.dtype) || weight.dtype != x.dtype || bias.dtype != x.dtype {
        return Err(bad("takes one cube float type (f32, f16, bf16)"));
    }
    let m = x.layout.numel() / k.max(1);
    let mut shape = x.shape().to_vec();
    shape[rank - 1] = n;
    if m == 0 || n == 0 || k == 0 {
        // No products to add: the broadcast bias (or nothing).
        let out = AscendTensor::empty(x.ctx(), shape, x.dtype)?;
        if out.layout.numel() > 0 {
            copy_into(&out, bias)?;
        }
        return Ok(out);
    }
    let x2 = super::copy::reshape(x, vec![m, k])?;
    let out = AscendTensor::empty(x.ctx(), vec![m, n], x.dtype)?;
    let api = x.ctx().bind();
    let one = || ScalarDesc::new(api, HostScalar::Int(1));
    aclnn!(
        &**x.ctx(),
        aclnnAddmm(
            bias.desc()?,
            x2.desc()?,
            weight.desc()?,
            one()?,
            one()?,
            out.desc()?,
            CUBE_MATH_KEEP_DTYPE
        )
    )
    .map_err(|e| {
        e.with_context(|| {
            format!(
                "aclnnAddmm of {} @ {} + {}",
                x2.describe(),
                weight.describe(),
                bias.describe()
            )
        })
    })?;
    super::copy::reshape(&out, shape)
}
