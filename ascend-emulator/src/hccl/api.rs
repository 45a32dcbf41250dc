//! The emulated HCCL functions, with HCCL's C signatures (`../shared/ascend/hccl-abi.md`).
//!
//! A call checks its arguments at once and returns the `HcclResult` HCCL documents for them
//! (`HCCL_E_NOT_SUPPORT` for a dtype or reduce op Atlas A2 lacks, `HCCL_E_PARA`/`HCCL_E_PTR`
//! for bad counts, ranks, buffers and streams), leaving the details for `aclGetRecentErrMsg`.
//! A transfer is then queued on the given stream and the call returns (a rank's first transfer
//! on an `HcclCommInitAll` communicator first waits for every rank's first, `comm::Connect`):
//! the rank's part runs
//! when the stream reaches it, waits there for the other ranks, and a failure (a peer that
//! never joins within `HCCL_EXEC_TIMEOUT`, mismatched parameters) becomes an error of that
//! stream, reported at its next synchronisation, and the communicator's asynchronous error.
#![allow(
    missing_docs,
    non_snake_case,
    clippy::missing_safety_doc,
    clippy::too_many_arguments
)]

use std::ffi::{c_char, c_void, CStr};
use std::sync::Arc;
use std::time::Duration;

use ascend_acl::hccl::data_type::facts;
use ascend_acl::hccl::env::*;
use ascend_acl::hccl::result::*;
use ascend_acl::hccl::{HcclComm, HcclRootInfo, ParsedCommConfig};
use ascend_acl::types::aclrtStream;
use ascend_acl::types::status::ACL_ERROR_RT_TASK_TIMEOUT;

use super::comm::{registry, Comm, Connect, Key, Rendezvous, Transport};
use super::net::{start_hub, NetLink, RootAddr};
use super::semantics::{supported, Kind, Op};
use crate::fault::{fault, panic_text, report, Fault};
use crate::machine::machine;
use crate::stream::Stream;

/// Runs `body`, turning a fault into its `HcclResult` (and the recent error message) and a panic
/// into HCCL_E_INTERNAL.
fn guard(what: &str, body: impl FnOnce() -> Result<(), Fault>) -> i32 {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(Ok(())) => HCCL_SUCCESS,
        Ok(Err(f)) => report(Fault {
            code: f.code,
            message: format!("{what}: {}", f.message),
        }),
        Err(p) => report(fault(
            HCCL_E_INTERNAL,
            format!("internal error in emulated {what}: {}", panic_text(&p)),
        )),
    }
}

/// An environment variable holding whole seconds within `range`, else its default.
fn env_seconds(
    name: &str,
    default: u64,
    range: std::ops::RangeInclusive<u64>,
) -> Result<u64, Fault> {
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(v) => v
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|s| range.contains(s))
            .ok_or_else(|| {
                fault(
                    HCCL_E_PARA,
                    format!(
                        "{name}={v:?} is not a whole number in [{}, {}]",
                        range.start(),
                        range.end()
                    ),
                )
            }),
    }
}

/// `HCCL_EXEC_TIMEOUT`: A2 in HOST mode takes [0, 2147483647] s, default 1836, 0 = never.
fn exec_timeout() -> Result<Option<Duration>, Fault> {
    let s = env_seconds(HCCL_EXEC_TIMEOUT, 1836, 0..=2_147_483_647)?;
    Ok((s > 0).then(|| Duration::from_secs(s)))
}

/// `HCCL_CONNECT_TIMEOUT`: [120, 7200] s, default 120; HCCL waits 20 s beyond it.
fn connect_timeout() -> Result<Duration, Fault> {
    Ok(Duration::from_secs(
        env_seconds(HCCL_CONNECT_TIMEOUT, 120, 120..=7200)? + 20,
    ))
}

/// `HCCL_BUFFSIZE` in MB (at least 1, default 200).
fn buffer_mb() -> Result<u64, Fault> {
    env_seconds(HCCL_BUFFSIZE, 200, 1..=u32::MAX as u64)
}

/// A runtime failure under HCCL (a stopped device, an unbound thread) as HCCL reports it.
fn runtime(f: Fault) -> Fault {
    fault(HCCL_E_RUNTIME, f.message)
}

