//! Collectives on tensors: one tensor for each of some (usually all) local ranks of a
//! [`Communicator`], each on its rank's device; outputs allocated on each rank's device, inputs
//! made contiguous, the HCCL transfer issued on every given rank's stream. Nothing passes
//! through host memory. Every rank of the communicator must take part in each collective, in
//! the same order, in this call or another (HCCL's rule: a rank that never does makes the
//! others fail after `HCCL_EXEC_TIMEOUT`).
//!
//! HCCL has no average: [`Reduce::Mean`] is a sum followed by one scaling on each device. Its
//! dtype rules are Atlas A2's (reductions of f32, f16, bf16 and signed integers; data movement
//! of every dtype, bools as bytes); HCCL refuses the others with `HCCL_E_NOT_SUPPORT`, which
//! comes back here with the op, shapes and devices added.

use std::ffi::c_void;

use super::arith::{binary_scalar, BinaryOp};
use super::copy::{contiguous, contiguous_copy};
use super::tensor::AscendTensor;
use crate::acl::handles::HostScalar;
use crate::acl::hccl::{hccl_data_type, reduce_op};
use crate::acl::{AclError, AclResult, DataType};
use crate::runtime::collective::LocalRank;
use crate::runtime::{AscendDevice, Communicator};

/// How a reducing collective combines the ranks' values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reduce {
    /// The sum.
    Sum,
    /// The product.
    Prod,
    /// The largest value.
    Max,
    /// The smallest value.
    Min,
    /// The sum divided by the number of ranks (float tensors).
    Mean,
}

impl Reduce {
    fn hccl(self) -> i32 {
        match self {
            Reduce::Sum | Reduce::Mean => reduce_op::HCCL_REDUCE_SUM,
            Reduce::Prod => reduce_op::HCCL_REDUCE_PROD,
            Reduce::Max => reduce_op::HCCL_REDUCE_MAX,
            Reduce::Min => reduce_op::HCCL_REDUCE_MIN,
        }
    }
}

/// `[2, 3] DT_FLOAT on emulated:0, emulated:1`, for errors.
fn describe(tensors: &[AscendTensor]) -> String {
    let devices: Vec<String> = tensors
        .iter()
        .map(|t| t.ctx().device().to_string())
        .collect();
    match tensors.first() {
        Some(t) => format!("{} on {}", t.describe(), devices.join(", ")),
        None => "no tensors".into(),
    }
}

fn refuse(op: &str, tensors: &[AscendTensor], why: impl std::fmt::Display) -> AclError {
    AclError::InvalidArgument(format!("{op} of {}: {why}", describe(tensors)))
}

/// The local ranks the tensors belong to (by device, one tensor per rank); with `same`, every
/// tensor of one shape and dtype.
fn ranks<'c>(
    op: &str,
    comm: &'c Communicator,
    tensors: &[AscendTensor],
    same: bool,
) -> AclResult<Vec<&'c LocalRank>> {
    if tensors.is_empty() {
        return Err(refuse(op, tensors, "no tensor to transfer"));
    }
    let mut out: Vec<&LocalRank> = Vec::with_capacity(tensors.len());
    for t in tensors {
        // A tensor of a context a reset destroyed: its memory is gone.
        t.ctx().check_alive()?;
        let device = t.ctx().device();
        let r = comm.rank_on(&device).ok_or_else(|| {
            refuse(
                op,
                tensors,
                format!("{device} holds no rank of the communicator"),
            )
        })?;
        if out.iter().any(|o| std::ptr::eq(*o, r)) {
            return Err(refuse(
                op,
                tensors,
                format!("two tensors for the rank on {device}"),
            ));
        }
        out.push(r);
    }
    if same {
        if let Some(bad) = tensors
            .iter()
            .find(|t| t.shape() != tensors[0].shape() || t.dtype() != tensors[0].dtype())
        {
            return Err(refuse(
                op,
                tensors,
                format!(
                    "every rank must pass the same shape and dtype, one passed {}",
                    bad.describe()
                ),
            ));
        }
    }
    Ok(out)
}

/// The device address of a contiguous tensor's first element.
fn addr(t: &AscendTensor) -> *mut c_void {
    // SAFETY: the offset lies inside the storage.
    unsafe { (t.storage_ptr() as *mut u8).add(t.layout().offset * t.dtype().size()) as *mut c_void }
}

