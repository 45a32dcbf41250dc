//! The fused kernels check their index inputs on the device, as device-side asserts do: a bad
//! value makes the kernel print it and trap (`AscendC::printf` + `AscendC::Trap`), and the op's
//! own result reports an AI Core error naming the kernel and the value when it is read, instead
//! of a clamped or zero result. Also: the costly checks behind `BURN_ASCEND_VALIDATE=1` (in a
//! child process: the switch is read once per process), and a kernel confined to its own NPU's
//! memory.
//!
//! Every test reads the error from the op's own result (`try_into_data`). A fault stops its
//! device until it is reset, so these tests run on `common::fault_device()`, one at a time, and
//! reset it after each fault (each case builds its inputs anew: a reset ends their context).

mod common;

use std::process::Command;

use burn::tensor::{DType, Int, Tensor, TensorData};
use burn_ascend::fused::{self, DecodeAttentionOptions, DecodePath};
use burn_ascend::ops::AscendTensor;
use burn_ascend::runtime::DeviceContext;
use burn_ascend::{Ascend, AscendDevice};
use burn_ascend_kernels::tiling::{self, AddType, DeviceProps};
use burn_ascend_suite::host_values::host_values;
use common::{fault_device as device, reset_fault_device, skipped_on_npu, Flex};
use serial_test::serial;

fn ints(v: &[i64], dtype: DType) -> Tensor<Ascend, 1, Int> {
    Tensor::from_data(
        TensorData::new(v.to_vec(), [v.len()]).convert_dtype(dtype),
        (&device(), dtype),
    )
}

fn i32s(v: &[i64]) -> Tensor<Ascend, 1, Int> {
    ints(v, DType::I32)
}

fn floats<const D: usize>(shape: [usize; D], seed: u64) -> Tensor<Ascend, D> {
    Tensor::from_data(host_values(shape.to_vec(), seed), (&device(), DType::F32))
}

/// The error `data` must be, as text: on the emulated NPU it names `kernel` and contains every
/// one of `needles` (the message the kernel printed); a real NPU reports the AI Core error
/// without the kernel's text (printed on its console), so there only the status is checked.
///
/// `op` runs the op and reads its result. A check that stops the device before the op's next
/// kernel is launched fails that launch instead of the read (the device runs asynchronously,
/// so which one depends on timing): either way the op fails with the check's message, and the
/// fault device is reset after it.
fn assert_fault<E: std::fmt::Debug>(
    what: &str,
    op: impl FnOnce() -> Result<TensorData, E>,
    kernel: &str,
    needles: &[&str],
) {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(op));
    reset_fault_device();
    let err = match outcome {
        Ok(Ok(d)) => panic!("{what}: the kernel's check must fail the op, got {d:?}"),
        Ok(Err(e)) => format!("{e:?}"),
        Err(p) => p
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_else(|| "a panic without a message".into()),
    };
    if matches!(device(), AscendDevice::Npu(_)) {
        assert!(
            err.contains("AICORE") || err.contains("VECTOR_CORE"),
            "{what}: {err}"
        );
        return;
    }
    assert!(
        err.contains("ACL_ERROR_RT_AICORE_EXCEPTION")
            && err.contains(&format!("kernel {kernel}, block "))
            && err.contains("AscendC::Trap() stopped the core after printing"),
        "{what}: {err}"
    );
    for needle in needles {
        assert!(err.contains(needle), "{what}: no {needle:?} in {err}");
    }
}

// ---- moe_gather, token_rearrange, moe_scatter ----

