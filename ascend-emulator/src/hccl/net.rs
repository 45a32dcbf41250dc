//! Root-info communicators across processes: the root's hub and each rank's link to it, over
//! TCP (the emulation's stand-in for the NPUs' data path between hosts).
//!
//! `HcclGetRootInfo` starts a hub listening on `HCCL_IF_IP` (default the loopback address;
//! port from `HCCL_IF_BASE_PORT`'s range of 32, else any free one) and writes its address and a
//! session number into the root info. Every rank's `HcclCommInitRootInfo` connects to it, says
//! who it is, and waits until all ranks have (`HCCL_CONNECT_TIMEOUT`). Afterwards each
//! transfer part is one request to the hub, which matches the parts in its own
//! [`Rendezvous`] and answers each rank with its output. The hub's process counts the traffic.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use ascend_acl::hccl::env::{HCCL_IF_BASE_PORT, HCCL_IF_IP};
use ascend_acl::hccl::result::*;
use ascend_acl::hccl::{HcclRootInfo, HCCL_ROOT_INFO_BYTES};

use super::comm::{ExchangeError, Key, Rendezvous, Transport};
use super::semantics::Op;

/// Marks root info written by the emulated HCCL.
const MAGIC: &[u8; 8] = b"EMUHCCL1";
/// How many ports from `HCCL_IF_BASE_PORT` root-info initialisation may use.
const PORT_RANGE: u16 = 32;

/// Where a root's hub listens, and which session it serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RootAddr {
    pub session: u64,
    pub addr: SocketAddr,
}

impl RootAddr {
    pub fn write(&self, info: &mut HcclRootInfo) {
        let mut b = Vec::with_capacity(64);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&self.session.to_le_bytes());
        b.extend_from_slice(&self.addr.port().to_le_bytes());
        let ip = self.addr.ip().to_string();
        b.push(ip.len() as u8);
        b.extend_from_slice(ip.as_bytes());
        info.internal = [0; HCCL_ROOT_INFO_BYTES];
        info.internal[..b.len()].copy_from_slice(&b);
    }

    pub fn read(info: &HcclRootInfo) -> Option<Self> {
        let b = &info.internal;
        if &b[..8] != MAGIC {
            return None;
        }
        let session = u64::from_le_bytes(b[8..16].try_into().ok()?);
        let port = u16::from_le_bytes(b[16..18].try_into().ok()?);
        let len = b[18] as usize;
        let ip: IpAddr = std::str::from_utf8(&b[19..19 + len]).ok()?.parse().ok()?;
        Some(Self {
            session,
            addr: SocketAddr::new(ip, port),
        })
    }
}

/// The host address the hub listens on.
fn if_ip() -> Result<IpAddr, String> {
    match std::env::var(HCCL_IF_IP) {
        // The real HCCL picks a NIC by name order, loopback last; the emulation serves one
        // machine, so it listens on loopback unless told otherwise.
        Err(_) => Ok(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        Ok(v) => v
            .trim()
            .parse()
            .map_err(|_| format!("{HCCL_IF_IP}={v:?} is not an IPv4 or IPv6 address")),
    }
}

fn bind(ip: IpAddr) -> Result<TcpListener, String> {
    match std::env::var(HCCL_IF_BASE_PORT) {
        Err(_) => TcpListener::bind((ip, 0)).map_err(|e| format!("cannot listen on {ip}: {e}")),
        Ok(v) => {
            let base: u16 = v
                .trim()
                .parse()
                .ok()
                .filter(|p| (1024..=65520).contains(p))
                .ok_or_else(|| {
                    format!("{HCCL_IF_BASE_PORT}={v:?} is not a port in [1024, 65520]")
                })?;
            (base..base + PORT_RANGE)
                .find_map(|p| TcpListener::bind((ip, p)).ok())
                .ok_or_else(|| {
                    format!(
                        "no free port in {ip}:{base}..{} ({HCCL_IF_BASE_PORT})",
                        base + PORT_RANGE
                    )
                })
        }
    }
}

/// Starts a hub for a new session, open for ranks to join until `connect_timeout` has passed;
/// returns where it listens.
pub(crate) fn start_hub(connect_timeout: Duration) -> Result<RootAddr, String> {
    static SESSIONS: AtomicU64 = AtomicU64::new(0);
    let listener = bind(if_ip()?)?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("listening socket has no address: {e}"))?;
    let session = (std::process::id() as u64) << 32
        ^ SESSIONS.fetch_add(1, Ordering::Relaxed)
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
    let hub = Arc::new(Hub {
        session,
        members: Mutex::default(),
        joined: Condvar::new(),
        rendezvous: Rendezvous::default(),
    });
    // Polled, so the hub stops listening once every rank has joined, or once they no longer
    // may.
    let deadline = Instant::now() + connect_timeout;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("cannot poll the listening socket: {e}"))?;
    std::thread::Builder::new()
        .name("emulated-hccl-hub".into())
        .spawn(move || {
            while !hub.complete() && Instant::now() < deadline {
                match listener.accept() {
                    Ok((conn, _)) if conn.set_nonblocking(false).is_ok() => {
                        let hub = hub.clone();
                        let _ = std::thread::Builder::new()
                            .name("emulated-hccl-link".into())
                            .spawn(move || hub.serve(conn));
                    }
                    Ok(_) => {}
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    Err(_) => return,
                }
            }
        })
        .map_err(|e| format!("cannot start the hub thread: {e}"))?;
    Ok(RootAddr { session, addr })
}

