//! The out-of-band exchange of HCCL's root info between processes: rank 0 listens on a TCP
//! address the user gives and hands the 4108 bytes, unchanged, to every other rank (the role
//! torch's TCPStore plays for torch_npu). HCCL's own traffic then flows on the addresses HCCL
//! chooses (`HCCL_IF_IP`), not on this one.
//!
//! HCCL authenticates nothing: whoever holds the root info can join the communicator, and a
//! rank handed a forged one joins the forger's. So rank 0 and each rank prove to each other that
//! they hold a shared secret ([`ENV_RENDEZVOUS_SECRET`] or the file named by
//! [`ENV_RENDEZVOUS_SECRET_FILE`]): each answers an HMAC-SHA256 challenge over both sides' fresh
//! nonces, and the reply carrying the root info is authenticated under the same secret. The
//! bytes are not encrypted: keep the address on a network only the job's hosts reach, as HCCL's
//! own traffic needs anyway.
//!
//! Rank 0 drops a connection that does not complete the handshake (a port scan, a health
//! probe, a wrong secret) and keeps serving until `HCCL_CONNECT_TIMEOUT`; every read is bounded
//! by that deadline, and a handshake by [`HANDSHAKE_LIMIT`] so that a silent peer delays the
//! ranks only briefly. Ranks that proved the secret but disagree on the communicator (its size,
//! a rank twice) fail here with a clear message instead of hanging inside HCCL.
//!
//! The exchange (integers little-endian; `hello` and the nonces form the transcript each MAC
//! covers, after a label naming its sender):
//! 1. rank to 0: `hello` = magic, rank u32, size u32, rank's nonce (32 bytes);
//! 2. 0 to rank: 0's nonce (32), MAC("root", transcript);
//! 3. rank to 0, once it has checked 2: MAC("rank", transcript);
//! 4. 0 to rank, once it has checked 3: status u8 (0: joined), root info (4108, zero when
//!    refused), MAC("reply", transcript, status, root info).

use std::ffi::OsString;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::acl::hccl::{env, HcclRootInfo, HCCL_ROOT_INFO_BYTES};
use crate::acl::{AclError, AclResult};

/// Environment variable: the rendezvous secret every rank shares (at least
/// [`MIN_SECRET_BYTES`] bytes), used by [`super::Communicator::rendezvous`].
pub const ENV_RENDEZVOUS_SECRET: &str = "BURN_ASCEND_RENDEZVOUS_SECRET";
/// Environment variable: a file holding the rendezvous secret instead (trailing whitespace,
/// such as the newline a generated file ends with, is not part of it).
pub const ENV_RENDEZVOUS_SECRET_FILE: &str = "BURN_ASCEND_RENDEZVOUS_SECRET_FILE";
/// The shortest secret accepted: 128 bits of a random secret resist guessing.
pub const MIN_SECRET_BYTES: usize = 16;

const MAGIC: &[u8; 8] = b"BASCRDV2";
const NONCE: usize = 32;
const TAG: usize = 32;
const HELLO: usize = MAGIC.len() + 8 + NONCE;
const REPLY: usize = 1 + HCCL_ROOT_INFO_BYTES;
/// The longest rank 0 waits on one connection's handshake: a real rank answers in
/// milliseconds.
const HANDSHAKE_LIMIT: Duration = Duration::from_secs(5);

type HmacSha256 = Hmac<Sha256>;

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

/// The secret of [`ENV_RENDEZVOUS_SECRET`] or [`ENV_RENDEZVOUS_SECRET_FILE`] (exactly one).
pub(crate) fn secret_from_env() -> AclResult<Vec<u8>> {
    secret_from(|name| std::env::var_os(name))
}

