//! The out-of-band exchange of HCCL's root info between processes: rank 0 listens on a TCP
//! address the user gives and hands the 4108 bytes, unchanged, to every other rank (the role
//! torch's TCPStore plays for torch_npu). HCCL's own traffic then flows on the addresses HCCL
//! chooses (`HCCL_IF_IP`), not on this one.
//!
//! Each rank says which rank it is of how many, so a misconfigured job fails here with a
//! clear message instead of hanging inside HCCL.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::acl::hccl::{env, HcclRootInfo, HCCL_ROOT_INFO_BYTES};
use crate::acl::{AclError, AclResult};

const MAGIC: &[u8; 8] = b"BASCROOT";

/// How long the ranks wait for each other here: `HCCL_CONNECT_TIMEOUT` (seconds, default 120),
/// which bounds HCCL's own wait for the same ranks.
fn timeout() -> Duration {
    let secs = std::env::var(env::HCCL_CONNECT_TIMEOUT)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(120u64);
    Duration::from_secs(secs)
}

fn failed(address: &str, what: impl std::fmt::Display) -> AclError {
    AclError::Library(format!("root-info rendezvous at {address}: {what}"))
}

/// Rank 0 creates the root info with `create` and serves it to the `size - 1` other ranks on
/// `address`; the other ranks fetch it. Returns the same bytes on every rank.
pub(crate) fn exchange_root_info(
    address: &str,
    rank: u32,
    size: u32,
    create: impl FnOnce() -> AclResult<HcclRootInfo>,
) -> AclResult<HcclRootInfo> {
    let deadline = Instant::now() + timeout();
    if rank == 0 {
        let listener = TcpListener::bind(address).map_err(|e| failed(address, e))?;
        let info = create()?;
        serve(&listener, address, size, &info, deadline)?;
        Ok(info)
    } else {
        fetch(address, rank, size, deadline)
    }
}

fn serve(
    listener: &TcpListener,
    address: &str,
    size: u32,
    info: &HcclRootInfo,
    deadline: Instant,
) -> AclResult<()> {
    listener
        .set_nonblocking(true)
        .map_err(|e| failed(address, e))?;
    let mut served = vec![false; size as usize];
    served[0] = true;
    while served.iter().any(|s| !s) {
        let conn = match listener.accept() {
            Ok((conn, _)) => conn,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    let missing: Vec<usize> = (0..served.len()).filter(|&r| !served[r]).collect();
                    return Err(failed(
                        address,
                        format!("ranks {missing:?} did not connect within HCCL_CONNECT_TIMEOUT"),
                    ));
                }
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            Err(e) => return Err(failed(address, e)),
        };
        let mut conn = conn;
        conn.set_nonblocking(false)
            .and_then(|_| conn.set_read_timeout(Some(Duration::from_secs(10))))
            .map_err(|e| failed(address, e))?;
        let mut hello = [0u8; 16];
        conn.read_exact(&mut hello)
            .map_err(|e| failed(address, e))?;
        let their_rank = u32::from_le_bytes(hello[8..12].try_into().unwrap());
        let their_size = u32::from_le_bytes(hello[12..16].try_into().unwrap());
        let refuse = |conn: &mut TcpStream, why: String| {
            let _ = conn.write_all(&[1]);
            Err(failed(address, why))
        };
        if &hello[..8] != MAGIC {
            return refuse(
                &mut conn,
                "a connection that is not a burn-ascend rank".into(),
            );
        }
        if their_size != size {
            return refuse(
                &mut conn,
                format!("rank {their_rank} expects {their_size} ranks, rank 0 expects {size}"),
            );
        }
        match served.get(their_rank as usize) {
            Some(false) => served[their_rank as usize] = true,
            _ => {
                return refuse(
                    &mut conn,
                    format!("rank {their_rank} joined twice or is not one of {size} ranks"),
                )
            }
        }
        let mut reply = vec![0u8];
        reply.extend_from_slice(&info.internal);
        conn.write_all(&reply).map_err(|e| failed(address, e))?;
    }
    Ok(())
}

fn fetch(address: &str, rank: u32, size: u32, deadline: Instant) -> AclResult<HcclRootInfo> {
    let target = address
        .to_socket_addrs()
        .map_err(|e| failed(address, e))?
        .next()
        .ok_or_else(|| failed(address, "the address resolves to nothing"))?;
    // Rank 0 may start later than this rank: retry until the deadline.
    let mut conn = loop {
        match TcpStream::connect_timeout(&target, Duration::from_secs(1)) {
            Ok(c) => break c,
            Err(e) if Instant::now() >= deadline => {
                return Err(failed(
                    address,
                    format!("rank 0 did not answer within HCCL_CONNECT_TIMEOUT: {e}"),
                ))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    let mut hello = MAGIC.to_vec();
    hello.extend_from_slice(&rank.to_le_bytes());
    hello.extend_from_slice(&size.to_le_bytes());
    conn.set_read_timeout(Some(
        deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(1),
    ))
    .and_then(|_| conn.write_all(&hello))
    .map_err(|e| failed(address, e))?;
    let mut status = [0u8; 1];
    conn.read_exact(&mut status)
        .map_err(|e| failed(address, e))?;
    if status[0] != 0 {
        return Err(failed(
            address,
            format!("rank 0 refused rank {rank} of {size} (see rank 0's error)"),
        ));
    }
    let mut info = HcclRootInfo::default();
    conn.read_exact(&mut info.internal[..HCCL_ROOT_INFO_BYTES])
        .map_err(|e| failed(address, e))?;
    Ok(info)
}
