//! The server side of the fused ops as burn-remote custom operations: `fused::register`'s
//! handlers run by burn-router's interpreter (what each burn-remote session runs) on the
//! emulated NPU. A call breaking a contract is refused with the core's error naming the op, the
//! shapes and the dtypes (typed, through `try_run`), and so is a custom op of another layout.
//! (Results against plain Burn ops: remote-suite's `fused_ops`, through a real server.)

use burn_ascend_b22::{fused, try_run, Ascend, AscendDevice, AscendError};
use burn_backend::{try_read_sync, DType, Shape, TensorData, Tolerance};
use burn_ir::{CustomOpIr, OperationIr, ScalarIr, TensorId, TensorIr, TensorStatus};
use burn_router::{CustomOpRegistry, TensorInterpreter};

fn interpreter() -> TensorInterpreter<Ascend> {
    let mut registry = CustomOpRegistry::new();
    fused::register(&mut registry);
    TensorInterpreter::with_custom_ops(AscendDevice::Emulated(0), registry)
}

fn output(id: u64, shape: &[usize]) -> TensorIr {
    TensorIr::uninit(TensorId::new(id), Shape::from(shape.to_vec()), DType::F32)
}

fn rms_norm_op(x: TensorIr, gamma: TensorIr, eps: f64) -> CustomOpIr {
    CustomOpIr::with_scalars(
        fused::RMS_NORM,
        &[x],
        &[output(1_000_001, &[2, 4]), output(1_000_002, &[2])],
        vec![ScalarIr::Float(eps)],
    )
    .with_input(gamma)
}

/// `CustomOpIr` has no builder for a second input: a helper for the tests' ops.
trait WithInput {
    fn with_input(self, t: TensorIr) -> Self;
}

impl WithInput for CustomOpIr {
    fn with_input(mut self, t: TensorIr) -> Self {
        self.inputs.push(t);
        self
    }
}

#[test]
fn rms_norm_handler_computes_on_the_npu() {
    let mut interp = interpreter();
    let x = interp.register_tensor_data_desc(TensorData::new(
        vec![1.0f32, 2.0, 3.0, 4.0, -2.0, 0.0, 2.0, 0.0],
        [2, 4],
    ));
    let gamma = interp.register_tensor_data_desc(TensorData::new(vec![1.0f32, 0.5, 2.0, 1.0], [4]));
    let op = rms_norm_op(x, gamma, 0.0);
    let (mut y, mut rstd) = (op.outputs[0].clone(), op.outputs[1].clone());
    interp.register_op(OperationIr::Custom(op));
    y.status = TensorStatus::ReadWrite;
    rstd.status = TensorStatus::ReadWrite;
    let read = |interp: &mut TensorInterpreter<Ascend>, t: TensorIr| {
        try_read_sync(interp.read_tensor_async(t))
            .expect("the read completes")
            .expect("the read succeeds")
    };
    // Closed form: rows' mean squares are 7.5 and 2.
    let (r0, r1) = (1.0 / 7.5f32.sqrt(), 1.0 / 2.0f32.sqrt());
    read(&mut interp, rstd).assert_approx_eq::<f32>(
        &TensorData::new(vec![r0, r1], [2]),
        Tolerance::absolute(1e-6),
    );
    read(&mut interp, y).assert_approx_eq::<f32>(
        &TensorData::new(
            vec![r0, r0, 6.0 * r0, 4.0 * r0, -2.0 * r1, 0.0, 4.0 * r1, 0.0],
            [2, 4],
        ),
        Tolerance::absolute(1e-6),
    );
}

#[test]
fn a_contract_breach_is_refused_naming_op_shapes_and_dtypes() {
    let mut interp = interpreter();
    let x = interp.register_tensor_data_desc(TensorData::new(vec![1.0f32; 8], [2, 4]));
    let gamma = interp.register_tensor_data_desc(TensorData::new(vec![1i32; 3], [3]));
    let err = try_run(|| interp.register_op(OperationIr::Custom(rms_norm_op(x, gamma, 1e-6))))
        .expect_err("a [3] int32 gamma for a [2, 4] x is refused");
    assert!(
        matches!(err, AscendError::InvalidArgument { .. }),
        "{err:?}"
    );
    let message = err.to_string();
    // The core names dtypes as CANN does.
    for part in ["rms_norm", "gamma", "[3] DT_INT32", "[2, 4] DT_FLOAT"] {
        assert!(
            message.contains(part),
            "the error should name {part}: {message}"
        );
    }
}

#[test]
fn a_custom_op_of_another_layout_is_refused_naming_it() {
    let mut interp = interpreter();
    let x = interp.register_tensor_data_desc(TensorData::new(vec![1.0f32; 8], [2, 4]));
    let idx = interp.register_tensor_data_desc(TensorData::new(vec![0i32, 1], [2]));
    // moe_gather with top_k sent as a float.
    let op = CustomOpIr::with_scalars(
        fused::MOE_GATHER,
        &[x, idx],
        &[output(1_000_003, &[2, 4])],
        vec![ScalarIr::Float(1.0)],
    );
    let payload = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        interp.register_op(OperationIr::Custom(op))
    }))
    .expect_err("a float top_k is refused");
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(
        message.contains("ascend::moe_gather") && message.contains("top_k"),
        "{message}"
    );
}
