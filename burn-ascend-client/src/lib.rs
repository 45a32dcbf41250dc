//! burn-ascend's fused ops for Burn 0.22 programs on an Ascend NPU served by
//! `burn-ascend-server` (Burn's remote backend).
//!
//! Burn's IR has no op for them, so each call is shipped as a burn-remote custom operation
//! (`"ascend::<op>"`) that the server runs with its fused kernel. The program names no Ascend
//! type: it depends on Burn 0.22 and this crate.
//!
//! # Set-up
//!
//! ```toml
//! [dependencies]
//! burn = { version = "=0.22.1", features = ["remote-websocket"] }
//! # this repository's crate, as a path (or git) dependency
//! burn-ascend-client = { path = "../burn-ascend/burn-ascend-client" }
//! ```
//!
//! Start the server (`cargo run -p burn-ascend-server -- --port 3000`, serving the emulated NPU
//! `emulated:0` by default, `--device npu:0` for a real one), then open its device, either from
//! the environment (`BURN_DEVICE=remote BURN_REMOTE_ADDRESS=ws://host:3000`, then
//! `Device::default()`) or explicitly:
//!
//! ```rust,no_run
//! use burn::remote::RemoteHost;
//! use burn::tensor::{Device, Tensor};
//!
//! let device = Device::remote_options(&RemoteHost::websocket("ws://127.0.0.1:3000"))
//!     .init()
//!     .expect("burn-ascend-server is listening");
//! let x = Tensor::<2>::ones([4, 8], &device);
//! let gamma = Tensor::<1>::ones([8], &device);
//! let y = burn_ascend_client::rms_norm(x, gamma, 1e-6);
//! ```
//!
//! The ops run only on a remote device (Burn's own backends have no such kernels): on another
//! device, or on a tensor tracked by autodiff, they panic naming the op. Each call checks its
//! contract (shapes, dtypes, scalars) before it is sent, panicking with a message naming the op,
//! the shapes and the dtypes; the server checks it again, and a call it refuses ends the
//! client's session (its log names why), so the next read returns an error rather than waits.
#![warn(missing_docs)]

use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::backend::{backend_extension, Backend, DType, Remote, Shape, TensorMetadata};
use burn::remote::CustomOpClient;
use burn::tensor::{Int, Tensor};
use burn_ir::{CustomOpIr, ScalarIr, TensorIr};

// The trait's methods take no `Option` of a tensor: `#[backend_extension]` 0.22.1 passes such
// an argument to the backend unconverted (a dispatch tensor), which does not compile.

/// The custom-op ids, as `burn_ascend_b22::fused` registers them on the server.
pub mod ids {
    /// RMS norm.
    pub const RMS_NORM: &str = "ascend::rms_norm";
    /// Residual add then RMS norm.
    pub const ADD_RMS_NORM: &str = "ascend::add_rms_norm";
    /// Layer norm.
    pub const LAYER_NORM: &str = "ascend::layer_norm";
    /// MoE gather.
    pub const MOE_GATHER: &str = "ascend::moe_gather";
    /// MoE scatter.
    pub const MOE_SCATTER: &str = "ascend::moe_scatter";
    /// Grouped matmul of MoE experts.
    pub const GROUPED_MATMUL: &str = "ascend::grouped_matmul";
    /// Split-KV decode attention over a paged cache.
    pub const DECODE_ATTENTION: &str = "ascend::decode_attention";
}

/// The scalars of [`decode_attention`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecodeAttentionOptions {
    /// Splits per request at most; every `num_kv_splits[b]` lies in `1..=max_kv_splits`.
    pub max_kv_splits: usize,
    /// The softmax scale applied to `q . k`.
    pub sm_scale: f32,
    /// Soft cap: scores become `cap * tanh(s / cap)` (cap > 0).
    pub logit_cap: Option<f32>,
}

