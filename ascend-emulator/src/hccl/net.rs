//! Root-info communicators across processes: the root's hub and each rank's link to it, over
//! TCP (the emulation's stand-in for the NPUs' data path between hosts).
//!
//! `HcclGetRootInfo` starts a hub listening on `HCCL_IF_IP` (default the loopback address;
//! port from `HCCL_IF_BASE_PORT`'s range of 32, else any free one) and writes its address and a
//! session number into the root info. Every rank's `HcclCommInitRootInfo` connects to it, says
//! who it is, and waits until all ranks have (`HCCL_CONNECT_TIMEOUT`). Afterwards each
//! transfer part is one request to the hub, which matches the parts in its own
//! [`Rendezvous`] and answers each rank with its output. The hub's process counts the traffic.
//!
//! The hub lives in the root's process, which NPUs do not need (their data path is between
//! the devices): so the root's `HcclCommDestroy` waits until the hub has answered every part
//! it received, or a rank whose output was computed would lose it when the root's process
//! exits (bounded by `HCCL_CONNECT_TIMEOUT`).

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
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
        unanswered: Mutex::new(0),
        answered: Condvar::new(),
    });
    hubs().lock().unwrap().insert(session, Arc::downgrade(&hub));
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
    /// Parts received and not answered yet.
    unanswered: Mutex<usize>,
    answered: Condvar,
}

/// The hubs of this process, by session.
fn hubs() -> &'static Mutex<HashMap<u64, Weak<Hub>>> {
    static HUBS: OnceLock<Mutex<HashMap<u64, Weak<Hub>>>> = OnceLock::new();
    HUBS.get_or_init(Mutex::default)
}

/// Waits until the hub of `session`, if this process holds it, has answered every part it
/// received (at most `timeout`).
fn drain_hub(session: u64, timeout: Duration) {
    let hub = hubs().lock().unwrap().get(&session).and_then(Weak::upgrade);
    if let Some(hub) = hub {
        let unanswered = hub.unanswered.lock().unwrap();
        drop(
            hub.answered
                .wait_timeout_while(unanswered, timeout, |n| *n > 0)
                .unwrap(),
        );
    }
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
        let (Ok(rank), Some(n)) = (admitted, self.members.lock().unwrap().n_ranks) else {
            return;
        };
        while let Ok(req) = Request::receive(&mut conn) {
            if let Err(m) = req.check(rank, n) {
                // A part that cannot be this rank's would break the matching of everyone's:
                // the link is dropped.
                let _ = Frame::err(HCCL_E_PARA, &m).send(&mut conn);
                return;
            }
            *self.unanswered.lock().unwrap() += 1;
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
            let sent = reply.send(&mut conn);
            *self.unanswered.lock().unwrap() -= 1;
            self.answered.notify_all();
            if sent.is_err() {
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
    session: u64,
    connect_timeout: Duration,
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
            session: root.session,
            connect_timeout,
        })
    }
}

impl Transport for NetLink {
    fn close(&self) {
        drain_hub(self.session, self.connect_timeout);
    }

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

