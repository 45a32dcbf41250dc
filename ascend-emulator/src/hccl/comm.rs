//! Communicators of the emulated HCCL and the rendezvous where their ranks meet.
//!
//! Every transfer is matched by a [`Key`]: a communicator's collectives by their sequence
//! number (each rank numbers the collectives it issues, so the n-th of every rank meet), a
//! point-to-point pair by (sender, receiver, n-th transfer between them). Each rank's part runs
//! on its own stream's worker: it copies its input out of device memory, hands it to the
//! [`Transport`] and blocks there until every participant has arrived (or its
//! `HCCL_EXEC_TIMEOUT` runs out), then writes its output. The last participant to arrive
//! computes everyone's output ([`super::semantics::compute`]).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use ascend_acl::hccl::result::*;

use super::semantics::{compute, Op};
use super::traffic;

/// Which transfer a part belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Key {
    /// The n-th collective of a communicator.
    Collective(u64),
    /// The n-th transfer from `src` to `dst`.
    P2p { src: u32, dst: u32, n: u64 },
}

/// Why a part did not complete: the `HcclResult` the communicator then reports, and a message.
#[derive(Debug, Clone)]
pub(crate) struct ExchangeError {
    pub code: i32,
    pub message: String,
}

/// How the parts of a transfer meet: in this process, or through the root's hub over TCP.
pub(crate) trait Transport: Send + Sync {
    /// Contributes participant `participant`'s part of transfer `key` (among `parties`
    /// participants) and waits for its output; `timeout` bounds the wait (`None`: forever).
    fn exchange(
        &self,
        key: Key,
        parties: usize,
        participant: usize,
        op: Op,
        input: Vec<u8>,
        timeout: Option<Duration>,
    ) -> Result<Vec<u8>, ExchangeError>;

    /// The communicator is being destroyed: finish what others still need from this rank.
    fn close(&self) {}
}

struct Slot {
    parts: Vec<Option<(Op, Vec<u8>)>>,
    outcome: Option<Result<Vec<Vec<u8>>, String>>,
    collected: usize,
}

/// The meeting place of the parts of the transfers of one group of ranks.
#[derive(Default)]
pub(crate) struct Rendezvous {
    slots: Mutex<HashMap<Key, Slot>>,
    cv: Condvar,
}

impl Transport for Rendezvous {
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
        let mut slots = self.slots.lock().unwrap();
        let slot = slots.entry(key).or_insert_with(|| Slot {
            parts: vec![None; parties],
            outcome: None,
            collected: 0,
        });
        if slot.parts.len() != parties || slot.parts[participant].is_some() {
            return Err(ExchangeError {
                code: HCCL_E_INTERNAL,
                message: format!("{what}: part {participant} of {key:?} was given twice"),
            });
        }
        slot.parts[participant] = Some((op, input));
        if slot.parts.iter().all(Option::is_some) {
            let (ops, inputs): (Vec<Op>, Vec<Vec<u8>>) =
                slot.parts.iter_mut().map(|p| p.take().unwrap()).unzip();
            drop(slots);
            let outcome = compute(&ops, &inputs).map(|(outs, t)| {
                traffic::record(ops[0].kind(), t);
                outs
            });
            slots = self.slots.lock().unwrap();
            slots.get_mut(&key).unwrap().outcome = Some(outcome);
            self.cv.notify_all();
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let slot = slots.get_mut(&key).unwrap();
            if let Some(outcome) = &mut slot.outcome {
                let result = match outcome {
                    Ok(outs) => Ok(std::mem::take(&mut outs[participant])),
                    Err(m) => Err(ExchangeError {
                        // On hardware mismatched parameters hang until HCCL_EXEC_TIMEOUT; the
                        // emulation reports them at once, as the same failure.
                        code: HCCL_E_TIMEOUT,
                        message: format!(
                            "{m} (on an NPU the ranks would wait for each other until HCCL_EXEC_TIMEOUT)"
                        ),
                    }),
                };
                slot.collected += 1;
                if slot.collected == parties {
                    slots.remove(&key);
                }
                return result;
            }
            match deadline {
                None => slots = self.cv.wait(slots).unwrap(),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        let missing: Vec<usize> = slot
                            .parts
                            .iter()
                            .enumerate()
                            .filter(|(_, p)| p.is_none())
                            .map(|(i, _)| i)
                            .collect();
                        return Err(ExchangeError {
                            code: HCCL_E_TIMEOUT,
                            message: format!(
                                "{what} timed out after {:.1} s (HCCL_EXEC_TIMEOUT): participants {missing:?} of {key:?} never joined",
                                timeout.unwrap_or_default().as_secs_f64()
                            ),
                        });
                    }
                    slots = self.cv.wait_timeout(slots, d - now).unwrap().0;
                }
            }
        }
    }
}

/// The lazy link set-up of an `HcclCommInitAll` communicator. Such a communicator connects its
/// ranks at their first transfer, not at creation: each rank's first call blocks the thread
/// issuing it until every rank has issued its own first call, within `HCCL_CONNECT_TIMEOUT`
/// (`hccl-abi.md` §6 rule 5: one thread per device, each thread's first op within
/// HCCL_CONNECT_TIMEOUT of the others). So one thread cannot issue every rank's first part in
/// turn: its first call never returns. Root-info communicators connect inside their
/// initialisation instead.
pub(crate) struct Connect {
    arrived: Mutex<Vec<bool>>,
    all: Condvar,
}