/// Reserves the communicator's two staging buffers on `device`, as HCCL does at creation;
/// returns them with the device's generation. A device stopped by a fault takes no new
/// communicator (its context is unusable until reset, see `stream.rs`).
fn reserve_staging(device: i32, mb: u64) -> Result<(u64, u64), Fault> {
    let npu = machine().npu(device).map_err(runtime)?;
    npu.fault.check().map_err(runtime)?;
    let staging = npu.memory.malloc(((2 * mb) << 20) as usize).map_err(|f| {
        fault(
            HCCL_E_MEMORY,
            format!("staging buffers of 2 x {mb} MB: {}", f.message),
        )
    })?;
    Ok((staging, npu.generation()))
}

fn new_handle(comm: Comm) -> HcclComm {
    let handle = Arc::into_raw(Arc::new(comm)) as HcclComm;
    registry().lock().unwrap().insert(handle as usize);
    handle
}

fn comm_of(handle: HcclComm) -> Result<Arc<Comm>, Fault> {
    if !registry().lock().unwrap().contains(&(handle as usize)) {
        return Err(fault(
            HCCL_E_PTR,
            format!("{handle:?} is not a live communicator"),
        ));
    }
    // SAFETY: registered handles come from Arc::into_raw and are live until destroyed.
    unsafe {
        Arc::increment_strong_count(handle as *const Comm);
        Ok(Arc::from_raw(handle as *const Comm))
    }
}

/// A live communicator whose device still has the context it was created in.
/// `aclrtResetDevice` destroys that context with everything in it (its memory, the
/// communicator's staging buffers among it); HCCL's order is HcclCommDestroy, then the reset
/// (hccl-abi.md rule 1). What HCCL does with a communicator used after the reset is not
/// documented: the emulation takes the strict reading and refuses every call but the destroy.
fn usable(handle: HcclComm) -> Result<Arc<Comm>, Fault> {
    let c = comm_of(handle)?;
    if machine().npu(c.device).map_err(runtime)?.generation() != c.generation {
        return Err(fault(
            HCCL_E_RUNTIME,
            format!(
                "rank {} of this communicator ran on npu:{}, which was reset \
                 (aclrtResetDevice) since: the communicator went with that context; destroy it \
                 (HcclCommDestroy, which belongs before the reset) and create a new one",
                c.rank, c.device
            ),
        ));
    }
    Ok(c)
}

unsafe fn out<'a, T>(p: *mut T, name: &str) -> Result<&'a mut T, Fault> {
    p.as_mut()
        .ok_or_else(|| fault(HCCL_E_PTR, format!("{name} is NULL")))
}

pub unsafe extern "C" fn HcclGetRootInfo(root_info: *mut HcclRootInfo) -> i32 {
    guard("HcclGetRootInfo", || {
        let info = out(root_info, "rootInfo")?;
        machine().current().map_err(runtime)?;
        let root = start_hub(connect_timeout()?).map_err(|m| fault(HCCL_E_TCP_CONNECT, m))?;
        root.write(info);
        Ok(())
    })
}

unsafe fn init_root_info(
    n_ranks: u32,
    root_info: *const HcclRootInfo,
    rank: u32,
    config: Option<ParsedCommConfig>,
    comm: *mut HcclComm,
) -> Result<(), Fault> {
    let slot = out(comm, "comm")?;
    let info = root_info
        .as_ref()
        .ok_or_else(|| fault(HCCL_E_PTR, "rootInfo is NULL"))?;
    let root = RootAddr::read(info).ok_or_else(|| {
        fault(
            HCCL_E_PARA,
            "rootInfo was not written by HcclGetRootInfo (copy its 4108 bytes unchanged)",
        )
    })?;
    if n_ranks == 0 || rank >= n_ranks {
        return Err(fault(
            HCCL_E_PARA,
            format!("rank {rank} of {n_ranks} ranks is out of range"),
        ));
    }
    let (device, _) = machine().current().map_err(runtime)?;
    let mb = match &config {
        Some(c) => c.buffer_mb as u64,
        None => buffer_mb()?,
    };
    let exec = exec_timeout()?;
    let link = NetLink::connect(root, n_ranks, rank, connect_timeout()?)
        .map_err(|(code, m)| fault(code, m))?;
    let (staging, generation) = reserve_staging(device, mb)?;
    *slot = new_handle(Comm::new(
        rank,
        n_ranks,
        (device, generation),
        Arc::new(link),
        exec,
        staging,
    ));
    Ok(())
}

