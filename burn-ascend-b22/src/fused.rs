//! The fused ops as burn-remote custom operations, for Burn 0.22 programs reaching [`Ascend`]
//! through `burn-ascend-server`: Burn's IR has no op for them, so a client ships each as an
//! `OperationIr::Custom` with the id `"ascend::<op>"` (the `burn-ascend-client` crate builds
//! them) and [`register`] gives the server a handler per id that runs the core's fused op.
//!
//! The wire format (inputs, outputs and scalars in this order; `burn-ascend-client` writes it):
//!
//! | id | inputs | outputs | scalars |
//! |---|---|---|---|
//! | `ascend::rms_norm` | x, gamma | y, rstd `[rows]` f32 | eps (float) |
//! | `ascend::add_rms_norm` | x1, x2, gamma | y, rstd, x = x1 + x2 | eps (float) |
//! | `ascend::layer_norm` | x, gamma?, beta? | y, mean, rstd `[rows]` f32 | has_gamma, has_beta (bool), eps (float) |
//! | `ascend::moe_gather` | x `[T, H]`, indices `[T*K]` | out `[T*K, H]` | top_k (uint) |
//! | `ascend::moe_scatter` | y `[T*K, H]`, indices, weights? | out `[T, H]` | has_weights (bool), top_k (uint) |
//! | `ascend::grouped_matmul` | x `[R, K]`, weights `[E, K, N]`, group_sizes `[E]` | out `[R, N]` | — |
//! | `ascend::decode_attention` | q, k_cache, v_cache?, kv_indptr, kv_indices, num_kv_splits | out `[B, HQ, Dv]`, lse `[B, HQ]` f32 | has_v (bool), max_kv_splits (uint), sm_scale (float), has_cap (bool), cap (float), value_dim (uint) |
//!
//! A call breaking an op's contract (the core's `check_*`) panics with the core's error, which
//! names the op, the shapes and the dtypes: burn-fusion claims the op's outputs with it, so the
//! client's read of them fails with that message rather than waits. The client crate checks
//! the same contracts before sending, so a program sees the message itself.
//!
//! Index values (`moe_gather`'s and `moe_scatter`'s indices, `decode_attention`'s `kv_indptr`,
//! `kv_indices` and `num_kv_splits`, `grouped_matmul`'s group sizes) no client can check: they
//! are device data. A bad one would fault the kernel, and a fault stops the device for every
//! session of the server, so the handlers check them on the device first
//! (`ops::fused::preflight`, one synchronisation per call) and refuse the call the same way.

use burn_backend::{ExecutionError, TensorMetadata};
use burn_fusion::stream::{Operation, StreamId};
use burn_fusion::{Fusion, FusionTensor};
use burn_ir::{
    CustomOpIr, HandleContainer, HandleKind, OperationIr, ScalarIr, TensorIr, TensorStatus,
};
use burn_router::{CustomOpRegistry, TensorInterpreter};

use crate::backend::fusion::AscendFusionRuntime;
use crate::backend::run;
use crate::{Ascend, AscendDevice, AscendHandle, AscendTensor};
use burn_ascend_core::ops::fused::{self, preflight};

/// `ascend::rms_norm`.
pub const RMS_NORM: &str = "ascend::rms_norm";
/// `ascend::add_rms_norm`.
pub const ADD_RMS_NORM: &str = "ascend::add_rms_norm";
/// `ascend::layer_norm`.
pub const LAYER_NORM: &str = "ascend::layer_norm";
/// `ascend::moe_gather`.
pub const MOE_GATHER: &str = "ascend::moe_gather";
/// `ascend::moe_scatter`.
pub const MOE_SCATTER: &str = "ascend::moe_scatter";
/// `ascend::grouped_matmul`.
pub const GROUPED_MATMUL: &str = "ascend::grouped_matmul";
/// `ascend::decode_attention` (its stage-1 partial results stay on the server).
pub const DECODE_ATTENTION: &str = "ascend::decode_attention";

/// Every id above: what [`register`] handles.
pub const IDS: [&str; 7] = [
    RMS_NORM,
    ADD_RMS_NORM,
    LAYER_NORM,
    MOE_GATHER,
    MOE_SCATTER,
    GROUPED_MATMUL,
    DECODE_ATTENTION,
];

