//! Grid sampling of 4-D inputs through aclnnGridSampler2D. aclnn's sampler takes F32/F16/F64
//! (BF16 is sampled in F32 and cast back).

use super::copy::cast;
use super::tensor::AscendTensor;
use crate::acl::{AclResult, DataType};

/// How a grid sample interpolates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Sampling {
    Bilinear = 0,
    Nearest = 1,
    Bicubic = 2,
}

/// What a grid sample reads outside the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Padding {
    Zeros = 0,
    Border = 1,
    Reflection = 2,
}

/// `x [N, C, H, W]` sampled at `grid [N, Ho, Wo, 2]` (x, y in [-1, 1]) into `[N, C, Ho, Wo]`.
pub fn grid_sample_2d(
    x: &AscendTensor,
    grid: &AscendTensor,
    sampling: Sampling,
    padding: Padding,
    align_corners: bool,
) -> AclResult<AscendTensor> {
    if x.dtype == DataType::BF16 {
        let f = grid_sample_2d(
            &cast(x, DataType::F32)?,
            &cast(grid, DataType::F32)?,
            sampling,
            padding,
            align_corners,
        )?;
        return cast(&f, DataType::BF16);
    }
    let grid = cast(grid, x.dtype)?;
    let (xs, gs) = (x.shape(), grid.shape());
    if xs.len() != 4 || gs.len() != 4 {
        return Err(super::broadcast::invalid_input(
            "grid_sample_2d",
            format!(
                "needs a 4-D input and grid, got {} and {}",
                x.describe(),
                grid.describe()
            ),
        ));
    }
    let out = AscendTensor::empty(x.ctx(), vec![xs[0], xs[1], gs[1], gs[2]], x.dtype)?;
    if out.layout.numel() > 0 {
        let what = format!("{} at {}", x.describe(), grid.describe());
        run_op!(
            x.ctx(),
            aclnnGridSampler2D(
                x.desc()?,
                grid.desc()?,
                sampling as i64,
                padding as i64,
                align_corners,
                out.desc()?
            ),
            what
        )?;
    }
    Ok(out)
}