/// burn-ascend's fused ops at the primitive level (contracts: the functions of the same names
/// at the crate root). Implemented for Burn's remote backend, whose server runs them.
#[backend_extension(Remote)]
pub trait AscendFusedOps: Backend {
    /// `(y, rstd)`: see [`rms_norm`]; rstd is `[rows]` f32.
    fn rms_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        eps: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);

    /// `(y, rstd, x1 + x2)`: see [`add_rms_norm`].
    fn add_rms_norm(
        x1: FloatTensor<Self>,
        x2: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        eps: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>);

    /// `(y, mean, rstd)`: see [`layer_norm`]; mean and rstd are `[rows]` f32.
    fn layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        eps: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>);

    /// See [`moe_gather`].
    fn moe_gather(
        x: FloatTensor<Self>,
        indices: IntTensor<Self>,
        top_k: usize,
    ) -> FloatTensor<Self>;

    /// See [`moe_scatter`] (with weights).
    fn moe_scatter(
        y: FloatTensor<Self>,
        indices: IntTensor<Self>,
        weights: FloatTensor<Self>,
        top_k: usize,
    ) -> FloatTensor<Self>;

    /// See [`moe_scatter`] (without weights).
    fn moe_scatter_unweighted(
        y: FloatTensor<Self>,
        indices: IntTensor<Self>,
        top_k: usize,
    ) -> FloatTensor<Self>;

    /// `(out, lse)`: see [`decode_attention`].
    fn decode_attention(
        q: FloatTensor<Self>,
        k_cache: FloatTensor<Self>,
        v_cache: FloatTensor<Self>,
        kv_indptr: IntTensor<Self>,
        kv_indices: IntTensor<Self>,
        num_kv_splits: IntTensor<Self>,
        options: DecodeAttentionOptions,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);

    /// See [`grouped_matmul`].
    fn grouped_matmul(
        x: FloatTensor<Self>,
        weights: FloatTensor<Self>,
        group_sizes: IntTensor<Self>,
    ) -> FloatTensor<Self>;
}

/// RMS norm over the last dim of `x` (leading dims flattened into rows): `y = x * rstd * gamma`
/// with `rstd = 1 / sqrt(mean(x^2) + eps)` per row, computed in f32. `x` is f32, f16 or bf16;
/// `gamma` is `[N]` in x's dtype (or f32 for an f16/bf16 x); `eps` is finite and `>= 0`.
pub fn rms_norm<const D: usize>(x: Tensor<D>, gamma: Tensor<1>, eps: f64) -> Tensor<D> {
    let (y, _rstd) = <burn::backend::Dispatch as AscendFusedOps>::rms_norm(
        x.into_dispatch(),
        gamma.into_dispatch(),
        eps,
    );
    Tensor::from_dispatch(y)
}

/// Residual add then RMS norm: `x = x1 + x2` (same shape and dtype), then [`rms_norm`] of `x`
/// with `gamma` `[N]` in x1's dtype. Returns `(y, x)`: the normalised rows and the new residual.
pub fn add_rms_norm<const D: usize>(
    x1: Tensor<D>,
    x2: Tensor<D>,
    gamma: Tensor<1>,
    eps: f64,
) -> (Tensor<D>, Tensor<D>) {
    let (y, _rstd, x) = <burn::backend::Dispatch as AscendFusedOps>::add_rms_norm(
        x1.into_dispatch(),
        x2.into_dispatch(),
        gamma.into_dispatch(),
        eps,
    );
    (Tensor::from_dispatch(y), Tensor::from_dispatch(x))
}

/// Layer norm over the last dim of `x` (statistics in f32): `(x - mean) * rstd * gamma + beta`
/// with `rstd = 1 / sqrt(var + eps)` (biased variance); `gamma` and `beta` are `[N]`.
pub fn layer_norm<const D: usize>(
    x: Tensor<D>,
    gamma: Tensor<1>,
    beta: Tensor<1>,
    eps: f64,
) -> Tensor<D> {
    let (y, _mean, _rstd) = <burn::backend::Dispatch as AscendFusedOps>::layer_norm(
        x.into_dispatch(),
        gamma.into_dispatch(),
        beta.into_dispatch(),
        eps,
    );
    Tensor::from_dispatch(y)
}

/// `out[i] = x[indices[i] / top_k]` for `x [T, H]` (f32, f16 or bf16) and a permutation
/// `indices [T*K]` (int32) of `0..T*K`: each token's row copied to its `K` expert slots.
pub fn moe_gather(x: Tensor<2>, indices: Tensor<1, Int>, top_k: usize) -> Tensor<2> {
    Tensor::from_dispatch(<burn::backend::Dispatch as AscendFusedOps>::moe_gather(
        x.into_dispatch(),
        indices.into_dispatch(),
        top_k,
    ))
}

