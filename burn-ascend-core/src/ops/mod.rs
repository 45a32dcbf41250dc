//! The op-mapping layer: turns tensor operations on [`AscendTensor`] views into aclnn calls
//! (output shape and dtype, broadcasting, contiguity, compositions where aclnn lacks an op).
//! Nothing here knows of Burn.

/// Calls an aclnn operator on the tensor's device and, on failure, names the operator and its
/// operands (`$what`).
macro_rules! run_op {
    ($ctx:expr, $op:ident($($arg:expr),* $(,)?), $what:expr) => {
        $crate::acl::aclnn!(&**$ctx, $op($($arg),*))
            .map_err(|e| e.with_context(|| format!("{} of {}", stringify!($op), $what)))
    };
}

pub mod activation;
pub mod arith;
pub mod attention;
pub mod broadcast;
pub mod collective;
pub mod compare;
pub mod constant;
pub mod conv;
pub mod copy;
pub mod creation;
pub mod deform;
pub mod fft;
pub mod flash_attention;
pub mod fused;
pub mod grid_sample;
pub mod index;
pub mod layout;
pub mod math;
pub mod matmul;
pub mod pool;
pub mod pool3d;
pub mod quant;
pub mod quant_matmul;
pub mod random;
pub mod reduce;
pub mod resample;
pub mod sort;
pub mod tensor;
pub mod update;

pub use layout::Layout;
pub use tensor::AscendTensor;
