//! What each emulated collective computes, once every rank's part has arrived: the check that
//! the ranks asked for the same thing, the outputs, and the link traffic the collective's
//! algorithm puts on a full mesh of HCCS links.
//!
//! Outputs are computed from byte copies of every rank's input, so a collective whose input and
//! output share a buffer (in-place all-reduce, broadcast) reads nothing it has written.

use ascend_acl::hccl::data_type::*;
use ascend_acl::hccl::reduce_op::*;
use half::{bf16, f16};

/// One rank's part of a collective or point-to-point transfer: the parameters it passed. Every
/// rank of a collective must pass matching ones (`hccl-abi.md` §6 rule 4).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Op {
    AllReduce {
        count: u64,
        dtype: i32,
        op: i32,
    },
    Broadcast {
        count: u64,
        dtype: i32,
        root: u32,
    },
    /// `count` is each rank's send count.
    AllGather {
        count: u64,
        dtype: i32,
    },
    /// `count` is each rank's receive count.
    ReduceScatter {
        count: u64,
        dtype: i32,
        op: i32,
    },
    /// Counts in elements, one per peer rank.
    AlltoAllV {
        dtype: i32,
        send_counts: Vec<u64>,
        recv_counts: Vec<u64>,
    },
    Send {
        count: u64,
        dtype: i32,
        peer: u32,
    },
    Recv {
        count: u64,
        dtype: i32,
        peer: u32,
    },
}

/// The kinds of transfer the counters tell apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `HcclAllReduce`.
    AllReduce,
    /// `HcclBroadcast`.
    Broadcast,
    /// `HcclAllGather`.
    AllGather,
    /// `HcclReduceScatter`.
    ReduceScatter,
    /// `HcclAlltoAllV`.
    AlltoAllV,
    /// A matched `HcclSend` / `HcclRecv` pair.
    SendRecv,
}

impl Kind {
    /// Every kind, in counter order.
    pub const ALL: [Kind; 6] = [
        Kind::AllReduce,
        Kind::Broadcast,
        Kind::AllGather,
        Kind::ReduceScatter,
        Kind::AlltoAllV,
        Kind::SendRecv,
    ];

    /// The C function's name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::AllReduce => "HcclAllReduce",
            Kind::Broadcast => "HcclBroadcast",
            Kind::AllGather => "HcclAllGather",
            Kind::ReduceScatter => "HcclReduceScatter",
            Kind::AlltoAllV => "HcclAlltoAllV",
            Kind::SendRecv => "HcclSend/HcclRecv",
        }
    }
}

impl Op {
    pub fn kind(&self) -> Kind {
        match self {
            Op::AllReduce { .. } => Kind::AllReduce,
            Op::Broadcast { .. } => Kind::Broadcast,
            Op::AllGather { .. } => Kind::AllGather,
            Op::ReduceScatter { .. } => Kind::ReduceScatter,
            Op::AlltoAllV { .. } => Kind::AlltoAllV,
            Op::Send { .. } | Op::Recv { .. } => Kind::SendRecv,
        }
    }

    pub(crate) fn dtype(&self) -> i32 {
        match self {
            Op::AllReduce { dtype, .. }
            | Op::Broadcast { dtype, .. }
            | Op::AllGather { dtype, .. }
            | Op::ReduceScatter { dtype, .. }
            | Op::AlltoAllV { dtype, .. }
            | Op::Send { dtype, .. }
            | Op::Recv { dtype, .. } => *dtype,
        }
    }

    fn elem(&self) -> usize {
        facts(self.dtype()).map_or(1, |f| f.0)
    }