pub unsafe extern "C" fn HcclCommInitRootInfo(
    n_ranks: u32,
    root_info: *const HcclRootInfo,
    rank: u32,
    comm: *mut HcclComm,
) -> i32 {
    guard("HcclCommInitRootInfo", || {
        init_root_info(n_ranks, root_info, rank, None, comm)
    })
}

pub unsafe extern "C" fn HcclCommInitRootInfoConfig(
    n_ranks: u32,
    root_info: *const HcclRootInfo,
    rank: u32,
    config: *const c_void,
    comm: *mut HcclComm,
) -> i32 {
    guard("HcclCommInitRootInfoConfig", || {
        if config.is_null() {
            return Err(fault(HCCL_E_PTR, "config is NULL"));
        }
        let parsed = ParsedCommConfig::read(config as *const u8)
            .ok_or_else(|| fault(HCCL_E_PARA, "config lacks HcclCommConfig's magic word: initialise it as HcclCommConfigInit does"))?;
        // The emulation parses like the releases before 8.2.RC1 (the strictest): "not set"
        // markers are taken literally, so they are rejected here.
        if parsed.buffer_mb == u32::MAX || parsed.buffer_mb == 0 {
            return Err(fault(
                HCCL_E_PARA,
                format!(
                    "hcclBufferSize {:#x} MB: releases before 8.2.RC1 take the 'not set' marker literally; set the size explicitly",
                    parsed.buffer_mb
                ),
            ));
        }
        if parsed.deterministic > 1 {
            return Err(fault(
                HCCL_E_PARA,
                format!(
                    "hcclDeterministic {:#x}: releases before 8.2.RC1 accept only 0 or 1",
                    parsed.deterministic
                ),
            ));
        }
        init_root_info(n_ranks, root_info, rank, Some(parsed), comm)
    })
}

pub unsafe extern "C" fn HcclCommInitAll(
    ndev: u32,
    devices: *mut i32,
    comms: *mut HcclComm,
) -> i32 {
    guard("HcclCommInitAll", || {
        if devices.is_null() || comms.is_null() {
            return Err(fault(HCCL_E_PTR, "devices or comms is NULL"));
        }
        if ndev == 0 {
            return Err(fault(HCCL_E_PARA, "ndev is 0"));
        }
        let ids = std::slice::from_raw_parts(devices, ndev as usize).to_vec();
        let m = machine();
        for (i, &d) in ids.iter().enumerate() {
            m.npu(d).map_err(|f| fault(HCCL_E_PARA, f.message))?;
            if ids[..i].contains(&d) {
                return Err(fault(
                    HCCL_E_PARA,
                    format!("device {d} is listed twice in {ids:?}"),
                ));
            }
        }
        let exec = exec_timeout()?;
        let mb = buffer_mb()?;
        let connect_within = connect_timeout()?;
        let group: Arc<dyn Transport> = Arc::new(Rendezvous::default());
        let connect = Arc::new(Connect::new(ids.len()));
        let mut made = Vec::with_capacity(ids.len());
        for (rank, &device) in ids.iter().enumerate() {
            match reserve_staging(device, mb) {
                Ok((staging, generation)) => made.push(
                    Comm::new(
                        rank as u32,
                        ndev,
                        (device, generation),
                        group.clone(),
                        exec,
                        staging,
                    )
                    .connecting(connect.clone(), connect_within),
                ),
                Err(f) => {
                    for c in &made {
                        let _ = m.npu(c.device).map(|n| n.memory.free(c.staging()));
                    }
                    return Err(f);
                }
            }
        }
        for (i, c) in made.into_iter().enumerate() {
            *comms.add(i) = new_handle(c);
        }
        Ok(())
    })
}

pub unsafe extern "C" fn HcclCommDestroy(comm: HcclComm) -> i32 {
    guard("HcclCommDestroy", || {
        let c = comm_of(comm)?;
        registry().lock().unwrap().remove(&(comm as usize));
        drop(Arc::from_raw(comm as *const Comm));
        c.close();
        let npu = machine().npu(c.device).map_err(runtime)?;
        // After a reset the staging buffers went with the context (and their addresses may
        // be another allocation's now).
        if npu.generation() == c.generation {
            npu.memory.free(c.staging()).map_err(runtime)?;
        }
        Ok(())
    })
}

