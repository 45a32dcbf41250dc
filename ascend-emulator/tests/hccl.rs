//! The emulated HCCL through its function table: every collective and point-to-point transfer
//! against closed-form results, Atlas A2's dtype and reduce-op support, asynchronous issue and
//! matching in order, and the documented failures (mismatched parameters, a rank that never
//! joins within HCCL_EXEC_TIMEOUT, buffers and streams of the wrong device, the config traps),
//! and the device rules every op follows: a failed transfer stops its device until reset, and a
//! reset takes the device's communicators with it.

use std::ffi::c_void;
use std::sync::OnceLock;

use ascend_acl::hccl::data_type::*;
use ascend_acl::hccl::reduce_op::*;
use ascend_acl::hccl::result::*;
use ascend_acl::hccl::{CommConfig, HcclApi, HcclComm, HcclRootInfo};
use ascend_acl::types::event_status::*;
use ascend_acl::types::memcpy_kind::*;
use ascend_acl::types::status::*;
use ascend_acl::types::*;
use ascend_acl::AclApi;
use ascend_emulator::hccl::{hccl_counters, EmulatedHccl, Kind};
use ascend_emulator::EmulatedRuntime;
use half::{bf16, f16};
use serial_test::serial;

fn acl() -> &'static AclApi {
    static API: OnceLock<AclApi> = OnceLock::new();
    API.get_or_init(|| {
        let api = AclApi::new(Box::new(EmulatedRuntime)).expect("the emulator exports the list");
        // SAFETY: NULL means "no configuration file".
        api.check(unsafe { (api.core.aclInit)(std::ptr::null()) }, "aclInit")
            .unwrap();
        api
    })
}

fn hccl() -> &'static HcclApi {
    static API: OnceLock<HcclApi> = OnceLock::new();
    API.get_or_init(|| HcclApi::new(Box::new(EmulatedHccl)).expect("the emulator exports HCCL"))
}

/// `aclrtResetDeviceForce`: destroys the device's context, clearing its fault, however many
/// threads bound it.
fn reset(device: i32) {
    let api = acl();
    let force = api
        .optional
        .aclrtResetDeviceForce
        .expect("CANN 8.1.RC1 has it");
    // SAFETY: plain call.
    api.check(unsafe { force(device) }, "aclrtResetDeviceForce")
        .unwrap();
}

fn on(device: i32) {
    let api = acl();
    // SAFETY: plain call.
    api.check(
        unsafe { (api.core.aclrtSetDevice)(device) },
        "aclrtSetDevice",
    )
    .unwrap();
}

/// One rank's device, stream and buffers.
struct Rank {
    device: i32,
    stream: aclrtStream,
}

impl Rank {
    fn new(device: i32) -> Self {
        on(device);
        let mut stream = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        acl()
            .check(
                unsafe { (acl().core.aclrtCreateStream)(&mut stream) },
                "aclrtCreateStream",
            )
            .unwrap();
        Self { device, stream }
    }

    fn upload(&self, bytes: &[u8]) -> *mut c_void {
        on(self.device);
        let api = acl();
        let mut p = std::ptr::null_mut();
        // SAFETY: valid pointers; the buffer holds `bytes.len()` bytes.
        unsafe {
            api.check(
                (api.core.aclrtMalloc)(&mut p, bytes.len().max(1), ACL_MEM_MALLOC_HUGE_FIRST),
                "aclrtMalloc",
            )
            .unwrap();
            if !bytes.is_empty() {
                api.check(
                    (api.core.aclrtMemcpy)(
                        p,
                        bytes.len(),
                        bytes.as_ptr() as _,
                        bytes.len(),
                        ACL_MEMCPY_HOST_TO_DEVICE,
                    ),
                    "aclrtMemcpy",
                )
                .unwrap();
            }
        }
        p
    }

    fn sync(&self) -> Result<(), ascend_acl::AclError> {
        on(self.device);
        // SAFETY: the stream is live.
        acl().check(
            unsafe { (acl().core.aclrtSynchronizeStream)(self.stream) },
            "aclrtSynchronizeStream",
        )
    }

    fn download(&self, p: *mut c_void, len: usize) -> Vec<u8> {
        self.sync().unwrap();
        let mut out = vec![0u8; len];
        // SAFETY: the buffer holds at least `len` bytes.
        acl()
            .check(
                unsafe {
                    (acl().core.aclrtMemcpy)(
                        out.as_mut_ptr() as _,
                        len,
                        p,
                        len,
                        ACL_MEMCPY_DEVICE_TO_HOST,
                    )
                },
                "aclrtMemcpy",
            )
            .unwrap();
        out
    }
}