    /// A short description for mismatch messages.
    pub fn describe(&self) -> String {
        let dt = |d: i32| facts(d).map_or("unknown dtype", |f| f.1);
        match self {
            Op::AllReduce { count, dtype, op } => {
                format!("HcclAllReduce of {count} {} with {}", dt(*dtype), name(*op))
            }
            Op::Broadcast { count, dtype, root } => {
                format!("HcclBroadcast of {count} {} from root {root}", dt(*dtype))
            }
            Op::AllGather { count, dtype } => {
                format!("HcclAllGather of {count} {} per rank", dt(*dtype))
            }
            Op::ReduceScatter { count, dtype, op } => format!(
                "HcclReduceScatter of {count} {} per rank with {}",
                dt(*dtype),
                name(*op)
            ),
            Op::AlltoAllV {
                dtype,
                send_counts,
                recv_counts,
            } => format!(
                "HcclAlltoAllV of {} sending {send_counts:?} receiving {recv_counts:?}",
                dt(*dtype)
            ),
            Op::Send { count, dtype, peer } => {
                format!("HcclSend of {count} {} to rank {peer}", dt(*dtype))
            }
            Op::Recv { count, dtype, peer } => {
                format!("HcclRecv of {count} {} from rank {peer}", dt(*dtype))
            }
        }
    }
}

/// Atlas A2's support for a collective's dtype and reduce op (`hccl-abi.md` §4): `Err(true)`
/// for a code that is no `HcclDataType`/`HcclReduceOp` at all (HCCL_E_PARA), `Err(false)` for
/// a valid one A2 does not support (HCCL_E_NOT_SUPPORT).
pub(crate) fn supported(kind: Kind, dtype: i32, op: Option<i32>) -> Result<(), (bool, String)> {
    let Some((_, dname)) = facts(dtype) else {
        return Err((true, format!("{dtype} is not an HcclDataType")));
    };
    let reducing = matches!(kind, Kind::AllReduce | Kind::ReduceScatter);
    if !reducing {
        return Ok(());
    }
    let reducible = [
        HCCL_DATA_TYPE_INT8,
        HCCL_DATA_TYPE_INT16,
        HCCL_DATA_TYPE_INT32,
        HCCL_DATA_TYPE_INT64,
        HCCL_DATA_TYPE_FP16,
        HCCL_DATA_TYPE_FP32,
        HCCL_DATA_TYPE_BFP16,
    ];
    if !reducible.contains(&dtype) {
        return Err((
            false,
            format!(
                "{} does not support {dname} on Atlas A2 (reductions take int8, int16, int32, int64, fp16, fp32 and bf16)",
                kind.name()
            ),
        ));
    }
    let op = op.unwrap_or(HCCL_REDUCE_SUM);
    if !(HCCL_REDUCE_SUM..=HCCL_REDUCE_MIN).contains(&op) {
        return Err((true, format!("{op} is not an HcclReduceOp")));
    }
    if op == HCCL_REDUCE_PROD && matches!(dtype, HCCL_DATA_TYPE_INT16 | HCCL_DATA_TYPE_BFP16) {
        return Err((
            false,
            format!(
                "{} does not support HCCL_REDUCE_PROD on {dname} on Atlas A2",
                kind.name()
            ),
        ));
    }
    Ok(())
}

/// Bytes per element and name of an HCCL dtype.
pub(crate) fn facts(dtype: i32) -> Option<(usize, &'static str)> {
    ascend_acl::hccl::data_type::facts(dtype)
}

/// Link traffic of one collective on a full mesh (every pair of NPUs joined by its own HCCS
/// link, as in an 8-NPU Atlas A2 server), under the algorithm the emulation models for it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Sequential communication rounds.
    pub rounds: u64,
    /// Bytes sent from one rank to another, over all links.
    pub link_bytes: u64,
    /// The fewest bytes any algorithm must move between ranks for the same result.
    pub min_link_bytes: u64,
    /// Sum over rounds of the most bytes one link carries in one direction in that round:
    /// divided by a link's bandwidth, the time the transfers take.
    pub critical_bytes: u64,
}