fn empty_like(t: &AscendTensor, shape: Vec<usize>) -> AclResult<AscendTensor> {
    AscendTensor::empty(t.ctx(), shape, t.dtype())
}

/// What a failure of `op` on `tensors` says the backend was doing.
fn what<'a>(op: &'a str, tensors: &'a [AscendTensor]) -> impl Fn() -> String + 'a {
    move || format!("{op} of {}", describe(tensors))
}

/// Every rank receives the elementwise reduction of all ranks' tensors.
pub fn all_reduce(
    comm: &Communicator,
    tensors: &[AscendTensor],
    op: Reduce,
) -> AclResult<Vec<AscendTensor>> {
    const OP: &str = "all_reduce";
    let ranks = ranks(OP, comm, tensors, true)?;
    if op == Reduce::Mean && !tensors[0].dtype().is_float() {
        return Err(refuse(OP, tensors, "a mean needs float tensors"));
    }
    let inputs = contiguous_all(tensors)?;
    let outs = tensors
        .iter()
        .map(|t| empty_like(t, t.shape().to_vec()))
        .collect::<AclResult<Vec<_>>>()?;
    let count = tensors[0].layout().numel() as u64;
    if count > 0 {
        let dtype = hccl_data_type(tensors[0].dtype());
        comm.issue(
            &ranks,
            "HcclAllReduce",
            &what(OP, tensors),
            |api, i, c, s| {
                // SAFETY: both buffers hold `count` elements on rank i's device and live until
                // the transfer has run (stream-ordered reuse).
                unsafe {
                    (api.fns.HcclAllReduce)(
                        addr(&inputs[i]),
                        addr(&outs[i]),
                        count,
                        dtype,
                        op.hccl(),
                        c,
                        s,
                    )
                }
            },
        )?;
    }
    mean_of_sums(op, outs, comm.size())
}

/// Every rank receives rank `root`'s tensor.
pub fn broadcast(
    comm: &Communicator,
    tensors: &[AscendTensor],
    root: usize,
) -> AclResult<Vec<AscendTensor>> {
    const OP: &str = "broadcast";
    let ranks = ranks(OP, comm, tensors, true)?;
    if root >= comm.size() {
        return Err(refuse(
            OP,
            tensors,
            format!("root {root} is not one of {} ranks", comm.size()),
        ));
    }
    // HCCL broadcasts in place: the root's buffer is a copy, so its input stays untouched.
    let bufs = tensors
        .iter()
        .zip(&ranks)
        .map(|(t, r)| {
            if r.rank as usize == root {
                contiguous_copy(t)
            } else {
                empty_like(t, t.shape().to_vec())
            }
        })
        .collect::<AclResult<Vec<_>>>()?;
    let count = tensors[0].layout().numel() as u64;
    if count > 0 {
        let dtype = hccl_data_type(tensors[0].dtype());
        comm.issue(
            &ranks,
            "HcclBroadcast",
            &what(OP, tensors),
            |api, i, c, s| {
                // SAFETY: the buffer holds `count` elements on rank i's device.
                unsafe { (api.fns.HcclBroadcast)(addr(&bufs[i]), count, dtype, root as u32, c, s) }
            },
        )?;
    }
    Ok(bufs)
}

/// Every rank receives all ranks' tensors concatenated along dim 0, in rank order.
pub fn all_gather(comm: &Communicator, tensors: &[AscendTensor]) -> AclResult<Vec<AscendTensor>> {
    const OP: &str = "all_gather";
    let ranks = ranks(OP, comm, tensors, true)?;
    let shape = tensors[0].shape();
    if shape.is_empty() {
        return Err(refuse(OP, tensors, "tensors need a dim 0 to gather along"));
    }
    let mut gathered = shape.to_vec();
    gathered[0] *= comm.size();
    let inputs = contiguous_all(tensors)?;
    let outs = tensors
        .iter()
        .map(|t| empty_like(t, gathered.clone()))
        .collect::<AclResult<Vec<_>>>()?;
    let count = tensors[0].layout().numel() as u64;
    if count > 0 {
        let dtype = hccl_data_type(tensors[0].dtype());
        comm.issue(
            &ranks,
            "HcclAllGather",
            &what(OP, tensors),
            |api, i, c, s| {
                // SAFETY: the input holds `count` elements, the output `count` per rank.
                unsafe {
                    (api.fns.HcclAllGather)(addr(&inputs[i]), addr(&outs[i]), count, dtype, c, s)
                }
            },
        )?;
    }
    Ok(outs)
}