#[derive(Default)]
struct Members {
    n_ranks: Option<u32>,
    ranks: Vec<u32>,
}

struct Hub {
    session: u64,
    members: Mutex<Members>,
    joined: Condvar,
    rendezvous: Rendezvous,
}

impl Hub {
    fn complete(&self) -> bool {
        let m = self.members.lock().unwrap();
        m.n_ranks.is_some_and(|n| m.ranks.len() == n as usize)
    }

    /// Admits one rank, then answers its transfer requests until it disconnects.
    fn serve(&self, mut conn: TcpStream) {
        let _ = conn.set_nodelay(true);
        let admitted = self.admit(&mut conn);
        let reply = match &admitted {
            Ok(_) => Frame::ok(Vec::new()),
            Err((code, m)) => Frame::err(*code, m),
        };
        if reply.send(&mut conn).is_err() || admitted.is_err() {
            return;
        }
        while let Ok(req) = Request::receive(&mut conn) {
            let out = self.rendezvous.exchange(
                req.key,
                req.parties,
                req.participant,
                req.op,
                req.input,
                req.timeout,
            );
            let reply = match out {
                Ok(bytes) => Frame::ok(bytes),
                Err(e) => Frame::err(e.code, &e.message),
            };
            if reply.send(&mut conn).is_err() {
                return;
            }
        }
    }

    fn admit(&self, conn: &mut TcpStream) -> Result<u32, (i32, String)> {
        let hello = Hello::receive(conn).map_err(|e| (HCCL_E_TCP_TRANSFER, e.to_string()))?;
        if hello.session != self.session {
            return Err((
                HCCL_E_PARA,
                "the root info belongs to another session (stale or from another root)".into(),
            ));
        }
        let mut m = self.members.lock().unwrap();
        let n = *m.n_ranks.get_or_insert(hello.n_ranks);
        if hello.n_ranks != n || hello.rank >= n || m.ranks.contains(&hello.rank) {
            return Err((
                HCCL_E_PARA,
                format!(
                    "rank {} of {} does not fit the communicator of {n} ranks whose ranks {:?} have joined",
                    hello.rank, hello.n_ranks, m.ranks
                ),
            ));
        }
        m.ranks.push(hello.rank);
        self.joined.notify_all();
        let (m, waited) = self
            .joined
            .wait_timeout_while(m, hello.connect_timeout, |m| m.ranks.len() < n as usize)
            .unwrap();
        if waited.timed_out() {
            let missing: Vec<u32> = (0..n).filter(|r| !m.ranks.contains(r)).collect();
            return Err((
                HCCL_E_TIMEOUT,
                format!(
                    "ranks {missing:?} did not join within {:.0} s (HCCL_CONNECT_TIMEOUT)",
                    hello.connect_timeout.as_secs_f64()
                ),
            ));
        }
        Ok(hello.rank)
    }
}

/// A rank's link to its root's hub.
pub(crate) struct NetLink {
    conn: Mutex<TcpStream>,
}