/// `HcclCommInitAll` of `devices`: the ranks are not connected yet.
fn init_all(devices: &[i32]) -> Vec<HcclComm> {
    acl();
    let mut ids = devices.to_vec();
    let mut out = vec![std::ptr::null_mut(); devices.len()];
    let init = hccl().optional.HcclCommInitAll.unwrap();
    // SAFETY: both arrays hold `devices.len()` entries.
    hccl()
        .check(
            unsafe { init(ids.len() as u32, ids.as_mut_ptr(), out.as_mut_ptr()) },
            "HcclCommInitAll",
        )
        .unwrap();
    out
}

/// Communicators of `devices`, connected: each rank's first transfer (a one-byte broadcast)
/// issued from a thread of its own, as HCCL requires, and finished.
fn comms(devices: &[i32]) -> Vec<HcclComm> {
    let cs = init_all(devices);
    std::thread::scope(|s| {
        for (&device, &c) in devices.iter().zip(&cs) {
            let c = c as usize;
            s.spawn(move || {
                let r = Rank::new(device);
                let b = r.upload(&[7]);
                // SAFETY: a live one-byte buffer of the rank's device.
                let code = unsafe {
                    (hccl().fns.HcclBroadcast)(
                        b,
                        1,
                        HCCL_DATA_TYPE_UINT8,
                        0,
                        c as HcclComm,
                        r.stream,
                    )
                };
                hccl().check(code, "HcclBroadcast").unwrap();
                r.sync().unwrap();
            });
        }
    });
    cs
}

fn destroy(comms: Vec<HcclComm>) {
    for c in comms {
        // SAFETY: a live communicator.
        hccl()
            .check(
                unsafe { (hccl().fns.HcclCommDestroy)(c) },
                "HcclCommDestroy",
            )
            .unwrap();
    }
}

fn bytes<T: Copy>(v: &[T]) -> Vec<u8> {
    // SAFETY: plain-old-data values viewed as bytes.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
        .to_vec()
}

fn values<T: Copy + Default>(b: &[u8]) -> Vec<T> {
    let mut v = vec![T::default(); b.len() / std::mem::size_of::<T>()];
    // SAFETY: `v` has room for the bytes.
    unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), v.as_mut_ptr() as *mut u8, b.len()) };
    v
}

/// All-reduces `inputs[r]` (rank r's values) in place and returns what every rank holds.
fn all_reduce<T: Copy + Default>(inputs: &[Vec<T>], dtype: i32, op: i32) -> Vec<Vec<T>> {
    let cs = comms(&[0, 1]);
    let ranks = [Rank::new(0), Rank::new(1)];
    let bufs: Vec<_> = ranks
        .iter()
        .zip(inputs)
        .map(|(r, v)| r.upload(&bytes(v)))
        .collect();
    let n = inputs[0].len() as u64;
    for ((r, &b), &c) in ranks.iter().zip(&bufs).zip(&cs) {
        on(r.device);
        // SAFETY: live buffers of `n` elements on the rank's device.
        let code = unsafe { (hccl().fns.HcclAllReduce)(b, b, n, dtype, op, c, r.stream) };
        hccl().check(code, "HcclAllReduce").unwrap();
    }
    let out = ranks
        .iter()
        .zip(&bufs)
        .map(|(r, &b)| values(&r.download(b, n as usize * std::mem::size_of::<T>())))
        .collect();
    destroy(cs);
    out
}

