//! The emulated convolution and padding operators validate calls as Atlas A2 does (dtypes,
//! shapes, A2 limits, cubeMathType, contiguous gradient outputs) and answer 161002 with a
//! message naming the operator; cubeMathType 1 on F32 computes in HF32, as the cube unit does.

mod common;

use std::sync::Arc;

use burn_ascend::acl::aclnn;
use burn_ascend::acl::handles::{Absent, BoolArrayDesc, HostScalar, IntArrayDesc, ScalarDesc};
use burn_ascend::acl::types::status::ACLNN_ERR_PARAM_INVALID;
use burn_ascend::acl::{AclError, AclResult, DataType};
use burn_ascend::ops::creation::{from_bytes, to_bytes};
use burn_ascend::ops::AscendTensor;
use burn_ascend::runtime::DeviceContext;
use burn_ascend::AscendDevice;

fn ctx() -> Arc<DeviceContext> {
    DeviceContext::get(&AscendDevice::Emulated(0).into()).expect("emulated device opens")
}

/// A tensor of `values` (as F32, converted on the device to `dtype`).
fn tensor(
    ctx: &Arc<DeviceContext>,
    shape: &[usize],
    values: &[f32],
    dtype: DataType,
) -> AscendTensor {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let t = from_bytes(ctx, shape.to_vec(), DataType::F32, &bytes).unwrap();
    burn_ascend::ops::copy::cast(&t, dtype).unwrap()
}

fn ramp(n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 37 % 23) as f32 - 11.0) * scale)
        .collect()
}

