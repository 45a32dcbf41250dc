//! What Burn's backend test crate provides its tests (`TestBackend`, `TestTensor`, the default
//! device with the binary's float dtype), for `Ascend`; the check that a call ran
//! aclnnFlashAttentionScore; and the gradient twins of the tests that fit the flash contract.

use std::sync::Once;

use burn::tensor::backend::Backend;
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Bool, DType, Distribution, Element, Tensor, TensorData, Tolerance};
use burn_ascend::emulator::aclnn_launches_of;
use burn_ascend::{fused, Ascend, AscendDevice};
use burn_autodiff::Autodiff;
use serial_test::serial;

use super::common;
use super::FloatElem;

pub type TestBackend = Ascend;
pub type TestTensor<const D: usize> = Tensor<TestBackend, D>;
pub type TestTensorBool<const D: usize> = Tensor<TestBackend, D, Bool>;
type AdAscend = Autodiff<Ascend>;

/// The suite's device, whose default float dtype is the binary's `FloatElem` (upstream sets it
/// the same way, for its default device, in `tests/common/backend.rs`).
pub fn device() -> AscendDevice {
    static DTYPES: Once = Once::new();
    let device = common::device();
    DTYPES.call_once(|| {
        burn::tensor::set_default_dtypes::<Ascend>(
            &device,
            <FloatElem as Element>::dtype(),
            <i32 as Element>::dtype(),
        )
        .expect("the default dtypes of a fresh device");
    });
    device
}

const FLASH: &str = "aclnnFlashAttentionScore";

/// Runs `f` (one `attention` call) and asserts that it launched aclnnFlashAttentionScore once
/// (on the emulated NPU, whose launch counts it reads).
pub fn flash_ran<T>(f: impl FnOnce() -> T) -> T {
    if matches!(device(), AscendDevice::Npu(_)) {
        return f();
    }
    Ascend::sync(&device()).unwrap();
    let before = aclnn_launches_of(FLASH);
    let out = f();
    Ascend::sync(&device()).unwrap();
    assert_eq!(
        aclnn_launches_of(FLASH) - before,
        1,
        "the call fits the flash contract: one {FLASH} launch"
    );
    out
}

/// Gradients for q, k, v of `sum(attention(q, k, v) * w)` on `Autodiff<Ascend>` computed in
/// `dtype` and returned in the binary's `FloatElem`: through
/// `module::attention` (Burn's composed `attention_fallback`, by Burn 0.21's design) when
/// `fused_path` is false, through `fused::flash_attention` (aclnnFlashAttentionScoreGrad)
/// when it is true.
fn grads(
    operands: &[TensorData; 4],
    mask: Option<&TensorData>,
    options: AttentionModuleOptions,
    fused_path: bool,
    dtype: DType,
) -> [TensorData; 3] {
    let d = device();
    let t = |data: &TensorData| Tensor::<AdAscend, 4>::from_data(data.clone(), (&d, dtype));
    let (q, k, v, w) = (
        t(&operands[0]).require_grad(),
        t(&operands[1]).require_grad(),
        t(&operands[2]).require_grad(),
        t(&operands[3]),
    );
    let m = mask.map(|m| Tensor::<AdAscend, 4, Bool>::from_data(m.clone(), &d));
    let out = if fused_path {
        flash_ran(|| fused::flash_attention(q.clone(), k.clone(), v.clone(), m, options))
    } else {
        attention(q.clone(), k.clone(), v.clone(), m, None, options)
    };
    let g = (out * w).sum().backward();
    [q, k, v].map(|x| {
        let g = x.grad(&g).expect("a gradient");
        g.cast(<FloatElem as Element>::dtype()).into_data()
    })
}

/// The twin of an upstream forward test for gradients: q, k, v drawn from `dist` as the test
/// draws them, the fused backward against Burn's differentiated composition at the test's
/// tolerance. The composition runs in f32 on the same (rounded) inputs: in f16 its own rounding
/// exceeds the half tolerance on `test_attention_no_mask`'s 128 keys (dq, dk), where the fused
/// backward, which accumulates in f32, is within it of the f32 values.
fn gradient_twin(
    qkv: [[usize; 4]; 3],
    dist: Distribution,
    mask: Option<TensorData>,
    options: AttentionModuleOptions,
) {
    let d = device();
    let random = |s: [usize; 4]| TestTensor::<4>::random(s, dist, &d).into_data();
    let [qs, ks, vs] = qkv;
    let out = [qs[0], qs[1], qs[2], vs[3]];
    let operands = [random(qs), random(ks), random(vs), random(out)];
    let dtype = <FloatElem as Element>::dtype();
    let fused = grads(&operands, mask.as_ref(), options, true, dtype);
    let composed = grads(&operands, mask.as_ref(), options, false, DType::F32);
    for (got, want) in fused.iter().zip(&composed) {
        got.assert_approx_eq::<FloatElem>(
            want,
            Tolerance::rel_abs(1e-2, 1e-3).set_half_precision_relative(1e-1),
        );
    }
}

#[test]
#[serial]
fn gradients_of_test_attention_no_mask() {
    let s = [1, 1, 128, 64];
    gradient_twin(
        [s; 3],
        Distribution::Uniform(0., 1.),
        None,
        Default::default(),
    );
}

#[test]
#[serial]
fn gradients_of_test_attention_custom_scale() {
    let s = [1, 2, 16, 32];
    let options = AttentionModuleOptions {
        scale: Some(0.1),
        ..Default::default()
    };
    gradient_twin([s; 3], Distribution::Uniform(-1., 1.), None, options);
}

#[test]
#[serial]
fn gradients_of_test_attention_is_causal() {
    let s = [2, 4, 16, 32];
    let options = AttentionModuleOptions {
        is_causal: true,
        ..Default::default()
    };
    gradient_twin([s; 3], Distribution::Uniform(-1., 1.), None, options);
}

#[test]
#[serial]
fn gradients_of_test_attention_bool_mask_broadcast_batch_and_heads() {
    let s = [2, 3, 16, 32];
    let mask = TestTensor::<4>::random([1, 1, 16, 16], Distribution::Uniform(0., 1.), &device())
        .greater_elem(0.7)
        .expand([2, 3, 16, 16])
        .into_data();
    gradient_twin(
        [s; 3],
        Distribution::Uniform(-1., 1.),
        Some(mask),
        Default::default(),
    );
}
