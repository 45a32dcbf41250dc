//! RMS norm through CANN's operators (aclnnRmsNorm, aclnnAddRmsNorm, aclnnRmsNormGrad on the
//! emulated NPU): `fused::rms_norm`, `fused::add_rms_norm` and `fused::rms_norm_backward` on
//! `Ascend` and `Fusion<Ascend>` against their composed defaults on burn-flex, for f32, f16 and
//! bf16 and shapes with empty and size-1 dims; the gradients `Autodiff<Ascend>` (and
//! `Autodiff<Fusion<Ascend>>`) takes through them against `Autodiff<Flex>` on the norm written
//! with standard ops; bad calls; and the checks the emulated operators make, called directly.

mod common;

use common::panic_message;

use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, Tensor, TensorData};
use burn_ascend::acl::aclnn;
use burn_ascend::acl::types::status::*;
use burn_ascend::acl::{AclError, DataType};
use burn_ascend::{fused, Ascend, AscendDevice, AscendTensor, FusedOps};
use burn_ascend_suite::host_values::host_values;
use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use burn_fusion::Fusion;

type AdAscend = Autodiff<Ascend>;
type AdFlex = Autodiff<Flex>;
type Fused = Fusion<Ascend>;
type AdFused = Autodiff<Fused>;

const EPS: f64 = 1e-6;

fn ascend() -> AscendDevice {
    common::device()
}

fn flex() -> FlexDevice {
    Default::default()
}

fn float<B: Backend, const D: usize>(
    data: &TensorData,
    dtype: DType,
    d: &B::Device,
) -> Tensor<B, D> {
    Tensor::from_data(data.clone().convert_dtype(dtype), (d, dtype))
}

fn to_f64(d: TensorData) -> Vec<f64> {
    d.convert::<f64>().to_vec::<f64>().unwrap()
}

/// Asserts that `got` matches `want` in shape, dtype and values, relative to `max(|want|, 1)`;
/// NaN matches NaN only.
fn assert_close(what: &str, got: TensorData, want: TensorData, tol: f64) {
    assert_eq!(got.shape, want.shape, "{what}: shape");
    assert_eq!(got.dtype, want.dtype, "{what}: dtype");
    for (i, (a, b)) in to_f64(got).iter().zip(&to_f64(want)).enumerate() {
        let same = if b.is_nan() {
            a.is_nan()
        } else {
            (a - b).abs() <= tol * b.abs().max(1.0)
        };
        assert!(same, "{what}: element {i} is {a}, the reference gives {b}");
    }
}

fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 4e-3,
        DType::BF16 => 2e-2,
        _ => 2e-5,
    }
}

/// Shapes with several rows, one row, one column, rows without columns, no rows, three dims and
/// a row longer than one 256-byte repeat.
const SHAPES: &[&[usize]] = &[
    &[4, 64],
    &[1, 1],
    &[5, 1],
    &[1, 300],
    &[3, 0],
    &[0, 16],
    &[2, 3, 8],
    &[0, 2, 0],
];

/// `[y, rstd]` of `rms_norm` on backend B for x `shape` in `dtype` and gamma in `gamma_dtype`.
fn rms_norm_on<B: FusedOps>(
    d: &B::Device,
    shape: &[usize],
    dtype: DType,
    gamma_dtype: DType,
) -> [TensorData; 2] {
    let n = *shape.last().unwrap();
    let x = float::<B, 3>(&host_values(pad3(shape), 1), dtype, d);
    let gamma = float::<B, 1>(&host_values(vec![n], 2), gamma_dtype, d);
    let (y, rstd) = fused::rms_norm(x, gamma, EPS);
    [y.into_data(), rstd.into_data()]
}

/// `[y, rstd, x]` of `add_rms_norm` on backend B.
fn add_rms_norm_on<B: FusedOps>(d: &B::Device, shape: &[usize], dtype: DType) -> [TensorData; 3] {
    let n = *shape.last().unwrap();
    let x1 = float::<B, 3>(&host_values(pad3(shape), 1), dtype, d);
    let x2 = float::<B, 3>(&host_values(pad3(shape), 3), dtype, d);
    let gamma = float::<B, 1>(&host_values(vec![n], 2), dtype, d);
    let (y, rstd, x) = fused::add_rms_norm(x1, x2, gamma, EPS);
    [y.into_data(), rstd.into_data(), x.into_data()]
}