impl Connect {
    pub fn new(ranks: usize) -> Self {
        Self {
            arrived: Mutex::new(vec![false; ranks]),
            all: Condvar::new(),
        }
    }

    /// Rank `rank` has issued its first transfer: waits until every rank has.
    fn arrive(&self, rank: usize, timeout: Duration) -> Result<(), ExchangeError> {
        let mut arrived = self.arrived.lock().unwrap();
        arrived[rank] = true;
        self.all.notify_all();
        let (arrived, waited) = self
            .all
            .wait_timeout_while(arrived, timeout, |a| !a.iter().all(|&x| x))
            .unwrap();
        if waited.timed_out() {
            let missing: Vec<usize> = (0..arrived.len()).filter(|&r| !arrived[r]).collect();
            return Err(ExchangeError {
                code: HCCL_E_TIMEOUT,
                message: format!(
                    "rank {rank}'s first transfer connects the communicator, which waits for every \
                     rank's first transfer; ranks {missing:?} issued none within {:.0} s \
                     (HCCL_CONNECT_TIMEOUT). An HcclCommInitAll communicator needs one issuing \
                     thread per device",
                    timeout.as_secs_f64()
                ),
            });
        }
        Ok(())
    }
}

/// One rank of a communicator.
pub(crate) struct Comm {
    pub rank: u32,
    pub size: u32,
    /// The NPU the rank runs on: its buffers and streams must be that device's.
    pub device: i32,
    /// The device's generation at creation: a reset of the device destroys the communicator
    /// with the rest of its context.
    pub generation: u64,
    transport: Arc<dyn Transport>,
    next_collective: AtomicU64,
    next_p2p: Mutex<HashMap<(u32, u32), u64>>,
    pub exec_timeout: Option<Duration>,
    /// The first failure of an issued transfer (`HcclGetCommAsyncError`).
    async_error: AtomicI32,
    /// The staging buffers the communicator reserves in HBM (`HCCL_BUFFSIZE`, twice).
    staging: u64,
    /// For an `HcclCommInitAll` communicator: its lazy connection, and how long it may wait.
    connect: Option<(Arc<Connect>, Duration)>,
    connected: AtomicBool,
}

impl Comm {
    pub fn new(
        rank: u32,
        size: u32,
        (device, generation): (i32, u64),
        transport: Arc<dyn Transport>,
        exec_timeout: Option<Duration>,
        staging: u64,
    ) -> Self {
        Self {
            rank,
            size,
            device,
            generation,
            transport,
            next_collective: AtomicU64::new(0),
            next_p2p: Mutex::default(),
            exec_timeout,
            async_error: AtomicI32::new(HCCL_SUCCESS),
            staging,
            connect: None,
            connected: AtomicBool::new(false),
        }
    }

    /// A rank of an `HcclCommInitAll` communicator, whose ranks connect at their first
    /// transfer ([`Connect`]).
    pub fn connecting(mut self, connect: Arc<Connect>, timeout: Duration) -> Self {
        self.connect = Some((connect, timeout));
        self
    }

    /// Called by each transfer at issue, before it takes its place in the rank's order: the
    /// first one waits until every rank has issued its first ([`Connect`]).
    pub fn connect(&self) -> Result<(), ExchangeError> {
        match &self.connect {
            Some((c, timeout)) if !self.connected.load(Ordering::Acquire) => {
                c.arrive(self.rank as usize, *timeout)?;
                self.connected.store(true, Ordering::Release);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// The key of the next collective this rank issues.
    pub fn next_collective(&self) -> Key {
        Key::Collective(self.next_collective.fetch_add(1, Ordering::Relaxed))
    }

    /// The key of the next transfer from `src` to `dst` (one of them this rank).
    pub fn next_p2p(&self, src: u32, dst: u32) -> Key {
        let mut map = self.next_p2p.lock().unwrap();
        let n = map.entry((src, dst)).or_insert(0);
        *n += 1;
        Key::P2p { src, dst, n: *n }
    }

    pub fn exchange(
        &self,
        key: Key,
        parties: usize,
        participant: usize,
        op: Op,
        input: Vec<u8>,
    ) -> Result<Vec<u8>, ExchangeError> {
        let r = self
            .transport
            .exchange(key, parties, participant, op, input, self.exec_timeout);
        if let Err(e) = &r {
            let _ = self.async_error.compare_exchange(
                HCCL_SUCCESS,
                e.code,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
        r
    }

    /// See [`Transport::close`].
    pub fn close(&self) {
        self.transport.close();
    }

    pub fn async_error(&self) -> i32 {
        self.async_error.load(Ordering::Acquire)
    }

    pub fn staging(&self) -> u64 {
        self.staging
    }
}

/// Live communicator handles (from `Arc::into_raw`), so stale or foreign ones are rejected.
pub(crate) fn registry() -> &'static Mutex<HashSet<usize>> {
    static LIVE: OnceLock<Mutex<HashSet<usize>>> = OnceLock::new();
    LIVE.get_or_init(Mutex::default)
}