#[test]
#[serial(fault_device)]
fn gathers_reject_negative_and_out_of_range_indices() {
    let x = || floats([4, 16], 1);
    for (indices, needle) in [
        (
            vec![0, 1, -3, 2, 4, 5, 6, 7],
            "moe_gather: indices[2] = -3 is outside [0, 8)",
        ),
        (
            vec![0, 1, 2, 3, 4, 5, 6, 8],
            "moe_gather: indices[7] = 8 is outside [0, 8)",
        ),
    ] {
        assert_fault(
            "moe_gather",
            || fused::moe_gather(x(), i32s(&indices), 2).try_into_data(),
            "moe_gather",
            &[needle],
        );
    }
    for dtype in [DType::I32, DType::I64] {
        for (perm, needle) in [
            (
                vec![3, -1, 0, 1],
                "token_rearrange: perm[1] = -1 is outside [0, 4)",
            ),
            (
                vec![3, 2, 4, 1],
                "token_rearrange: perm[2] = 4 is outside [0, 4)",
            ),
            (
                vec![0, 1, 2, 1 << 40],
                "token_rearrange: perm[3] = 1099511627776 is outside [0, 4)",
            ),
        ] {
            if dtype == DType::I32 && perm[3] > i32::MAX as i64 {
                continue;
            }
            assert_fault(
                &format!("token_rearrange {dtype:?}"),
                || fused::token_rearrange(x(), ints(&perm, dtype)).try_into_data(),
                "token_rearrange",
                &[needle],
            );
        }
    }
}

#[test]
#[serial(fault_device)]
fn moe_scatter_rejects_indices_out_of_range_or_repeated() {
    let y = || floats([8, 16], 2);
    for (indices, kernel, needle) in [
        (
            vec![0, 9, 2, 3, 4, 5, 6, 7],
            "moe_scatter_inverse",
            "moe_scatter: indices[1] = 9 is outside [0, 8)",
        ),
        (
            vec![0, 1, 2, 3, 4, 5, -2, 7],
            "moe_scatter_inverse",
            "moe_scatter: indices[6] = -2 is outside [0, 8)",
        ),
        // 3 twice, so no index points at slot 5 (token 2's second choice).
        (
            vec![0, 1, 2, 3, 4, 3, 6, 7],
            "moe_scatter",
            "moe_scatter: no entry of indices is 5 (token 2, choice 1 has no expert row)",
        ),
    ] {
        assert_fault(
            &format!("moe_scatter {indices:?}"),
            || fused::moe_scatter(y(), i32s(&indices), None, 2).try_into_data(),
            kernel,
            &[needle],
        );
    }
    // A permutation still scatters as the composed default does.
    let perm = [5, 0, 7, 2, 1, 6, 3, 4];
    let got = fused::moe_scatter(y(), i32s(&perm), None, 2).into_data();
    let want = fused::moe_scatter(
        Tensor::<Flex, 2>::from_data(host_values(vec![8, 16], 2), &Default::default()),
        Tensor::<Flex, 1, Int>::from_data(TensorData::new(perm.to_vec(), [8]), &Default::default()),
        None,
        2,
    )
    .into_data();
    got.assert_approx_eq::<f32>(&want, burn::tensor::Tolerance::absolute(1e-5));
}

// ---- decode_attention ----

/// One decode-attention call on 6 cache slots, 2 query heads over 1 KV head, Dk = Dv = 16: f32
/// on the vector path, or half on the cube path (`path` Cube).
fn decode_on(
    path: Option<DecodePath>,
    indptr: &[i64],
    indices: &[i64],
    splits: &[i64],
) -> Result<TensorData, String> {
    let batch = indptr.len() - 1;
    let dtype = if path == Some(DecodePath::Cube) {
        DType::F16
    } else {
        DType::F32
    };
    let (q, k, v) = (
        floats([batch, 2, 16], 3).cast(dtype),
        floats([6, 1, 16], 4).cast(dtype),
        floats([6, 1, 16], 5).cast(dtype),
    );
    let options = DecodeAttentionOptions {
        max_kv_splits: 2,
        sm_scale: 0.25,
        logit_cap: None,
        value_dim: 16,
        path,
    };
    let (out, _) = fused::decode_attention(
        q,
        k,
        Some(v),
        i32s(indptr),
        i32s(indices),
        i32s(splits),
        options,
    );
    out.try_into_data().map_err(|e| format!("{e:?}"))
}

fn decode(indptr: &[i64], indices: &[i64], splits: &[i64]) -> Result<TensorData, String> {
    decode_on(None, indptr, indices, splits)
}