/// `out[indices[i] / K] += w[indices[i]] * y[i]` for `y [T*K, H]` and a permutation
/// `indices [T*K]` (int32) of `0..T*K`, accumulated in f32 (`w` = 1 without `weights [T*K]`):
/// out `[T, H]` in y's dtype.
pub fn moe_scatter(
    y: Tensor<2>,
    indices: Tensor<1, Int>,
    weights: Option<Tensor<1>>,
    top_k: usize,
) -> Tensor<2> {
    type Ops = burn::backend::Dispatch;
    let (y, indices) = (y.into_dispatch(), indices.into_dispatch());
    Tensor::from_dispatch(match weights {
        Some(w) => <Ops as AscendFusedOps>::moe_scatter(y, indices, w.into_dispatch(), top_k),
        None => <Ops as AscendFusedOps>::moe_scatter_unweighted(y, indices, top_k),
    })
}

/// Grouped matmul of MoE experts: the rows of `x [R, K]` are grouped contiguously by expert,
/// expert `e` owning the next `group_sizes[e]` rows, and `out[r] = x[r] @ weights[e]` for
/// `weights [E, K, N]` of x's dtype; out `[R, N]`, rows past `sum(group_sizes)` zero.
pub fn grouped_matmul(x: Tensor<2>, weights: Tensor<3>, group_sizes: Tensor<1, Int>) -> Tensor<2> {
    Tensor::from_dispatch(<burn::backend::Dispatch as AscendFusedOps>::grouped_matmul(
        x.into_dispatch(),
        weights.into_dispatch(),
        group_sizes.into_dispatch(),
    ))
}

/// Split-KV grouped decode attention over a paged cache: one query token per request,
/// `q [B, HQ, Dk]`, attends to its cached keys `k_cache[kv_indices[kv_indptr[b] ..
/// kv_indptr[b + 1]]]` (`k_cache [N, HKV, Dk]`, kv head `h / (HQ / HKV)`) and values
/// (`v_cache [N, HKV, Dv]`): `softmax(sm_scale * q . k) v` per head, computed in
/// `num_kv_splits[b]` chunks merged by their log-sum-exp. `kv_indptr [B + 1]`, `kv_indices`
/// and `num_kv_splits [B]` are int32; every request has at least one key. Returns `(out [B,
/// HQ, Dv]` in q's dtype, `lse [B, HQ]` f32, the log-sum-exp of each head's scaled scores`)`.
pub fn decode_attention(
    q: Tensor<3>,
    k_cache: Tensor<3>,
    v_cache: Tensor<3>,
    kv_indptr: Tensor<1, Int>,
    kv_indices: Tensor<1, Int>,
    num_kv_splits: Tensor<1, Int>,
    options: DecodeAttentionOptions,
) -> (Tensor<3>, Tensor<2>) {
    let (out, lse) = <burn::backend::Dispatch as AscendFusedOps>::decode_attention(
        q.into_dispatch(),
        k_cache.into_dispatch(),
        v_cache.into_dispatch(),
        kv_indptr.into_dispatch(),
        kv_indices.into_dispatch(),
        num_kv_splits.into_dispatch(),
        options,
    );
    (Tensor::from_dispatch(out), Tensor::from_dispatch(lse))
}

type Primitive = FloatTensor<Remote>;

/// An operand as the contract checks see it.
fn describe(t: &Primitive) -> String {
    format!("{:?} {:?}", t.shape().as_slice(), t.dtype())
}

/// Ends a call breaking `op`'s contract, before anything is sent.
fn refuse(op: &str, reason: String) -> ! {
    panic!("{op}: invalid input: {reason}")
}

fn is_norm_float(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
}

/// `(rows, cols)` of a norm's input: f32, f16 or bf16 with at least one dim.
fn norm_rows(op: &str, name: &str, x: &Primitive) -> (usize, usize) {
    let shape = x.shape();
    match shape.as_slice().split_last() {
        Some((cols, leading)) if is_norm_float(x.dtype()) => (leading.iter().product(), *cols),
        _ => refuse(
            op,
            format!(
                "{name} must be f32, f16 or bf16 with at least one dim, got {}",
                describe(x)
            ),
        ),
    }
}

