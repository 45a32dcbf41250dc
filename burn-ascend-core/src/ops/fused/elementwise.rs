//! `vector_add` through its kernel.

use burn_ascend_kernels::tiling::{self, AddType};

use super::Operand;
use super::{data_ptr, device_props};
use crate::acl::{AclResult, DataType};
use crate::ops::broadcast::invalid_input;
use crate::ops::copy::contiguous;
use crate::ops::tensor::AscendTensor;

fn add_type(dtype: DataType) -> Option<AddType> {
    match dtype {
        DataType::F32 => Some(AddType::F32),
        DataType::F16 => Some(AddType::F16),
        DataType::BF16 => Some(AddType::BF16),
        DataType::I32 => Some(AddType::I32),
        DataType::I16 => Some(AddType::I16),
        _ => None,
    }
}

/// The contract of [`vector_add`]: two 1-D tensors of equal length and dtype.
pub fn check_vector_add(x: &impl Operand, y: &impl Operand) -> AclResult<()> {
    if x.dims().len() != 1 || x.dims() != y.dims() || x.data_type() != y.data_type() {
        return Err(invalid_input(
            "vector_add",
            format!(
                "needs two 1-D tensors of equal length and dtype, got {} and {}",
                x.describe(),
                y.describe()
            ),
        ));
    }
    Ok(())
}

/// `x + y` for 1-D tensors of equal length and dtype, by the `vector_add` kernel. The vector
/// unit has no f64, i64, i8 or u8 addition; those go to aclnnAdd.
pub fn vector_add(x: &AscendTensor, y: &AscendTensor) -> AclResult<AscendTensor> {
    super::same_device("vector_add", &[Some(x), Some(y)])?;
    check_vector_add(x, y)?;
    let Some(kind) = add_type(x.dtype) else {
        return crate::ops::arith::binary(crate::ops::arith::BinaryOp::Add, x, y);
    };
    let (x, y) = (contiguous(x)?, contiguous(y)?);
    let out = AscendTensor::empty(x.ctx(), x.shape().to_vec(), x.dtype)?;
    let len = x.layout.numel() as u64;
    if len == 0 {
        return Ok(out);
    }
    let plan = tiling::vector_add(len, kind, &device_props(x.ctx())?);
    let (px, py, pz) = (data_ptr(&x), data_ptr(&y), data_ptr(&out));
    // SAFETY: the three buffers hold `len` elements of the tiling's type and stay alive in
    // stream order until the kernel has run.
    x.ctx()
        .launch_kernel("vector_add", |kernels, stream| unsafe {
            kernels.vector_add(stream, plan, px, py, pz)
        })
        .map_err(|e| {
            e.with_context(|| format!("vector_add of {} and {}", x.describe(), y.describe()))
        })?;
    Ok(out)
}