#[test]
#[serial(fault_device)]
fn decode_attention_rejects_bad_indptr_empty_requests_splits_and_slots() {
    // (kv_indptr, kv_indices, num_kv_splits, what the kernel prints)
    type Case = (&'static [i64], &'static [i64], &'static [i64], &'static str);
    let cases: [Case; 8] = [
        // kv_indptr past kv_indices: today clamped to the 3 entries.
        (
            &[0, 2, 5],
            &[0, 1, 2],
            &[1, 1],
            "decode_attention: kv_indptr[2] = 5 is past the 3 entries of kv_indices",
        ),
        (
            &[-1, 2, 3],
            &[0, 1, 2],
            &[1, 1],
            "decode_attention: kv_indptr[0] = -1 is outside the 3 entries of kv_indices",
        ),
        (
            &[0, 3, 2, 4],
            &[0, 1, 2, 3],
            &[1, 1, 1],
            "decode_attention: kv_indptr decreases: kv_indptr[1] = 3 > kv_indptr[2] = 2",
        ),
        // A request without keys: today out = 0 and lse = -inf.
        (
            &[0, 2, 2, 3],
            &[0, 1, 2],
            &[1, 1, 1],
            "decode_attention: request 1 has no cached token (kv_indptr[1] = kv_indptr[2] = 2)",
        ),
        (
            &[0, 2, 3],
            &[0, 6, 2],
            &[1, 1],
            "decode_attention: kv_indices[1] = 6 is not a cache slot (k_cache has 6 rows)",
        ),
        (
            &[0, 2, 3],
            &[0, 1, -4],
            &[1, 1],
            "decode_attention: kv_indices[2] = -4 is not a cache slot",
        ),
        // Split counts: today clamped into 1..=max_kv_splits.
        (
            &[0, 2, 3],
            &[0, 1, 2],
            &[0, 1],
            "decode_attention: num_kv_splits[0] = 0 is outside [1, 2] (max_kv_splits)",
        ),
        (
            &[0, 2, 3],
            &[0, 1, 2],
            &[1, 3],
            "decode_attention: num_kv_splits[1] = 3 is outside [1, 2] (max_kv_splits)",
        ),
    ];
    for (indptr, indices, splits, needle) in cases {
        assert_fault(
            &format!("decode_attention indptr {indptr:?} indices {indices:?} splits {splits:?}"),
            || decode(indptr, indices, splits),
            "decode_attention_stage1",
            &[needle],
        );
    }
    decode(&[0, 2, 3], &[5, 1, 2], &[2, 1]).expect("valid input still runs");
    // The cube path's first kernel checks the same values.
    for (indptr, indices, splits, needle) in cases {
        assert_fault(
            &format!(
                "cube decode_attention indptr {indptr:?} indices {indices:?} splits {splits:?}"
            ),
            || decode_on(Some(DecodePath::Cube), indptr, indices, splits),
            "decode_attention_scores",
            &[needle],
        );
    }
    decode_on(Some(DecodePath::Cube), &[0, 2, 3], &[5, 1, 2], &[2, 1])
        .expect("valid input still runs on the cube path");
}

// ---- alloc_extend ----

fn alloc(
    prefix: &[i64],
    seq: &[i64],
    last: &[i64],
    free: &[i64],
    page_size: usize,
    extend_total: usize,
    dtype: DType,
) -> Result<TensorData, String> {
    let out = fused::alloc_extend(
        ints(prefix, dtype),
        ints(seq, dtype),
        ints(last, dtype),
        ints(free, dtype),
        page_size,
        extend_total,
    );
    out.slots.try_into_data().map_err(|e| format!("{e:?}"))
}

