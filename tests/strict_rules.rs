//! Rules the emulated NPU enforces where real-NPU bugs hide, through the backend: object
//! lifetimes across the two aclnn phases, the arrays nnopbase hands back, and the bugs these
//! rules exposed in the op mapping (each test here failed before its fix).

mod common;

use burn::tensor::{Bool, Tensor, TensorData};
use burn_ascend::acl::view_dims::live_arrays;
use common::*;
use serial_test::serial;

/// `linear` with a bias is one aclnnAddmm whose two `aclScalar`s (alpha, beta) must live until
/// phase two: the op mapping used to destroy them right after phase one.
#[test]
fn linear_with_a_bias_keeps_its_scalars_alive_until_phase_two() {
    let device = device();
    let x = Tensor::<Ascend, 2>::from_floats([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], &device);
    let w = Tensor::<Ascend, 2>::from_floats([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], &device);
    let b = Tensor::<Ascend, 1>::from_floats([0.5, -0.5], &device);
    let y = burn::tensor::module::linear(x, w, Some(b));
    y.into_data()
        .assert_eq(&TensorData::from([[4.5, 4.5], [10.5, 10.5]]), false);
}

/// The array `aclGetViewShape` returns is the caller's to free (acl-abi.md 6.2): `argwhere`
/// used to leak it.
#[test]
#[serial(view_arrays)]
fn argwhere_frees_the_array_nnopbase_returns() {
    if skipped_on_npu("argwhere_frees_the_array_nnopbase_returns") {
        return;
    }
    let device = device();
    let mask = Tensor::<Ascend, 2, Bool>::from_bool(
        TensorData::from([[true, false, true], [false, false, true]]),
        &device,
    );
    let before = live_arrays();
    let found = mask.argwhere();
    assert_eq!(live_arrays(), before, "the view-shape array was not freed");
    found
        .into_data()
        .assert_eq(&TensorData::from([[0i64, 0], [0, 2], [1, 2]]), false);
}