/// Rank r receives block r (of `size` equal blocks along dim 0) of the reduction of all
/// ranks' tensors.
pub fn reduce_scatter(
    comm: &Communicator,
    tensors: &[AscendTensor],
    op: Reduce,
) -> AclResult<Vec<AscendTensor>> {
    const OP: &str = "reduce_scatter";
    let ranks = ranks(OP, comm, tensors, true)?;
    let shape = tensors[0].shape();
    let n = comm.size();
    if shape.is_empty() || !shape[0].is_multiple_of(n) {
        return Err(refuse(
            OP,
            tensors,
            format!("dim 0 must split into {n} equal blocks, one per rank"),
        ));
    }
    if op == Reduce::Mean && !tensors[0].dtype().is_float() {
        return Err(refuse(OP, tensors, "a mean needs float tensors"));
    }
    let mut block = shape.to_vec();
    block[0] /= n;
    let inputs = contiguous_all(tensors)?;
    let outs = tensors
        .iter()
        .map(|t| empty_like(t, block.clone()))
        .collect::<AclResult<Vec<_>>>()?;
    let count = tensors[0].layout().numel() as u64 / n as u64;
    if count > 0 {
        let dtype = hccl_data_type(tensors[0].dtype());
        comm.issue(
            &ranks,
            "HcclReduceScatter",
            &what(OP, tensors),
            |api, i, c, s| {
                // SAFETY: the input holds `count` elements per rank, the output `count`.
                unsafe {
                    (api.fns.HcclReduceScatter)(
                        addr(&inputs[i]),
                        addr(&outs[i]),
                        count,
                        dtype,
                        op.hccl(),
                        c,
                        s,
                    )
                }
            },
        )?;
    }
    mean_of_sums(op, outs, n)
}

/// Rows sent between ranks: `rows[src][dst]` rows go from rank `src` to rank `dst`. Every rank
/// must hold the same matrix (for example from an all-gather of each rank's row).
pub type RowCounts = [Vec<usize>];

/// All-to-all of rows: each local rank's tensor `[rows, ...]` holds the rows it sends, grouped
/// by destination rank in rank order (`rows[src][dst]` of them for each); each rank receives
/// the rows sent to it, grouped by source rank in rank order. Ranks may send no rows.
pub fn all_to_all_v(
    comm: &Communicator,
    tensors: &[AscendTensor],
    rows: &RowCounts,
) -> AclResult<Vec<AscendTensor>> {
    const OP: &str = "all_to_all_v";
    let ranks = ranks(OP, comm, tensors, false)?;
    let n = comm.size();
    if rows.len() != n || rows.iter().any(|r| r.len() != n) {
        return Err(refuse(
            OP,
            tensors,
            format!("the row counts must be {n} x {n}"),
        ));
    }
    let row_shape = tensors[0].shape().get(1..).unwrap_or_default().to_vec();
    for (t, r) in tensors.iter().zip(&ranks) {
        let sent: usize = rows[r.rank as usize].iter().sum();
        if t.shape().is_empty()
            || t.shape()[1..] != row_shape[..]
            || t.dtype() != tensors[0].dtype()
        {
            return Err(refuse(
                OP,
                tensors,
                format!(
                    "rank {} passed {}: every rank's rows must have one shape and dtype",
                    r.rank,
                    t.describe()
                ),
            ));
        }
        if t.shape()[0] != sent {
            return Err(refuse(
                OP,
                tensors,
                format!(
                    "rank {} passed {} rows but the counts send {sent}",
                    r.rank,
                    t.shape()[0]
                ),
            ));
        }
    }
    let width: usize = row_shape.iter().product();
    let inputs = contiguous_all(tensors)?;
    let outs = ranks
        .iter()
        .zip(tensors)
        .map(|(r, t)| {
            let mut shape = vec![rows.iter().map(|from| from[r.rank as usize]).sum()];
            shape.extend_from_slice(&row_shape);
            empty_like(t, shape)
        })
        .collect::<AclResult<Vec<_>>>()?;
    // Counts and displacements in elements, per peer, as HCCL takes them (host arrays).
    let layout = |counts: Vec<usize>| -> (Vec<u64>, Vec<u64>) {
        let mut at = 0u64;
        let mut displs = Vec::with_capacity(counts.len());
        let counts: Vec<u64> = counts.iter().map(|&c| (c * width) as u64).collect();
        for &c in &counts {
            displs.push(at);
            at += c;
        }
        (counts, displs)
    };
    let plans: Vec<_> = ranks
        .iter()
        .map(|r| {
            let me = r.rank as usize;
            (
                layout(rows[me].clone()),
                layout(rows.iter().map(|from| from[me]).collect()),
            )
        })
        .collect();
    let dtype = hccl_data_type(tensors[0].dtype());
    comm.issue(
        &ranks,
        "HcclAlltoAllV",
        &what(OP, tensors),
        |api, i, c, s| {
            let ((sc, sd), (rc, rd)) = &plans[i];
            // SAFETY: the buffers hold the rows the counts describe; the count arrays are host
            // memory HCCL reads during the call.
            unsafe {
                (api.fns.HcclAlltoAllV)(
                    addr(&inputs[i]),
                    sc.as_ptr() as _,
                    sd.as_ptr() as _,
                    dtype,
                    addr(&outs[i]),
                    rc.as_ptr() as _,
                    rd.as_ptr() as _,
                    dtype,
                    c,
                    s,
                )
            }
        },
    )?;
    Ok(outs)
}