#[test]
#[serial(fault_device)]
fn alloc_extend_rejects_shrinking_requests_bad_pages_and_wrong_totals() {
    for dtype in [DType::I32, DType::I64] {
        let what = |case: &str| format!("alloc_extend {case} {dtype:?}");
        // seq < prefix: today a negative extension and negative totals.
        assert_fault(
            &what("seq < prefix"),
            || alloc(&[0, 5], &[4, 3], &[0, 3], &[7, 8], 4, 4, dtype),
            "alloc_extend",
            &["alloc_extend: request 1 has prefix_lens = 5 and seq_lens = 3"],
        );
        assert_fault(
            &what("negative prefix"),
            || alloc(&[-2], &[3], &[0], &[7, 8], 4, 5, dtype),
            "alloc_extend",
            &["alloc_extend: request 0 has prefix_lens = -2 and seq_lens = 3"],
        );
        // 3 pages needed, 2 listed: today -1 slots.
        assert_fault(
            &what("free list too short"),
            || alloc(&[0], &[10], &[0], &[7, 8], 4, 10, dtype),
            "alloc_extend",
            &["alloc_extend: request 0 needs free-list entry 2, but free_pages lists 2 pages"],
        );
        assert_fault(
            &what("negative page id"),
            || alloc(&[0], &[6], &[0], &[7, -3], 4, 6, dtype),
            "alloc_extend",
            &["alloc_extend: free_pages[1] = -3 is not a page id"],
        );
        // Token 2 of request 0 sits at offset 2 of its page, so last_loc must be 4k + 2.
        assert_fault(
            &what("last_loc off its page"),
            || alloc(&[3], &[6], &[13], &[7], 4, 3, dtype),
            "alloc_extend",
            &["alloc_extend: last_loc[0] = 13 is not the slot of token 2 in a page of 4 slots"],
        );
        // extend_total disagreeing with the lengths: today -1 entries or dropped tokens.
        assert_fault(
            &what("extend_total too large"),
            || alloc(&[0], &[3], &[0], &[7], 4, 5, dtype),
            "alloc_extend",
            &["alloc_extend: the lengths add up to 3 new tokens, but out_slots holds 5"],
        );
        assert_fault(
            &what("extend_total too small"),
            || alloc(&[0, 0], &[3, 4], &[0, 0], &[7, 8], 4, 5, dtype),
            "alloc_extend",
            &["alloc_extend: request 1 takes out_slots up to position 7, but out_slots holds 5"],
        );
        let slots = alloc(&[3], &[6], &[14], &[7], 4, 3, dtype).expect("valid input still runs");
        assert_eq!(
            slots.convert::<i64>().to_vec::<i64>().unwrap(),
            vec![15, 28, 29]
        );
    }
    // Page ids whose slots pass 2^31 do not fit int32 slots.
    assert_fault(
        "alloc_extend int32 page id too large",
        || alloc(&[0], &[2], &[0], &[1 << 29], 4, 2, DType::I32),
        "alloc_extend",
        &["alloc_extend: free_pages[0] = 536870912 is not a page id (0..536870911 for pages of 4 slots)"],
    );
}

// ---- the validation switch ----

const CHILD_TEST: &str = "child_checks_moe_gather_permutations";

#[test]
#[ignore = "run by the validation switch's test, with BURN_ASCEND_VALIDATE=1"]
fn child_checks_moe_gather_permutations() {
    assert_fault(
        "moe_gather with a repeated index",
        || fused::moe_gather(floats([4, 16], 6), i32s(&[0, 5, 2, 3, 4, 5, 6, 7]), 2).try_into_data(),
        "moe_gather",
        &[
            "moe_gather: indices[5] = 5 repeats an earlier entry: indices must be a permutation of \
             0..8 (checked because BURN_ASCEND_VALIDATE=1)",
        ],
    );
    fused::moe_gather(floats([4, 16], 6), i32s(&[7, 0, 6, 1, 5, 2, 4, 3]), 2)
        .try_into_data()
        .expect("a permutation passes the validation");
    println!("validated");
}

fn run_child(validate: &str) -> (bool, String) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", CHILD_TEST, "--nocapture"])
        .env("BURN_ASCEND_VALIDATE", validate)
        .output()
        .expect("the test binary runs");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success() && text.contains("validated"), text)
}