#[test]
#[serial]
fn all_reduce_sums_multiplies_and_compares_in_the_dtype() {
    let a = [1.5f32, -2.0, 3.25, 8.0];
    let b = [0.5f32, 4.0, -1.25, -9.0];
    let expect =
        |f: fn(f32, f32) -> f32| -> Vec<f32> { a.iter().zip(&b).map(|(x, y)| f(*x, *y)).collect() };
    for (op, f) in [
        (HCCL_REDUCE_SUM, (|x, y| x + y) as fn(f32, f32) -> f32),
        (HCCL_REDUCE_PROD, |x, y| x * y),
        (HCCL_REDUCE_MAX, f32::max),
        (HCCL_REDUCE_MIN, f32::min),
    ] {
        let out = all_reduce(&[a.to_vec(), b.to_vec()], HCCL_DATA_TYPE_FP32, op);
        assert_eq!(
            out[0],
            expect(f),
            "{}",
            ascend_acl::hccl::reduce_op::name(op)
        );
        assert_eq!(
            out[1],
            expect(f),
            "{}",
            ascend_acl::hccl::reduce_op::name(op)
        );
    }
    // Integers wrap as device arithmetic does; f16 and bf16 round once per addition.
    let out = all_reduce(
        &[vec![i8::MAX, -3], vec![1i8, 5]],
        HCCL_DATA_TYPE_INT8,
        HCCL_REDUCE_SUM,
    );
    assert_eq!(out[1], vec![i8::MIN, 2]);
    let out = all_reduce(
        &[vec![1i64 << 40, -7], vec![3i64, 7]],
        HCCL_DATA_TYPE_INT64,
        HCCL_REDUCE_SUM,
    );
    assert_eq!(out[0], vec![(1i64 << 40) + 3, 0]);
    let h = |v: f32| f16::from_f32(v);
    let out = all_reduce(
        &[vec![h(2048.0), h(0.5)], vec![h(1.0), h(0.25)]],
        HCCL_DATA_TYPE_FP16,
        HCCL_REDUCE_SUM,
    );
    assert_eq!(out[0], vec![h(2048.0) + h(1.0), h(0.75)]);
    let bh = |v: f32| bf16::from_f32(v);
    let out = all_reduce(
        &[vec![bh(256.0)], vec![bh(1.0)]],
        HCCL_DATA_TYPE_BFP16,
        HCCL_REDUCE_MAX,
    );
    assert_eq!(out[1], vec![bh(256.0)]);
}

#[test]
#[serial]
fn broadcast_gather_scatter_alltoallv_and_send_recv() {
    let cs = comms(&[0, 1]);
    let r = [Rank::new(0), Rank::new(1)];
    let i32s = |v: &[i32]| bytes(v);
    // Broadcast from rank 1, in place.
    let bc = [
        r[0].upload(&i32s(&[0, 0, 0])),
        r[1].upload(&i32s(&[7, 8, 9])),
    ];
    // AllGather of 2 per rank.
    let ag_in = [r[0].upload(&i32s(&[1, 2])), r[1].upload(&i32s(&[3, 4]))];
    let ag_out = [r[0].upload(&[0; 16]), r[1].upload(&[0; 16])];
    // ReduceScatter: each rank receives the sum of its block.
    let rs_in = [
        r[0].upload(&i32s(&[1, 2, 3, 4])),
        r[1].upload(&i32s(&[10, 20, 30, 40])),
    ];
    let rs_out = [r[0].upload(&[0; 8]), r[1].upload(&[0; 8])];
    // AlltoAllV with uneven counts and a gap in the receive layout.
    let a2a_in = [
        r[0].upload(&i32s(&[1, 2, 3])),
        r[1].upload(&i32s(&[4, 5, 6, 7])),
    ];
    let a2a_out = [r[0].upload(&[0; 32]), r[1].upload(&[0; 32])];
    let send_counts = [[1u64, 2], [3, 1]];
    let sdispls = [[0u64, 1], [0, 3]];
    let recv_counts = [[1u64, 3], [2, 1]];
    let rdispls = [[0u64, 2], [0, 4]];
    // Send 0 -> 1.
    let p2p = [r[0].upload(&i32s(&[42, 43])), r[1].upload(&[0; 8])];
    let f = &hccl().fns;
    for i in 0..2 {
        let (c, s) = (cs[i], r[i].stream);
        on(r[i].device);
        // SAFETY: every buffer is live on rank i's device and large enough.
        unsafe {
            hccl()
                .check(
                    (f.HcclBroadcast)(bc[i], 3, HCCL_DATA_TYPE_INT32, 1, c, s),
                    "bcast",
                )
                .unwrap();
            hccl()
                .check(
                    (f.HcclAllGather)(ag_in[i], ag_out[i], 2, HCCL_DATA_TYPE_INT32, c, s),
                    "ag",
                )
                .unwrap();
            hccl()
                .check(
                    (f.HcclReduceScatter)(
                        rs_in[i],
                        rs_out[i],
                        2,
                        HCCL_DATA_TYPE_INT32,
                        HCCL_REDUCE_SUM,
                        c,
                        s,
                    ),
                    "rs",
                )
                .unwrap();
            hccl()
                .check(
                    (f.HcclAlltoAllV)(
                        a2a_in[i],
                        send_counts[i].as_ptr() as _,
                        sdispls[i].as_ptr() as _,
                        HCCL_DATA_TYPE_INT32,
                        a2a_out[i],
                        recv_counts[i].as_ptr() as _,
                        rdispls[i].as_ptr() as _,
                        HCCL_DATA_TYPE_INT32,
                        c,
                        s,
                    ),
                    "a2a",
                )
                .unwrap();
            let code = if i == 0 {
                (f.HcclSend)(p2p[0], 2, HCCL_DATA_TYPE_INT32, 1, c, s)
            } else {
                (f.HcclRecv)(p2p[1], 2, HCCL_DATA_TYPE_INT32, 0, c, s)
            };
            hccl().check(code, "p2p").unwrap();
        }
    }
    let get = |i: usize, p, n: usize| values::<i32>(&r[i].download(p, 4 * n));
    for i in 0..2 {
        assert_eq!(get(i, bc[i], 3), [7, 8, 9]);
        assert_eq!(get(i, ag_out[i], 4), [1, 2, 3, 4]);
    }
    assert_eq!(get(0, rs_out[0], 2), [11, 22]);
    assert_eq!(get(1, rs_out[1], 2), [33, 44]);
    assert_eq!(get(0, a2a_out[0], 5), [1, 0, 4, 5, 6]);
    assert_eq!(get(1, a2a_out[1], 5), [2, 3, 0, 0, 7]);
    assert_eq!(get(1, p2p[1], 2), [42, 43]);
    destroy(cs);
}