fn floats(t: &AscendTensor) -> Vec<f32> {
    to_bytes(t)
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// aclnnConvolution of 2-D `x` by `w`, padding `pad`, into `out`.
fn convolution(
    x: &AscendTensor,
    w: &AscendTensor,
    out: &AscendTensor,
    pad: i64,
    cube: i8,
) -> AclResult<()> {
    let ctx = x.ctx();
    let api = ctx.bind();
    let ones = IntArrayDesc::new(api, &[1, 1])?;
    let padding = IntArrayDesc::new(api, &[pad, pad])?;
    let zeros = IntArrayDesc::new(api, &[0, 0])?;
    aclnn!(
        &**ctx,
        aclnnConvolution(
            x.desc()?,
            w.desc()?,
            Absent,
            &ones,
            &padding,
            &ones,
            false,
            &zeros,
            1,
            out.desc()?,
            cube
        )
    )
}

fn assert_rejected(result: AclResult<()>, needles: &[&str]) {
    let err: AclError = result.expect_err("the call should be rejected");
    assert_eq!(err.code(), Some(ACLNN_ERR_PARAM_INVALID), "{err}");
    let text = err.to_string();
    for n in needles {
        assert!(text.contains(n), "{text} should mention {n}");
    }
}

#[test]
fn convolution_rejects_f64_and_mismatched_shapes() {
    if common::skipped_on_npu("convolution_rejects_f64_and_mismatched_shapes") {
        return;
    }
    let ctx = ctx();
    let x = tensor(&ctx, &[1, 2, 4, 4], &ramp(32, 0.5), DataType::F64);
    let w = tensor(&ctx, &[3, 2, 3, 3], &ramp(54, 0.25), DataType::F64);
    let out = AscendTensor::empty(&ctx, vec![1, 3, 2, 2], DataType::F64).unwrap();
    assert_rejected(
        convolution(&x, &w, &out, 0, 0),
        &["aclnnConvolution", "DT_DOUBLE"],
    );

    let x = tensor(&ctx, &[1, 2, 4, 4], &ramp(32, 0.5), DataType::F32);
    let w = tensor(&ctx, &[3, 2, 3, 3], &ramp(54, 0.25), DataType::F32);
    let wrong = AscendTensor::empty(&ctx, vec![1, 3, 3, 3], DataType::F32).unwrap();
    assert_rejected(
        convolution(&x, &w, &wrong, 0, 0),
        &["aclnnConvolution", "[1, 3, 2, 2]"],
    );
}

#[test]
fn convolution_enforces_the_a2_limits_and_cube_modes() {
    if common::skipped_on_npu("convolution_enforces_the_a2_limits_and_cube_modes") {
        return;
    }
    let ctx = ctx();
    let x = tensor(&ctx, &[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0], DataType::F32);
    let w = tensor(&ctx, &[1, 1, 1, 1], &[1.0], DataType::F32);
    let big = AscendTensor::empty(&ctx, vec![1, 1, 514, 514], DataType::F32).unwrap();
    assert_rejected(convolution(&x, &w, &big, 256, 0), &["padding", "255"]);

    let xb = tensor(&ctx, &[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0], DataType::BF16);
    let wb = tensor(&ctx, &[1, 1, 1, 1], &[1.0], DataType::BF16);
    let ob = AscendTensor::empty(&ctx, vec![1, 1, 2, 2], DataType::BF16).unwrap();
    assert_rejected(convolution(&xb, &wb, &ob, 0, 2), &["cubeMathType 2"]);
}

#[test]
fn cube_math_type_one_computes_f32_in_hf32() {
    if common::skipped_on_npu("cube_math_type_one_computes_f32_in_hf32") {
        return;
    }
    let ctx = ctx();
    // Values with more mantissa bits than HF32 keeps.
    let xs: Vec<f32> = (0..16).map(|i| 1.0 + (i as f32) * 1.234_567e-4).collect();
    let x = tensor(&ctx, &[1, 1, 4, 4], &xs, DataType::F32);
    let w = tensor(&ctx, &[1, 1, 1, 1], &[1.000_123_4], DataType::F32);
    let exact = AscendTensor::empty(&ctx, vec![1, 1, 4, 4], DataType::F32).unwrap();
    let hf32 = AscendTensor::empty(&ctx, vec![1, 1, 4, 4], DataType::F32).unwrap();
    convolution(&x, &w, &exact, 0, 0).unwrap();
    convolution(&x, &w, &hf32, 0, 1).unwrap();
    let (e, h) = (floats(&exact), floats(&hf32));
    for (i, (&e, &x)) in e.iter().zip(&xs).enumerate() {
        assert_eq!(e, x * 1.000_123_4, "KEEP_DTYPE is plain f32 at {i}");
    }
    let worst = e
        .iter()
        .zip(&h)
        .map(|(a, b)| ((a - b) / a).abs())
        .fold(0f32, f32::max);
    assert!(
        worst > 1e-5 && worst < 2e-3,
        "HF32 keeps about 11 significant bits: relative error {worst}"
    );
}

#[test]
fn convolution_backward_needs_contiguous_outputs_and_a_three_value_mask() {
    if common::skipped_on_npu(
        "convolution_backward_needs_contiguous_outputs_and_a_three_value_mask",
    ) {
        return;
    }
    let ctx = ctx();
    let api = ctx.bind();
    let x = tensor(&ctx, &[1, 2, 4, 4], &ramp(32, 0.5), DataType::F32);
    let w = tensor(&ctx, &[3, 2, 3, 3], &ramp(54, 0.25), DataType::F32);
    let g = tensor(&ctx, &[1, 3, 2, 2], &ramp(12, 1.0), DataType::F32);
    // A transposed view of a [2, 3, 3, 3] buffer: the shape fits, the layout does not.
    let base = AscendTensor::empty(&ctx, vec![2, 3, 3, 3], DataType::F32).unwrap();
    let strided = base.with_layout(base.layout().swap_dims(0, 1));
    let run = |grad_weight: &AscendTensor, mask: &[bool]| -> AclResult<()> {
        let ones = IntArrayDesc::new(api, &[1, 1])?;
        let zeros = IntArrayDesc::new(api, &[0, 0])?;
        let bias = IntArrayDesc::new(api, &[3])?;
        let mask = BoolArrayDesc::new(api, mask)?;
        aclnn!(
            &*ctx,
            aclnnConvolutionBackward(
                g.desc()?,
                x.desc()?,
                w.desc()?,
                &bias,
                &ones,
                &zeros,
                &ones,
                false,
                &zeros,
                1,
                &mask,
                0,
                Absent,
                grad_weight.desc()?,
                Absent
            )
        )
    };
    assert_rejected(
        run(&strided, &[false, true, false]),
        &["gradWeight", "contiguous"],
    );
    let dense = AscendTensor::empty(&ctx, vec![3, 2, 3, 3], DataType::F32).unwrap();
    assert_rejected(run(&dense, &[false, true]), &["outputMask"]);
    run(&dense, &[false, true, false]).expect("a dense gradWeight is accepted");
}

#[test]
fn constant_pad_checks_the_output_shape_and_fills() {
    if common::skipped_on_npu("constant_pad_checks_the_output_shape_and_fills") {
        return;
    }
    let ctx = ctx();
    let api = ctx.bind();
    let x = tensor(
        &ctx,
        &[2, 3],
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        DataType::F32,
    );
    let pad = |out: &AscendTensor, amounts: &[i64]| -> AclResult<()> {
        let p = IntArrayDesc::new(api, amounts)?;
        let v = ScalarDesc::new(api, HostScalar::Float(-1.0))?;
        aclnn!(&*ctx, aclnnConstantPadNd(x.desc()?, &p, &v, out.desc()?))
    };
    let wrong = AscendTensor::empty(&ctx, vec![2, 4], DataType::F32).unwrap();
    assert_rejected(pad(&wrong, &[1, 1]), &["aclnnConstantPadNd", "[2, 5]"]);
    // Last dim: 1 before, 0 after; first dim: crop 1 before, 1 after.
    let out = AscendTensor::empty(&ctx, vec![2, 4], DataType::F32).unwrap();
    pad(&out, &[1, 0, -1, 1]).unwrap();
    assert_eq!(
        floats(&out),
        vec![-1.0, 4.0, 5.0, 6.0, -1.0, -1.0, -1.0, -1.0]
    );
}
