//! Reductions and scans. Burn's full reductions return shape `[1]` while aclnn writes 0-d
//! tensors, so those are reshaped; `*_dim` reductions keep the reduced dim (keepDim).
//!
//! Bridged semantics: integer mean truncates in Burn (ReduceSum then DivMods in trunc mode,
//! never aclnnMean); argmax/argmin write I64 and are cast to the requested index dtype.

use super::arith::{binary_scalar, BinaryOp};
use super::copy::cast;
use super::tensor::AscendTensor;
use crate::acl::aclnn_cached;
use crate::acl::cache::{In, Ints, Out};
use crate::acl::handles::{HostScalar, IntArrayDesc, ScalarDesc};
use crate::acl::{AclResult, DataType};

/// A reduction over dims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Reduce {
    Sum,
    Prod,
    Mean,
    Max,
    Min,
    Any,
    All,
}

fn out_shape(shape: &[usize], dim: Option<usize>) -> Vec<usize> {
    match dim {
        Some(d) => {
            let mut s = shape.to_vec();
            s[d] = 1;
            s
        }
        None => Vec::new(),
    }
}

/// `op` over `dim` (kept, size 1), or over every element (shape `[1]`) when `dim` is `None`.
pub fn reduce(op: Reduce, x: &AscendTensor, dim: Option<usize>) -> AclResult<AscendTensor> {
    if op == Reduce::Mean && !x.dtype.is_float() {
        let count = dim.map_or(x.layout.numel(), |d| x.shape()[d]);
        let sum = reduce(Reduce::Sum, x, dim)?;
        return binary_scalar(BinaryOp::Div, &sum, HostScalar::Int(count as i64));
    }
    let out_dtype = if matches!(op, Reduce::Any | Reduce::All) {
        DataType::Bool
    } else {
        x.dtype
    };
    let rank = x.shape().len();
    let out = AscendTensor::empty(x.ctx(), out_shape(x.shape(), dim), out_dtype)?;
    let dims: Vec<i64> = match dim {
        Some(d) => vec![d as i64],
        None => (0..rank as i64).collect(),
    };
    let keep = dim.is_some();
    // Formatted only for an error message.
    let what = || format!("{} over {:?}", x.describe(), dim);
    let ctx = x.ctx();
    if x.layout.numel() == 0 {
        if matches!(op, Reduce::Max | Reduce::Min) {
            return Err(super::broadcast::invalid_input(
                "max/min",
                format!("{}: the tensor is empty", what()),
            ));
        }
        // Reducing nothing gives the reduction's identity (NaN for a mean, as 0/0); aclnn's
        // behaviour on empty inputs is not documented.
        let identity = match op {
            Reduce::Prod | Reduce::All => HostScalar::Int(1),
            Reduce::Mean => HostScalar::Float(f64::NAN),
            _ => HostScalar::Int(0),
        };
        let filled = super::creation::full(ctx, out.shape().to_vec(), out_dtype, identity)?;
        return super::copy::reshape(&filled, final_shape(dim, out.shape()));
    }
    if rank == 0 {
        super::copy::copy_into(&out, &cast(x, out_dtype)?)?;
    } else if out.layout.numel() > 0 && op == Reduce::Sum {
        // The hot reduction goes through the executor cache.
        let (i, o) = (In(x.view()), Out(out.view()));
        aclnn_cached!(
            &**ctx,
            aclnnReduceSum(i, Ints(&dims), keep, out_dtype.acl(), o)
        )
        .map_err(|e| e.with_context(|| format!("aclnnReduceSum of {}", what())))?;
    } else if out.layout.numel() > 0 {
        let api = ctx.bind();
        let dims_d = IntArrayDesc::new(api, &dims)?;
        let (i, o, dd) = (x.desc()?, out.desc()?, &dims_d);
        let (i, o) = (&i, &o);
        let dt = out_dtype.acl();
        match op {
            Reduce::Sum => unreachable!("cached above"),
            Reduce::Prod => match dim {
                Some(d) => run_op!(ctx, aclnnProdDim(i, d as i64, true, dt, o), what()),
                None => run_op!(ctx, aclnnProd(i, dt, o), what()),
            },
            Reduce::Mean => run_op!(ctx, aclnnMean(i, dd, keep, dt, o), what()),
            Reduce::Max if dim.is_none() => run_op!(ctx, aclnnMax(i, o), what()),
            Reduce::Min if dim.is_none() => run_op!(ctx, aclnnMin(i, o), what()),
            Reduce::Max => run_op!(ctx, aclnnAmax(i, dd, keep, o), what()),
            Reduce::Min => run_op!(ctx, aclnnAmin(i, dd, keep, o), what()),
            Reduce::Any => run_op!(ctx, aclnnAny(i, dd, keep, o), what()),
            Reduce::All => run_op!(ctx, aclnnAll(i, dd, keep, o), what()),
        }?;
    }
    super::copy::reshape(&out, final_shape(dim, out.shape()))
}

fn final_shape(dim: Option<usize>, shape: &[usize]) -> Vec<usize> {
    match dim {
        Some(_) => shape.to_vec(),
        None => vec![1],
    }
}

/// Index of the maximum (`max`) or minimum along `dim` (kept, size 1), first on ties.
pub fn arg(
    x: &AscendTensor,
    dim: usize,
    max: bool,
    index_dtype: DataType,
) -> AclResult<AscendTensor> {
    let out = AscendTensor::empty(x.ctx(), out_shape(x.shape(), Some(dim)), DataType::I64)?;
    if out.layout.numel() > 0 {
        let what = format!("{} along {dim}", x.describe());
        let (i, o) = (x.desc()?, out.desc()?);
        if max {
            run_op!(x.ctx(), aclnnArgMax(&i, dim as i64, true, &o), what)?;
        } else {
            run_op!(x.ctx(), aclnnArgMin(&i, dim as i64, true, &o), what)?;
        }
    }
    cast(&out, index_dtype)
}

/// A running reduction along a dim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Scan {
    Sum,
    Prod,
    Max,
    Min,
}

/// The running `op` along `dim`, same shape as `x`.
pub fn scan(op: Scan, x: &AscendTensor, dim: usize) -> AclResult<AscendTensor> {
    let out = AscendTensor::empty(x.ctx(), x.shape().to_vec(), x.dtype)?;
    if out.layout.numel() == 0 {
        return Ok(out);
    }
    let ctx = x.ctx();
    let what = format!("{} along {dim}", x.describe());
    let (i, o) = (x.desc()?, out.desc()?);
    let (i, o) = (&i, &o);
    let dt = x.dtype.acl();
    match op {
        Scan::Sum => run_op!(ctx, aclnnCumsum(i, dim as i64, dt, o), what)?,
        Scan::Prod => {
            let d = ScalarDesc::new(ctx.bind(), HostScalar::Int(dim as i64))?;
            run_op!(ctx, aclnnCumprod(i, &d, dt, o), what)?
        }
        Scan::Max | Scan::Min => {
            let indices = AscendTensor::empty(ctx, x.shape().to_vec(), DataType::I64)?;
            let id = indices.desc()?;
            if op == Scan::Max {
                run_op!(ctx, aclnnCummax(i, dim as i64, o, &id), what)?
            } else {
                run_op!(ctx, aclnnCummin(i, dim as i64, o, &id), what)?
            }
        }
    }
    Ok(out)
}
