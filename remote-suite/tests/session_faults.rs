//! One client's bad input on a served device while another client works on it: the bad
//! client's call fails with an error it sees, the other's work is right afterwards (against
//! burn-flex), and a new connection works. The steps run in order on one thread, each within a
//! bounded wait (a hang fails the test), so which session reads first is fixed.
//!
//! The tests share the process's emulated device (one test's reset would reach another's
//! tensors), so they run one at a time.

mod common;

use std::sync::{mpsc, Mutex};
use std::time::Duration;

use burn::tensor::{Device, Int, Tensor, TensorData, Tolerance};
use burn_ascend_client as fused;
use burn_ascend_remote_suite::LocalServer;

/// One test at a time on the device (see the module doc).
static DEVICE: Mutex<()> = Mutex::new(());

/// Runs `steps` on a thread of its own: its value, or the test fails naming `what` when it
/// neither returns nor fails within 60 s.
fn bounded<T: Send + 'static>(what: &str, steps: impl FnOnce() -> T + Send + 'static) -> T {
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(
            steps,
        )));
    });
    match receiver.recv_timeout(Duration::from_secs(60)) {
        Ok(Ok(value)) => value,
        Ok(Err(payload)) => std::panic::resume_unwind(payload),
        Err(_) => panic!("{what}: no answer within 60 s"),
    }
}

fn ints(values: &[i32], device: &Device) -> Tensor<1, Int> {
    Tensor::from_data(TensorData::new(values.to_vec(), [values.len()]), device)
}

/// The other client's work: tensors it made before the bad call, used again after it.
struct Bystander {
    x: Tensor<2>,
    w: Tensor<2>,
}

impl Bystander {
    fn inputs() -> (TensorData, TensorData) {
        (
            common::floats(&[6, 16], 0.4, 256.0),
            common::floats(&[16, 12], 2.1, 256.0),
        )
    }

    fn new(device: &Device) -> Self {
        let (x, w) = Self::inputs();
        Self {
            x: Tensor::from_data(x, device),
            w: Tensor::from_data(w, device),
        }
    }

    /// A matmul and an element-wise chain (which the server fuses), read back.
    fn work(&self) -> Result<TensorData, String> {
        (self.x.clone().matmul(self.w.clone()) * 0.5 + 1.0)
            .tanh()
            .try_into_data()
            .map_err(|e| e.to_string())
    }

    /// The same work on burn-flex.
    fn want() -> TensorData {
        let (x, w) = Self::inputs();
        Self {
            x: Tensor::from_data(x, &Device::flex()),
            w: Tensor::from_data(w, &Device::flex()),
        }
        .work()
        .expect("burn-flex reads")
    }
}

fn assert_right(what: &str, got: Result<TensorData, String>) {
    let got = got.unwrap_or_else(|e| panic!("{what}: {e}"));
    got.assert_approx_eq::<f32>(&Bystander::want(), Tolerance::absolute(1e-5));
}

fn assert_names(error: &str, parts: &[&str]) {
    for part in parts {
        assert!(
            error.contains(part),
            "the error should name {part:?}: {error}"
        );
    }
}

/// moe_gather's expected output for `perm` over `x [4, 16]` with top_k 2, on burn-flex.
fn gathered(x: &TensorData, perm: &[i32]) -> TensorData {
    let cpu = Device::flex();
    Tensor::<2>::from_data(x.clone(), &cpu)
        .select(0, ints(perm, &cpu) / 2)
        .into_data()
}

/// `kv_indptr` of two requests of 3 and 4 keys.
const REQUESTS: &[i32] = &[0, 3, 7];

/// decode_attention for two requests over a cache of 10 slots, 4 query heads over 2 kv
/// heads, `max_kv_splits` 4: its output and log-sum-exp, read back.
fn decode(
    indptr: &[i32],
    indices: &[i32],
    splits: &[i32],
    device: &Device,
) -> Result<(TensorData, TensorData), String> {
    let (slots, kv_heads, dim_k, dim_v) = (10, 2, 16, 8);
    let (out, lse) = fused::decode_attention(
        Tensor::from_data(common::floats(&[2, 4, dim_k], 0.2, 256.0), device),
        Tensor::from_data(
            common::floats(&[slots, kv_heads, dim_k], 1.1, 256.0),
            device,
        ),
        Tensor::from_data(
            common::floats(&[slots, kv_heads, dim_v], 2.3, 256.0),
            device,
        ),
        ints(indptr, device),
        ints(indices, device),
        ints(splits, device),
        fused::DecodeAttentionOptions {
            max_kv_splits: 4,
            sm_scale: 0.25,
            logit_cap: None,
        },
    );
    out.try_into_data()
        .and_then(|out| Ok((out, lse.try_into_data()?)))
        .map_err(|e| e.to_string())
}