#[test]
#[serial]
fn issue_is_asynchronous_and_parts_match_in_order() {
    let before = hccl_counters();
    let cs = comms(&[0, 1]);
    let r = [Rank::new(0), Rank::new(1)];
    let x = [
        r[0].upload(&bytes(&[1.0f32; 4])),
        r[1].upload(&bytes(&[2.0f32; 4])),
    ];
    let y = [
        r[0].upload(&bytes(&[10.0f32; 4])),
        r[1].upload(&bytes(&[20.0f32; 4])),
    ];
    let f = &hccl().fns;
    on(0);
    // SAFETY: live buffers of 4 floats; the event belongs to device 0.
    unsafe {
        for b in [x[0], y[0]] {
            hccl()
                .check(
                    (f.HcclAllReduce)(
                        b,
                        b,
                        4,
                        HCCL_DATA_TYPE_FP32,
                        HCCL_REDUCE_SUM,
                        cs[0],
                        r[0].stream,
                    ),
                    "ar",
                )
                .unwrap();
        }
        let mut event = std::ptr::null_mut();
        acl()
            .check((acl().core.aclrtCreateEvent)(&mut event), "event")
            .unwrap();
        acl()
            .check((acl().core.aclrtRecordEvent)(event, r[0].stream), "record")
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mut status = -1;
        acl()
            .check(
                (acl().core.aclrtQueryEventStatus)(event, &mut status),
                "query",
            )
            .unwrap();
        assert_eq!(
            status, ACL_EVENT_RECORDED_STATUS_NOT_READY,
            "rank 0 must wait for rank 1"
        );
        on(1);
        for b in [x[1], y[1]] {
            hccl()
                .check(
                    (f.HcclAllReduce)(
                        b,
                        b,
                        4,
                        HCCL_DATA_TYPE_FP32,
                        HCCL_REDUCE_SUM,
                        cs[1],
                        r[1].stream,
                    ),
                    "ar",
                )
                .unwrap();
        }
        acl()
            .check((acl().core.aclrtSynchronizeEvent)(event), "wait")
            .unwrap();
    }
    for i in 0..2 {
        assert_eq!(values::<f32>(&r[i].download(x[i], 16)), [3.0; 4]);
        assert_eq!(values::<f32>(&r[i].download(y[i], 16)), [30.0; 4]);
    }
    let moved = hccl_counters().since(&before).of(Kind::AllReduce);
    assert_eq!(moved.calls, 2);
    // Two-shot all-reduce of 16 bytes on 2 ranks: each rank sends half, twice.
    assert_eq!(moved.traffic.link_bytes, 2 * 2 * 16);
    assert_eq!(moved.traffic.link_bytes, moved.traffic.min_link_bytes);
    destroy(cs);
}