fn check_eps(op: &str, eps: f64) {
    if !(eps.is_finite() && eps >= 0.0) {
        refuse(op, format!("eps must be finite and >= 0, got {eps}"));
    }
}

fn check_gamma(op: &str, x: &Primitive, gamma: &Primitive, cols: usize, f32_ok: bool) {
    let ok_type = gamma.dtype() == x.dtype() || (f32_ok && gamma.dtype() == DType::F32);
    if gamma.shape().as_slice() != [cols] || !ok_type {
        refuse(
            op,
            format!(
                "gamma must be [{cols}] in x's dtype{} for x {}, got {}",
                if f32_ok { " or f32" } else { "" },
                describe(x),
                describe(gamma)
            ),
        );
    }
}

fn check_vector(op: &str, name: &str, t: Option<&Primitive>, len: usize) {
    if let Some(t) = t {
        if t.shape().as_slice() != [len] {
            refuse(op, format!("{name} must be [{len}], got {}", describe(t)));
        }
    }
}

fn check_index(op: &str, name: &str, t: &Primitive, len: usize) {
    if t.shape().as_slice() != [len] || t.dtype() != DType::I32 {
        refuse(
            op,
            format!("{name} must be [{len}] int32, got {}", describe(t)),
        );
    }
}

/// Builds and sends one custom op on the device of `inputs[0]`, returning its outputs, each
/// `(shape, dtype)` computed here from the contract (the client declares them: no round trip).
fn send(
    id: &'static str,
    inputs: Vec<Primitive>,
    outputs: &[(Vec<usize>, DType)],
    scalars: Vec<ScalarIr>,
) -> Vec<Primitive> {
    let client = CustomOpClient::new(&inputs[0].device());
    let inputs: Vec<TensorIr> = inputs.into_iter().map(|t| t.into_ir()).collect();
    let outputs: Vec<TensorIr> = outputs
        .iter()
        .map(|(shape, dtype)| {
            TensorIr::uninit(
                client.create_empty_handle(),
                Shape::from(shape.clone()),
                *dtype,
            )
        })
        .collect();
    client.register(CustomOpIr::with_scalars(id, &inputs, &outputs, scalars))
}

fn rows_of(x: &Primitive) -> Vec<usize> {
    let shape = x.shape();
    shape.as_slice()[..shape.num_dims() - 1].to_vec()
}

impl AscendFusedOps for Remote {
    fn rms_norm(x: Primitive, gamma: Primitive, eps: f64) -> (Primitive, Primitive) {
        const OP: &str = "rms_norm";
        let (_, cols) = norm_rows(OP, "x", &x);
        check_gamma(OP, &x, &gamma, cols, true);
        check_eps(OP, eps);
        let outs = [
            (x.shape().as_slice().to_vec(), x.dtype()),
            (vec![rows_of(&x).iter().product()], DType::F32),
        ];
        let [y, rstd] = fixed(send(
            ids::RMS_NORM,
            vec![x, gamma],
            &outs,
            vec![ScalarIr::Float(eps)],
        ));
        (y, rstd)
    }

    fn add_rms_norm(
        x1: Primitive,
        x2: Primitive,
        gamma: Primitive,
        eps: f64,
    ) -> (Primitive, Primitive, Primitive) {
        const OP: &str = "add_rms_norm";
        let (rows, cols) = norm_rows(OP, "x1", &x1);
        if x2.shape() != x1.shape() || x2.dtype() != x1.dtype() {
            refuse(
                OP,
                format!(
                    "x2 must have x1's shape and dtype {}, got {}",
                    describe(&x1),
                    describe(&x2)
                ),
            );
        }
        check_gamma(OP, &x1, &gamma, cols, false);
        check_eps(OP, eps);
        let like = (x1.shape().as_slice().to_vec(), x1.dtype());
        let outs = [like.clone(), (vec![rows], DType::F32), like];
        let [y, rstd, x] = fixed(send(
            ids::ADD_RMS_NORM,
            vec![x1, x2, gamma],
            &outs,
            vec![ScalarIr::Float(eps)],
        ));
        (y, rstd, x)
    }