/// Out-of-range `moe_gather` indices and `decode_attention` `kv_indices` fail the call that
/// sent them, naming the op, the condition and the operands, before anything runs: no fault,
/// so the other session's tensors made before are still there and right, the faulty session
/// goes on, and a new one works.
#[test]
fn out_of_range_indices_fail_only_the_call_that_sent_them() {
    let _one = DEVICE.lock().unwrap_or_else(|p| p.into_inner());
    let server = LocalServer::start();
    let bystander_device = server.session("bystander");
    let bystander = bounded("the bystander's first work", move || {
        let b = Bystander::new(&bystander_device);
        assert_right("the bystander before", b.work());
        b
    });

    let faulty = server.session("faulty");
    let x = common::floats(&[4, 16], 0.5, 256.0);
    let (gather_error, faulty) = bounded("moe_gather with an index of -3", {
        let x = x.clone();
        move || {
            let out = fused::moe_gather(
                Tensor::from_data(x, &faulty),
                ints(&[1, 4, -3, 0, 3, 7, 2, 5], &faulty),
                2,
            );
            (out.try_into_data().map(|_| ()), faulty)
        }
    });
    let gather_error = gather_error
        .expect_err("indices outside [0, 8) were gathered")
        .to_string();
    assert_names(
        &gather_error,
        &[
            "moe_gather",
            "[0, 8)",
            "indices [8] DT_INT32",
            "x [4, 16] DT_FLOAT",
        ],
    );

    let (decode_error, faulty) = bounded("decode_attention with slot 10 of 10", move || {
        (
            decode(REQUESTS, &[5, 1, 8, 0, 2, 10, 4], &[2, 3], &faulty),
            faulty,
        )
    });
    let decode_error = decode_error.expect_err("slot 10 of a 10-slot cache was attended to");
    assert_names(
        &decode_error,
        &[
            "decode_attention",
            "kv_indices",
            "[0, 10)",
            "k_cache [10, 2, 16] DT_FLOAT",
        ],
    );

    // The faulty session goes on: a right gather, and decode_attention ignoring entries of
    // kv_indices past kv_indptr[B] (which its kernels never read) as they do.
    bounded("the faulty session's right calls", move || {
        let perm = [1, 4, 6, 0, 3, 7, 2, 5];
        let out = fused::moe_gather(
            Tensor::from_data(x.clone(), &faulty),
            ints(&perm, &faulty),
            2,
        );
        out.into_data()
            .assert_approx_eq::<f32>(&gathered(&x, &perm), Tolerance::absolute(0.0));
        let keys = [5, 1, 8, 0, 2, 9, 4];
        let unread = [5, 1, 8, 0, 2, 9, 4, -1, 99];
        let want = decode(REQUESTS, &keys, &[2, 3], &faulty);
        let got = decode(REQUESTS, &unread, &[2, 3], &faulty);
        assert_eq!(
            got.expect("entries past kv_indptr[B] are not read"),
            want.expect("a right decode_attention")
        );
    });

    bounded("the bystander's tensors after", move || {
        assert_right("the bystander after", bystander.work())
    });
    let fresh = server.session("fresh");
    bounded("a new session", move || {
        assert_right("a new session", Bystander::new(&fresh).work())
    });
}