pub unsafe extern "C" fn HcclGetRankSize(comm: HcclComm, rank_size: *mut u32) -> i32 {
    guard("HcclGetRankSize", || {
        *out(rank_size, "rankSize")? = usable(comm)?.size;
        Ok(())
    })
}

pub unsafe extern "C" fn HcclGetRankId(comm: HcclComm, rank: *mut u32) -> i32 {
    guard("HcclGetRankId", || {
        *out(rank, "rank")? = usable(comm)?.rank;
        Ok(())
    })
}

pub unsafe extern "C" fn HcclGetCommAsyncError(comm: HcclComm, async_error: *mut i32) -> i32 {
    guard("HcclGetCommAsyncError", || {
        *out(async_error, "asyncError")? = usable(comm)?.async_error();
        Ok(())
    })
}

/// Capabilities of an 8.1.RC1 library: buffer size, deterministic, name, expansion mode.
pub unsafe extern "C" fn HcclGetCommConfigCapability() -> u32 {
    4
}

pub unsafe extern "C" fn HcclGetErrorString(code: i32) -> *const c_char {
    let text: &'static CStr = match code {
        HCCL_SUCCESS => c"success",
        HCCL_E_PARA => c"parameter error",
        HCCL_E_PTR => c"empty or invalid pointer",
        HCCL_E_MEMORY => c"memory error",
        HCCL_E_INTERNAL => c"internal error",
        HCCL_E_NOT_SUPPORT => c"not supported",
        HCCL_E_NOT_FOUND => c"resource not found",
        HCCL_E_UNAVAIL => c"resource unavailable",
        HCCL_E_SYSCALL => c"system call error",
        HCCL_E_TIMEOUT => c"timeout",
        HCCL_E_TCP_CONNECT => c"TCP connect failed",
        HCCL_E_TCP_TRANSFER => c"TCP transfer failed",
        HCCL_E_RUNTIME => c"runtime error",
        _ => c"unknown error",
    };
    text.as_ptr()
}

/// A byte range of device memory.
#[derive(Clone, Copy)]
struct Region {
    addr: u64,
    len: usize,
}

/// The stream a rank's part is queued on: a live stream of the rank's own device, issued from
/// a thread bound to that device (the issuing threads of a communicator on a device use its
/// context, hccl-abi.md rule 3), which has not stopped at a fault.
fn stream_of(handle: aclrtStream, comm: &Comm) -> Result<Arc<Stream>, Fault> {
    let (current, npu) = machine().current().map_err(runtime)?;
    if current != comm.device {
        return Err(fault(
            HCCL_E_PARA,
            format!(
                "the calling thread is bound to npu:{current}, but rank {} of the communicator \
                 runs on npu:{}: bind that device first (aclrtSetDevice)",
                comm.rank, comm.device
            ),
        ));
    }
    npu.fault.check().map_err(runtime)?;
    if handle.is_null() {
        return Err(fault(
            HCCL_E_PARA,
            "stream is NULL: HCCL queues its tasks on an explicit stream",
        ));
    }
    let s = machine()
        .stream(handle)
        .map_err(|f| fault(HCCL_E_PARA, f.message))?;
    if s.device() != comm.device {
        return Err(fault(
            HCCL_E_PARA,
            format!(
                "the stream belongs to npu:{} but rank {} of the communicator runs on npu:{}",
                s.device(),
                comm.rank,
                comm.device
            ),
        ));
    }
    Ok(s)
}

/// `len` bytes at `ptr`: live memory of the rank's device, aligned to the element size.
fn region(
    comm: &Comm,
    ptr: *const c_void,
    len: usize,
    elem: usize,
    what: &str,
) -> Result<Region, Fault> {
    let addr = ptr as u64;
    if len == 0 {
        return Ok(Region { addr, len });
    }
    if ptr.is_null() {
        return Err(fault(HCCL_E_PTR, format!("{what} is NULL")));
    }
    let npu = machine().npu(comm.device).map_err(runtime)?;
    if !npu.memory.owns(addr) {
        return Err(fault(
            HCCL_E_PARA,
            format!(
                "{what} 0x{addr:x} is not memory of npu:{}, where rank {} runs",
                comm.device, comm.rank
            ),
        ));
    }
    npu.memory
        .check(addr, len)
        .map_err(|f| fault(HCCL_E_PARA, format!("{what}: {}", f.message)))?;
    if !addr.is_multiple_of(elem as u64) {
        return Err(fault(
            HCCL_E_PARA,
            format!("{what} 0x{addr:x} is not aligned to its {elem}-byte elements"),
        ));
    }
    Ok(Region { addr, len })
}