    fn layer_norm(
        x: Primitive,
        gamma: Primitive,
        beta: Primitive,
        eps: f64,
    ) -> (Primitive, Primitive, Primitive) {
        const OP: &str = "layer_norm";
        let (rows, cols) = norm_rows(OP, "x", &x);
        check_vector(OP, "gamma", Some(&gamma), cols);
        check_vector(OP, "beta", Some(&beta), cols);
        check_eps(OP, eps);
        let (gamma, beta) = (Some(gamma), Some(beta));
        let scalars = vec![
            ScalarIr::Bool(true),
            ScalarIr::Bool(true),
            ScalarIr::Float(eps),
        ];
        let outs = [
            (x.shape().as_slice().to_vec(), x.dtype()),
            (vec![rows], DType::F32),
            (vec![rows], DType::F32),
        ];
        let inputs = [Some(x), gamma, beta].into_iter().flatten().collect();
        let [y, mean, rstd] = fixed(send(ids::LAYER_NORM, inputs, &outs, scalars));
        (y, mean, rstd)
    }

    fn moe_gather(x: Primitive, indices: IntTensor<Self>, top_k: usize) -> Primitive {
        const OP: &str = "moe_gather";
        if top_k == 0 {
            refuse(OP, "top_k must be at least 1".into());
        }
        let shape = x.shape();
        if shape.num_dims() != 2 || !is_norm_float(x.dtype()) {
            refuse(
                OP,
                format!("x must be 2-D f32, f16 or bf16, got {}", describe(&x)),
            );
        }
        let slots = shape[0] * top_k;
        check_index(OP, "indices", &indices, slots);
        let outs = [(vec![slots, shape[1]], x.dtype())];
        let [out] = fixed(send(
            ids::MOE_GATHER,
            vec![x, indices],
            &outs,
            vec![ScalarIr::UInt(top_k as u64)],
        ));
        out
    }

    fn moe_scatter(
        y: Primitive,
        indices: IntTensor<Self>,
        weights: Primitive,
        top_k: usize,
    ) -> Primitive {
        scatter(y, indices, Some(weights), top_k)
    }

    fn moe_scatter_unweighted(y: Primitive, indices: IntTensor<Self>, top_k: usize) -> Primitive {
        scatter(y, indices, None, top_k)
    }

    fn decode_attention(
        q: Primitive,
        k_cache: Primitive,
        v_cache: Primitive,
        kv_indptr: Primitive,
        kv_indices: Primitive,
        num_kv_splits: Primitive,
        options: DecodeAttentionOptions,
    ) -> (Primitive, Primitive) {
        const OP: &str = "decode_attention";
        let (qs, ks, vs) = (q.shape(), k_cache.shape(), v_cache.shape());
        let inputs = || {
            format!(
                "q {}, k_cache {}, v_cache {}",
                describe(&q),
                describe(&k_cache),
                describe(&v_cache)
            )
        };
        let one_type = k_cache.dtype() == q.dtype() && v_cache.dtype() == q.dtype();
        if qs.num_dims() != 3 || ks.num_dims() != 3 || vs.num_dims() != 3 {
            refuse(
                OP,
                format!("needs 3-D q, k_cache and v_cache, got {}", inputs()),
            );
        }
        let (batch, q_heads, dim_k) = (qs[0], qs[1], qs[2]);
        let (slots, kv_heads, dim_v) = (ks[0], ks[1], vs[2]);
        if !is_norm_float(q.dtype())
            || !one_type
            || ks[2] != dim_k
            || dim_k == 0
            || dim_v == 0
            || vs[0] != slots
            || vs[1] != kv_heads
            || kv_heads == 0
            || !q_heads.is_multiple_of(kv_heads)
        {
            refuse(
                OP,
                format!(
                    "needs q [B, HQ, Dk], k_cache [N, HKV, Dk] and v_cache [N, HKV, Dv] of one \
                     f32, f16 or bf16 type, HQ a multiple of HKV, Dk and Dv at least 1; got {}",
                    inputs()
                ),
            );
        }
        let cap_ok = options.logit_cap.is_none_or(|c| c > 0.0 && c.is_finite());
        if options.max_kv_splits == 0 || !options.sm_scale.is_finite() || !cap_ok {
            refuse(
                OP,
                format!(
                    "max_kv_splits must be at least 1, sm_scale finite and logit_cap positive \
                     and finite, got {options:?}"
                ),
            );
        }
        check_index(OP, "kv_indptr", &kv_indptr, batch + 1);
        let keys = kv_indices.shape().as_slice().first().copied().unwrap_or(0);
        check_index(OP, "kv_indices", &kv_indices, keys);
        check_index(OP, "num_kv_splits", &num_kv_splits, batch);
        let scalars = vec![
            ScalarIr::Bool(true),
            ScalarIr::UInt(options.max_kv_splits as u64),
            ScalarIr::Float(options.sm_scale as f64),
            ScalarIr::Bool(options.logit_cap.is_some()),
            ScalarIr::Float(options.logit_cap.unwrap_or(0.0) as f64),
            ScalarIr::UInt(dim_v as u64),
        ];
        let outs = [
            (vec![batch, q_heads, dim_v], q.dtype()),
            (vec![batch, q_heads], DType::F32),
        ];
        let [out, lse] = fixed(send(
            ids::DECODE_ATTENTION,
            vec![q, k_cache, v_cache, kv_indptr, kv_indices, num_kv_splits],
            &outs,
            scalars,
        ));
        (out, lse)
    }

