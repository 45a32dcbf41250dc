//! Sorting along a dim on the device: aclnnSort with `stable = true` (Burn's ties keep index
//! order; NaN sorts as the largest value, so last in ascending order).
//!
//! aclnnSort has no F64. An F64 key is split exactly into three F32 keys (x = hi + mid + lo,
//! each the F32 rounding of what remains), and three stable sorts, least significant key
//! first, order the lanes lexicographically, which is the F64 order. (Finite values beyond the
//! F32 range are outside what the split represents.)

use super::arith::{binary, BinaryOp};
use super::copy::{cast, contiguous};
use super::index::gather;
use super::tensor::AscendTensor;
use crate::acl::{AclResult, DataType};

/// Sorted values and their source indices (I64) along `dim`.
pub fn sort(
    x: &AscendTensor,
    dim: usize,
    descending: bool,
) -> AclResult<(AscendTensor, AscendTensor)> {
    if x.dtype == DataType::F64 {
        return sort_f64(x, dim, descending);
    }
    let values = AscendTensor::empty(x.ctx(), x.shape().to_vec(), x.dtype)?;
    let indices = AscendTensor::empty(x.ctx(), x.shape().to_vec(), DataType::I64)?;
    if values.layout.numel() > 0 {
        let what = format!("{} along {dim}", x.describe());
        run_op!(
            x.ctx(),
            aclnnSort(
                x.desc()?,
                true,
                dim as i64,
                descending,
                values.desc()?,
                indices.desc()?
            ),
            what
        )?;
    }
    Ok((values, indices))
}

fn sort_f64(
    x: &AscendTensor,
    dim: usize,
    descending: bool,
) -> AclResult<(AscendTensor, AscendTensor)> {
    let x = contiguous(x)?;
    let hi = cast(&x, DataType::F32)?;
    let rest = binary(BinaryOp::Sub, &x, &cast(&hi, DataType::F64)?)?;
    let mid = cast(&rest, DataType::F32)?;
    let lo = cast(
        &binary(BinaryOp::Sub, &rest, &cast(&mid, DataType::F64)?)?,
        DataType::F32,
    )?;
    let (_, mut order) = sort(&lo, dim, descending)?;
    for key in [mid, hi] {
        let (_, step) = sort(&gather(dim, &key, &order)?, dim, descending)?;
        order = gather(dim, &order, &step)?;
    }
    Ok((gather(dim, &x, &order)?, order))
}

/// The `k` largest values along `dim` and their indices (I64), largest first; ties keep index
/// order.
pub fn topk(x: &AscendTensor, dim: usize, k: usize) -> AclResult<(AscendTensor, AscendTensor)> {
    let (values, indices) = sort(x, dim, true)?;
    let narrow =
        |t: &AscendTensor| t.with_layout(t.layout.narrow(dim, 0, k.min(t.shape()[dim]), 1));
    Ok((narrow(&values), narrow(&indices)))
}