/// The secret as [`secret_from_env`] finds it, with `var` reading the environment.
fn secret_from(var: impl Fn(&str) -> Option<OsString>) -> AclResult<Vec<u8>> {
    let invalid = |why: String| AclError::InvalidArgument(format!("root-info rendezvous: {why}"));
    let secret = match (var(ENV_RENDEZVOUS_SECRET), var(ENV_RENDEZVOUS_SECRET_FILE)) {
        (Some(_), Some(_)) => {
            return Err(invalid(format!(
                "both {ENV_RENDEZVOUS_SECRET} and {ENV_RENDEZVOUS_SECRET_FILE} are set: set one"
            )))
        }
        (Some(v), None) => v.into_encoded_bytes(),
        (None, Some(path)) => {
            let mut bytes = std::fs::read(&path).map_err(|e| {
                invalid(format!(
                    "{ENV_RENDEZVOUS_SECRET_FILE}={}: {e}",
                    path.to_string_lossy()
                ))
            })?;
            let kept = bytes.trim_ascii_end().len();
            bytes.truncate(kept);
            bytes
        }
        (None, None) => {
            return Err(invalid(format!(
                "no shared secret: set {ENV_RENDEZVOUS_SECRET} (or {ENV_RENDEZVOUS_SECRET_FILE}) to the same secret of at least {MIN_SECRET_BYTES} bytes on every rank; without one anyone who reaches the address could join the communicator"
            )))
        }
    };
    check_secret(&secret)?;
    Ok(secret)
}

fn check_secret(secret: &[u8]) -> AclResult<()> {
    if secret.len() < MIN_SECRET_BYTES {
        return Err(AclError::InvalidArgument(format!(
            "root-info rendezvous: the shared secret has {} bytes, fewer than {MIN_SECRET_BYTES}",
            secret.len()
        )));
    }
    Ok(())
}

/// Rank 0 creates the root info with `create` and serves it to the `size - 1` other ranks on
/// `address`; the other ranks fetch it. Every side proves `secret`. Returns the same bytes on
/// every rank.
pub(crate) fn exchange_root_info(
    address: &str,
    rank: u32,
    size: u32,
    secret: &[u8],
    create: impl FnOnce() -> AclResult<HcclRootInfo>,
) -> AclResult<HcclRootInfo> {
    exchange(
        address,
        rank,
        size,
        secret,
        Instant::now() + timeout(),
        create,
    )
}

fn exchange(
    address: &str,
    rank: u32,
    size: u32,
    secret: &[u8],
    deadline: Instant,
    create: impl FnOnce() -> AclResult<HcclRootInfo>,
) -> AclResult<HcclRootInfo> {
    check_secret(secret)?;
    if rank == 0 {
        let listener = TcpListener::bind(address).map_err(|e| failed(address, e))?;
        let info = create()?;
        serve(&listener, address, size, secret, &info, deadline)?;
        Ok(info)
    } else {
        fetch(address, rank, size, secret, deadline)
    }
}

fn mac(secret: &[u8], label: &[u8], parts: &[&[u8]]) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(label);
    for part in parts {
        mac.update(part);
    }
    mac
}

fn nonce() -> AclResult<[u8; NONCE]> {
    let mut n = [0u8; NONCE];
    getrandom::fill(&mut n)
        .map_err(|e| AclError::Library(format!("root-info rendezvous: no random nonce: {e}")))?;
    Ok(n)
}