/// Sends `tensor` from its local rank to rank `dst`, which must receive it with [`recv`]
/// (issued in the same order on both sides: a pair completes only when both have run).
pub fn send(comm: &Communicator, tensor: &AscendTensor, dst: usize) -> AclResult<()> {
    const OP: &str = "send";
    let one = std::slice::from_ref(tensor);
    let rank = comm.rank_on(&tensor.ctx().device()).ok_or_else(|| {
        refuse(
            OP,
            one,
            "the tensor's device holds no rank of the communicator",
        )
    })?;
    tensor.ctx().check_alive()?;
    let input = contiguous(tensor)?;
    let count = tensor.layout().numel() as u64;
    let dtype = hccl_data_type(tensor.dtype());
    comm.issue(&[rank], "HcclSend", &what(OP, one), |api, _, c, s| {
        // SAFETY: the buffer holds `count` elements and lives until the pair has run.
        unsafe { (api.fns.HcclSend)(addr(&input), count, dtype, dst as u32, c, s) }
    })
}

/// Receives a `shape` tensor of `dtype` from rank `src` on `device` (which holds a rank of the
/// communicator).
pub fn recv(
    comm: &Communicator,
    device: &AscendDevice,
    shape: Vec<usize>,
    dtype: DataType,
    src: usize,
) -> AclResult<AscendTensor> {
    let rank = comm.rank_on(device).ok_or_else(|| {
        AclError::InvalidArgument(format!(
            "recv of {shape:?} {dtype} on {device}: the device holds no rank of the communicator"
        ))
    })?;
    let out = AscendTensor::empty(&rank.ctx, shape, dtype)?;
    let count = out.layout().numel() as u64;
    let hccl_dtype = hccl_data_type(dtype);
    comm.issue(
        &[rank],
        "HcclRecv",
        &what("recv", std::slice::from_ref(&out)),
        |api, _, c, s| {
            // SAFETY: the buffer holds `count` elements.
            unsafe { (api.fns.HcclRecv)(addr(&out), count, hccl_dtype, src as u32, c, s) }
        },
    )?;
    Ok(out)
}

/// Each tensor made contiguous (HCCL reads and writes dense buffers).
fn contiguous_all(tensors: &[AscendTensor]) -> AclResult<Vec<AscendTensor>> {
    tensors.iter().map(contiguous).collect()
}

/// The results of a reduction: a mean is issued to HCCL as a sum over `ranks` and divided here.
fn mean_of_sums(op: Reduce, outs: Vec<AscendTensor>, ranks: usize) -> AclResult<Vec<AscendTensor>> {
    if op != Reduce::Mean {
        return Ok(outs);
    }
    let scale = HostScalar::Float(1.0 / ranks as f64);
    outs.iter()
        .map(|o| binary_scalar(BinaryOp::Mul, o, scale))
        .collect()
}