type Handles = HandleContainer<AscendHandle>;

/// Adds a handler for each fused op above to `registry`.
pub fn register(registry: &mut CustomOpRegistry<Ascend>) {
    registry.register(RMS_NORM, |h, ir, _| rms_norm(h, ir));
    registry.register(ADD_RMS_NORM, |h, ir, _| add_rms_norm(h, ir));
    registry.register(LAYER_NORM, |h, ir, _| layer_norm(h, ir));
    registry.register(MOE_GATHER, |h, ir, _| moe_gather(h, ir));
    registry.register(MOE_SCATTER, |h, ir, _| moe_scatter(h, ir));
    registry.register(GROUPED_MATMUL, |h, ir, _| grouped_matmul(h, ir));
    registry.register(DECODE_ATTENTION, |h, ir, _| decode_attention(h, ir));
}

fn rms_norm(h: &mut Handles, ir: &CustomOpIr) {
    let eps = floats::<1>(ir)[0];
    let [x, gamma] = inputs(h, ir, 2).try_into().expect("two inputs");
    let (y, rstd) = run(RMS_NORM, fused::rms_norm(&x, &gamma, eps));
    outputs(h, ir, [y, rstd]);
}

fn add_rms_norm(h: &mut Handles, ir: &CustomOpIr) {
    let eps = floats::<1>(ir)[0];
    let [x1, x2, gamma] = inputs(h, ir, 3).try_into().expect("three inputs");
    let (y, rstd, x) = run(ADD_RMS_NORM, fused::add_rms_norm(&x1, &x2, &gamma, eps));
    outputs(h, ir, [y, rstd, x]);
}

fn layer_norm(h: &mut Handles, ir: &CustomOpIr) {
    let (has_gamma, has_beta, eps) = match ir.scalars.as_slice() {
        [ScalarIr::Bool(g), ScalarIr::Bool(b), ScalarIr::Float(eps)] => (*g, *b, *eps),
        other => wire(
            ir,
            format!("scalars (has_gamma, has_beta, eps), got {other:?}"),
        ),
    };
    let mut operands = inputs(h, ir, 1 + has_gamma as usize + has_beta as usize).into_iter();
    let x = operands.next().expect("x");
    let gamma = has_gamma.then(|| operands.next().expect("gamma"));
    let beta = has_beta.then(|| operands.next().expect("beta"));
    let (y, mean, rstd) = run(
        LAYER_NORM,
        fused::layer_norm(&x, gamma.as_deref(), beta.as_deref(), eps),
    );
    outputs(h, ir, [y, mean, rstd]);
}

fn moe_gather(h: &mut Handles, ir: &CustomOpIr) {
    let top_k = match ir.scalars.as_slice() {
        [ScalarIr::UInt(k)] => *k as usize,
        other => wire(ir, format!("scalars (top_k), got {other:?}")),
    };
    let [x, indices] = inputs(h, ir, 2).try_into().expect("two inputs");
    let out = run(
        MOE_GATHER,
        preflight::moe_gather(&x, &indices, top_k)
            .and_then(|()| fused::moe_gather(&x, &indices, top_k)),
    );
    outputs(h, ir, [out]);
}

fn moe_scatter(h: &mut Handles, ir: &CustomOpIr) {
    let (has_weights, top_k) = match ir.scalars.as_slice() {
        [ScalarIr::Bool(w), ScalarIr::UInt(k)] => (*w, *k as usize),
        other => wire(ir, format!("scalars (has_weights, top_k), got {other:?}")),
    };
    let mut operands = inputs(h, ir, 2 + has_weights as usize).into_iter();
    let (y, indices) = (operands.next().expect("y"), operands.next().expect("idx"));
    let weights = operands.next();
    let out = run(
        MOE_SCATTER,
        preflight::moe_scatter(&y, &indices, weights.as_deref(), top_k)
            .and_then(|()| fused::moe_scatter(&y, &indices, weights.as_deref(), top_k)),
    );
    outputs(h, ir, [out]);
}

