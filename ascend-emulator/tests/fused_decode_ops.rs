//! The decode-step operators of issue 36 through the function table
//! (`shared/ascend/aclnn-fused-decode-ops.md`): aclnnMoeGatingTopKSoftmax(V2), aclnnTopk,
//! aclnnSwiGlu, aclnnApplyRotaryPosEmb, aclnnRopeWithSinCosCache, aclnnInplaceScatterUpdate.
//! Each: results against references computed here in f64 from the stored inputs (closed forms
//! where there are some) in F32, F16 and BF16, one launch per call, and one test per rule that
//! refuses a call (its status, and a message naming the op and the shapes).
//!
//! The tests hold one lock (the launch counters are per process) and fault only NPU 1, which
//! they reset.

mod common;

use ascend_acl::dtype::DataType::{self, *};
use ascend_acl::handles::TensorDesc;
use ascend_acl::types::status::*;
use ascend_acl::AclApi;
use ascend_emulator::aclnn_launches_of;
use common::ops::*;
use common::{api, serial};

const FLOATS: [DataType; 3] = [F32, F16, BF16];
const INVALID: i32 = ACLNN_ERR_PARAM_INVALID;
const NULLPTR: i32 = ACLNN_ERR_PARAM_NULLPTR;
const TILING: i32 = ACLNN_ERR_INNER_TILING_ERROR;
const AICORE: i32 = ACL_ERROR_RT_AICORE_EXCEPTION;

/// Relative tolerance of one rounding to `dtype` (and a few f32 steps before it).
fn tol(dtype: DataType) -> f64 {
    match dtype {
        F32 => 2e-6,
        F16 => 2f64.powi(-10),
        BF16 => 2f64.powi(-7),
        _ => 0.0,
    }
}

#[track_caller]
fn assert_close(got: &[f64], want: &[f64], dtype: DataType, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let bound = tol(dtype) * w.abs().max(1e-3);
        assert!(
            (g - w).abs() <= bound,
            "{what} [{i}]: got {g}, want {w} ({dtype})"
        );
    }
}

/// A tensor to make: dtype, shape, optional strides (dense when `None`).
#[derive(Clone)]
struct Spec {
    dtype: DataType,
    shape: Vec<usize>,
    strides: Option<Vec<usize>>,
}

fn spec(dtype: DataType, shape: &[usize]) -> Spec {
    Spec {
        dtype,
        shape: shape.to_vec(),
        strides: None,
    }
}

fn strided(dtype: DataType, shape: &[usize], strides: &[usize]) -> Spec {
    Spec {
        dtype,
        shape: shape.to_vec(),
        strides: Some(strides.to_vec()),
    }
}

/// A buffer holding `values` (zeros when empty: as many as the view reaches) and the view.
fn make(api: &AclApi, s: &Spec, values: &[f64]) -> (Buf, TensorDesc<'static>) {
    let strides = s.strides.clone().unwrap_or_else(|| dense_strides(&s.shape));
    let extent = if s.shape.contains(&0) {
        0
    } else {
        1 + s
            .shape
            .iter()
            .zip(&strides)
            .map(|(n, st)| (n - 1) * st)
            .sum::<usize>()
    };
    let values = if values.is_empty() {
        vec![0.0; extent]
    } else {
        values.to_vec()
    };
    assert!(values.len() >= extent, "values for {:?}", s.shape);
    let b = buf(api, s.dtype, &values);
    let d = view(&b, &s.shape, &strides, 0);
    (b, d)
}

/// `launch` of an operator field of the table, counting that it launches once.
macro_rules! op {
    ($api:expr, $op:ident, |$f:ident, $ws:ident, $ex:ident| $call:expr) => {{
        let name = stringify!($op);
        let before = aclnn_launches_of(name);
        let result = launch(
            &$api.ops.$op,
            name,
            concat!(stringify!($op), "GetWorkspaceSize"),
            // SAFETY: live descriptors and out-pointers, the operator's declared signature.
            |$f, $ws, $ex| unsafe { $call },
        );
        if result.is_ok() {
            assert_eq!(aclnn_launches_of(name) - before, 1, "{name} is one launch");
        }
        result
    }};
}