    /// A length-prefixed byte string. The length comes from the peer: the buffer grows with
    /// the bytes that actually arrive, so a forged length cannot make this process allocate.
    fn bytes(&mut self) -> std::io::Result<Vec<u8>> {
        let len = self.u64()?;
        let mut v = Vec::new();
        (&mut self.0).take(len).read_to_end(&mut v)?;
        if v.len() as u64 != len {
            return Err(std::io::Error::new(
                ErrorKind::UnexpectedEof,
                format!("{len} bytes announced, {} arrived", v.len()),
            ));
        }
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
    /// Whether this request, from the link of rank `rank` of `n`, describes a part that rank can
    /// give: the peer is not trusted, and the hub indexes and slices by these fields.
    fn check(&self, rank: u32, n: u32) -> Result<(), String> {
        let bad = |why: String| Err(format!("rank {rank} sent a malformed transfer part: {why}"));
        let (parties, me) = match self.key {
            Key::Collective(_) => (n as usize, self.participant as u32),
            Key::P2p { src, dst, .. } => {
                if src >= n || dst >= n || src == dst {
                    return bad(format!("pair {src} -> {dst} among {n} ranks"));
                }
                (2, if self.participant == 0 { src } else { dst })
            }
        };
        if self.parties != parties || self.participant >= parties || me != rank {
            return bad(format!(
                "participant {} of {} in {:?}",
                self.participant, self.parties, self.key
            ));
        }
        let Some((elem, _)) = super::semantics::facts(self.op.dtype()) else {
            return bad("no HcclDataType".into());
        };
        let bytes = |count: u64| count.checked_mul(elem as u64);
        let expected = match &self.op {
            Op::AllReduce { count, .. } | Op::AllGather { count, .. } | Op::Send { count, .. } => {
                bytes(*count)
            }
            Op::Recv { .. } => Some(0),
            Op::ReduceScatter { count, .. } => bytes(*count).and_then(|b| b.checked_mul(n as u64)),
            Op::Broadcast { count, root, .. } => {
                if *root >= n {
                    return bad(format!("root {root} among {n} ranks"));
                }
                if *root == rank {
                    bytes(*count)
                } else {
                    Some(0)
                }
            }
            Op::AlltoAllV {
                send_counts,
                recv_counts,
                ..
            } => {
                if send_counts.len() != parties || recv_counts.len() != parties {
                    return bad(format!("AlltoAllV counts for {parties} ranks"));
                }
                send_counts
                    .iter()
                    .try_fold(0u64, |t, &c| t.checked_add(c))
                    .and_then(bytes)
            }
        };
        if expected != Some(self.input.len() as u64) {
            return bad(format!(
                "{} bytes of input for {}",
                self.input.len(),
                self.op.describe()
            ));
        }
        Ok(())
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    fn all_reduce(count: u64, input: Vec<u8>, participant: usize, parties: usize) -> Request {
        Request {
            key: Key::Collective(0),
            parties,
            participant,
            op: Op::AllReduce {
                count,
                dtype: ascend_acl::hccl::data_type::HCCL_DATA_TYPE_FP32,
                op: ascend_acl::hccl::reduce_op::HCCL_REDUCE_SUM,
            },
            input,
            timeout: None,
        }
    }

    /// A frame announcing far more bytes than any machine holds, followed by three: the reader
    /// reports the short frame instead of allocating what was announced.
    #[test]
    fn a_forged_length_allocates_nothing() {
        let mut wire = Vec::new();
        put_u32(&mut wire, 0);
        put_u64(&mut wire, 1 << 60);
        wire.extend_from_slice(&[1, 2, 3]);
        let e = Frame::receive(&mut wire.as_slice())
            .err()
            .expect("a short frame");
        assert_eq!(e.kind(), ErrorKind::UnexpectedEof);
        // The same through a request's input.
        let mut wire = Vec::new();
        all_reduce(2, vec![0; 8], 0, 2).send(&mut wire).unwrap();
        let at = wire.len() - 8 - 8;
        wire[at..at + 8].copy_from_slice(&(1u64 << 60).to_le_bytes());
        assert!(Request::receive(&mut wire.as_slice()).is_err());
    }

    /// The hub indexes and slices by a part's participant, party count, root and counts: a part
    /// that does not fit the sender's rank is refused before it reaches the rendezvous.
    #[test]
    fn parts_that_do_not_fit_their_rank_are_refused() {
        assert!(all_reduce(2, vec![0; 8], 1, 2).check(1, 2).is_ok());
        for (req, rank, n) in [
            // Another rank's part.
            (all_reduce(2, vec![0; 8], 0, 2), 1, 2),
            // More parties than ranks (the rendezvous would size its slot by it).
            (all_reduce(2, vec![0; 8], 1, 1 << 40), 1, 2),
            // A participant past the parties.
            (all_reduce(2, vec![0; 8], 5, 2), 1, 2),
            // An input shorter than the count says.
            (all_reduce(4, vec![0; 8], 1, 2), 1, 2),
        ] {
            let e = req.check(rank, n).expect_err("refused");
            assert!(e.contains("malformed"), "{e}");
        }
        let mut bcast = all_reduce(0, Vec::new(), 1, 2);
        bcast.op = Op::Broadcast {
            count: 1,
            dtype: ascend_acl::hccl::data_type::HCCL_DATA_TYPE_FP32,
            root: 7,
        };
        assert!(bcast.check(1, 2).unwrap_err().contains("root 7"));
        let mut a2a = all_reduce(0, Vec::new(), 1, 2);
        a2a.op = Op::AlltoAllV {
            dtype: ascend_acl::hccl::data_type::HCCL_DATA_TYPE_FP32,
            send_counts: vec![0],
            recv_counts: vec![0, 0],
        };
        assert!(a2a.check(1, 2).unwrap_err().contains("counts"));
    }
}