fn grouped_matmul(h: &mut Handles, ir: &CustomOpIr) {
    if !ir.scalars.is_empty() {
        wire(ir, format!("no scalars, got {:?}", ir.scalars));
    }
    let [x, weights, group_sizes] = inputs(h, ir, 3).try_into().expect("three inputs");
    let out = run(
        GROUPED_MATMUL,
        preflight::grouped_matmul(&x, &weights, &group_sizes)
            .and_then(|()| fused::grouped_matmul(&x, &weights, &group_sizes)),
    );
    outputs(h, ir, [out]);
}

fn decode_attention(h: &mut Handles, ir: &CustomOpIr) {
    use ScalarIr::{Bool, Float, UInt};
    let (has_v, options) = match ir.scalars.as_slice() {
        [Bool(has_v), UInt(splits), Float(scale), Bool(has_cap), Float(cap), UInt(dim_v)] => (
            *has_v,
            fused::DecodeAttentionOptions {
                max_kv_splits: *splits as usize,
                sm_scale: *scale as f32,
                logit_cap: has_cap.then_some(*cap as f32),
                value_dim: *dim_v as usize,
                path: None,
            },
        ),
        other => wire(
            ir,
            format!(
                "scalars (has_v, max_kv_splits, sm_scale, has_cap, cap, value_dim), got {other:?}"
            ),
        ),
    };
    let mut operands = inputs(h, ir, 5 + has_v as usize).into_iter();
    let mut next = || operands.next().expect("counted above");
    let (q, k_cache) = (next(), next());
    let v_cache = has_v.then(&mut next);
    let (kv_indptr, kv_indices, num_kv_splits) = (next(), next(), next());
    let result = preflight::decode_attention(
        &q,
        &k_cache,
        v_cache.as_deref(),
        &kv_indptr,
        &kv_indices,
        &num_kv_splits,
        &options,
    )
    .and_then(|()| {
        fused::decode_attention(
            &q,
            &k_cache,
            v_cache.as_deref(),
            &kv_indptr,
            &kv_indices,
            &num_kv_splits,
            options,
        )
    });
    let (out, lse) = run(DECODE_ATTENTION, result.map(|t| (t.out, t.lse)));
    outputs(h, ir, [out, lse]);
}

/// A custom op whose layout is not this module's: a client of another version.
fn wire(ir: &CustomOpIr, expected: String) -> ! {
    panic!(
        "{}: the custom op's layout is not the server's: expected {expected} \
         (is the client's burn-ascend-client of this server's version?)",
        ir.id
    )
}

/// The float scalars of `ir`, exactly `N` of them.
fn floats<const N: usize>(ir: &CustomOpIr) -> [f64; N] {
    let values: Option<Vec<f64>> = ir
        .scalars
        .iter()
        .map(|s| match s {
            ScalarIr::Float(v) => Some(*v),
            _ => None,
        })
        .collect();
    values
        .and_then(|v| v.try_into().ok())
        .unwrap_or_else(|| wire(ir, format!("{N} float scalar(s), got {:?}", ir.scalars)))
}

/// The `n` input tensors of `ir`, float or int as each one's dtype says (the primitive is one
/// type for both on `Ascend`).
fn inputs(h: &mut Handles, ir: &CustomOpIr, n: usize) -> Vec<AscendTensor> {
    if ir.inputs.len() != n {
        wire(ir, format!("{n} inputs, got {}", ir.inputs.len()));
    }
    ir.inputs.iter().map(|t| input(h, t)).collect()
}

fn input(h: &mut Handles, t: &TensorIr) -> AscendTensor {
    if t.dtype.is_float() {
        h.get_float_tensor::<Ascend>(t)
    } else {
        h.get_int_tensor::<Ascend>(t)
    }
}