fn null() -> *const ascend_acl::types::aclTensor {
    std::ptr::null()
}

// ---------------------------------------------------------------------------------------------
// aclnnMoeGatingTopKSoftmax(V2)
// ---------------------------------------------------------------------------------------------

/// Softmax of a row in f64.
fn softmax(row: &[f64]) -> Vec<f64> {
    let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let z: f64 = row.iter().map(|v| (v - m).exp()).sum();
    row.iter().map(|v| (v - m).exp() / z).collect()
}

/// Positions of the k largest (ties to the lower position).
fn best(row: &[f64], k: usize, largest: bool) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..row.len()).collect();
    idx.sort_by(|&a, &b| {
        let c = row[a].partial_cmp(&row[b]).unwrap();
        if largest {
            c.reverse()
        } else {
            c
        }
    });
    idx.truncate(k);
    idx
}

/// Logits `ln(w)` with distinct integer weights per row (a permutation of 1..=E, scaled).
fn gating_logits(rows: usize, experts: usize) -> Vec<Vec<f64>> {
    (0..rows)
        .map(|r| {
            (0..experts)
                .map(|e| (1.0 + ((e * 7 + r * 3) % experts) as f64 * (r + 1) as f64).ln())
                .collect()
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn gating_v2(
    api: &'static AclApi,
    x: &TensorDesc,
    finished: Option<&TensorDesc>,
    k: i64,
    renorm: i64,
    flag: bool,
    y: &TensorDesc,
    idx: &TensorDesc,
    sm: Option<&TensorDesc>,
) -> Result<(), Failure> {
    op!(api, aclnnMoeGatingTopKSoftmaxV2, |f, ws, ex| f(
        x.as_ptr(),
        finished.map_or(null(), |t| t.as_ptr()),
        k,
        renorm,
        flag,
        y.as_ptr(),
        idx.as_ptr(),
        sm.map_or(null(), |t| t.as_ptr()),
        ws,
        ex
    ))
}

#[test]
fn gating_v2_renorm_0_is_the_softmax_then_its_top_k_and_marks_finished_rows() {
    let _lock = serial();
    let api = api();
    let (rows, experts, k) = (6, 5, 2);
    let logits = gating_logits(rows, experts);
    for dtype in FLOATS {
        let flat: Vec<f64> = logits.iter().flatten().copied().collect();
        let (_bx, x) = make(api, &spec(dtype, &[2, 3, experts]), &flat);
        // Row 3 (position [1, 0]) is finished.
        let (_bf, fin) = make(api, &spec(Bool, &[2, 3]), &[0., 0., 0., 1., 0., 0.]);
        let (by, y) = make(api, &spec(dtype, &[2, 3, k]), &[]);
        let (bi, idx) = make(api, &spec(I32, &[2, 3, k]), &[]);
        let (bs, sm) = make(api, &spec(F32, &[2, 3, experts]), &[]);
        gating_v2(api, &x, Some(&fin), k as i64, 0, true, &y, &idx, Some(&sm)).unwrap();
        let (mut want_y, mut want_i, mut want_s) = (vec![], vec![], vec![]);
        for (r, row) in logits.iter().enumerate() {
            let row: Vec<f64> = row.iter().map(|&v| stored(dtype, v)).collect();
            let p = softmax(&row);
            let top = best(&p, k, true);
            want_y.extend(top.iter().map(|&e| p[e]));
            want_i.extend(top.iter().map(|&e| if r == 3 { experts } else { e } as f64));
            want_s.extend(p);
        }
        assert_close(&read(api, &by), &want_y, dtype, "yOut");
        assert_eq!(read(api, &bi), want_i, "expertIdxOut ({dtype})");
        assert_close(&read(api, &bs), &want_s, F32, "softmaxResultOut");
        if dtype == F32 {
            // The closed form: the probabilities of ln(w) are w / sum(w).
            let w0: Vec<f64> = logits[0].iter().map(|v| v.exp()).collect();
            let total: f64 = w0.iter().sum();
            let want: Vec<f64> = w0.iter().map(|w| w / total).collect();
            assert_close(&read(api, &bs)[..experts], &want, F32, "closed form");
        }
    }
}

#[test]
fn gating_v2_renorm_1_is_the_softmax_of_the_top_k_logits() {
    let _lock = serial();
    let api = api();
    let (rows, experts, k) = (4, 6, 3);
    let logits = gating_logits(rows, experts);
    for dtype in FLOATS {
        let flat: Vec<f64> = logits.iter().flatten().copied().collect();
        let (_bx, x) = make(api, &spec(dtype, &[rows, experts]), &flat);
        let (by, y) = make(api, &spec(dtype, &[rows, k]), &[]);
        let (bi, idx) = make(api, &spec(I32, &[rows, k]), &[]);
        let sentinel = vec![-7.0; rows * experts];
        let (bs, sm) = make(api, &spec(F32, &[rows, experts]), &sentinel);
        gating_v2(api, &x, None, k as i64, 1, true, &y, &idx, Some(&sm)).unwrap();
        let (mut want_y, mut want_i) = (vec![], vec![]);
        for row in &logits {
            let row: Vec<f64> = row.iter().map(|&v| stored(dtype, v)).collect();
            let top = best(&row, k, true);
            let picked: Vec<f64> = top.iter().map(|&e| row[e]).collect();
            want_y.extend(softmax(&picked));
            want_i.extend(top.iter().map(|&e| e as f64));
        }
        assert_close(&read(api, &by), &want_y, dtype, "yOut");
        assert_eq!(read(api, &bi), want_i, "expertIdxOut ({dtype})");
        // Renormalised = softmax, top k, divided by the top k's sum: with ln(w) logits, each
        // kept w over the kept w's sum.
        if dtype == F32 {
            let w: Vec<f64> = want_i[..k]
                .iter()
                .map(|&e| logits[0][e as usize].exp())
                .collect();
            let total: f64 = w.iter().sum();
            let want: Vec<f64> = w.iter().map(|v| v / total).collect();
            assert_close(&read(api, &by)[..k], &want, F32, "closed form");
        }
        // With renorm 1 the flag has no effect: the softmax result is not written.
        assert_eq!(read(api, &bs), sentinel, "softmaxResultOut untouched");
    }
}

#[test]
fn gating_v1_gives_the_column_major_row_index_and_reads_strided_x() {
    let _lock = serial();
    let api = api();
    let (rows, experts, k) = (3, 4, 2);
    let logits = gating_logits(rows, experts);
    for dtype in FLOATS {
        // x [3, 4] as the transpose of a dense [4, 3] buffer.
        let mut storage = vec![0.0; rows * experts];
        for (r, row) in logits.iter().enumerate() {
            for (e, &v) in row.iter().enumerate() {
                storage[e * rows + r] = v;
            }
        }
        let (_bx, x) = make(api, &strided(dtype, &[rows, experts], &[1, rows]), &storage);
        let (by, y) = make(api, &spec(dtype, &[rows, k]), &[]);
        let (bi, idx) = make(api, &spec(I32, &[rows, k]), &[]);
        let (br, row_idx) = make(api, &spec(I32, &[rows, k]), &[]);
        op!(api, aclnnMoeGatingTopKSoftmax, |f, ws, ex| f(
            x.as_ptr(),
            null(),
            k as i64,
            y.as_ptr(),
            idx.as_ptr(),
            row_idx.as_ptr(),
            ws,
            ex
        ))
        .unwrap();
        let (mut want_y, mut want_i) = (vec![], vec![]);
        for row in &logits {
            let row: Vec<f64> = row.iter().map(|&v| stored(dtype, v)).collect();
            let p = softmax(&row);
            let top = best(&p, k, true);
            want_y.extend(top.iter().map(|&e| p[e]));
            want_i.extend(top.iter().map(|&e| e as f64));
        }
        assert_close(&read(api, &by), &want_y, dtype, "yOut");
        assert_eq!(read(api, &bi), want_i, "expertIdxOut ({dtype})");
        // rowIdx[r][j] = j * rows + r.
        assert_eq!(read(api, &br), vec![0., 3., 1., 4., 2., 5.], "rowIdxOut");
    }
}

/// The valid V2 call of the refusal tests, with one argument changed by `change`.
struct GatingCall {
    x: Spec,
    finished: Option<Spec>,
    k: i64,
    renorm: i64,
    flag: bool,
    y: Spec,
    idx: Spec,
    sm: Option<Spec>,
}

fn gating_refusal(change: impl FnOnce(&mut GatingCall)) -> Result<(), Failure> {
    let api = api();
    let mut c = GatingCall {
        x: spec(F32, &[4, 8]),
        finished: None,
        k: 2,
        renorm: 0,
        flag: false,
        y: spec(F32, &[4, 2]),
        idx: spec(I32, &[4, 2]),
        sm: None,
    };
    change(&mut c);
    let (_a, x) = make(api, &c.x, &[]);
    let fin = c.finished.as_ref().map(|s| make(api, s, &[]));
    let (_c, y) = make(api, &c.y, &[]);
    let (_d, idx) = make(api, &c.idx, &[]);
    let sm = c.sm.as_ref().map(|s| make(api, s, &[]));
    gating_v2(
        api,
        &x,
        fin.as_ref().map(|f| &f.1),
        c.k,
        c.renorm,
        c.flag,
        &y,
        &idx,
        sm.as_ref().map(|s| &s.1),
    )
}

const GATING_V2: &str = "aclnnMoeGatingTopKSoftmaxV2";

#[test]
fn gating_the_valid_refusal_baseline_runs() {
    let _lock = serial();
    gating_refusal(|_| {}).unwrap();
}

#[test]
fn gating_refuses_an_integer_x() {
    let _lock = serial();
    let r = gating_refusal(|c| c.x.dtype = I32);
    refused(r, INVALID, &[GATING_V2, "x", "[4, 8] DT_INT32"]);
}

#[test]
fn gating_refuses_a_y_of_another_dtype_than_x() {
    let _lock = serial();
    let r = gating_refusal(|c| c.y.dtype = F16);
    refused(
        r,
        INVALID,
        &[GATING_V2, "yOut", "[4, 2] DT_FLOAT16", "[4, 8] DT_FLOAT"],
    );
}

#[test]
fn gating_refuses_int64_expert_ids() {
    let _lock = serial();
    let r = gating_refusal(|c| c.idx.dtype = I64);
    refused(r, INVALID, &[GATING_V2, "expertIdxOut", "[4, 2] DT_INT64"]);
}

#[test]
fn gating_refuses_an_x_of_rank_4() {
    let _lock = serial();
    let r = gating_refusal(|c| {
        c.x.shape = vec![1, 2, 2, 8];
        c.y.shape = vec![1, 2, 2, 2];
        c.idx.shape = vec![1, 2, 2, 2];
    });
    refused(r, TILING, &[GATING_V2, "[1, 2, 2, 8]", "2-D or 3-D"]);
}

#[test]
fn gating_refuses_a_finished_of_another_shape_than_x_without_its_last_dim() {
    let _lock = serial();
    let r = gating_refusal(|c| c.finished = Some(spec(Bool, &[3])));
    refused(r, TILING, &[GATING_V2, "finishedOptional", "[3]", "[4, 8]"]);
}

#[test]
fn gating_refuses_a_finished_that_is_not_bool() {
    let _lock = serial();
    let r = gating_refusal(|c| c.finished = Some(spec(I32, &[4])));
    refused(r, INVALID, &[GATING_V2, "finishedOptional", "[4] DT_INT32"]);
}

#[test]
fn gating_refuses_k_outside_one_to_the_expert_count() {
    let _lock = serial();
    for k in [0, 9, -1] {
        let r = gating_refusal(|c| c.k = k);
        refused(r, TILING, &[GATING_V2, &format!("k {k}"), "[4, 8]"]);
    }
}

#[test]
fn gating_refuses_k_above_1024() {
    let _lock = serial();
    let r = gating_refusal(|c| {
        c.x.shape = vec![1, 1100];
        c.k = 1025;
        c.y.shape = vec![1, 1025];
        c.idx.shape = vec![1, 1025];
    });
    refused(r, TILING, &[GATING_V2, "k 1025", "[1, 1100]", "1024"]);
    // 1024 itself is taken.
    gating_refusal(|c| {
        c.x.shape = vec![1, 1100];
        c.k = 1024;
        c.y.shape = vec![1, 1024];
        c.idx.shape = vec![1, 1024];
    })
    .unwrap();
}

#[test]
fn gating_refuses_renorm_other_than_0_or_1() {
    let _lock = serial();
    let r = gating_refusal(|c| c.renorm = 2);
    refused(r, TILING, &[GATING_V2, "renorm 2"]);
}

#[test]
fn gating_refuses_a_softmax_result_that_is_not_float32() {
    let _lock = serial();
    let r = gating_refusal(|c| {
        c.flag = true;
        c.sm = Some(spec(F16, &[4, 8]));
    });
    refused(
        r,
        TILING,
        &[GATING_V2, "softmaxResultOutOptional", "[4, 8] DT_FLOAT16"],
    );
}

#[test]
fn gating_refuses_a_missing_softmax_result_its_flag_asks_for() {
    let _lock = serial();
    let r = gating_refusal(|c| c.flag = true);
    refused(r, NULLPTR, &[GATING_V2, "softmaxResultOutOptional"]);
}

#[test]
fn gating_refuses_a_softmax_result_of_another_shape_than_x() {
    let _lock = serial();
    let r = gating_refusal(|c| {
        c.flag = true;
        c.sm = Some(spec(F32, &[4, 7]));
    });
    refused(
        r,
        INVALID,
        &[GATING_V2, "softmaxResultOutOptional", "[4, 7]", "[4, 8]"],
    );
}

#[test]
fn gating_refuses_a_non_contiguous_y() {
    let _lock = serial();
    let r = gating_refusal(|c| c.y = strided(F32, &[4, 2], &[1, 4]));
    refused(r, INVALID, &[GATING_V2, "yOut", "[4, 2]", "contiguous"]);
}

#[test]
fn gating_refuses_outputs_of_the_wrong_shape() {
    let _lock = serial();
    let r = gating_refusal(|c| c.y.shape = vec![4, 3]);
    refused(r, INVALID, &[GATING_V2, "yOut", "[4, 3]", "[4, 2]"]);
    let r = gating_refusal(|c| c.idx.shape = vec![2, 4]);
    refused(r, INVALID, &[GATING_V2, "expertIdxOut", "[2, 4]", "[4, 2]"]);
}

#[test]
fn gating_v1_refuses_a_row_index_of_another_shape_or_dtype() {
    let _lock = serial();
    let api = api();
    for row in [spec(I32, &[4, 3]), spec(I64, &[4, 2])] {
        let (_a, x) = make(api, &spec(F32, &[4, 8]), &[]);
        let (_b, y) = make(api, &spec(F32, &[4, 2]), &[]);
        let (_c, idx) = make(api, &spec(I32, &[4, 2]), &[]);
        let (_d, r) = make(api, &row, &[]);
        let result = op!(api, aclnnMoeGatingTopKSoftmax, |f, ws, ex| f(
            x.as_ptr(),
            null(),
            2,
            y.as_ptr(),
            idx.as_ptr(),
            r.as_ptr(),
            ws,
            ex
        ));
        let shape = format!("{:?}", row.shape);
        refused(
            result,
            INVALID,
            &["aclnnMoeGatingTopKSoftmax", "rowIdxOut", &shape],
        );
    }
}

// ---------------------------------------------------------------------------------------------
// aclnnTopk
// ---------------------------------------------------------------------------------------------

fn topk(
    api: &'static AclApi,
    x: &TensorDesc,
    k: i64,
    dim: i64,
    largest: bool,
    sorted: bool,
    values: &TensorDesc,
    indices: &TensorDesc,
) -> Result<(), Failure> {
    op!(api, aclnnTopk, |f, ws, ex| f(
        x.as_ptr(),
        k,
        dim,
        largest,
        sorted,
        values.as_ptr(),
        indices.as_ptr(),
        ws,
        ex
    ))
}

#[test]
fn topk_takes_the_largest_or_smallest_along_a_dim_ties_to_the_lower_index() {
    let _lock = serial();
    let api = api();
    // [3, 5], with ties (row 0: two 4s; row 2: three 1s).
    let rows = [
        [4., 1., 4., -2., 3.],
        [0., 7., -5., 2., 6.],
        [1., 1., 9., 1., -3.],
    ];
    let flat: Vec<f64> = rows.iter().flatten().copied().collect();
    for dtype in [F32, F16, BF16, I32, I64, I8] {
        let (_b, x) = make(api, &spec(dtype, &[3, 5]), &flat);
        // Along dim 1, the 3 largest.
        let (bv, v) = make(api, &spec(dtype, &[3, 3]), &[]);
        let (bi, i) = make(api, &spec(I64, &[3, 3]), &[]);
        topk(api, &x, 3, 1, true, true, &v, &i).unwrap();
        let (mut want_v, mut want_i) = (vec![], vec![]);
        for row in &rows {
            for e in best(row, 3, true) {
                want_v.push(row[e]);
                want_i.push(e as f64);
            }
        }
        assert_eq!(read(api, &bv), want_v, "values ({dtype})");
        assert_eq!(read(api, &bi), want_i, "indices ({dtype})");
        assert_eq!(
            &want_i[..3],
            &[0., 2., 4.],
            "the tie goes to the lower index"
        );
        // Along dim -2 (the columns), the 2 smallest.
        let (bv, v) = make(api, &spec(dtype, &[2, 5]), &[]);
        let (bi, i) = make(api, &spec(I64, &[2, 5]), &[]);
        topk(api, &x, 2, -2, false, true, &v, &i).unwrap();
        let (mut want_v, mut want_i) = (vec![0.; 10], vec![0.; 10]);
        for c in 0..5 {
            let col: Vec<f64> = rows.iter().map(|r| r[c]).collect();
            for (j, e) in best(&col, 2, false).into_iter().enumerate() {
                want_v[j * 5 + c] = col[e];
                want_i[j * 5 + c] = e as f64;
            }
        }
        assert_eq!(read(api, &bv), want_v, "column values ({dtype})");
        assert_eq!(read(api, &bi), want_i, "column indices ({dtype})");
    }
}

#[test]
fn topk_reads_a_strided_self_and_rounds_nothing() {
    let _lock = serial();
    let api = api();
    for dtype in FLOATS {
        // self [4, 2] is the transpose of a dense [2, 4] buffer; values exact in every dtype.
        let storage = [0.5, -1.25, 3.0, 2.0, 8.0, 0.75, -4.0, 6.5];
        let (_b, x) = make(api, &strided(dtype, &[4, 2], &[1, 4]), &storage);
        let (bv, v) = make(api, &spec(dtype, &[1, 2]), &[]);
        let (bi, i) = make(api, &spec(I64, &[1, 2]), &[]);
        topk(api, &x, 1, 0, true, true, &v, &i).unwrap();
        assert_eq!(read(api, &bv), vec![3.0, 8.0], "{dtype}");
        assert_eq!(read(api, &bi), vec![2.0, 0.0], "{dtype}");
    }
}

/// A Topk call refused in phase one.
fn topk_refusal(x: Spec, k: i64, dim: i64, sorted: bool, v: Spec, i: Spec) -> Result<(), Failure> {
    let api = api();
    let (_a, x) = make(api, &x, &[]);
    let (_b, v) = make(api, &v, &[]);
    let (_c, i) = make(api, &i, &[]);
    topk(api, &x, k, dim, true, sorted, &v, &i)
}

#[test]
fn topk_refuses_unsorted_output() {
    let _lock = serial();
    let r = topk_refusal(
        spec(F32, &[2, 5]),
        2,
        1,
        false,
        spec(F32, &[2, 2]),
        spec(I64, &[2, 2]),
    );
    refused(r, INVALID, &["aclnnTopk", "sorted", "[2, 5]"]);
}

#[test]
fn topk_refuses_k_outside_zero_to_the_dim_size() {
    let _lock = serial();
    for k in [6, -1] {
        let r = topk_refusal(
            spec(F32, &[2, 5]),
            k,
            1,
            true,
            spec(F32, &[2, 2]),
            spec(I64, &[2, 2]),
        );
        refused(r, INVALID, &["aclnnTopk", &format!("k {k}"), "[2, 5]"]);
    }
    // k = 0 is taken: empty outputs.
    topk_refusal(
        spec(F32, &[2, 5]),
        0,
        1,
        true,
        spec(F32, &[2, 0]),
        spec(I64, &[2, 0]),
    )
    .unwrap();
}

#[test]
fn topk_refuses_a_dim_out_of_range() {
    let _lock = serial();
    let r = topk_refusal(
        spec(F32, &[2, 5]),
        1,
        2,
        true,
        spec(F32, &[2, 1]),
        spec(I64, &[2, 1]),
    );
    refused(r, INVALID, &["aclnnTopk", "dim 2"]);
}

#[test]
fn topk_refuses_int32_indices() {
    let _lock = serial();
    let r = topk_refusal(
        spec(F32, &[2, 5]),
        2,
        1,
        true,
        spec(F32, &[2, 2]),
        spec(I32, &[2, 2]),
    );
    refused(r, INVALID, &["aclnnTopk", "indicesOut", "[2, 2] DT_INT32"]);
}

#[test]
fn topk_refuses_values_of_the_wrong_shape_or_dtype() {
    let _lock = serial();
    let r = topk_refusal(
        spec(F32, &[2, 5]),
        2,
        1,
        true,
        spec(F32, &[2, 3]),
        spec(I64, &[2, 2]),
    );
    refused(r, INVALID, &["aclnnTopk", "valuesOut", "[2, 3]", "[2, 5]"]);
    let r = topk_refusal(
        spec(F32, &[2, 5]),
        2,
        1,
        true,
        spec(F16, &[2, 2]),
        spec(I64, &[2, 2]),
    );
    refused(r, INVALID, &["aclnnTopk", "valuesOut", "[2, 2] DT_FLOAT16"]);
}

#[test]
fn topk_refuses_a_bool_self() {
    let _lock = serial();
    let r = topk_refusal(
        spec(Bool, &[2, 5]),
        2,
        1,
        true,
        spec(Bool, &[2, 2]),
        spec(I64, &[2, 2]),
    );
    refused(r, INVALID, &["aclnnTopk", "self", "[2, 5] DT_BOOL"]);
}

#[test]
fn topk_refuses_a_scalar_self() {
    let _lock = serial();
    let r = topk_refusal(spec(F32, &[]), 1, 0, true, spec(F32, &[]), spec(I64, &[]));
    refused(r, INVALID, &["aclnnTopk", "[] DT_FLOAT", "1 to 8 dims"]);
}