/// `shape` as three dims (leading 1s), so one tensor rank serves every case.
fn pad3(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; 3 - shape.len()];
    s.extend_from_slice(shape);
    s
}

#[test]
fn rms_norm_matches_the_composed_default_on_flex() {
    for &dtype in &[DType::F32, DType::F16, DType::BF16] {
        for gamma_dtype in [dtype, DType::F32] {
            for shape in SHAPES {
                let what = format!("rms_norm {shape:?} {dtype:?} gamma {gamma_dtype:?}");
                let want = rms_norm_on::<Flex>(&flex(), shape, dtype, gamma_dtype);
                let on_ascend = rms_norm_on::<Ascend>(&ascend(), shape, dtype, gamma_dtype);
                let fusion = rms_norm_on::<Fused>(&ascend(), shape, dtype, gamma_dtype);
                for (backend, got) in [("Ascend", on_ascend), ("Fusion<Ascend>", fusion)] {
                    for (i, name) in ["y", "rstd"].iter().enumerate() {
                        assert_close(
                            &format!("{what} on {backend}: {name}"),
                            got[i].clone(),
                            want[i].clone(),
                            tolerance(dtype),
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn rms_norm_of_f32_matches_a_host_reference() {
    // The composed default is the reference above; this pins both to the formula.
    let (m, n) = (3usize, 40usize);
    let xv = to_f64(host_values(vec![m, n], 1));
    let gv = to_f64(host_values(vec![n], 2));
    let [y, rstd] = rms_norm_on::<Ascend>(&ascend(), &[m, n], DType::F32, DType::F32);
    let mut want_y = vec![0.0; m * n];
    let mut want_r = vec![0.0; m];
    for r in 0..m {
        let row = &xv[r * n..(r + 1) * n];
        let rs = 1.0 / (row.iter().map(|v| v * v).sum::<f64>() / n as f64 + EPS).sqrt();
        want_r[r] = rs;
        for c in 0..n {
            want_y[r * n + c] = row[c] * rs * gv[c];
        }
    }
    let f32_data = |v: Vec<f64>, s: Vec<usize>| TensorData::new(v, s).convert_dtype(DType::F32);
    assert_close("y", y, f32_data(want_y, vec![1, m, n]), 1e-5);
    assert_close("rstd", rstd, f32_data(want_r, vec![m]), 1e-5);
}

#[test]
fn add_rms_norm_matches_the_composed_default_on_flex() {
    for &dtype in &[DType::F32, DType::F16, DType::BF16] {
        for shape in SHAPES {
            let what = format!("add_rms_norm {shape:?} {dtype:?}");
            let want = add_rms_norm_on::<Flex>(&flex(), shape, dtype);
            let on_ascend = add_rms_norm_on::<Ascend>(&ascend(), shape, dtype);
            let fusion = add_rms_norm_on::<Fused>(&ascend(), shape, dtype);
            for (backend, got) in [("Ascend", on_ascend), ("Fusion<Ascend>", fusion)] {
                for (i, name) in ["y", "rstd", "x"].iter().enumerate() {
                    assert_close(
                        &format!("{what} on {backend}: {name}"),
                        got[i].clone(),
                        want[i].clone(),
                        tolerance(dtype),
                    );
                }
            }
        }
    }
}

/// `[dx, dgamma]` of `rms_norm_backward` on backend B.
fn backward_on<B: FusedOps>(d: &B::Device, shape: &[usize], dtype: DType) -> [TensorData; 2] {
    let n = *shape.last().unwrap();
    let x = float::<B, 3>(&host_values(pad3(shape), 1), dtype, d);
    let gamma = float::<B, 1>(&host_values(vec![n], 2), DType::F32, d);
    let (_, rstd) = fused::rms_norm(x.clone(), gamma.clone(), EPS);
    let dy = float::<B, 3>(&host_values(pad3(shape), 4), dtype, d);
    let (dx, dgamma) = fused::rms_norm_backward(dy, x, rstd, gamma);
    [dx.into_data(), dgamma.into_data()]
}

#[test]
fn rms_norm_backward_matches_the_composed_default_on_flex() {
    for &dtype in &[DType::F32, DType::F16, DType::BF16] {
        for shape in SHAPES {
            let what = format!("rms_norm_backward {shape:?} {dtype:?}");
            let want = backward_on::<Flex>(&flex(), shape, dtype);
            let on_ascend = backward_on::<Ascend>(&ascend(), shape, dtype);
            let fusion = backward_on::<Fused>(&ascend(), shape, dtype);
            for (backend, got) in [("Ascend", on_ascend), ("Fusion<Ascend>", fusion)] {
                for (i, name) in ["dx", "dgamma"].iter().enumerate() {
                    // dgamma sums every row in f32: its tolerance grows with their number.
                    let tol = if i == 1 { 2e-4 } else { tolerance(dtype) };
                    assert_close(
                        &format!("{what} on {backend}: {name}"),
                        got[i].clone(),
                        want[i].clone(),
                        tol,
                    );
                }
            }
        }
    }
}

/// `[y, dx1, dx2, dgamma]` of `sum(y * g) + sum(x * h)` where `(y, _, x) = add_rms_norm(x1, x2,
/// gamma)` (for `rms_norm`, `x2` absent: `x = x1` and no `h` term, dx2 empty), fused or written
/// with standard ops (in f32, cast back to the dtype).
fn grads<B: AutodiffBackend + FusedOps>(
    d: &B::Device,
    shape: &[usize],
    dtype: DType,
    add: bool,
    fused: bool,
) -> Vec<TensorData> {
    let n = *shape.last().unwrap();
    let s = pad3(shape);
    let x1 = float::<B, 3>(&host_values(s.clone(), 1), dtype, d).require_grad();
    let x2 = float::<B, 3>(&host_values(s.clone(), 3), dtype, d).require_grad();
    let gamma = float::<B, 1>(&host_values(vec![n], 2), dtype, d).require_grad();
    let (y, x) = match (fused, add) {
        (true, true) => {
            let (y, _, x) = fused::add_rms_norm(x1.clone(), x2.clone(), gamma.clone(), EPS);
            (y, Some(x))
        }
        (true, false) => (fused::rms_norm(x1.clone(), gamma.clone(), EPS).0, None),
        (false, _) => {
            let x = if add {
                x1.clone() + x2.clone()
            } else {
                x1.clone()
            };
            let xf = x.clone().cast(DType::F32);
            let rstd = (xf.clone().powi_scalar(2).mean_dim(2) + EPS).sqrt().recip();
            let g = gamma.clone().cast(DType::F32).unsqueeze::<3>();
            ((xf * rstd * g).cast(dtype), add.then_some(x))
        }
    };
    let mut loss = (y.clone() * float::<B, 3>(&host_values(s.clone(), 4), dtype, d)).sum();
    if let Some(x) = x {
        loss = loss + (x * float::<B, 3>(&host_values(s, 5), dtype, d)).sum();
    }
    let grads = loss.backward();
    let dx2 = if add {
        x2.grad(&grads).unwrap().into_data()
    } else {
        TensorData::new(Vec::<f32>::new(), [0])
    };
    vec![
        y.into_data(),
        x1.grad(&grads).unwrap().into_data(),
        dx2,
        gamma.grad(&grads).unwrap().into_data(),
    ]
}

#[test]
fn gradients_match_autodiff_on_flex() {
    for &dtype in &[DType::F32, DType::F16, DType::BF16] {
        for shape in [&[4usize, 64][..], &[1, 1], &[2, 3, 8], &[5, 1]] {
            for add in [false, true] {
                let what = format!("add {add} {shape:?} {dtype:?}");
                let got = grads::<AdAscend>(&ascend(), shape, dtype, add, true);
                let fusion = grads::<AdFused>(&ascend(), shape, dtype, add, true);
                let reference = grads::<AdFlex>(&flex(), shape, dtype, add, false);
                let default = grads::<AdFlex>(&flex(), shape, dtype, add, true);
                for (i, name) in ["y", "dx1", "dx2", "dgamma"].iter().enumerate() {
                    // Sums over the rows (dgamma) and f16/bf16 gradients rounded at each op of
                    // the reference carry more rounding than y.
                    let tol = tolerance(dtype) * if i == 0 { 1.0 } else { 10.0 };
                    let backends = [
                        ("Ascend", &got),
                        ("Fusion<Ascend>", &fusion),
                        ("default on flex", &default),
                    ];
                    for (backend, got) in backends {
                        assert_close(
                            &format!("{what}: {name} on {backend}"),
                            got[i].clone(),
                            reference[i].clone(),
                            tol,
                        );
                    }
                }
            }
        }
    }
}

/// A bad call, why it is bad, and the words its error must hold.
type BadCall = (&'static str, Box<dyn FnOnce()>, &'static [&'static str]);

fn bad_calls<B: FusedOps>(d: &B::Device, backend: &str) {
    let x = float::<B, 2>(&host_values(vec![4, 8], 1), DType::F32, d);
    let half = float::<B, 2>(&host_values(vec![4, 8], 1), DType::F16, d);
    let gamma = |n: usize, dtype| float::<B, 1>(&host_values(vec![n], 2), dtype, d);
    let cases: Vec<BadCall> = vec![
        (
            "a gamma of the wrong length",
            Box::new({
                let (x, g) = (x.clone(), gamma(7, DType::F32));
                move || drop(fused::rms_norm(x, g, EPS))
            }),
            &[
                "rms_norm",
                "gamma must be [8] DT_FLOAT",
                "[4, 8] DT_FLOAT",
                "[7] DT_FLOAT",
            ],
        ),
        (
            "an f16 gamma for an f32 x",
            Box::new({
                let (x, g) = (x.clone(), gamma(8, DType::F16));
                move || drop(fused::rms_norm(x, g, EPS))
            }),
            &["rms_norm", "[4, 8] DT_FLOAT", "[8] DT_FLOAT16"],
        ),
        (
            "an f32 gamma for an f16 add_rms_norm",
            Box::new({
                let (a, b, g) = (half.clone(), half.clone(), gamma(8, DType::F32));
                move || drop(fused::add_rms_norm(a, b, g, EPS))
            }),
            &[
                "add_rms_norm",
                "gamma must be [8] DT_FLOAT16",
                "[8] DT_FLOAT",
            ],
        ),
        (
            "an x2 of another dtype",
            Box::new({
                let (a, b, g) = (x.clone(), half.clone(), gamma(8, DType::F32));
                move || drop(fused::add_rms_norm(a, b, g, EPS))
            }),
            &["add_rms_norm", "x2", "[4, 8] DT_FLOAT16"],
        ),
        (
            "a negative eps",
            Box::new({
                let (x, g) = (x.clone(), gamma(8, DType::F32));
                move || drop(fused::rms_norm(x, g, -1.0))
            }),
            &["rms_norm", "eps", "-1"],
        ),
        (
            "an rstd of the wrong length",
            Box::new({
                let (x, g, r) = (x.clone(), gamma(8, DType::F32), gamma(3, DType::F32));
                move || drop(fused::rms_norm_backward(x.clone(), x, r, g))
            }),
            &[
                "rms_norm_backward",
                "rstd must be [4] DT_FLOAT",
                "[3] DT_FLOAT",
            ],
        ),
    ];
    for (why, call, words) in cases {
        let text = panic_message(call);
        for w in words {
            assert!(text.contains(w), "{backend}, {why}: {w:?} not in {text:?}");
        }
    }
}

#[test]
fn bad_calls_are_clear_errors() {
    bad_calls::<Ascend>(&ascend(), "Ascend");
    bad_calls::<Fused>(&ascend(), "Fusion<Ascend>");
}

fn tensor(shape: &[usize], dtype: DataType) -> AscendTensor {
    let b = match dtype {
        DataType::F16 => DType::F16,
        DataType::BF16 => DType::BF16,
        DataType::I32 => DType::I32,
        _ => DType::F32,
    };
    let data = host_values(vec![shape.iter().product()], 7).convert_dtype(b);
    let flat = if b == DType::I32 {
        Tensor::<Ascend, 1, burn::tensor::Int>::from_data(data, (&ascend(), b)).into_primitive()
    } else {
        Tensor::<Ascend, 1>::from_data(data, (&ascend(), b))
            .into_primitive()
            .tensor()
    };
    burn_ascend::ops::copy::reshape(&flat, shape.to_vec())
        .unwrap()
        .into()
}

/// aclnnRmsNorm called directly on `(x, gamma, y, rstd)` descriptions `(shape, dtype)`.
fn rms(
    x: (&[usize], DataType),
    gamma: (&[usize], DataType),
    y: (&[usize], DataType),
    rstd: (&[usize], DataType),
    eps: f64,
) -> Result<(), AclError> {
    let [x, g, y, r] = [x, gamma, y, rstd].map(|(s, d)| tensor(s, d));
    aclnn!(
        &**x.ctx(),
        aclnnRmsNorm(x.desc()?, g.desc()?, eps, y.desc()?, r.desc()?)
    )
}

fn add_rms(
    x: (&[usize], DataType),
    gamma: (&[usize], DataType),
    out: (&[usize], DataType),
    rstd: (&[usize], DataType),
) -> Result<(), AclError> {
    let [x1, x2, g, y, r, xo] = [x, x, gamma, out, rstd, out].map(|(s, d)| tensor(s, d));
    aclnn!(
        &**x1.ctx(),
        aclnnAddRmsNorm(
            x1.desc()?,
            x2.desc()?,
            g.desc()?,
            EPS,
            y.desc()?,
            r.desc()?,
            xo.desc()?
        )
    )
}

fn rms_grad(
    x: (&[usize], DataType),
    rstd: (&[usize], DataType),
    gamma: (&[usize], DataType),
    dgamma: (&[usize], DataType),
) -> Result<(), AclError> {
    let [dy, x, r, g, dx, dg] = [x, x, rstd, gamma, x, dgamma].map(|(s, d)| tensor(s, d));
    aclnn!(
        &**x.ctx(),
        aclnnRmsNormGrad(
            dy.desc()?,
            x.desc()?,
            r.desc()?,
            g.desc()?,
            dx.desc()?,
            dg.desc()?
        )
    )
}

#[test]
fn emulated_rms_norm_reads_views_and_writes_in_place() {
    if common::skipped_on_npu("emulated_rms_norm_reads_views_and_writes_in_place") {
        return;
    }
    let (m, n) = (6usize, 40usize);
    let norm = |x: &AscendTensor, y: &AscendTensor| {
        let g = tensor(&[n], DataType::F32);
        let r = tensor(&[m, 1], DataType::F32);
        aclnn!(
            &**x.ctx(),
            aclnnRmsNorm(
                x.desc().unwrap(),
                g.desc().unwrap(),
                EPS,
                y.desc().unwrap(),
                r.desc().unwrap()
            )
        )
        .unwrap();
        Tensor::<Ascend, 2>::from_primitive(burn::tensor::TensorPrimitive::Float(y.clone()))
            .into_data()
    };
    let x = tensor(&[m, n], DataType::F32);
    let want = norm(&x, &tensor(&[m, n], DataType::F32));
    // y over x itself: each row is read before it is written.
    let inplace = burn_ascend::ops::copy::contiguous(&x).unwrap();
    let inplace = burn_ascend::ops::copy::reshape(&inplace, vec![m, n])
        .unwrap()
        .into();
    assert_close("in place", norm(&inplace, &inplace), want.clone(), 0.0);
    // x as a transposed view of its transpose.
    let xt = tensor(&[n, m], DataType::F32);
    let t = Tensor::<Ascend, 2>::from_primitive(burn::tensor::TensorPrimitive::Float(xt));
    let view = t.clone().transpose().into_primitive().tensor();
    let dense = t.transpose().into_data();
    let y = norm(&view, &tensor(&[m, n], DataType::F32));
    let dense = Tensor::<Ascend, 2>::from_data(dense, (&ascend(), DType::F32))
        .into_primitive()
        .tensor();
    assert_close(
        "strided x",
        y,
        norm(&dense, &tensor(&[m, n], DataType::F32)),
        0.0,
    );
}

#[test]
fn emulated_rms_norm_ops_check_what_the_operators_check() {
    if common::skipped_on_npu("emulated_rms_norm_ops_check_what_the_operators_check") {
        return;
    }
    use DataType::{BF16, F16, F32, I32};
    let refused = |r: Result<(), AclError>, op: &str, words: &[&str], why: &str| {
        let e = r.err().unwrap_or_else(|| panic!("{why} should be refused"));
        assert_eq!(e.code(), Some(ACLNN_ERR_PARAM_INVALID), "{why}: {e}");
        let text = e.to_string();
        assert!(text.contains(op), "{why}: {op} not in {text}");
        for w in words {
            assert!(text.contains(w), "{why}: {w:?} not in {text}");
        }
    };
    let x: &[usize] = &[2, 3, 8];
    let (g1, g2): (&[usize], &[usize]) = (&[8], &[3, 8]);
    let (r1, r2): (&[usize], &[usize]) = (&[2, 3, 1], &[2, 1, 1]);

    // What the A2 tables allow: gamma over one or two trailing dims, an f32 gamma for half x.
    rms((x, F32), (g1, F32), (x, F32), (r1, F32), EPS).unwrap();
    rms((x, BF16), (g2, F32), (x, BF16), (r2, F32), EPS).unwrap();
    rms((x, F16), (g1, F16), (x, F16), (r1, F32), 0.0).unwrap();
    add_rms((x, BF16), (g2, BF16), (x, BF16), (r2, F32)).unwrap();
    rms_grad((x, F16), (r1, F32), (g1, F32), (g1, F32)).unwrap();

    let op = "aclnnRmsNorm";
    let cases = [
        (
            rms((x, I32), (g1, I32), (x, I32), (r1, F32), EPS),
            "INT32 x",
        ),
        (
            rms((x, F32), (g1, F16), (x, F32), (r1, F32), EPS),
            "an f16 gamma for an f32 x",
        ),
        (
            rms((x, F16), (g1, BF16), (x, F16), (r1, F32), EPS),
            "a bf16 gamma for an f16 x",
        ),
        (
            rms((x, F16), (g1, F16), (x, F16), (r1, F16), EPS),
            "an f16 rstd",
        ),
        (
            rms((x, F16), (g1, F16), (x, F32), (r1, F32), EPS),
            "y in another dtype",
        ),
        (
            rms((x, F32), (&[3], F32), (x, F32), (&[2, 1, 1], F32), EPS),
            "a gamma not over the trailing dims",
        ),
        (
            rms((x, F32), (g1, F32), (x, F32), (&[2, 3], F32), EPS),
            "an rstd without the normalised dims",
        ),
        (
            rms((x, F32), (g1, F32), (x, F32), (r1, F32), -1e-6),
            "a negative epsilon",
        ),
    ];
    for (r, why) in cases {
        refused(r, op, &[], why);
    }
    refused(
        rms((x, F32), (g1, F16), (x, F32), (r1, F32), EPS),
        op,
        &["[2, 3, 8]", "[8]", "DT_FLOAT16"],
        "the message names the shapes and dtypes",
    );

    let op = "aclnnAddRmsNorm";
    refused(
        add_rms((x, F16), (g1, F32), (x, F16), (r1, F32)),
        op,
        &["gamma"],
        "an f32 gamma for f16 inputs",
    );
    refused(
        add_rms((x, F32), (g1, F32), (x, F32), (r2, F32)),
        op,
        &["rstdOut"],
        "an rstd of another gamma",
    );

    let op = "aclnnRmsNormGrad";
    refused(
        rms_grad((x, F32), (r1, F32), (g1, F32), (g1, F16)),
        op,
        &["dgammaOut"],
        "an f16 dgamma",
    );
    refused(
        rms_grad((x, F32), (&[2, 3], F32), (g1, F32), (g1, F32)),
        op,
        &["rstd"],
        "an rstd without the normalised dims",
    );
    refused(
        rms_grad((x, F32), (r1, F32), (g1, F16), (g1, F32)),
        op,
        &["gamma"],
        "an f16 gamma for an f32 x",
    );
}