fn check_dtype(kind: Kind, dtype: i32, op: Option<i32>) -> Result<usize, Fault> {
    supported(kind, dtype, op).map_err(|(invalid, m)| {
        fault(
            if invalid {
                HCCL_E_PARA
            } else {
                HCCL_E_NOT_SUPPORT
            },
            m,
        )
    })?;
    Ok(facts(dtype).map_or(1, |f| f.0))
}

fn bytes_of(count: u64, elem: usize) -> Result<usize, Fault> {
    count
        .checked_mul(elem as u64)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| fault(HCCL_E_PARA, format!("count {count} is too large")))
}

/// Queues the rank's part of transfer `key`: read `reads` from device memory, exchange, write
/// the output over `writes` in order.
fn enqueue(
    comm: Arc<Comm>,
    stream: &Stream,
    key: Key,
    parties: usize,
    participant: usize,
    op: Op,
    reads: Vec<Region>,
    writes: Vec<Region>,
) -> Result<(), Fault> {
    let queued = stream.enqueue(Box::new(move || {
        let op = op.clone();
        let npu = machine().npu(comm.device)?;
        let mut input = Vec::with_capacity(reads.iter().map(|r| r.len).sum());
        for r in reads.iter().filter(|r| r.len > 0) {
            let (block, off) = npu.memory.resolve(r.addr, r.len)?;
            // SAFETY: resolve checked the range.
            input.extend_from_slice(unsafe {
                std::slice::from_raw_parts(block.host_ptr(off), r.len)
            });
        }
        let what = op.describe();
        let output = comm
            .exchange(key, parties, participant, op, input)
            .map_err(|e| {
                fault(
                    ACL_ERROR_RT_TASK_TIMEOUT,
                    format!(
                        "HCCL task of rank {} on npu:{} failed ({}): {}",
                        comm.rank,
                        comm.device,
                        ascend_acl::hccl::result::name(e.code),
                        e.message
                    ),
                )
            })?;
        let expected: usize = writes.iter().map(|w| w.len).sum();
        if output.len() != expected {
            return Err(fault(
                ACL_ERROR_RT_TASK_TIMEOUT,
                format!(
                    "{what}: {} bytes arrived for {expected} bytes of output",
                    output.len()
                ),
            ));
        }
        let mut at = 0;
        for w in writes.iter().filter(|w| w.len > 0) {
            let (block, off) = npu.memory.resolve(w.addr, w.len)?;
            // SAFETY: resolve checked the range.
            unsafe {
                std::ptr::copy_nonoverlapping(output[at..].as_ptr(), block.host_ptr(off), w.len)
            };
            at += w.len;
        }
        Ok(())
    }));
    queued.map_err(runtime)
}

/// A2 supports collectives inside ACL graph capture (hccl-abi.md §8), but the emulation does not
/// model their replay (all ranks replaying one capture's transfers in step): refused, the
/// stricter side, before the transfer takes a place in the rank's order (a refused transfer
/// must not shift the matching of the next ones).
fn not_capturing(stream: &Stream, op: &Op) -> Result<(), Fault> {
    if stream.capture().is_some() {
        return Err(fault(
            HCCL_E_NOT_SUPPORT,
            format!(
                "{}: collectives inside an ACL graph capture are not modelled by the emulated \
                 HCCL; issue them outside the capture",
                op.describe()
            ),
        ));
    }
    Ok(())
}

/// The rank's first transfer connects its communicator (`comm::Connect`): checked after every
/// argument, so a refused call neither connects nor takes a place in the rank's order.
fn connect(comm: &Comm) -> Result<(), Fault> {
    comm.connect().map_err(|e| fault(e.code, e.message))
}

/// Queues a collective of every rank of `comm`.
fn collective(
    comm: Arc<Comm>,
    stream: &Stream,
    op: Op,
    reads: Vec<Region>,
    writes: Vec<Region>,
) -> Result<(), Fault> {
    not_capturing(stream, &op)?;
    connect(&comm)?;
    let key = comm.next_collective();
    let (n, rank) = (comm.size as usize, comm.rank as usize);
    enqueue(comm, stream, key, n, rank, op, reads, writes)
}