/// An `HcclCommInitAll` communicator connects at its ranks' first transfers: each blocks the
/// thread issuing it until every rank has issued its own (hccl-abi.md §6 rule 5, one thread per
/// device), so one thread cannot issue them in turn; afterwards issue returns at once.
#[test]
#[serial]
fn the_first_transfer_of_each_rank_waits_for_every_rank_to_issue_its_own() {
    let cs = init_all(&[0, 1]);
    let (c0, c1) = (cs[0] as usize, cs[1] as usize);
    let (tx, rx) = std::sync::mpsc::channel();
    let first = std::thread::spawn(move || {
        let r = Rank::new(0);
        let b = r.upload(&bytes(&[1.0f32, 2.0]));
        // SAFETY: a live buffer of 2 floats on device 0.
        let code = unsafe {
            (hccl().fns.HcclAllReduce)(
                b,
                b,
                2,
                HCCL_DATA_TYPE_FP32,
                HCCL_REDUCE_SUM,
                c0 as HcclComm,
                r.stream,
            )
        };
        tx.send(code).unwrap();
        values::<f32>(&r.download(b, 8))
    });
    // Rank 0's call has not returned: it waits for rank 1.
    assert!(matches!(
        rx.recv_timeout(std::time::Duration::from_millis(300)),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout)
    ));
    let r = Rank::new(1);
    let b = r.upload(&bytes(&[3.0f32, 5.0]));
    let issue = |b| {
        on(1);
        // SAFETY: a live buffer of 2 floats on device 1.
        unsafe {
            (hccl().fns.HcclAllReduce)(
                b,
                b,
                2,
                HCCL_DATA_TYPE_FP32,
                HCCL_REDUCE_SUM,
                c1 as HcclComm,
                r.stream,
            )
        }
    };
    assert_eq!(issue(b), HCCL_SUCCESS);
    assert_eq!(rx.recv().unwrap(), HCCL_SUCCESS);
    assert_eq!(first.join().unwrap(), [4.0, 7.0]);
    assert_eq!(values::<f32>(&r.download(b, 8)), [4.0, 7.0]);
    // Connected: one thread now issues both ranks' next parts in turn, each queued at once.
    let r0 = Rank::new(0);
    let b0 = r0.upload(&bytes(&[1.0f32, 1.0]));
    let start = std::time::Instant::now();
    assert_eq!(issue(b), HCCL_SUCCESS);
    on(0);
    // SAFETY: a live buffer of 2 floats on device 0.
    let code = unsafe {
        (hccl().fns.HcclAllReduce)(
            b0,
            b0,
            2,
            HCCL_DATA_TYPE_FP32,
            HCCL_REDUCE_SUM,
            c0 as HcclComm,
            r0.stream,
        )
    };
    assert_eq!(code, HCCL_SUCCESS);
    assert!(start.elapsed() < std::time::Duration::from_secs(1));
    assert_eq!(values::<f32>(&r0.download(b0, 8)), [5.0, 8.0]);
    assert_eq!(values::<f32>(&r.download(b, 8)), [5.0, 8.0]);
    destroy(cs);
}

#[test]
#[serial]
fn a2_dtype_and_reduce_op_support() {
    let cs = comms(&[0, 1]);
    let r = Rank::new(0);
    let b = r.upload(&[0u8; 64]);
    let f = &hccl().fns;
    let call = |dtype, op| unsafe { (f.HcclAllReduce)(b, b, 4, dtype, op, cs[0], r.stream) };
    assert_eq!(
        call(HCCL_DATA_TYPE_FP64, HCCL_REDUCE_SUM),
        HCCL_E_NOT_SUPPORT
    );
    assert_eq!(
        call(HCCL_DATA_TYPE_UINT32, HCCL_REDUCE_SUM),
        HCCL_E_NOT_SUPPORT
    );
    assert_eq!(
        call(HCCL_DATA_TYPE_BFP16, HCCL_REDUCE_PROD),
        HCCL_E_NOT_SUPPORT
    );
    assert_eq!(
        call(HCCL_DATA_TYPE_INT16, HCCL_REDUCE_PROD),
        HCCL_E_NOT_SUPPORT
    );
    assert_eq!(call(99, HCCL_REDUCE_SUM), HCCL_E_PARA);
    assert_eq!(call(HCCL_DATA_TYPE_FP32, 7), HCCL_E_PARA);
    // SAFETY: as above.
    let msg = unsafe { std::ffi::CStr::from_ptr((acl().core.aclGetRecentErrMsg)()) };
    assert!(msg.to_string_lossy().contains("HcclReduceOp"), "{msg:?}");
    // Data movement takes every dtype, FP64 and unsigned ones included.
    let ranks = [Rank::new(0), Rank::new(1)];
    let bufs: Vec<_> = (0..2)
        .map(|i| ranks[i].upload(&bytes(&[i as f64 + 0.5; 2])))
        .collect();
    let rs: Vec<i32> = (0..2)
        // SAFETY: a live buffer of 2 doubles on device i.
        .map(|i| unsafe {
            on(ranks[i].device);
            (f.HcclBroadcast)(bufs[i], 2, HCCL_DATA_TYPE_FP64, 0, cs[i], ranks[i].stream)
        })
        .collect();
    for i in 0..2 {
        assert_eq!(values::<f64>(&ranks[i].download(bufs[i], 16)), [0.5; 2]);
    }
    assert_eq!(rs, [HCCL_SUCCESS; 2]);
    destroy(cs);
}