    fn grouped_matmul(x: Primitive, weights: Primitive, group_sizes: IntTensor<Self>) -> Primitive {
        const OP: &str = "grouped_matmul";
        let (xs, ws) = (x.shape(), weights.shape());
        if !is_norm_float(x.dtype()) || weights.dtype() != x.dtype() {
            refuse(
                OP,
                format!(
                    "x and weights must share f32, f16 or bf16, got {} and {}",
                    describe(&x),
                    describe(&weights)
                ),
            );
        }
        if xs.num_dims() != 2 || ws.num_dims() != 3 || xs[1] != ws[1] {
            refuse(
                OP,
                format!(
                    "needs x [R, K] and weights [E, K, N], got {} and {}",
                    describe(&x),
                    describe(&weights)
                ),
            );
        }
        let gs = group_sizes.dtype();
        if group_sizes.shape().as_slice() != [ws[0]] || !(gs.is_int() || gs.is_uint()) {
            refuse(
                OP,
                format!(
                    "group_sizes must be [{}] integers, got {}",
                    ws[0],
                    describe(&group_sizes)
                ),
            );
        }
        let outs = [(vec![xs[0], ws[2]], x.dtype())];
        let [out] = fixed(send(
            ids::GROUPED_MATMUL,
            vec![x, weights, group_sizes],
            &outs,
            vec![],
        ));
        out
    }
}

/// [`AscendFusedOps::moe_scatter`] with or without weights.
fn scatter(
    y: Primitive,
    indices: Primitive,
    weights: Option<Primitive>,
    top_k: usize,
) -> Primitive {
    const OP: &str = "moe_scatter";
    let shape = y.shape();
    if shape.num_dims() != 2
        || !is_norm_float(y.dtype())
        || top_k == 0
        || !shape[0].is_multiple_of(top_k)
    {
        refuse(
            OP,
            format!(
                "y must be [T*K, H] f32, f16 or bf16 with K = {top_k} >= 1, got {}",
                describe(&y)
            ),
        );
    }
    let slots = shape[0];
    check_index(OP, "indices", &indices, slots);
    check_vector(OP, "weights", weights.as_ref(), slots);
    let scalars = vec![
        ScalarIr::Bool(weights.is_some()),
        ScalarIr::UInt(top_k as u64),
    ];
    let outs = [(vec![slots / top_k, shape[1]], y.dtype())];
    let inputs = [Some(y), Some(indices), weights]
        .into_iter()
        .flatten()
        .collect();
    let [out] = fixed(send(ids::MOE_SCATTER, inputs, &outs, scalars));
    out
}

/// The `N` outputs `send` returned for the `N` it declared.
fn fixed<const N: usize>(outputs: Vec<Primitive>) -> [Primitive; N] {
    outputs
        .try_into()
        .unwrap_or_else(|o: Vec<_>| panic!("expected {N} outputs, got {}", o.len()))
}