/// The whole-buffer outputs of a collective, one per participant, and its traffic; an error
/// if the participants' parameters do not match. `ops[i]` and `inputs[i]` are participant
/// `i`'s: every rank for a collective, (sender, receiver) for a point-to-point pair.
pub(crate) fn compute(ops: &[Op], inputs: &[Vec<u8>]) -> Result<(Vec<Vec<u8>>, Traffic), String> {
    let n = ops.len();
    let first = &ops[0];
    let same = |what: &str| -> Result<(), String> {
        match ops.iter().position(|o| o != first) {
            None => Ok(()),
            Some(r) => Err(format!(
                "mismatched {what}: rank 0 issued {} but rank {r} issued {}",
                first.describe(),
                ops[r].describe()
            )),
        }
    };
    let elem = first.elem();
    match first {
        Op::AllReduce { count, dtype, op } => {
            same("collective")?;
            let out = reduce(inputs, *dtype, *op);
            let s = count * elem as u64;
            let chunk = chunk_bytes(*count, n, elem);
            Ok((
                vec![out; n],
                Traffic {
                    rounds: 2,
                    link_bytes: 2 * (n as u64 - 1) * s,
                    min_link_bytes: 2 * (n as u64 - 1) * s,
                    critical_bytes: 2 * chunk,
                },
            ))
        }
        Op::Broadcast { count, root, .. } => {
            same("collective")?;
            let s = count * elem as u64;
            Ok((
                vec![inputs[*root as usize].clone(); n],
                Traffic {
                    rounds: 1,
                    link_bytes: (n as u64 - 1) * s,
                    min_link_bytes: (n as u64 - 1) * s,
                    critical_bytes: s,
                },
            ))
        }
        Op::AllGather { count, .. } => {
            same("collective")?;
            let s = count * elem as u64;
            let out: Vec<u8> = inputs.concat();
            Ok((
                vec![out; n],
                Traffic {
                    rounds: 1,
                    link_bytes: (n * (n - 1)) as u64 * s,
                    min_link_bytes: (n * (n - 1)) as u64 * s,
                    critical_bytes: s,
                },
            ))
        }
        Op::ReduceScatter { count, dtype, op } => {
            same("collective")?;
            let s = (*count as usize) * elem;
            let outs = (0..n)
                .map(|r| {
                    let parts: Vec<Vec<u8>> = inputs
                        .iter()
                        .map(|i| i[r * s..(r + 1) * s].to_vec())
                        .collect();
                    reduce(&parts, *dtype, *op)
                })
                .collect();
            Ok((
                outs,
                Traffic {
                    rounds: 1,
                    link_bytes: (n * (n - 1) * s) as u64,
                    min_link_bytes: (n * (n - 1) * s) as u64,
                    critical_bytes: s as u64,
                },
            ))
        }
        Op::AlltoAllV { dtype, .. } => {
            let counts: Vec<(&Vec<u64>, &Vec<u64>)> = ops
                .iter()
                .map(|o| match o {
                    Op::AlltoAllV {
                        dtype: d,
                        send_counts,
                        recv_counts,
                    } if d == dtype => Ok((send_counts, recv_counts)),
                    other => Err(format!(
                        "mismatched collective: rank 0 issued {} but another rank issued {}",
                        first.describe(),
                        other.describe()
                    )),
                })
                .collect::<Result<_, _>>()?;
            for (src, (send, _)) in counts.iter().enumerate() {
                for (dst, (_, recv)) in counts.iter().enumerate() {
                    if send[dst] != recv[src] {
                        return Err(format!(
                            "mismatched HcclAlltoAllV counts: rank {src} sends {} elements to rank {dst}, which expects {} from it",
                            send[dst], recv[src]
                        ));
                    }
                }
            }
            // Each rank's input is its chunks in destination order.
            let offsets: Vec<Vec<usize>> = counts
                .iter()
                .map(|(send, _)| {
                    let mut at = 0;
                    send.iter()
                        .map(|&c| {
                            let o = at;
                            at += c as usize * elem;
                            o
                        })
                        .collect()
                })
                .collect();
            let outs = (0..n)
                .map(|dst| {
                    (0..n)
                        .flat_map(|src| {
                            let c = counts[src].0[dst] as usize * elem;
                            inputs[src][offsets[src][dst]..offsets[src][dst] + c].iter()
                        })
                        .copied()
                        .collect()
                })
                .collect();
            let mut link = 0u64;
            let mut critical = 0u64;
            for (src, (send, _)) in counts.iter().enumerate() {
                for (dst, &c) in send.iter().enumerate() {
                    if src != dst {
                        link += c * elem as u64;
                        critical = critical.max(c * elem as u64);
                    }
                }
            }
            Ok((
                outs,
                Traffic {
                    rounds: 1,
                    link_bytes: link,
                    min_link_bytes: link,
                    critical_bytes: critical,
                },
            ))
        }
        Op::Send { count, dtype, .. } => {
            let expected = Op::Recv {
                count: *count,
                dtype: *dtype,
                peer: 0,
            };
            match &ops[1] {
                Op::Recv {
                    count: c, dtype: d, ..
                } if c == count && d == dtype => {}
                other => {
                    return Err(format!(
                        "mismatched point-to-point pair: {} met {} (expected {})",
                        first.describe(),
                        other.describe(),
                        expected.describe()
                    ))
                }
            }
            let s = count * elem as u64;
            Ok((
                vec![Vec::new(), inputs[0].clone()],
                Traffic {
                    rounds: 1,
                    link_bytes: s,
                    min_link_bytes: s,
                    critical_bytes: s,
                },
            ))
        }
        Op::Recv { .. } => Err("a receive cannot lead a point-to-point pair".into()),
    }
}