#[test]
#[serial]
fn bad_buffers_streams_ranks_and_handles_are_refused() {
    let cs = comms(&[0, 1]);
    let (r0, r1) = (Rank::new(0), Rank::new(1));
    let on0 = r0.upload(&[0u8; 16]);
    let on1 = r1.upload(&[0u8; 16]);
    let f = &hccl().fns;
    // SAFETY: the calls are refused before touching any buffer.
    unsafe {
        // Rank 0 issued from a thread bound to device 1 (the issuing thread uses the rank's
        // device context, hccl-abi.md rule 3).
        assert_eq!(
            (f.HcclAllReduce)(
                on0,
                on0,
                4,
                HCCL_DATA_TYPE_FP32,
                HCCL_REDUCE_SUM,
                cs[0],
                r0.stream
            ),
            HCCL_E_PARA
        );
        let msg = std::ffi::CStr::from_ptr((acl().core.aclGetRecentErrMsg)());
        assert!(msg.to_string_lossy().contains("bound to npu:1"), "{msg:?}");
        on(0);
        // A buffer of device 1 given to rank 0.
        assert_eq!(
            (f.HcclAllReduce)(
                on1,
                on1,
                4,
                HCCL_DATA_TYPE_FP32,
                HCCL_REDUCE_SUM,
                cs[0],
                r0.stream
            ),
            HCCL_E_PARA
        );
        // A stream of device 1 given to rank 0.
        assert_eq!(
            (f.HcclAllReduce)(
                on0,
                on0,
                4,
                HCCL_DATA_TYPE_FP32,
                HCCL_REDUCE_SUM,
                cs[0],
                r1.stream
            ),
            HCCL_E_PARA
        );
        // More elements than the buffer holds.
        assert_eq!(
            (f.HcclAllReduce)(
                on0,
                on0,
                5,
                HCCL_DATA_TYPE_FP32,
                HCCL_REDUCE_SUM,
                cs[0],
                r0.stream
            ),
            HCCL_E_PARA
        );
        // A misaligned buffer of a reduction.
        let odd = (on0 as *mut u8).add(2) as *mut c_void;
        assert_eq!(
            (f.HcclAllReduce)(
                odd,
                odd,
                2,
                HCCL_DATA_TYPE_FP32,
                HCCL_REDUCE_SUM,
                cs[0],
                r0.stream
            ),
            HCCL_E_PARA
        );
        assert_eq!(
            (f.HcclAllReduce)(
                on0,
                on0,
                4,
                HCCL_DATA_TYPE_FP32,
                HCCL_REDUCE_SUM,
                cs[0],
                std::ptr::null_mut()
            ),
            HCCL_E_PARA
        );
        assert_eq!(
            (f.HcclSend)(on0, 4, HCCL_DATA_TYPE_FP32, 0, cs[0], r0.stream),
            HCCL_E_PARA
        );
        assert_eq!(
            (f.HcclBroadcast)(on0, 4, HCCL_DATA_TYPE_FP32, 2, cs[0], r0.stream),
            HCCL_E_PARA
        );
        let mut bogus = 0u8;
        let fake = &mut bogus as *mut u8 as HcclComm;
        assert_eq!(
            (f.HcclAllReduce)(
                on0,
                on0,
                4,
                HCCL_DATA_TYPE_FP32,
                HCCL_REDUCE_SUM,
                fake,
                r0.stream
            ),
            HCCL_E_PTR
        );
        let mut dup = [0i32, 0];
        let mut out = [std::ptr::null_mut(); 2];
        let init = hccl().optional.HcclCommInitAll.unwrap();
        assert_eq!(init(2, dup.as_mut_ptr(), out.as_mut_ptr()), HCCL_E_PARA);
    }
    let mut size = 0u32;
    let mut rank = 9u32;
    // SAFETY: valid out-pointers.
    unsafe {
        (hccl().optional.HcclGetRankSize.unwrap())(cs[1], &mut size);
        (hccl().optional.HcclGetRankId.unwrap())(cs[1], &mut rank);
    }
    assert_eq!((size, rank), (2, 1));
    assert_eq!(hccl().error_string(HCCL_E_NOT_SUPPORT), "not supported");
    destroy(cs);
}

