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

#[allow(clippy::too_many_arguments)]
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

// ---------------------------------------------------------------------------------------------
// aclnnSwiGlu
// ---------------------------------------------------------------------------------------------

fn silu(a: f64) -> f64 {
    a / (1.0 + (-a).exp())
}

fn swiglu(api: &'static AclApi, x: &TensorDesc, dim: i64, out: &TensorDesc) -> Result<(), Failure> {
    op!(api, aclnnSwiGlu, |f, ws, ex| f(
        x.as_ptr(),
        dim,
        out.as_ptr(),
        ws,
        ex
    ))
}

#[test]
fn swiglu_is_silu_of_the_first_half_times_the_second_along_the_last_dim() {
    let _lock = serial();
    let api = api();
    let (rows, h) = (3, 8);
    let values: Vec<f64> = (0..rows * 2 * h)
        .map(|i| ((i * 37 % 29) as f64 - 14.0) / 4.0)
        .collect();
    for dtype in FLOATS {
        let (_bx, x) = make(api, &spec(dtype, &[rows, 2 * h]), &values);
        let (bo, out) = make(api, &spec(dtype, &[rows, h]), &[]);
        swiglu(api, &x, -1, &out).unwrap();
        let want: Vec<f64> = (0..rows)
            .flat_map(|r| {
                let row = &values[r * 2 * h..(r + 1) * 2 * h];
                (0..h)
                    .map(|j| silu(stored(dtype, row[j])) * stored(dtype, row[h + j]))
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_close(&read(api, &bo), &want, dtype, "out");
    }
}

#[test]
fn swiglu_gates_with_the_first_half_along_any_dim() {
    let _lock = serial();
    let api = api();
    for dtype in FLOATS {
        // x [4, 3] split along dim 0: rows 0-1 are the gate A, rows 2-3 the value B.
        let a = [0.0, 2.0, -1.0, 1.0, 4.0, 0.5];
        let b = [3.0, 3.0, 2.0, 0.0, -1.0, 1.5];
        let values: Vec<f64> = a.iter().chain(&b).copied().collect();
        let (_bx, x) = make(api, &spec(dtype, &[4, 3]), &values);
        let (bo, out) = make(api, &spec(dtype, &[2, 3]), &[]);
        swiglu(api, &x, 0, &out).unwrap();
        let want: Vec<f64> = a.iter().zip(&b).map(|(&a, &b)| silu(a) * b).collect();
        let got = read(api, &bo);
        assert_close(&got, &want, dtype, "out");
        // silu(0) * 3 = 0, where the other gating order would give silu(3) * 0 = 0 too; but
        // silu(2) * 3 differs from silu(3) * 2: the first half is the gate.
        assert!((got[1] - silu(3.0) * 2.0).abs() > 0.1, "{got:?}");
    }
}

#[test]
fn swiglu_takes_an_empty_x() {
    let _lock = serial();
    let api = api();
    let (_bx, x) = make(api, &spec(F16, &[0, 4]), &[]);
    let (_bo, out) = make(api, &spec(F16, &[0, 2]), &[]);
    swiglu(api, &x, 1, &out).unwrap();
}

fn swiglu_refusal(x: Spec, dim: i64, out: Spec) -> Result<(), Failure> {
    let api = api();
    let (_a, x) = make(api, &x, &[]);
    let (_b, out) = make(api, &out, &[]);
    swiglu(api, &x, dim, &out)
}

#[test]
fn swiglu_refuses_an_odd_split_dim() {
    let _lock = serial();
    let r = swiglu_refusal(spec(F32, &[2, 7]), -1, spec(F32, &[2, 3]));
    refused(r, INVALID, &["aclnnSwiGlu", "[2, 7]", "odd"]);
}

#[test]
fn swiglu_refuses_a_dim_out_of_range() {
    let _lock = serial();
    for dim in [2, -3] {
        let r = swiglu_refusal(spec(F32, &[2, 8]), dim, spec(F32, &[2, 4]));
        refused(
            r,
            INVALID,
            &["aclnnSwiGlu", &format!("dim {dim}"), "[2, 8]"],
        );
    }
}

#[test]
fn swiglu_refuses_an_integer_x() {
    let _lock = serial();
    let r = swiglu_refusal(spec(I32, &[2, 8]), -1, spec(I32, &[2, 4]));
    refused(r, INVALID, &["aclnnSwiGlu", "x", "[2, 8] DT_INT32"]);
}

#[test]
fn swiglu_refuses_an_out_of_another_dtype() {
    let _lock = serial();
    let r = swiglu_refusal(spec(BF16, &[2, 8]), -1, spec(F32, &[2, 4]));
    refused(
        r,
        INVALID,
        &["aclnnSwiGlu", "out", "[2, 4] DT_FLOAT", "[2, 8] DT_BF16"],
    );
}

#[test]
fn swiglu_refuses_an_out_of_the_wrong_shape() {
    let _lock = serial();
    let r = swiglu_refusal(spec(F32, &[2, 8]), -1, spec(F32, &[2, 8]));
    refused(r, INVALID, &["aclnnSwiGlu", "out", "[2, 8]", "[2, 4]"]);
}

#[test]
fn swiglu_refuses_non_contiguous_x_and_out() {
    let _lock = serial();
    let r = swiglu_refusal(strided(F32, &[2, 8], &[1, 2]), -1, spec(F32, &[2, 4]));
    refused(r, INVALID, &["aclnnSwiGlu", "x", "[2, 8]", "contiguous"]);
    let r = swiglu_refusal(spec(F32, &[2, 8]), -1, strided(F32, &[2, 4], &[1, 2]));
    refused(r, INVALID, &["aclnnSwiGlu", "out", "[2, 4]", "contiguous"]);
}

#[test]
fn swiglu_refuses_a_scalar_x() {
    let _lock = serial();
    let r = swiglu_refusal(spec(F32, &[]), 0, spec(F32, &[]));
    refused(r, INVALID, &["aclnnSwiGlu", "[] DT_FLOAT", "rank 0"]);
}

// ---------------------------------------------------------------------------------------------
// aclnnApplyRotaryPosEmb
// ---------------------------------------------------------------------------------------------

const D: usize = 128;

fn apply_rope(
    api: &'static AclApi,
    q: &TensorDesc,
    k: &TensorDesc,
    cos: &TensorDesc,
    sin: &TensorDesc,
    layout: i64,
) -> Result<(), Failure> {
    op!(api, aclnnApplyRotaryPosEmb, |f, ws, ex| f(
        q.as_ptr(),
        k.as_ptr(),
        cos.as_ptr(),
        sin.as_ptr(),
        layout,
        ws,
        ex
    ))
}

/// Reference rotate-half of one row, each of its three operations rounded by `step` (the
/// identity: the f64 value).
fn rotate_half_row(x: &[f64], cos: &[f64], sin: &[f64], step: impl Fn(f64) -> f64) -> Vec<f64> {
    let h = x.len() / 2;
    (0..x.len())
        .map(|j| {
            let r = if j < h { -x[j + h] } else { x[j - h] };
            step(step(x[j] * cos[j]) + step(r * sin[j]))
        })
        .collect()
}

/// ApplyRotaryPosEmb's precision per dtype: the op doc's unified-buffer formula casts only BF16
/// to f32, so F16 computes in F16 (each step rounded to F16) and F32 in F32; BF16 computes in
/// f32 and is rounded once when stored.
fn apply_rope_step(dtype: DataType) -> impl Fn(f64) -> f64 {
    move |v| match dtype {
        F16 => stored(F16, v),
        _ => v as f32 as f64,
    }
}

#[test]
fn apply_rope_rotates_q_and_k_in_place_in_one_launch() {
    let _lock = serial();
    let api = api();
    let (b, s, nq, nk) = (1, 2, 2, 1);
    for dtype in FLOATS {
        let q_vals: Vec<f64> = (0..b * s * nq * D)
            .map(|i| ((i * 13 % 41) as f64 - 20.0) / 8.0)
            .collect();
        let k_vals: Vec<f64> = (0..b * s * nk * D)
            .map(|i| ((i * 7 % 23) as f64 - 11.0) / 4.0)
            .collect();
        // Position p's angles: theta_j = p * 10000^(-(j mod 64) / 64).
        let angle = |p: usize, j: usize| p as f64 * 10000f64.powf(-((j % 64) as f64) / 64.0);
        let cos_vals: Vec<f64> = (0..s * D).map(|i| angle(i / D + 1, i % D).cos()).collect();
        let sin_vals: Vec<f64> = (0..s * D).map(|i| angle(i / D + 1, i % D).sin()).collect();
        let (bq, q) = make(api, &spec(dtype, &[b, s, nq, D]), &q_vals);
        let (bk, k) = make(api, &spec(dtype, &[b, s, nk, D]), &k_vals);
        let (_bc, cos) = make(api, &spec(dtype, &[b, s, 1, D]), &cos_vals);
        let (_bs, sin) = make(api, &spec(dtype, &[b, s, 1, D]), &sin_vals);
        apply_rope(api, &q, &k, &cos, &sin, 1).unwrap();
        for (name, got, vals, n) in [
            ("q", read(api, &bq), &q_vals, nq),
            ("k", read(api, &bk), &k_vals, nk),
        ] {
            let mut want = vec![];
            for si in 0..s {
                let c: Vec<f64> = cos_vals[si * D..(si + 1) * D]
                    .iter()
                    .map(|&v| stored(dtype, v))
                    .collect();
                let sn: Vec<f64> = sin_vals[si * D..(si + 1) * D]
                    .iter()
                    .map(|&v| stored(dtype, v))
                    .collect();
                for ni in 0..n {
                    let at = (si * n + ni) * D;
                    let row: Vec<f64> =
                        vals[at..at + D].iter().map(|&v| stored(dtype, v)).collect();
                    let exact = rotate_half_row(&row, &c, &sn, |v| v);
                    let modelled = rotate_half_row(&row, &c, &sn, apply_rope_step(dtype));
                    want.extend(exact.into_iter().zip(modelled));
                }
            }
            for (i, (&g, &(exact, modelled))) in got.iter().zip(&want).enumerate() {
                // Bit for bit the documented precision, and close to the exact value.
                assert_eq!(g, stored(dtype, modelled), "{name} [{i}] ({dtype})");
                let bound = 3.0 * tol(dtype) * exact.abs().max(4.0);
                assert!(
                    (g - exact).abs() <= bound,
                    "{name} [{i}] ({dtype}): {g} vs {exact}"
                );
            }
        }
    }
}

#[test]
fn apply_rope_with_cos_0_and_sin_1_is_exactly_rotate_half_on_a_strided_q() {
    let _lock = serial();
    let api = api();
    for dtype in FLOATS {
        // q is heads 1..3 of a [1, 1, 4, 128] buffer: strides of the whole, offset one head.
        let storage: Vec<f64> = (0..4 * D).map(|i| (i % 97) as f64 - 48.0).collect();
        let bq = buf(api, dtype, &storage);
        let q = view(&bq, &[1, 1, 2, D], &[4 * D, 4 * D, D, 1], D);
        let (bk, k) = make(api, &spec(dtype, &[1, 1, 1, D]), &storage[..D]);
        let (_bc, cos) = make(api, &spec(dtype, &[1, 1, 1, D]), &[0.0; D]);
        let (_bs, sin) = make(api, &spec(dtype, &[1, 1, 1, D]), &[1.0; D]);
        apply_rope(api, &q, &k, &cos, &sin, 1).unwrap();
        let got = read(api, &bq);
        for head in 0..4 {
            let row = &storage[head * D..(head + 1) * D];
            let want: Vec<f64> = if head == 1 || head == 2 {
                (0..D)
                    .map(|j| {
                        if j < D / 2 {
                            -row[j + D / 2]
                        } else {
                            row[j - D / 2]
                        }
                    })
                    .collect()
            } else {
                row.to_vec()
            };
            assert_eq!(
                &got[head * D..(head + 1) * D],
                &want[..],
                "head {head} ({dtype})"
            );
        }
        let want_k: Vec<f64> = (0..D)
            .map(|j| {
                if j < D / 2 {
                    -storage[j + D / 2]
                } else {
                    storage[j - D / 2]
                }
            })
            .collect();
        assert_eq!(read(api, &bk), want_k, "k ({dtype})");
    }
}

/// A valid ApplyRotaryPosEmb call with one argument changed.
struct RopeCall {
    q: Spec,
    k: Spec,
    cos: Spec,
    sin: Spec,
    layout: i64,
}

fn apply_rope_refusal(change: impl FnOnce(&mut RopeCall)) -> Result<(), Failure> {
    let api = api();
    let mut c = RopeCall {
        q: spec(F16, &[2, 3, 4, D]),
        k: spec(F16, &[2, 3, 1, D]),
        cos: spec(F16, &[2, 3, 1, D]),
        sin: spec(F16, &[2, 3, 1, D]),
        layout: 1,
    };
    change(&mut c);
    let (_a, q) = make(api, &c.q, &[]);
    let (_b, k) = make(api, &c.k, &[]);
    let (_c, cos) = make(api, &c.cos, &[]);
    let (_d, sin) = make(api, &c.sin, &[]);
    apply_rope(api, &q, &k, &cos, &sin, c.layout)
}

const APPLY_ROPE: &str = "aclnnApplyRotaryPosEmb";

#[test]
fn apply_rope_the_valid_refusal_baseline_runs() {
    let _lock = serial();
    apply_rope_refusal(|_| {}).unwrap();
}

#[test]
fn apply_rope_refuses_layouts_other_than_bsnd() {
    let _lock = serial();
    for layout in [0, 2, 3, 4] {
        let r = apply_rope_refusal(|c| c.layout = layout);
        refused(
            r,
            INVALID,
            &[APPLY_ROPE, &format!("layout {layout}"), "[2, 3, 4, 128]"],
        );
    }
}

#[test]
fn apply_rope_refuses_a_head_dim_other_than_128() {
    let _lock = serial();
    let r = apply_rope_refusal(|c| {
        for t in [&mut c.q, &mut c.k, &mut c.cos, &mut c.sin] {
            t.shape[3] = 64;
        }
    });
    refused(r, INVALID, &[APPLY_ROPE, "[2, 3, 4, 64]", "128"]);
}

#[test]
fn apply_rope_refuses_other_ranks() {
    let _lock = serial();
    let r = apply_rope_refusal(|c| c.q.shape = vec![6, 4, D]);
    refused(r, INVALID, &[APPLY_ROPE, "[6, 4, 128]", "4-D"]);
}

#[test]
fn apply_rope_refuses_cos_with_more_than_one_head() {
    let _lock = serial();
    let r = apply_rope_refusal(|c| c.cos.shape[2] = 4);
    refused(r, INVALID, &[APPLY_ROPE, "cos [2, 3, 4, 128]"]);
}

#[test]
fn apply_rope_refuses_q_and_k_of_other_batch_or_sequence() {
    let _lock = serial();
    let r = apply_rope_refusal(|c| c.k.shape[0] = 1);
    refused(r, INVALID, &[APPLY_ROPE, "keyRef [1, 3, 1, 128]"]);
    let r = apply_rope_refusal(|c| c.sin.shape[1] = 2);
    refused(r, INVALID, &[APPLY_ROPE, "sin [2, 2, 1, 128]"]);
}

#[test]
fn apply_rope_refuses_mixed_dtypes() {
    let _lock = serial();
    let r = apply_rope_refusal(|c| c.cos.dtype = F32);
    refused(
        r,
        INVALID,
        &[APPLY_ROPE, "cos [2, 3, 1, 128] DT_FLOAT", "one dtype"],
    );
}

#[test]
fn apply_rope_refuses_an_integer_q() {
    let _lock = serial();
    let r = apply_rope_refusal(|c| c.q.dtype = I32);
    refused(
        r,
        INVALID,
        &[APPLY_ROPE, "queryRef", "[2, 3, 4, 128] DT_INT32"],
    );
}

#[test]
fn apply_rope_refuses_empty_tensors() {
    let _lock = serial();
    let r = apply_rope_refusal(|c| c.q.shape[2] = 0);
    refused(r, INVALID, &[APPLY_ROPE, "[2, 3, 0, 128]", "empty"]);
}

#[test]
fn apply_rope_refuses_more_heads_than_the_unified_buffer_holds() {
    let _lock = serial();
    // F32: (Nq + Nk) * 128 * 4 * 5 + 128 * 4 * 4 <= 196608 holds up to 76 heads.
    let heads = |nq: usize, nk: usize| {
        move |c: &mut RopeCall| {
            for t in [&mut c.q, &mut c.k, &mut c.cos, &mut c.sin] {
                t.dtype = F32;
                t.shape[0] = 1;
                t.shape[1] = 1;
            }
            c.q.shape[2] = nq;
            c.k.shape[2] = nk;
        }
    };
    apply_rope_refusal(heads(68, 8)).unwrap();
    let r = apply_rope_refusal(heads(69, 8));
    refused(
        r,
        TILING,
        &[
            APPLY_ROPE,
            "[1, 1, 69, 128]",
            "77 q and k heads",
            "unified buffer",
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// aclnnRopeWithSinCosCache
// ---------------------------------------------------------------------------------------------

#[allow(clippy::too_many_arguments)]
fn rope_cache(
    api: &'static AclApi,
    pos: &TensorDesc,
    q: &TensorDesc,
    k: &TensorDesc,
    cache: &TensorDesc,
    mrope: *const ascend_acl::types::aclIntArray,
    head_size: i64,
    neox: bool,
    qo: &TensorDesc,
    ko: &TensorDesc,
) -> Result<(), Failure> {
    op!(api, aclnnRopeWithSinCosCache, |f, ws, ex| f(
        pos.as_ptr(),
        q.as_ptr(),
        k.as_ptr(),
        cache.as_ptr(),
        mrope,
        head_size,
        neox,
        qo.as_ptr(),
        ko.as_ptr(),
        ws,
        ex
    ))
}

/// Reference of one head: the first `rot` columns rotated (NeoX halves or GPT-J pairs) with
/// `cos`/`sin` of length `rot / 2`, the rest passed through.
fn rope_head(x: &[f64], cos: &[f64], sin: &[f64], neox: bool) -> Vec<f64> {
    let half = cos.len();
    let mut out = x.to_vec();
    for i in 0..half {
        let (a, b) = if neox {
            (i, half + i)
        } else {
            (2 * i, 2 * i + 1)
        };
        out[a] = x[a] * cos[i] - x[b] * sin[i];
        out[b] = x[b] * cos[i] + x[a] * sin[i];
    }
    out
}

#[test]
fn rope_with_sin_cos_cache_gathers_cos_and_sin_by_position_neox_and_gptj() {
    let _lock = serial();
    let api = api();
    let (t, nq, nk, hs, rot, max_seq) = (3, 2, 1, 64, 32, 8);
    let positions = [5.0, 0.0, 7.0];
    // Row p of the cache: cos(p * w_i) for i < 16, then sin(p * w_i).
    let w = |i: usize| 10000f64.powf(-(i as f64) / 16.0);
    let cache_vals: Vec<f64> = (0..max_seq)
        .flat_map(|p| {
            (0..rot).map(move |c| {
                let a = p as f64 * w(c % (rot / 2));
                if c < rot / 2 {
                    a.cos()
                } else {
                    a.sin()
                }
            })
        })
        .collect();
    for dtype in FLOATS {
        for neox in [true, false] {
            let q_vals: Vec<f64> = (0..t * nq * hs)
                .map(|i| ((i * 11 % 37) as f64 - 18.0) / 8.0)
                .collect();
            let k_vals: Vec<f64> = (0..t * nk * hs)
                .map(|i| ((i * 5 % 19) as f64 - 9.0) / 4.0)
                .collect();
            let (_bp, pos) = make(api, &spec(I64, &[t]), &positions);
            let (_bq, q) = make(api, &spec(dtype, &[t, nq * hs]), &q_vals);
            let (_bk, k) = make(api, &spec(dtype, &[t, nk * hs]), &k_vals);
            let (_bc, cache) = make(api, &spec(dtype, &[max_seq, rot]), &cache_vals);
            let (bqo, qo) = make(api, &spec(dtype, &[t, nq * hs]), &[]);
            let (bko, ko) = make(api, &spec(dtype, &[t, nk * hs]), &[]);
            rope_cache(
                api,
                &pos,
                &q,
                &k,
                &cache,
                std::ptr::null(),
                hs as i64,
                neox,
                &qo,
                &ko,
            )
            .unwrap();
            for (name, got, vals, n) in [
                ("query", read(api, &bqo), &q_vals, nq),
                ("key", read(api, &bko), &k_vals, nk),
            ] {
                let mut want = vec![];
                for (ti, &p) in positions.iter().enumerate() {
                    let row = &cache_vals[p as usize * rot..(p as usize + 1) * rot];
                    let row: Vec<f64> = row.iter().map(|&v| stored(dtype, v)).collect();
                    let (c, s) = row.split_at(rot / 2);
                    for h in 0..n {
                        let at = (ti * n + h) * hs;
                        let x: Vec<f64> = vals[at..at + hs]
                            .iter()
                            .map(|&v| stored(dtype, v))
                            .collect();
                        want.extend(rope_head(&x, c, s, neox));
                    }
                }
                for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                    let bound = tol(dtype) * w.abs().max(2.0);
                    assert!(
                        (g - w).abs() <= bound,
                        "{name} [{i}] ({dtype}, neox {neox}): {g} vs {w}"
                    );
                }
                // The columns past rotaryDim pass through unchanged.
                for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                    if i % hs >= rot {
                        assert_eq!(g, w, "{name} pass-through [{i}]");
                    }
                }
            }
        }
    }
}

#[test]
fn rope_with_sin_cos_cache_faults_on_a_position_outside_the_cache() {
    let _lock = serial();
    on_faulting_device(|api| {
        let (_bp, pos) = make(api, &spec(I64, &[2]), &[1.0, 8.0]);
        let (_bq, q) = make(api, &spec(F32, &[2, 32]), &[]);
        let (_bk, k) = make(api, &spec(F32, &[2, 32]), &[]);
        let (_bc, cache) = make(api, &spec(F32, &[8, 16]), &[]);
        let (_bqo, qo) = make(api, &spec(F32, &[2, 32]), &[]);
        let (_bko, ko) = make(api, &spec(F32, &[2, 32]), &[]);
        let r = rope_cache(
            api,
            &pos,
            &q,
            &k,
            &cache,
            std::ptr::null(),
            32,
            true,
            &qo,
            &ko,
        );
        refused(
            r,
            AICORE,
            &["aclnnRopeWithSinCosCache", "positions[1] = 8", "8 rows"],
        );
    });
}

/// A valid RopeWithSinCosCache call (F16, T 4, 2 q heads and 1 k head of 64, rotaryDim 32,
/// 16 cache rows) with one argument changed.
struct CacheCall {
    pos: Spec,
    q: Spec,
    k: Spec,
    cache: Spec,
    mrope: bool,
    head_size: i64,
    qo: Spec,
    ko: Spec,
}

fn rope_cache_refusal(change: impl FnOnce(&mut CacheCall)) -> Result<(), Failure> {
    let api = api();
    let mut c = CacheCall {
        pos: spec(I64, &[4]),
        q: spec(F16, &[4, 128]),
        k: spec(F16, &[4, 64]),
        cache: spec(F16, &[16, 32]),
        mrope: false,
        head_size: 64,
        qo: spec(F16, &[4, 128]),
        ko: spec(F16, &[4, 64]),
    };
    change(&mut c);
    let (_a, pos) = make(api, &c.pos, &[]);
    let (_b, q) = make(api, &c.q, &[]);
    let (_c, k) = make(api, &c.k, &[]);
    let (_d, cache) = make(api, &c.cache, &[]);
    let (_e, qo) = make(api, &c.qo, &[]);
    let (_f, ko) = make(api, &c.ko, &[]);
    let section = ascend_acl::handles::IntArrayDesc::new(api, &[16, 24, 24]).unwrap();
    let mrope = if c.mrope {
        section.as_ptr()
    } else {
        std::ptr::null()
    };
    rope_cache(
        api,
        &pos,
        &q,
        &k,
        &cache,
        mrope,
        c.head_size,
        true,
        &qo,
        &ko,
    )
}

const ROPE_CACHE: &str = "aclnnRopeWithSinCosCache";

#[test]
fn rope_cache_the_valid_refusal_baseline_runs() {
    let _lock = serial();
    rope_cache_refusal(|_| {}).unwrap();
}

#[test]
fn rope_cache_refuses_m_rope_as_not_emulated() {
    let _lock = serial();
    let r = rope_cache_refusal(|c| c.mrope = true);
    refused(r, INVALID, &[ROPE_CACHE, "mropeSection", "[4, 128]"]);
}

#[test]
fn rope_cache_refuses_int32_positions() {
    let _lock = serial();
    let r = rope_cache_refusal(|c| c.pos.dtype = I32);
    refused(r, INVALID, &[ROPE_CACHE, "positions", "[4] DT_INT32"]);
}

#[test]
fn rope_cache_refuses_a_cache_of_another_dtype() {
    let _lock = serial();
    let r = rope_cache_refusal(|c| c.cache.dtype = F32);
    refused(
        r,
        INVALID,
        &[
            ROPE_CACHE,
            "cosSinCache [16, 32] DT_FLOAT",
            "[4, 128] DT_FLOAT16",
        ],
    );
}

#[test]
fn rope_cache_refuses_a_head_size_off_the_alignment() {
    let _lock = serial();
    // 2-byte dtypes: a multiple of 32 (48 is not); q [4, 96] = 2 heads of 48.
    let r = rope_cache_refusal(|c| {
        c.head_size = 48;
        c.q.shape[1] = 96;
        c.qo.shape[1] = 96;
        c.k.shape[1] = 48;
        c.ko.shape[1] = 48;
    });
    refused(r, TILING, &[ROPE_CACHE, "headSize 48", "multiples of 32"]);
}

#[test]
fn rope_cache_refuses_a_rotary_dim_above_the_head_size() {
    let _lock = serial();
    let r = rope_cache_refusal(|c| c.cache.shape[1] = 96);
    refused(
        r,
        TILING,
        &[ROPE_CACHE, "cosSinCache [16, 96]", "rotaryDim 96"],
    );
}

#[test]
fn rope_cache_refuses_q_rows_other_than_the_positions() {
    let _lock = serial();
    let r = rope_cache_refusal(|c| {
        c.q.shape[0] = 3;
        c.qo.shape[0] = 3;
    });
    refused(
        r,
        TILING,
        &[ROPE_CACHE, "positions [4]", "queryIn [3, 128]"],
    );
}

#[test]
fn rope_cache_refuses_a_q_width_not_a_multiple_of_the_head_size() {
    let _lock = serial();
    let r = rope_cache_refusal(|c| {
        c.k.shape[1] = 96;
        c.ko.shape[1] = 96;
    });
    refused(r, TILING, &[ROPE_CACHE, "keyIn [4, 96]", "headSize 64"]);
}

#[test]
fn rope_cache_refuses_a_non_contiguous_output() {
    let _lock = serial();
    let r = rope_cache_refusal(|c| c.qo = strided(F16, &[4, 128], &[1, 4]));
    refused(
        r,
        INVALID,
        &[ROPE_CACHE, "queryOut", "[4, 128]", "contiguous"],
    );
}

#[test]
fn rope_cache_refuses_an_output_of_another_shape() {
    let _lock = serial();
    let r = rope_cache_refusal(|c| c.ko.shape = vec![4, 128]);
    refused(r, TILING, &[ROPE_CACHE, "keyOut [4, 128]", "[4, 64]"]);
}

#[test]
fn rope_cache_refuses_empty_tensors() {
    let _lock = serial();
    let r = rope_cache_refusal(|c| c.pos.shape = vec![0]);
    refused(r, INVALID, &[ROPE_CACHE, "positions [0]", "empty"]);
}

#[test]
fn rope_cache_refuses_2d_positions() {
    let _lock = serial();
    let r = rope_cache_refusal(|c| c.pos.shape = vec![3, 4]);
    refused(r, TILING, &[ROPE_CACHE, "positions [3, 4]", "(T)"]);
}

// ---------------------------------------------------------------------------------------------
// aclnnInplaceScatterUpdate
// ---------------------------------------------------------------------------------------------

fn scatter_update(
    api: &'static AclApi,
    data: &TensorDesc,
    indices: &TensorDesc,
    updates: &TensorDesc,
    axis: i64,
) -> Result<(), Failure> {
    op!(api, aclnnInplaceScatterUpdate, |f, ws, ex| f(
        data.as_ptr(),
        indices.as_ptr(),
        updates.as_ptr(),
        axis,
        ws,
        ex
    ))
}

/// The reference: `data` (dense, `dshape`) with `updates` (dense, `ushape`) written at
/// `indices[i]` along `ax`.
fn scatter_reference(
    data: &[f64],
    dshape: [usize; 4],
    updates: &[f64],
    ushape: [usize; 4],
    indices: &[usize],
    ax: usize,
) -> Vec<f64> {
    let mut out = data.to_vec();
    let ds = dense_strides(&dshape);
    let mut u = 0;
    for (i, &start) in indices.iter().enumerate().take(ushape[0]) {
        for j in 0..ushape[1] {
            for k in 0..ushape[2] {
                for l in 0..ushape[3] {
                    let mut at = [i, j, k, l];
                    at[ax] += start;
                    let o: usize = at.iter().zip(&ds).map(|(a, s)| a * s).sum();
                    out[o] = updates[u];
                    u += 1;
                }
            }
        }
    }
    out
}

/// data shape, updates shape, indices, axis, the axis as a dim.
type ScatterCase = ([usize; 4], [usize; 4], Vec<usize>, i64, usize);

#[test]
fn scatter_update_writes_each_batch_row_at_its_index_along_axis_2_or_3() {
    let _lock = serial();
    let api = api();
    for dtype in [F32, F16, BF16, I8] {
        for index_dtype in [I32, I64] {
            // Axis -2, one new row per sequence (decode): data [2, 2, 6, 4], updates [2, 2, 1, 4].
            // Axis 2, a chunk of 3 rows for the first batch row only: updates [1, 2, 3, 4].
            // Axis -1: data [2, 1, 3, 8], updates [2, 1, 3, 2].
            let cases: [ScatterCase; 3] = [
                ([2, 2, 6, 4], [2, 2, 1, 4], vec![5, 0], -2, 2),
                ([2, 2, 6, 4], [1, 2, 3, 4], vec![2], 2, 2),
                ([2, 1, 3, 8], [2, 1, 3, 2], vec![6, 3], -1, 3),
            ];
            for (dshape, ushape, idx, axis, ax) in cases {
                let n: usize = dshape.iter().product();
                let m: usize = ushape.iter().product();
                let data_vals: Vec<f64> = (0..n).map(|i| (i % 50) as f64 - 25.0).collect();
                let upd_vals: Vec<f64> = (0..m).map(|i| 100.0 + i as f64 / 2.0).collect();
                let upd_vals: Vec<f64> = upd_vals.iter().map(|&v| stored(dtype, v)).collect();
                let (bd, data) = make(api, &spec(dtype, &dshape), &data_vals);
                let idx_f: Vec<f64> = idx.iter().map(|&i| i as f64).collect();
                let (_bi, indices) = make(api, &spec(index_dtype, &[idx.len()]), &idx_f);
                let (_bu, updates) = make(api, &spec(dtype, &ushape), &upd_vals);
                scatter_update(api, &data, &indices, &updates, axis).unwrap();
                let want = scatter_reference(&data_vals, dshape, &upd_vals, ushape, &idx, ax);
                assert_eq!(read(api, &bd), want, "{dtype} {index_dtype} axis {axis}");
            }
        }
    }
}

#[test]
fn scatter_update_writes_into_a_strided_cache_view() {
    let _lock = serial();
    let api = api();
    // The cache is [2, 3, 6, 4]; data is its heads 1..3 ([2, 2, 6, 4]).
    let full: Vec<f64> = (0..2 * 3 * 6 * 4).map(|i| i as f64).collect();
    let bd = buf(api, F32, &full);
    let data = view(&bd, &[2, 2, 6, 4], &[72, 24, 4, 1], 24);
    let (_bi, indices) = make(api, &spec(I64, &[2]), &[3.0, 1.0]);
    let (_bu, updates) = make(api, &spec(F32, &[2, 2, 1, 4]), &[-1.0; 16]);
    scatter_update(api, &data, &indices, &updates, -2).unwrap();
    let mut want = full.clone();
    for (b, p) in [(0usize, 3usize), (1, 1)] {
        for h in 1..3 {
            for l in 0..4 {
                want[b * 72 + h * 24 + p * 4 + l] = -1.0;
            }
        }
    }
    assert_eq!(read(api, &bd), want);
}

#[test]
fn scatter_update_faults_on_an_index_past_the_axis() {
    let _lock = serial();
    for (idx, needle) in [(-1.0, "indices[1] = -1"), (5.0, "indices[1] = 5")] {
        on_faulting_device(|api| {
            let (_bd, data) = make(api, &spec(F16, &[2, 1, 6, 4]), &[]);
            let (_bi, indices) = make(api, &spec(I64, &[2]), &[0.0, idx]);
            let (_bu, updates) = make(api, &spec(F16, &[2, 1, 2, 4]), &[]);
            let r = scatter_update(api, &data, &indices, &updates, -2);
            refused(
                r,
                AICORE,
                &["aclnnInplaceScatterUpdate", needle, "[2, 1, 6, 4]"],
            );
        });
    }
}

struct ScatterCall {
    data: Spec,
    indices: Spec,
    updates: Spec,
    axis: i64,
}

fn scatter_refusal(change: impl FnOnce(&mut ScatterCall)) -> Result<(), Failure> {
    let api = api();
    let mut c = ScatterCall {
        data: spec(F16, &[2, 4, 8, 16]),
        indices: spec(I64, &[2]),
        updates: spec(F16, &[2, 4, 1, 16]),
        axis: -2,
    };
    change(&mut c);
    let (_a, data) = make(api, &c.data, &[]);
    let (_b, indices) = make(api, &c.indices, &[]);
    let (_c, updates) = make(api, &c.updates, &[]);
    scatter_update(api, &data, &indices, &updates, c.axis)
}

const SCATTER: &str = "aclnnInplaceScatterUpdate";

#[test]
fn scatter_update_the_valid_refusal_baseline_runs() {
    let _lock = serial();
    scatter_refusal(|_| {}).unwrap();
}

#[test]
fn scatter_update_refuses_data_that_is_not_4d() {
    let _lock = serial();
    let r = scatter_refusal(|c| {
        c.data.shape = vec![2, 8, 16];
        c.updates.shape = vec![2, 1, 16];
    });
    refused(r, INVALID, &[SCATTER, "data [2, 8, 16]", "4-D"]);
}

#[test]
fn scatter_update_refuses_2d_indices() {
    let _lock = serial();
    let r = scatter_refusal(|c| c.indices.shape = vec![2, 2]);
    refused(r, INVALID, &[SCATTER, "indices [2, 2]", "1-D"]);
}

#[test]
fn scatter_update_refuses_axes_other_than_the_last_two() {
    let _lock = serial();
    for axis in [0, 1, -3, -4, 4] {
        let r = scatter_refusal(|c| c.axis = axis);
        refused(
            r,
            INVALID,
            &[SCATTER, &format!("axis {axis}"), "[2, 4, 8, 16]"],
        );
    }
}

#[test]
fn scatter_update_refuses_dtypes_outside_the_header() {
    let _lock = serial();
    let r = scatter_refusal(|c| {
        c.data.dtype = I32;
        c.updates.dtype = I32;
    });
    refused(r, INVALID, &[SCATTER, "data", "[2, 4, 8, 16] DT_INT32"]);
    let r = scatter_refusal(|c| c.indices.dtype = F32);
    refused(r, INVALID, &[SCATTER, "indices", "[2] DT_FLOAT"]);
}

#[test]
fn scatter_update_refuses_updates_of_another_dtype() {
    let _lock = serial();
    let r = scatter_refusal(|c| c.updates.dtype = F32);
    refused(
        r,
        INVALID,
        &[SCATTER, "updates [2, 4, 1, 16] DT_FLOAT", "data's dtype"],
    );
}

#[test]
fn scatter_update_refuses_mismatched_shapes() {
    let _lock = serial();
    // One index per batch row of updates.
    let r = scatter_refusal(|c| c.indices.shape = vec![3]);
    refused(
        r,
        INVALID,
        &[SCATTER, "indices [3]", "updates [2, 4, 1, 16]"],
    );
    // More batch rows than data.
    let r = scatter_refusal(|c| {
        c.updates.shape[0] = 3;
        c.indices.shape = vec![3];
    });
    refused(
        r,
        INVALID,
        &[SCATTER, "updates [3, 4, 1, 16]", "data [2, 4, 8, 16]"],
    );
    // Another head count.
    let r = scatter_refusal(|c| c.updates.shape[1] = 2);
    refused(r, INVALID, &[SCATTER, "updates [2, 2, 1, 16]"]);
    // More rows along the axis than data has.
    let r = scatter_refusal(|c| c.updates.shape[2] = 9);
    refused(r, INVALID, &[SCATTER, "updates [2, 4, 9, 16]"]);
}

#[test]
fn scatter_update_refuses_empty_tensors() {
    let _lock = serial();
    let r = scatter_refusal(|c| {
        c.updates.shape[2] = 0;
    });
    refused(r, INVALID, &[SCATTER, "updates [2, 4, 0, 16]", "empty"]);
}

#[test]
fn scatter_update_refuses_indices_beyond_the_unified_buffer() {
    let _lock = serial();
    // INT64 indices: n * 8 + 224 <= 196608 holds up to 24548 of them.
    let shapes = |n: usize| {
        move |c: &mut ScatterCall| {
            c.data.shape = vec![n, 1, 1, 1];
            c.updates.shape = vec![n, 1, 1, 1];
            c.indices.shape = vec![n];
        }
    };
    scatter_refusal(shapes(24548)).unwrap();
    let r = scatter_refusal(shapes(24549));
    refused(r, TILING, &[SCATTER, "indices [24549]", "unified buffer"]);
}

// ---------------------------------------------------------------------------------------------
// Releases
// ---------------------------------------------------------------------------------------------

/// aclnnMoeGatingTopKSoftmaxV2, aclnnRopeWithSinCosCache and aclnnInplaceScatterUpdate are
/// 8.1.RC1 functions (the stricter reading of the fact sheet, `ascend_acl::release`); the
/// others of this file are in 8.0 already (`aclnn-ops.tsv`: used by torch_npu since 8.0.0).
#[test]
fn the_newer_decode_operators_are_exported_from_8_1_rc1_on() {
    use ascend_acl::release::CannRelease;
    use ascend_acl::table::SymbolSource;
    use ascend_emulator::EmulatedRelease;
    let (old, current) = (
        EmulatedRelease(CannRelease::V8_0_0),
        EmulatedRelease(CannRelease::V8_1_RC1),
    );
    for op in [
        "aclnnMoeGatingTopKSoftmaxV2",
        "aclnnRopeWithSinCosCache",
        "aclnnInplaceScatterUpdate",
    ] {
        let phase1 = format!("{op}GetWorkspaceSize");
        assert!(
            old.lookup(&phase1).is_none() && old.lookup(op).is_none(),
            "{op}"
        );
        assert!(
            current.lookup(&phase1).is_some() && current.lookup(op).is_some(),
            "{op}"
        );
    }
    for op in [
        "aclnnMoeGatingTopKSoftmax",
        "aclnnTopk",
        "aclnnSwiGlu",
        "aclnnApplyRotaryPosEmb",
    ] {
        assert!(
            old.lookup(&format!("{op}GetWorkspaceSize")).is_some(),
            "{op}"
        );
        assert!(old.lookup(op).is_some(), "{op}");
    }
}