impl NetLink {
    /// Connects rank `rank` of `n_ranks` to the hub and waits until every rank has.
    pub fn connect(
        root: RootAddr,
        n_ranks: u32,
        rank: u32,
        connect_timeout: Duration,
    ) -> Result<Self, (i32, String)> {
        let deadline = Instant::now() + connect_timeout;
        let mut conn = loop {
            match TcpStream::connect_timeout(&root.addr, Duration::from_secs(1)) {
                Ok(c) => break c,
                Err(e) if Instant::now() >= deadline => {
                    return Err((
                        HCCL_E_TCP_CONNECT,
                        format!("cannot reach the root at {}: {e}", root.addr),
                    ))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        let _ = conn.set_nodelay(true);
        let io = |e: std::io::Error| (HCCL_E_TCP_TRANSFER, format!("root {}: {e}", root.addr));
        Hello {
            session: root.session,
            n_ranks,
            rank,
            connect_timeout,
        }
        .send(&mut conn)
        .map_err(io)?;
        conn.set_read_timeout(Some(
            deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(1),
        ))
        .map_err(io)?;
        match Frame::receive(&mut conn) {
            Ok(Frame { status: 0, .. }) => {}
            Ok(f) => return Err((f.status, String::from_utf8_lossy(&f.body).into_owned())),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err((
                    HCCL_E_TIMEOUT,
                    "the other ranks did not join in time (HCCL_CONNECT_TIMEOUT)".into(),
                ))
            }
            Err(e) => return Err(io(e)),
        }
        Ok(Self {
            conn: Mutex::new(conn),
        })
    }
}

impl Transport for NetLink {
    fn exchange(
        &self,
        key: Key,
        parties: usize,
        participant: usize,
        op: Op,
        input: Vec<u8>,
        timeout: Option<Duration>,
    ) -> Result<Vec<u8>, ExchangeError> {
        let what = op.describe();
        let lost = |e: std::io::Error| ExchangeError {
            code: HCCL_E_TCP_TRANSFER,
            message: format!("{what}: the link to the root failed: {e}"),
        };
        let mut conn = self.conn.lock().unwrap();
        Request {
            key,
            parties,
            participant,
            op,
            input,
            timeout,
        }
        .send(&mut *conn)
        .map_err(lost)?;
        // The hub enforces the timeout; the margin only covers a hub that vanished.
        conn.set_read_timeout(timeout.map(|t| t + Duration::from_secs(5)))
            .map_err(lost)?;
        let reply = Frame::receive(&mut *conn).map_err(lost)?;
        if reply.status == 0 {
            Ok(reply.body)
        } else {
            Err(ExchangeError {
                code: reply.status,
                message: String::from_utf8_lossy(&reply.body).into_owned(),
            })
        }
    }
}

// The wire format: little-endian integers, length-prefixed byte strings.

fn put_u32(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(b: &mut Vec<u8>, v: u64) {
    b.extend_from_slice(&v.to_le_bytes());
}

fn put_bytes(b: &mut Vec<u8>, v: &[u8]) {
    put_u64(b, v.len() as u64);
    b.extend_from_slice(v);
}

struct Reader<R>(R);

impl<R: Read> Reader<R> {
    fn u8(&mut self) -> std::io::Result<u8> {
        let mut b = [0u8; 1];
        self.0.read_exact(&mut b)?;
        Ok(b[0])
    }

    fn u32(&mut self) -> std::io::Result<u32> {
        let mut b = [0u8; 4];
        self.0.read_exact(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    fn i32(&mut self) -> std::io::Result<i32> {
        Ok(self.u32()? as i32)
    }

    fn u64(&mut self) -> std::io::Result<u64> {
        let mut b = [0u8; 8];
        self.0.read_exact(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    fn bytes(&mut self) -> std::io::Result<Vec<u8>> {
        let len = self.u64()? as usize;
        let mut v = vec![0u8; len];
        self.0.read_exact(&mut v)?;
        Ok(v)
    }

    fn counts(&mut self) -> std::io::Result<Vec<u64>> {
        let n = self.u32()? as usize;
        (0..n).map(|_| self.u64()).collect()
    }
}

fn bad(what: &str) -> std::io::Error {
    std::io::Error::new(ErrorKind::InvalidData, what.to_string())
}

struct Hello {
    session: u64,
    n_ranks: u32,
    rank: u32,
    connect_timeout: Duration,
}

impl Hello {
    fn send(&self, w: &mut impl Write) -> std::io::Result<()> {
        let mut b = MAGIC.to_vec();
        put_u64(&mut b, self.session);
        put_u32(&mut b, self.n_ranks);
        put_u32(&mut b, self.rank);
        put_u64(&mut b, self.connect_timeout.as_millis() as u64);
        w.write_all(&b)
    }

    fn receive(r: &mut impl Read) -> std::io::Result<Self> {
        let mut magic = [0u8; 8];
        r.read_exact(&mut magic)?;
        if &magic != MAGIC {
            return Err(bad("not an emulated HCCL rank"));
        }
        let mut r = Reader(r);
        Ok(Self {
            session: r.u64()?,
            n_ranks: r.u32()?,
            rank: r.u32()?,
            connect_timeout: Duration::from_millis(r.u64()?),
        })
    }
}

/// A reply: status 0 and a body, or an `HcclResult` and a message.
struct Frame {
    status: i32,
    body: Vec<u8>,
}

impl Frame {
    fn ok(body: Vec<u8>) -> Self {
        Self { status: 0, body }
    }

    fn err(code: i32, message: &str) -> Self {
        Self {
            status: code,
            body: message.as_bytes().to_vec(),
        }
    }

    fn send(&self, w: &mut impl Write) -> std::io::Result<()> {
        let mut b = Vec::with_capacity(self.body.len() + 12);
        put_u32(&mut b, self.status as u32);
        put_bytes(&mut b, &self.body);
        w.write_all(&b)
    }

    fn receive(r: &mut impl Read) -> std::io::Result<Self> {
        let mut r = Reader(r);
        Ok(Self {
            status: r.i32()?,
            body: r.bytes()?,
        })
    }
}

struct Request {
    key: Key,
    parties: usize,
    participant: usize,
    op: Op,
    input: Vec<u8>,
    timeout: Option<Duration>,
}

impl Request {
    fn send(&self, w: &mut impl Write) -> std::io::Result<()> {
        let mut b = Vec::with_capacity(self.input.len() + 128);
        match self.key {
            Key::Collective(n) => {
                b.push(0);
                put_u64(&mut b, n);
            }
            Key::P2p { src, dst, n } => {
                b.push(1);
                put_u32(&mut b, src);
                put_u32(&mut b, dst);
                put_u64(&mut b, n);
            }
        }
        put_u32(&mut b, self.parties as u32);
        put_u32(&mut b, self.participant as u32);
        put_u64(&mut b, self.timeout.map_or(0, |t| t.as_millis() as u64 + 1));
        encode_op(&mut b, &self.op);
        put_bytes(&mut b, &self.input);
        w.write_all(&b)
    }

    fn receive(r: &mut impl Read) -> std::io::Result<Self> {
        let mut r = Reader(r);
        let key = match r.u8()? {
            0 => Key::Collective(r.u64()?),
            1 => Key::P2p {
                src: r.u32()?,
                dst: r.u32()?,
                n: r.u64()?,
            },
            _ => return Err(bad("unknown transfer key")),
        };
        let parties = r.u32()? as usize;
        let participant = r.u32()? as usize;
        let timeout = match r.u64()? {
            0 => None,
            ms => Some(Duration::from_millis(ms - 1)),
        };
        let op = decode_op(&mut r)?;
        Ok(Self {
            key,
            parties,
            participant,
            op,
            input: r.bytes()?,
            timeout,
        })
    }
}

fn encode_op(b: &mut Vec<u8>, op: &Op) {
    let counts = |b: &mut Vec<u8>, c: &[u64]| {
        put_u32(b, c.len() as u32);
        c.iter().for_each(|&v| put_u64(b, v));
    };
    match op {
        Op::AllReduce { count, dtype, op } => {
            b.push(0);
            put_u64(b, *count);
            put_u32(b, *dtype as u32);
            put_u32(b, *op as u32);
        }
        Op::Broadcast { count, dtype, root } => {
            b.push(1);
            put_u64(b, *count);
            put_u32(b, *dtype as u32);
            put_u32(b, *root);
        }
        Op::AllGather { count, dtype } => {
            b.push(2);
            put_u64(b, *count);
            put_u32(b, *dtype as u32);
        }
        Op::ReduceScatter { count, dtype, op } => {
            b.push(3);
            put_u64(b, *count);
            put_u32(b, *dtype as u32);
            put_u32(b, *op as u32);
        }
        Op::AlltoAllV {
            dtype,
            send_counts,
            recv_counts,
        } => {
            b.push(4);
            put_u32(b, *dtype as u32);
            counts(b, send_counts);
            counts(b, recv_counts);
        }
        Op::Send { count, dtype, peer } | Op::Recv { count, dtype, peer } => {
            b.push(if matches!(op, Op::Send { .. }) { 5 } else { 6 });
            put_u64(b, *count);
            put_u32(b, *dtype as u32);
            put_u32(b, *peer);
        }
    }
}

fn decode_op<R: Read>(r: &mut Reader<R>) -> std::io::Result<Op> {
    Ok(match r.u8()? {
        0 => Op::AllReduce {
            count: r.u64()?,
            dtype: r.i32()?,
            op: r.i32()?,
        },
        1 => Op::Broadcast {
            count: r.u64()?,
            dtype: r.i32()?,
            root: r.u32()?,
        },
        2 => Op::AllGather {
            count: r.u64()?,
            dtype: r.i32()?,
        },
        3 => Op::ReduceScatter {
            count: r.u64()?,
            dtype: r.i32()?,
            op: r.i32()?,
        },
        4 => Op::AlltoAllV {
            dtype: r.i32()?,
            send_counts: r.counts()?,
            recv_counts: r.counts()?,
        },
        5 => Op::Send {
            count: r.u64()?,
            dtype: r.i32()?,
            peer: r.u32()?,
        },
        6 => Op::Recv {
            count: r.u64()?,
            dtype: r.i32()?,
            peer: r.u32()?,
        },
        _ => return Err(bad("unknown transfer kind")),
    })
}