#[test]
#[serial]
fn mismatched_parameters_fail_both_ranks() {
    let cs = comms(&[0, 1]);
    let r = [Rank::new(0), Rank::new(1)];
    let b = [r[0].upload(&[0u8; 32]), r[1].upload(&[0u8; 32])];
    let f = &hccl().fns;
    for (i, count) in [(0usize, 4u64), (1, 8)] {
        on(r[i].device);
        // SAFETY: live buffers of 8 floats.
        let code = unsafe {
            (f.HcclAllReduce)(
                b[i],
                b[i],
                count,
                HCCL_DATA_TYPE_FP32,
                HCCL_REDUCE_SUM,
                cs[i],
                r[i].stream,
            )
        };
        assert_eq!(code, HCCL_SUCCESS);
    }
    for (i, rank) in r.iter().enumerate() {
        let e = rank.sync().unwrap_err();
        assert_eq!(e.code(), Some(ACL_ERROR_RT_TASK_TIMEOUT));
        let text = e.to_string();
        assert!(
            text.contains("mismatched") && text.contains("of 4") && text.contains("of 8"),
            "{text}"
        );
        let mut async_error = 0;
        // SAFETY: valid out-pointer.
        unsafe { (hccl().optional.HcclGetCommAsyncError.unwrap())(cs[i], &mut async_error) };
        assert_eq!(async_error, HCCL_E_TIMEOUT);
    }
    // The failure stopped both devices, as any device fault does (sticky until reset): a new
    // transfer is refused at issue, and so is a new communicator on them.
    on(0);
    // SAFETY: a live buffer of 8 floats.
    let code = unsafe {
        (f.HcclAllReduce)(
            b[0],
            b[0],
            4,
            HCCL_DATA_TYPE_FP32,
            HCCL_REDUCE_SUM,
            cs[0],
            r[0].stream,
        )
    };
    assert_eq!(code, HCCL_E_RUNTIME);
    let recent = || {
        // SAFETY: returns a NUL-terminated string.
        unsafe { std::ffi::CStr::from_ptr((acl().core.aclGetRecentErrMsg)()) }
            .to_string_lossy()
            .into_owned()
    };
    let msg = recent();
    assert!(
        msg.contains("mismatched") && msg.contains("until aclrtResetDevice"),
        "{msg}"
    );
    let (mut ids, mut more) = ([0i32, 1], [std::ptr::null_mut(); 2]);
    let init = hccl().optional.HcclCommInitAll.unwrap();
    // SAFETY: both arrays hold 2 entries.
    let code = unsafe { init(2, ids.as_mut_ptr(), more.as_mut_ptr()) };
    assert_eq!(code, HCCL_E_RUNTIME);
    // A reset destroys the devices' contexts and the communicators in them: every call but the
    // destroy refuses them after it.
    reset(0);
    reset(1);
    on(0);
    let mut size = 0u32;
    // SAFETY: valid out-pointer.
    let code = unsafe { (hccl().optional.HcclGetRankSize.unwrap())(cs[0], &mut size) };
    assert_eq!(code, HCCL_E_RUNTIME);
    assert!(recent().contains("was reset"), "{}", recent());
    destroy(cs);
    // New communicators on the reset devices work.
    let out = all_reduce(
        &[vec![1.0f32, 2.0], vec![3.0, 4.0]],
        HCCL_DATA_TYPE_FP32,
        HCCL_REDUCE_SUM,
    );
    assert_eq!(out, vec![vec![4.0f32, 6.0]; 2]);
}