pub unsafe extern "C" fn HcclAllReduce(
    send_buf: *mut c_void,
    recv_buf: *mut c_void,
    count: u64,
    data_type: i32,
    op: i32,
    comm: HcclComm,
    stream: aclrtStream,
) -> i32 {
    guard("HcclAllReduce", || {
        let c = usable(comm)?;
        let elem = check_dtype(Kind::AllReduce, data_type, Some(op))?;
        let s = stream_of(stream, &c)?;
        let len = bytes_of(count, elem)?;
        let read = region(&c, send_buf, len, elem, "sendBuf")?;
        let write = region(&c, recv_buf, len, elem, "recvBuf")?;
        let op = Op::AllReduce {
            count,
            dtype: data_type,
            op,
        };
        collective(c, &s, op, vec![read], vec![write])
    })
}

pub unsafe extern "C" fn HcclBroadcast(
    buf: *mut c_void,
    count: u64,
    data_type: i32,
    root: u32,
    comm: HcclComm,
    stream: aclrtStream,
) -> i32 {
    guard("HcclBroadcast", || {
        let c = usable(comm)?;
        let elem = check_dtype(Kind::Broadcast, data_type, None)?;
        if root >= c.size {
            return Err(fault(
                HCCL_E_PARA,
                format!("root {root} is not a rank of the {} ranks", c.size),
            ));
        }
        let s = stream_of(stream, &c)?;
        let r = region(&c, buf, bytes_of(count, elem)?, elem, "buf")?;
        let reads = if c.rank == root { vec![r] } else { Vec::new() };
        let op = Op::Broadcast {
            count,
            dtype: data_type,
            root,
        };
        collective(c, &s, op, reads, vec![r])
    })
}

pub unsafe extern "C" fn HcclAllGather(
    send_buf: *mut c_void,
    recv_buf: *mut c_void,
    send_count: u64,
    data_type: i32,
    comm: HcclComm,
    stream: aclrtStream,
) -> i32 {
    guard("HcclAllGather", || {
        let c = usable(comm)?;
        let elem = check_dtype(Kind::AllGather, data_type, None)?;
        let s = stream_of(stream, &c)?;
        let len = bytes_of(send_count, elem)?;
        let read = region(&c, send_buf, len, elem, "sendBuf")?;
        let write = region(&c, recv_buf, len * c.size as usize, elem, "recvBuf")?;
        let op = Op::AllGather {
            count: send_count,
            dtype: data_type,
        };
        collective(c, &s, op, vec![read], vec![write])
    })
}

pub unsafe extern "C" fn HcclReduceScatter(
    send_buf: *mut c_void,
    recv_buf: *mut c_void,
    recv_count: u64,
    data_type: i32,
    op: i32,
    comm: HcclComm,
    stream: aclrtStream,
) -> i32 {
    guard("HcclReduceScatter", || {
        let c = usable(comm)?;
        let elem = check_dtype(Kind::ReduceScatter, data_type, Some(op))?;
        let s = stream_of(stream, &c)?;
        let len = bytes_of(recv_count, elem)?;
        let read = region(&c, send_buf, len * c.size as usize, elem, "sendBuf")?;
        let write = region(&c, recv_buf, len, elem, "recvBuf")?;
        let op = Op::ReduceScatter {
            count: recv_count,
            dtype: data_type,
            op,
        };
        collective(c, &s, op, vec![read], vec![write])
    })
}

/// A host array of one `uint64_t` per rank.
unsafe fn per_rank(p: *const c_void, n: u32, what: &str) -> Result<Vec<u64>, Fault> {
    if p.is_null() {
        return Err(fault(HCCL_E_PTR, format!("{what} is NULL")));
    }
    Ok(std::slice::from_raw_parts(p as *const u64, n as usize).to_vec())
}