/// Bytes of the largest of `n` element-wise chunks of `count` elements.
fn chunk_bytes(count: u64, n: usize, elem: usize) -> u64 {
    count.div_ceil(n as u64) * elem as u64
}

/// Reduces equal-length buffers element by element, in rank order, in the dtype's own
/// precision (integers wrap, as device arithmetic does).
fn reduce(inputs: &[Vec<u8>], dtype: i32, op: i32) -> Vec<u8> {
    fn fold<T: Copy, const N: usize>(
        inputs: &[Vec<u8>],
        read: fn([u8; N]) -> T,
        write: fn(T) -> [u8; N],
        f: impl Fn(T, T) -> T,
    ) -> Vec<u8> {
        let mut out = inputs[0].clone();
        for other in &inputs[1..] {
            for (o, x) in out.chunks_exact_mut(N).zip(other.chunks_exact(N)) {
                let a = read(o.try_into().unwrap());
                let b = read(x.try_into().unwrap());
                o.copy_from_slice(&write(f(a, b)));
            }
        }
        out
    }
    macro_rules! int {
        ($t:ty, $n:literal) => {
            fold::<$t, $n>(inputs, <$t>::from_le_bytes, <$t>::to_le_bytes, {
                let f: fn($t, $t) -> $t = match op {
                    HCCL_REDUCE_PROD => |a: $t, b: $t| a.wrapping_mul(b),
                    HCCL_REDUCE_MAX => |a: $t, b: $t| a.max(b),
                    HCCL_REDUCE_MIN => |a: $t, b: $t| a.min(b),
                    _ => |a: $t, b: $t| a.wrapping_add(b),
                };
                f
            })
        };
    }
    macro_rules! float {
        ($t:ty, $n:literal) => {
            fold::<$t, $n>(inputs, <$t>::from_le_bytes, <$t>::to_le_bytes, {
                let f: fn($t, $t) -> $t = match op {
                    HCCL_REDUCE_PROD => |a: $t, b: $t| a * b,
                    HCCL_REDUCE_MAX => |a: $t, b: $t| if b > a { b } else { a },
                    HCCL_REDUCE_MIN => |a: $t, b: $t| if b < a { b } else { a },
                    _ => |a: $t, b: $t| a + b,
                };
                f
            })
        };
    }
    match dtype {
        HCCL_DATA_TYPE_INT8 => int!(i8, 1),
        HCCL_DATA_TYPE_INT16 => int!(i16, 2),
        HCCL_DATA_TYPE_INT32 => int!(i32, 4),
        HCCL_DATA_TYPE_INT64 => int!(i64, 8),
        HCCL_DATA_TYPE_FP32 => float!(f32, 4),
        HCCL_DATA_TYPE_FP16 => float!(f16, 2),
        HCCL_DATA_TYPE_BFP16 => float!(bf16, 2),
        // `supported` admits no other dtype to a reduction.
        other => unreachable!("reduction of HcclDataType {other}"),
    }
}
