//! The op-mapping layer: turns tensor operations on [`AscendTensor`] views into aclnn calls
//! (output shape and dtype, broadcasting, contiguity, compositions where aclnn lacks an op).
//! Nothing here knows of Burn.

pub mod arith;
pub mod broadcast;
pub mod copy;
pub mod creation;
pub mod layout;
pub mod matmul;
pub mod tensor;

pub use layout::Layout;
pub use tensor::AscendTensor;