/// A fault no check predicts (a plain `select` past the end of its tensor, whose kernel checks
/// the index on the device) resets the device: the faulty session's read fails saying so, the
/// other session's tensors made before fail clearly (they went with the reset) while its new
/// ones work, and a new session works.
#[test]
fn a_device_fault_resets_the_device_for_every_session() {
    let _one = DEVICE.lock().unwrap_or_else(|p| p.into_inner());
    let server = LocalServer::start();
    let bystander_device = server.session("bystander");
    let (bystander, bystander_device) = bounded("the bystander's first work", move || {
        let b = Bystander::new(&bystander_device);
        assert_right("the bystander before", b.work());
        (b, bystander_device)
    });

    let faulty = server.session("faulty");
    let fault = bounded("select of row 9 of 4", move || {
        Tensor::<2>::from_data(common::floats(&[4, 16], 0.5, 256.0), &faulty)
            .select(0, ints(&[0, 9], &faulty))
            .try_into_data()
            .map_err(|e| e.to_string())
    })
    .expect_err("row 9 of a 4-row tensor was selected");
    assert_names(
        &fault,
        &[
            "was reset after a fault",
            "create tensors on the device again",
        ],
    );

    // Its tensors made before, alone, with new ones, and in a fused op: each fails clearly.
    let (lost, bystander_device) = bounded("the bystander's tensors after the reset", move || {
        let fresh = Bystander::new(&bystander_device);
        let gathered = fused::moe_gather(
            bystander.x.clone(),
            ints(&[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], &bystander_device),
            2,
        );
        let lost = [
            bystander.work(),
            Bystander {
                x: fresh.x,
                w: bystander.w.clone(),
            }
            .work(),
            Bystander {
                x: bystander.x,
                w: fresh.w,
            }
            .work(),
            gathered.try_into_data().map_err(|e| e.to_string()),
        ];
        (lost, bystander_device)
    });
    for (i, lost) in lost.into_iter().enumerate() {
        let lost = lost.expect_err("a tensor made before the reset was read");
        match i {
            // With new tensors, in Burn's own op: the operation names the reset context.
            1 | 2 => assert_names(&lost, &["device context that was reset", "create it again"]),
            _ => assert_names(&lost, &["was reset after a fault", "create tensors"]),
        }
        assert!(i < 3 || lost.contains("moe_gather"), "{lost}");
    }
    bounded("the bystander's new tensors", move || {
        assert_right(
            "the bystander's new tensors",
            Bystander::new(&bystander_device).work(),
        )
    });
    let fresh = server.session("fresh");
    bounded("a new session", move || {
        assert_right("a new session", Bystander::new(&fresh).work())
    });
}

/// Every index condition the fused kernels (and grouped matmul's operator) would fault on is
/// refused before launch, naming it: the device never faults, so a tensor made before is still
/// right after them all.
#[test]
fn every_faulting_index_value_is_refused_before_launch() {
    let _one = DEVICE.lock().unwrap_or_else(|p| p.into_inner());
    let server = LocalServer::start();
    let device = server.session("faulty");
    bounded("the refused calls", move || {
        let before = Bystander::new(&device);
        let refused = |what: &str, got: Result<(), String>, names: &[&str]| {
            let error = got.expect_err(what);
            assert_names(&error, names);
            assert_names(&error, &["checked on the device before launch"]);
        };
        let decode_case = |indptr: &[i32], splits: &[i32]| {
            decode(indptr, &[5, 1, 8, 0, 2, 9, 4], splits, &device).map(|_| ())
        };
        let indptr_range = [
            "decode_attention",
            "every kv_indptr entry must be within [0, 7]",
        ];
        let increasing = ["decode_attention", "kv_indptr must increase strictly"];
        let splits = [
            "decode_attention",
            "num_kv_splits entry must be within [1, 4]",
        ];
        refused(
            "kv_indptr past kv_indices",
            decode_case(&[0, 3, 8], &[2, 3]),
            &indptr_range,
        );
        refused(
            "a negative kv_indptr",
            decode_case(&[-1, 3, 7], &[2, 3]),
            &indptr_range,
        );
        refused(
            "a decreasing kv_indptr",
            decode_case(&[0, 5, 3], &[2, 3]),
            &increasing,
        );
        refused(
            "a request without keys",
            decode_case(&[0, 3, 3], &[2, 3]),
            &increasing,
        );
        refused("0 splits", decode_case(REQUESTS, &[0, 3]), &splits);
        refused("5 splits of 4", decode_case(REQUESTS, &[2, 5]), &splits);

        let y = common::floats(&[8, 16], 1.5, 256.0);
        let scattered = fused::moe_scatter(
            Tensor::from_data(y, &device),
            ints(&[1, 4, 6, 0, 3, 7, 2, 2], &device),
            None,
            2,
        );
        refused(
            "a repeated moe_scatter index",
            scattered
                .try_into_data()
                .map(|_| ())
                .map_err(|e| e.to_string()),
            &["moe_scatter", "indices must be a permutation of 0..8"],
        );

        let grouped = |sizes: &[i32]| {
            fused::grouped_matmul(
                Tensor::from_data(common::floats(&[9, 16], 0.7, 256.0), &device),
                Tensor::from_data(common::floats(&[3, 16, 12], 1.9, 256.0), &device),
                ints(sizes, &device),
            )
            .try_into_data()
            .map(|_| ())
            .map_err(|e| e.to_string())
        };
        refused(
            "a negative group size",
            grouped(&[3, -1, 5]),
            &["grouped_matmul", "every group size must be within [0, 9]"],
        );
        refused(
            "groups of 10 rows of 9",
            grouped(&[3, 2, 5]),
            &["grouped_matmul", "add up to at most 9"],
        );
        assert_right("a tensor made before", before.work());
    });
}