#[test]
#[serial]
fn a_rank_that_never_joins_times_out() {
    std::env::set_var("HCCL_EXEC_TIMEOUT", "1");
    let cs = comms(&[0, 1]);
    std::env::remove_var("HCCL_EXEC_TIMEOUT");
    let r = Rank::new(0);
    let b = r.upload(&[0u8; 16]);
    let start = std::time::Instant::now();
    // SAFETY: a live buffer of 4 floats.
    let code = unsafe {
        (hccl().fns.HcclAllReduce)(
            b,
            b,
            4,
            HCCL_DATA_TYPE_FP32,
            HCCL_REDUCE_SUM,
            cs[0],
            r.stream,
        )
    };
    assert_eq!(code, HCCL_SUCCESS);
    let e = r.sync().unwrap_err();
    let waited = start.elapsed().as_secs_f64();
    assert!((0.9..10.0).contains(&waited), "waited {waited} s");
    assert_eq!(e.code(), Some(ACL_ERROR_RT_TASK_TIMEOUT));
    assert!(
        e.to_string().contains("HCCL_EXEC_TIMEOUT") && e.to_string().contains("[1]"),
        "{e}"
    );
    destroy(cs);
    // The timeout stopped device 0 (sticky): later tests need it back.
    reset(0);
}

#[test]
#[serial]
fn root_info_ranks_meet_over_tcp_from_two_threads() {
    acl();
    on(0);
    let mut info = HcclRootInfo::default();
    // SAFETY: valid out-pointer.
    hccl()
        .check(
            unsafe { (hccl().fns.HcclGetRootInfo)(&mut info) },
            "HcclGetRootInfo",
        )
        .unwrap();
    let results: Vec<Vec<f32>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|rank| {
                let info = info;
                s.spawn(move || {
                    let r = Rank::new(rank);
                    let mut comm = std::ptr::null_mut();
                    // SAFETY: valid pointers.
                    hccl()
                        .check(
                            unsafe {
                                (hccl().fns.HcclCommInitRootInfo)(2, &info, rank as u32, &mut comm)
                            },
                            "HcclCommInitRootInfo",
                        )
                        .unwrap();
                    let b = r.upload(&bytes(&[rank as f32 + 1.0; 3]));
                    // SAFETY: a live buffer of 3 floats.
                    let code = unsafe {
                        (hccl().fns.HcclAllReduce)(
                            b,
                            b,
                            3,
                            HCCL_DATA_TYPE_FP32,
                            HCCL_REDUCE_SUM,
                            comm,
                            r.stream,
                        )
                    };
                    hccl().check(code, "HcclAllReduce").unwrap();
                    let out = values::<f32>(&r.download(b, 12));
                    destroy(vec![comm]);
                    out
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(results, vec![vec![3.0f32; 3]; 2]);
}

#[test]
#[serial]
fn comm_config_traps_are_enforced() {
    acl();
    on(0);
    let init = hccl().optional.HcclCommInitRootInfoConfig.unwrap();
    let capability = unsafe { (hccl().optional.HcclGetCommConfigCapability.unwrap())() };
    let root = || {
        let mut info = HcclRootInfo::default();
        // SAFETY: valid out-pointer.
        hccl()
            .check(unsafe { (hccl().fns.HcclGetRootInfo)(&mut info) }, "root")
            .unwrap();
        info
    };
    let mut comm = std::ptr::null_mut();
    // The "not set" buffer size, as 8.2.RC1's inline initialiser leaves it.
    let unset = CommConfig::new(u32::MAX, false, "trap", capability);
    let info = root();
    // SAFETY: valid pointers.
    assert_eq!(
        unsafe { init(1, &info, 0, unset.as_ptr(), &mut comm) },
        HCCL_E_PARA
    );
    let zeros = [0u8; 300];
    assert_eq!(
        unsafe { init(1, &info, 0, zeros.as_ptr() as _, &mut comm) },
        HCCL_E_PARA
    );
    let good = CommConfig::new(64, true, "explicit", capability);
    let info = root();
    assert_eq!(
        unsafe { init(1, &info, 0, good.as_ptr(), &mut comm) },
        HCCL_SUCCESS
    );
    // The communicator reserved its two 64 MB staging buffers.
    let free = || {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers.
        unsafe { (acl().core.aclrtGetMemInfo)(ACL_HBM_MEM, &mut free, &mut total) };
        free
    };
    let held = free();
    destroy(vec![comm]);
    assert!(
        free() - held >= 128 << 20,
        "{} bytes released",
        free() - held
    );
}