/// Reads `buf` whole from `conn` by `until`, however the peer splits or delays its bytes.
fn read_by(conn: &mut TcpStream, buf: &mut [u8], until: Instant) -> std::io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(
                ErrorKind::TimedOut,
                "the peer did not send its part in time",
            ));
        }
        conn.set_read_timeout(Some(left))?;
        match conn.read(&mut buf[got..]) {
            Ok(0) => {
                return Err(std::io::Error::new(
                    ErrorKind::UnexpectedEof,
                    "the peer closed the connection",
                ))
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes `bytes` to `conn`, giving up at `until`.
fn write_by(conn: &mut TcpStream, bytes: &[u8], until: Instant) -> std::io::Result<()> {
    let left = until.saturating_duration_since(Instant::now());
    conn.set_write_timeout(Some(left.max(Duration::from_millis(1))))?;
    conn.write_all(bytes)
}

/// What became of a connection that proved the secret.
enum Admitted {
    Joined(usize),
    /// A rank of another configuration: the job is misconfigured.
    Refused(String),
}

fn serve(
    listener: &TcpListener,
    address: &str,
    size: u32,
    secret: &[u8],
    info: &HcclRootInfo,
    deadline: Instant,
) -> AclResult<()> {
    listener
        .set_nonblocking(true)
        .map_err(|e| failed(address, e))?;
    let mut served = vec![false; size as usize];
    served[0] = true;
    // The last connection dropped, named in the error if the ranks do not all come.
    let mut dropped = None;
    while served.contains(&false) {
        let (mut conn, peer) = match listener.accept() {
            Ok(accepted) => accepted,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    let missing: Vec<usize> = (0..served.len()).filter(|&r| !served[r]).collect();
                    let dropped = dropped
                        .map(|d| format!("; last connection dropped: {d}"))
                        .unwrap_or_default();
                    return Err(failed(
                        address,
                        format!(
                            "ranks {missing:?} did not connect within HCCL_CONNECT_TIMEOUT{dropped}"
                        ),
                    ));
                }
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            // A connection reset before it was accepted (a port scan) is no failure.
            Err(e) if e.kind() == ErrorKind::ConnectionAborted => continue,
            Err(e) => return Err(failed(address, e)),
        };
        let until = deadline.min(Instant::now() + HANDSHAKE_LIMIT);
        match admit(&mut conn, size, &served, secret, info, until) {
            Ok(Admitted::Joined(rank)) => served[rank] = true,
            Ok(Admitted::Refused(why)) => return Err(failed(address, why)),
            Err(why) => dropped = Some(format!("{peer}: {why}")),
        }
    }
    Ok(())
}

/// One connection's handshake; `Err` drops a peer that did not prove the secret.
fn admit(
    conn: &mut TcpStream,
    size: u32,
    served: &[bool],
    secret: &[u8],
    info: &HcclRootInfo,
    until: Instant,
) -> Result<Admitted, String> {
    conn.set_nonblocking(false).map_err(|e| e.to_string())?;
    let mut hello = [0u8; HELLO];
    read_by(conn, &mut hello, until).map_err(|e| e.to_string())?;
    if &hello[..MAGIC.len()] != MAGIC {
        return Err("not a burn-ascend rank".into());
    }
    let field = |at: usize| u32::from_le_bytes(hello[at..at + 4].try_into().unwrap());
    let (their_rank, their_size) = (field(MAGIC.len()), field(MAGIC.len() + 4));
    let ours = nonce().map_err(|e| e.to_string())?;
    let transcript: [&[u8]; 2] = [&hello, &ours];
    let mut challenge = ours.to_vec();
    challenge.extend_from_slice(&mac(secret, b"root", &transcript).finalize().into_bytes());
    write_by(conn, &challenge, until).map_err(|e| e.to_string())?;
    let mut answer = [0u8; TAG];
    read_by(conn, &mut answer, until).map_err(|e| e.to_string())?;
    mac(secret, b"rank", &transcript)
        .verify_slice(&answer)
        .map_err(|_| format!("a peer claiming rank {their_rank} did not prove the secret"))?;
    let refused = if their_size != size {
        Some(format!(
            "rank {their_rank} expects {their_size} ranks, rank 0 expects {size}"
        ))
    } else if served.get(their_rank as usize) != Some(&false) {
        Some(format!(
            "rank {their_rank} joined twice or is not one of {size} ranks"
        ))
    } else {
        None
    };
    let mut reply = vec![refused.is_some() as u8];
    match refused {
        Some(_) => reply.resize(REPLY, 0),
        None => reply.extend_from_slice(&info.internal),
    }
    let tag = mac(secret, b"reply", &[&hello, &ours, &reply]).finalize();
    reply.extend_from_slice(&tag.into_bytes());
    let sent = write_by(conn, &reply, until);
    match refused {
        Some(why) => Ok(Admitted::Refused(why)),
        None => sent
            .map(|_| Admitted::Joined(their_rank as usize))
            .map_err(|e| format!("rank {their_rank} left before it had the root info: {e}")),
    }
}

fn fetch(
    address: &str,
    rank: u32,
    size: u32,
    secret: &[u8],
    deadline: Instant,
) -> AclResult<HcclRootInfo> {
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
    let io = |e: std::io::Error| failed(address, format!("rank {rank} of {size}: {e}"));
    let mut hello = MAGIC.to_vec();
    hello.extend_from_slice(&rank.to_le_bytes());
    hello.extend_from_slice(&size.to_le_bytes());
    hello.extend_from_slice(&nonce()?);
    write_by(&mut conn, &hello, deadline).map_err(io)?;
    let mut challenge = [0u8; NONCE + TAG];
    read_by(&mut conn, &mut challenge, deadline).map_err(io)?;
    let (theirs, tag) = challenge.split_at(NONCE);
    let transcript: [&[u8]; 2] = [&hello, theirs];
    mac(secret, b"root", &transcript)
        .verify_slice(tag)
        .map_err(|_| {
            failed(
                address,
                "the peer did not prove the rendezvous secret: the ranks' secrets differ, or this address is not burn-ascend's rank 0",
            )
        })?;
    let answer = mac(secret, b"rank", &transcript).finalize().into_bytes();
    write_by(&mut conn, &answer, deadline).map_err(io)?;
    let mut reply = vec![0u8; REPLY + TAG];
    read_by(&mut conn, &mut reply, deadline).map_err(io)?;
    let (body, tag) = reply.split_at(REPLY);
    mac(secret, b"reply", &[&hello, theirs, body])
        .verify_slice(tag)
        .map_err(|_| failed(address, "rank 0's reply failed authentication"))?;
    if body[0] != 0 {
        return Err(failed(
            address,
            format!("rank 0 refused rank {rank} of {size} (see rank 0's error)"),
        ));
    }
    let mut info = HcclRootInfo::default();
    info.internal.copy_from_slice(&body[1..]);
    Ok(info)
}

#[cfg(test)]
mod tests {
    //! Loopback only: stray and hostile peers against rank 0, a forged rank 0 against a rank.

    use super::*;
    use std::thread::{sleep, spawn, JoinHandle};

    const SECRET: &[u8] = b"a secret the job's ranks share";

    fn free_address() -> String {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    }

    fn info() -> HcclRootInfo {
        let mut info = HcclRootInfo::default();
        for (i, b) in info.internal.iter_mut().enumerate() {
            *b = (i * 7 + 3) as u8;
        }
        info
    }

    fn within(secs: u64) -> Instant {
        Instant::now() + Duration::from_secs(secs)
    }

    /// Rank 0 of `size` serving [`info`] on `address` for at most `secs`.
    fn root(address: &str, size: u32, secs: u64) -> JoinHandle<AclResult<HcclRootInfo>> {
        let address = address.to_string();
        spawn(move || exchange(&address, 0, size, SECRET, within(secs), || Ok(info())))
    }

    fn rank(address: &str, rank: u32, size: u32, secret: &[u8]) -> AclResult<HcclRootInfo> {
        exchange(address, rank, size, secret, within(20), || {
            unreachable!("only rank 0 creates the root info")
        })
    }

    /// A raw connection to `address`, once something listens there.
    fn connect(address: &str) -> TcpStream {
        loop {
            match TcpStream::connect(address) {
                Ok(c) => return c,
                Err(_) => sleep(Duration::from_millis(10)),
            }
        }
    }

    fn assert_error(result: AclResult<HcclRootInfo>, expected: &str) {
        let e = result.expect_err(expected).to_string();
        assert!(e.contains(expected), "{e}");
    }

    #[test]
    fn stray_connections_do_not_stop_rank_0() {
        let address = free_address();
        let root = root(&address, 3, 30);
        // A port scan connects and closes; a health probe speaks another protocol; a truncated
        // hello stops short; a silent peer holds its connection open.
        drop(connect(&address));
        connect(&address)
            .write_all(b"GET /health HTTP/1.1\r\n\r\n")
            .unwrap();
        connect(&address).write_all(&MAGIC[..5]).unwrap();
        let silent = connect(&address);
        let ranks: Vec<_> = (1..3)
            .map(|r| {
                let address = address.clone();
                spawn(move || rank(&address, r, 3, SECRET))
            })
            .collect();
        for (r, handle) in ranks.into_iter().enumerate() {
            let got = handle.join().unwrap().unwrap();
            assert_eq!(got.internal, info().internal, "rank {}", r + 1);
        }
        assert_eq!(root.join().unwrap().unwrap().internal, info().internal);
        drop(silent);
    }

    #[test]
    fn a_wrong_secret_gets_no_root_info_and_rank_0_keeps_serving() {
        let address = free_address();
        let root = root(&address, 2, 30);
        assert_error(
            rank(&address, 1, 2, b"another secret of enough bytes"),
            "did not prove the rendezvous secret",
        );
        // A peer that answers the challenge without the secret: rank 0 hangs up on it without
        // sending anything more.
        let mut peer = connect(&address);
        let mut hello = MAGIC.to_vec();
        hello.extend_from_slice(&1u32.to_le_bytes());
        hello.extend_from_slice(&2u32.to_le_bytes());
        hello.extend_from_slice(&[7; NONCE]);
        peer.write_all(&hello).unwrap();
        let mut challenge = [0u8; NONCE + TAG];
        peer.read_exact(&mut challenge).unwrap();
        peer.write_all(&[0; TAG]).unwrap();
        let mut rest = Vec::new();
        peer.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        peer.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty(), "rank 0 sent {} bytes", rest.len());
        // The real rank still joins.
        assert_eq!(
            rank(&address, 1, 2, SECRET).unwrap().internal,
            info().internal
        );
        assert!(root.join().unwrap().is_ok());
    }

    #[test]
    fn a_forged_rank_0_is_refused() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        // Answers a hello with a root info of its own, as an unauthenticated rank 0 would.
        let forger = spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut hello = [0u8; HELLO];
            conn.read_exact(&mut hello).unwrap();
            let mut reply = vec![0u8];
            reply.extend_from_slice(&[0x5a; HCCL_ROOT_INFO_BYTES]);
            let _ = conn.write_all(&reply);
            let _ = conn.read_to_end(&mut Vec::new());
        });
        assert_error(
            rank(&address, 1, 2, SECRET),
            "did not prove the rendezvous secret",
        );
        forger.join().unwrap();
    }

    #[test]
    fn a_root_info_altered_in_transit_is_refused() {
        let address = free_address();
        let root = root(&address, 2, 30);
        // A relay that passes the handshake on and alters one byte of the root info.
        let relay = TcpListener::bind("127.0.0.1:0").unwrap();
        let relay_address = relay.local_addr().unwrap().to_string();
        let relay = spawn(move || {
            let (mut from_rank, _) = relay.accept().unwrap();
            let mut to_root = connect(&address);
            let mut pass = |len: usize, up: bool, alter: bool| {
                let mut buf = vec![0u8; len];
                let (src, dst) = if up {
                    (&mut from_rank, &mut to_root)
                } else {
                    (&mut to_root, &mut from_rank)
                };
                src.read_exact(&mut buf).unwrap();
                if alter {
                    buf[1] ^= 1;
                }
                dst.write_all(&buf).unwrap();
            };
            pass(HELLO, true, false);
            pass(NONCE + TAG, false, false);
            pass(TAG, true, false);
            pass(REPLY + TAG, false, true);
        });
        assert_error(
            rank(&relay_address, 1, 2, SECRET),
            "rank 0's reply failed authentication",
        );
        relay.join().unwrap();
        assert!(root.join().unwrap().is_ok());
    }

    #[test]
    fn ranks_missing_at_the_deadline_are_named_with_the_last_peer_dropped() {
        let address = free_address();
        let root = root(&address, 3, 3);
        assert_eq!(
            rank(&address, 1, 3, SECRET).unwrap().internal,
            info().internal
        );
        drop(connect(&address));
        let e = root.join().unwrap().unwrap_err().to_string();
        assert!(
            e.contains("ranks [2] did not connect within HCCL_CONNECT_TIMEOUT")
                && e.contains("last connection dropped")
                && e.contains("the peer closed the connection"),
            "{e}"
        );
    }

    #[test]
    fn the_secret_comes_from_the_environment_or_a_file() {
        let none = |_: &str| None;
        let e = secret_from(none).unwrap_err().to_string();
        assert!(
            e.contains("no shared secret: set BURN_ASCEND_RENDEZVOUS_SECRET"),
            "{e}"
        );

        let short = |n: &str| (n == ENV_RENDEZVOUS_SECRET).then(|| OsString::from("short"));
        let e = secret_from(short).unwrap_err().to_string();
        assert!(e.contains("has 5 bytes, fewer than 16"), "{e}");

        let path = std::env::temp_dir().join(format!("burn-ascend-secret-{}", std::process::id()));
        std::fs::write(&path, "0123456789abcdef-secret\n").unwrap();
        let file = |n: &str| (n == ENV_RENDEZVOUS_SECRET_FILE).then(|| path.clone().into());
        assert_eq!(secret_from(file).unwrap(), b"0123456789abcdef-secret");
        let both = |_: &str| Some(path.clone().into_os_string());
        let e = secret_from(both).unwrap_err().to_string();
        assert!(e.contains("are set: set one"), "{e}");
        std::fs::remove_file(&path).unwrap();

        let e = exchange(&free_address(), 1, 2, b"short", within(1), || Ok(info()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("fewer than 16"), "{e}");
    }
}