#[test]
#[serial(fault_device)]
fn the_validation_switch_adds_the_permutation_check_of_moe_gather() {
    if skipped_on_npu("the_validation_switch_adds_the_permutation_check_of_moe_gather") {
        return;
    }
    let (ok, text) = run_child("1");
    assert!(ok, "child with BURN_ASCEND_VALIDATE=1:\n{text}");
    // A value the switch does not understand is an error naming it.
    let (ok, text) = run_child("yes");
    assert!(
        !ok && text.contains("BURN_ASCEND_VALIDATE=\"yes\" is not understood: use 1 or 0"),
        "child with BURN_ASCEND_VALIDATE=yes:\n{text}"
    );
    if burn_ascend_kernels::checks::validation() != Ok(false) {
        eprintln!("the suite runs with BURN_ASCEND_VALIDATE set: the check without it is skipped");
        return;
    }
    // Without the switch a repeated index gathers its row twice, as the composed default does.
    let indices = [0i64, 5, 2, 3, 4, 5, 6, 7];
    let got = fused::moe_gather(floats([4, 16], 6), i32s(&indices), 2).into_data();
    let want = fused::moe_gather(
        Tensor::<Flex, 2>::from_data(host_values(vec![4, 16], 6), &Default::default()),
        Tensor::<Flex, 1, Int>::from_data(
            TensorData::new(indices.to_vec(), [8]).convert_dtype(DType::I32),
            &Default::default(),
        ),
        2,
    )
    .into_data();
    got.assert_approx_eq::<f32>(&want, burn::tensor::Tolerance::absolute(0.0));
}

// ---- one device per kernel ----

#[test]
#[serial(fault_device)]
fn a_kernel_touching_another_npus_memory_is_an_ai_core_error() {
    if skipped_on_npu("a_kernel_touching_another_npus_memory_is_an_ai_core_error") {
        return;
    }
    // The kernel runs on the fault device and is handed memory of the suite's device.
    reset_fault_device();
    let (here, there) = (device(), common::device());
    let ctx = DeviceContext::get(&here.into()).unwrap();
    let n = 256usize;
    let local = |d: &AscendDevice| -> AscendTensor {
        Tensor::<Ascend, 1>::from_data(host_values(vec![n], 7), d)
            .into_primitive()
            .tensor()
            .into_inner()
    };
    let (x, foreign) = (local(&here), local(&there));
    let out = AscendTensor::empty(&ctx, vec![n], burn_ascend::acl::DataType::F32).unwrap();
    let plan = tiling::vector_add(n as u64, AddType::F32, &DeviceProps::ATLAS_A2);
    // SAFETY: the buffers hold n floats each; the emulated device checks every access.
    ctx.launch_kernel("vector_add", |kernels, stream| unsafe {
        kernels.vector_add(
            stream,
            plan,
            x.storage_ptr(),
            foreign.storage_ptr(),
            out.storage_ptr(),
        )
    })
    .expect("the launch itself is queued");
    let err = ctx
        .synchronize()
        .expect_err("the kernel reads NPU 1's memory")
        .to_string();
    assert!(
        err.contains("ACL_ERROR_RT_AICORE_EXCEPTION")
            && err.contains("kernel vector_add, block ")
            && err.contains(&format!(
                "is memory of NPU {}, but the kernel runs on NPU {}",
                there.index(),
                here.index()
            )),
        "{err}"
    );
    // The same launch with its own device's buffers runs (on the reset device).
    reset_fault_device();
    let ctx = DeviceContext::get(&here.into()).unwrap();
    let (x, y) = (local(&here), local(&here));
    let out = AscendTensor::empty(&ctx, vec![n], burn_ascend::acl::DataType::F32).unwrap();
    ctx.launch_kernel("vector_add", |kernels, stream| unsafe {
        kernels.vector_add(
            stream,
            plan,
            x.storage_ptr(),
            y.storage_ptr(),
            out.storage_ptr(),
        )
    })
    .unwrap();
    ctx.synchronize().expect("one device's memory only");
}