pub unsafe extern "C" fn HcclAlltoAllV(
    send_buf: *const c_void,
    send_counts: *const c_void,
    sdispls: *const c_void,
    send_type: i32,
    recv_buf: *const c_void,
    recv_counts: *const c_void,
    rdispls: *const c_void,
    recv_type: i32,
    comm: HcclComm,
    stream: aclrtStream,
) -> i32 {
    guard("HcclAlltoAllV", || {
        let c = usable(comm)?;
        let elem = check_dtype(Kind::AlltoAllV, send_type, None)?;
        if recv_type != send_type {
            return Err(fault(
                HCCL_E_PARA,
                format!("recvType {recv_type} differs from sendType {send_type}"),
            ));
        }
        let s = stream_of(stream, &c)?;
        let n = c.size;
        let (sc, sd) = (
            per_rank(send_counts, n, "sendCounts")?,
            per_rank(sdispls, n, "sdispls")?,
        );
        let (rc, rd) = (
            per_rank(recv_counts, n, "recvCounts")?,
            per_rank(rdispls, n, "rdispls")?,
        );
        let total = |counts: &[u64], displs: &[u64]| -> Result<usize, Fault> {
            let end = counts
                .iter()
                .zip(displs)
                .filter(|(c, _)| **c > 0)
                .map(|(c, d)| c.checked_add(*d))
                .try_fold(0u64, |m, e| e.map(|e| m.max(e)))
                .ok_or_else(|| fault(HCCL_E_PARA, "counts plus displacements overflow"))?;
            bytes_of(end, elem)
        };
        let send = region(&c, send_buf, total(&sc, &sd)?, elem, "sendBuf")?;
        let recv = region(&c, recv_buf, total(&rc, &rd)?, elem, "recvBuf")?;
        if send.len > 0 && recv.len > 0 && send.addr == recv.addr {
            return Err(fault(HCCL_E_PARA, "recvBuf must differ from sendBuf"));
        }
        let parts = |base: Region, counts: &[u64], displs: &[u64]| -> Vec<Region> {
            counts
                .iter()
                .zip(displs)
                .map(|(&c, &d)| Region {
                    addr: base.addr + d * elem as u64,
                    len: c as usize * elem,
                })
                .collect()
        };
        let reads = parts(send, &sc, &sd);
        let writes = parts(recv, &rc, &rd);
        let op = Op::AlltoAllV {
            dtype: send_type,
            send_counts: sc,
            recv_counts: rc,
        };
        collective(c, &s, op, reads, writes)
    })
}

fn check_peer(c: &Comm, peer: u32, what: &str) -> Result<(), Fault> {
    if peer >= c.size || peer == c.rank {
        return Err(fault(
            HCCL_E_PARA,
            format!(
                "{what} {peer} is not another rank of the {} ranks (this is rank {})",
                c.size, c.rank
            ),
        ));
    }
    Ok(())
}

pub unsafe extern "C" fn HcclSend(
    send_buf: *mut c_void,
    count: u64,
    data_type: i32,
    dest_rank: u32,
    comm: HcclComm,
    stream: aclrtStream,
) -> i32 {
    guard("HcclSend", || {
        let c = usable(comm)?;
        let elem = check_dtype(Kind::SendRecv, data_type, None)?;
        check_peer(&c, dest_rank, "destRank")?;
        let s = stream_of(stream, &c)?;
        let read = region(&c, send_buf, bytes_of(count, elem)?, elem, "sendBuf")?;
        let op = Op::Send {
            count,
            dtype: data_type,
            peer: dest_rank,
        };
        not_capturing(&s, &op)?;
        connect(&c)?;
        let key = c.next_p2p(c.rank, dest_rank);
        enqueue(c, &s, key, 2, 0, op, vec![read], Vec::new())
    })
}

pub unsafe extern "C" fn HcclRecv(
    recv_buf: *mut c_void,
    count: u64,
    data_type: i32,
    src_rank: u32,
    comm: HcclComm,
    stream: aclrtStream,
) -> i32 {
    guard("HcclRecv", || {
        let c = usable(comm)?;
        let elem = check_dtype(Kind::SendRecv, data_type, None)?;
        check_peer(&c, src_rank, "srcRank")?;
        let s = stream_of(stream, &c)?;
        let write = region(&c, recv_buf, bytes_of(count, elem)?, elem, "recvBuf")?;
        let op = Op::Recv {
            count,
            dtype: data_type,
            peer: src_rank,
        };
        not_capturing(&s, &op)?;
        connect(&c)?;
        let key = c.next_p2p(src_rank, c.rank);
        enqueue(c, &s, key, 2, 1, op, Vec::new(), vec![write])
    })
}