/// Registers `results` under `ir`'s output ids, after checking that each is what the client
/// declared (the client computes outputs' shapes and dtypes itself, without a round trip).
fn outputs<const N: usize>(h: &mut Handles, ir: &CustomOpIr, results: [AscendTensor; N]) {
    if ir.outputs.len() != N {
        wire(ir, format!("{N} outputs, got {}", ir.outputs.len()));
    }
    for (declared, result) in ir.outputs.iter().zip(results) {
        let dtype = TensorMetadata::dtype(&result);
        if declared.shape.as_slice() != result.shape() || declared.dtype != dtype {
            wire(
                ir,
                format!(
                    "an output {:?} {dtype:?}, declared {:?} {:?}",
                    result.shape(),
                    declared.shape.as_slice(),
                    declared.dtype
                ),
            );
        }
        if dtype.is_float() {
            h.register_float_tensor::<Ascend>(&declared.id, result);
        } else {
            h.register_int_tensor::<Ascend>(&declared.id, result);
        }
    }
}

/// The handlers of `inner` for the ids `ids`, as handlers of `Fusion<Ascend>`, so that a server
/// of `Fusion<Ascend>` runs the same custom ops (ours and any other crate's, e.g. burn-signal's
/// FFT) as a server of `Ascend`.
///
/// burn-remote hands a custom op's handler the served backend's handles: for `Fusion<Ascend>`
/// those are fusion tensors, whose values may still be queued in the fusion stream. Each
/// forwarding handler therefore records the op in that stream (as `Fusion`'s own custom ops do):
/// when the stream runs it, the inner handler runs on the `Ascend` tensors in order with the ops
/// around it, through a one-op `TensorInterpreter` holding `inner`.
pub fn through_fusion(
    inner: CustomOpRegistry<Ascend>,
    ids: &[&str],
) -> CustomOpRegistry<Fusion<Ascend>> {
    let mut registry = CustomOpRegistry::new();
    for id in ids {
        let inner = inner.clone();
        registry.register(id, move |h, ir, device| forward(&inner, h, ir, device));
    }
    registry
}

type FusionHandles = HandleContainer<FusionTensor<AscendFusionRuntime>>;

fn forward(
    inner: &CustomOpRegistry<Ascend>,
    h: &mut FusionHandles,
    ir: &CustomOpIr,
    device: &AscendDevice,
) {
    let client = burn_fusion::get_client::<Ascend>(device);
    // The inputs as the fusion stream names them; the outputs under fresh fusion ids.
    let inputs = ir
        .inputs
        .iter()
        .map(|t| h.get_float_tensor::<Fusion<Ascend>>(t).into_ir())
        .collect();
    let outputs = ir
        .outputs
        .iter()
        .map(|t| TensorIr::uninit(client.create_empty_handle(), t.shape.clone(), t.dtype))
        .collect();
    let desc = CustomOpIr {
        id: ir.id.clone(),
        inputs,
        outputs,
        scalars: ir.scalars.clone(),
    };
    let op = Forward {
        desc: desc.clone(),
        inner: inner.clone(),
        device: *device,
    };
    let results = client.register(StreamId::current(), OperationIr::Custom(desc), op);
    for (declared, result) in ir.outputs.iter().zip(results) {
        h.register_float_tensor::<Fusion<Ascend>>(&declared.id, result);
    }
}

/// A forwarded custom op in the fusion stream.
struct Forward {
    desc: CustomOpIr,
    inner: CustomOpRegistry<Ascend>,
    device: AscendDevice,
}

impl std::fmt::Debug for Forward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forward").field("desc", &self.desc).finish()
    }
}

impl Operation<AscendFusionRuntime> for Forward {
    fn execute(&self, handles: &mut Handles) -> Result<(), ExecutionError> {
        let mut interpreter = TensorInterpreter::with_custom_ops(self.device, self.inner.clone());
        for t in &self.desc.inputs {
            let kind = match handles.get_handle(&t.id, &t.status) {
                AscendHandle::Tensor(x) => HandleKind::Float(x),
                AscendHandle::Quantized(q) => HandleKind::Quantized(q),
            };
            interpreter.register_tensor_to_device(t.id, kind);
        }
        interpreter.register_op(OperationIr::Custom(self.desc.clone()));
        for t in &self.desc.outputs {
            let taken = TensorIr {
                status: TensorStatus::ReadWrite,
                ..t.clone()
            };
            handles.register_handle(t.id, interpreter.get_tensor_handle(&taken));
        }
        Ok(())
    }
}
