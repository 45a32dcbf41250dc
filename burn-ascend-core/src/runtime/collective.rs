//! Communicators: HCCL's groups of ranks, one rank per device, and the issue of HCCL transfers
//! on the devices' streams.
//!
//! - [`Communicator::local`]: every listed device of this process, one rank each
//!   (`HcclCommInitAll`), cached per device list.
//! - [`Communicator::rendezvous`]: one rank of a communicator spanning processes or machines:
//!   rank 0 creates the root info and serves it on a TCP address the user gives
//!   (`rendezvous.rs`); every rank then joins with `HcclCommInitRootInfoConfig`.
//!
//! A transfer is issued on each local rank's device stream (the stream of its
//! [`DeviceContext`], so the transfer is ordered after the work that produced its input and
//! before the work that reads its output, and the allocator's stream-ordered reuse stays
//! valid). Every HCCL call of a device is made on that device's own issuing thread (one per
//! device, bound to it once): HCCL asks for one thread per device for the ranks of an
//! `HcclCommInitAll` communicator and for serial issue per device (`hccl-abi.md` §6 rules 3
//! and 5). Such a communicator connects its ranks at their first transfer, which blocks the
//! issuing thread until every rank has issued its own; [`Communicator::local`] makes that first
//! transfer (one byte broadcast) on all the devices' threads at once, so that later transfers
//! never wait at issue and one rank may be issued at a time, from any thread (Burn's
//! gradient-sync server issues one device after another). A communicator issues its ranks in
//! one order under its own lock, so that concurrent callers match on every device.
//!
//! A rank that fails at issue after other ranks of the transfer were issued (a partial issue)
//! leaves those waiting inside HCCL until the execution timeout and the ranks' sequences out of
//! step: the communicator is retired (its later use is an error; [`Communicator::local`] builds
//! a new one). So is a communicator whose rank reports an asynchronous error
//! (`HcclGetCommAsyncError`). The execution timeout is [`exec_timeout`], 120 s unless set.
//!
//! A communicator lives in its devices' contexts: [`super::reset_device`] retires every
//! communicator with a rank on the device before it waits for the device's work (so no thread
//! issues to the stream being reset), destroys the device's rank before `aclrtResetDevice`
//! (HCCL's order); [`Communicator::local`] then builds a new one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use super::context::DeviceContext;
use super::device::AscendDevice;
use crate::acl::hccl::data_type::HCCL_DATA_TYPE_UINT8;
use crate::acl::hccl::{env, CommConfig, HcclApi, HcclComm, HcclLibraries, HcclRootInfo};
use crate::acl::types::aclrtStream;
use crate::acl::{AclError, AclResult};

/// HCCL's table for devices of `device`'s kind: CANN's `libhccl.so` for NPUs (opened on first
/// use), the emulated HCCL for emulated NPUs.
pub fn hccl_api(device: &AscendDevice) -> AclResult<&'static HcclApi> {
    match device {
        AscendDevice::Npu(_) => {
            static API: OnceLock<AclResult<HcclApi>> = OnceLock::new();
            API.get_or_init(|| HcclApi::new(Box::new(HcclLibraries::open()?)))
                .as_ref()
                .map_err(AclError::clone)
        }
        #[cfg(feature = "emulator")]
        AscendDevice::Emulated(_) => {
            static API: OnceLock<HcclApi> = OnceLock::new();
            Ok(API.get_or_init(|| {
                HcclApi::new(Box::new(crate::emulator::hccl::EmulatedHccl))
                    .expect("the emulated HCCL exports every function")
            }))
        }
        #[cfg(not(feature = "emulator"))]
        AscendDevice::Emulated(_) => Err(AclError::Library(
            "burn-ascend was built without its `emulator` feature, so there is no emulated HCCL"
                .into(),
        )),
    }
}

/// One rank of a communicator that lives in this process.
pub struct LocalRank {
    /// Its rank in the communicator.
    pub rank: u32,
    /// The context of its device.
    pub ctx: Arc<DeviceContext>,
    comm: HcclComm,
    /// Whether `comm` was destroyed already (by a reset of the device).
    destroyed: AtomicBool,
}

// SAFETY: the handle is used from the device's issuing thread and for the destroy, which HCCL
// allows from any thread.
unsafe impl Send for LocalRank {}
unsafe impl Sync for LocalRank {}

impl LocalRank {
    fn new(rank: u32, ctx: Arc<DeviceContext>, comm: HcclComm) -> Self {
        Self {
            rank,
            ctx,
            comm,
            destroyed: AtomicBool::new(false),
        }
    }

    /// `HcclCommDestroy`, once.
    fn destroy(&self, api: &HcclApi) {
        if !self.destroyed.swap(true, Ordering::AcqRel) {
            // SAFETY: the handle is ours, and no longer used.
            unsafe { (api.fns.HcclCommDestroy)(self.comm) };
        }
    }
}

/// An HCCL communicator: its size and the ranks this process holds.
pub struct Communicator {
    api: &'static HcclApi,
    size: u32,
    ranks: Vec<LocalRank>,
    /// Set when the communicator may no longer be used: why.
    retired: OnceLock<String>,
    /// Held while a transfer's ranks are issued, so that every rank sees the transfers of
    /// concurrent callers in one order.
    order: Mutex<()>,
}

// SAFETY: HCCL handles may be used from any thread; each device's calls are made on its
// issuing thread, and a communicator's transfers are ordered by `order`.
unsafe impl Send for Communicator {}
unsafe impl Sync for Communicator {}

/// A call to make on a device's issuing thread.
type Job = Box<dyn FnOnce() + Send>;

/// The issuing thread of `device`: one per device for the process's life, bound to the
/// device's current context before each call. Being one thread, it also makes the device's
/// HCCL calls serial.
fn issuer(device: &AscendDevice) -> SyncSender<Job> {
    static ISSUERS: OnceLock<Mutex<HashMap<AscendDevice, SyncSender<Job>>>> = OnceLock::new();
    let mut map = ISSUERS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    map.entry(*device)
        .or_insert_with(|| {
            let (tx, rx) = sync_channel::<Job>(0);
            std::thread::Builder::new()
                .name(format!("hccl-issue-{device}"))
                .spawn(move || rx.into_iter().for_each(|job| job()))
                .expect("a thread to issue HCCL calls on");
            tx
        })
        .clone()
}

/// Hands `f` to `device`'s issuing thread; its result arrives on the returned receiver.
///
/// # Safety
/// `f` may borrow from the caller: the caller must receive from the returned receiver (which
/// yields once `f` has run or was dropped) before anything `f` borrows goes away.
unsafe fn dispatch<'a, T: Send + 'a>(
    device: &AscendDevice,
    f: impl FnOnce() -> T + Send + 'a,
) -> Receiver<std::thread::Result<T>> {
    let (tx, rx) = sync_channel(1);
    let job: Box<dyn FnOnce() + Send + 'a> = Box::new(move || {
        let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    });
    // SAFETY: the caller waits on `rx` before the borrows end; an unsent job is dropped here.
    let job: Job = unsafe { std::mem::transmute::<Box<dyn FnOnce() + Send + 'a>, Job>(job) };
    let _ = issuer(device).send(job);
    rx
}

/// The result of a dispatched call, once it has run.
fn collect<T>(rx: Receiver<std::thread::Result<T>>) -> T {
    match rx.recv() {
        Ok(Ok(v)) => v,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => panic!("an HCCL issuing thread stopped"),
    }
}

/// Runs `f` on `device`'s issuing thread and returns its result.
fn on_issuer<T: Send>(device: &AscendDevice, f: impl FnOnce() -> T + Send) -> T {
    // SAFETY: the result is awaited at once.
    collect(unsafe { dispatch(device, f) })
}

/// The execution timeout set by [`set_exec_timeout`], if it was.
static EXEC_TIMEOUT: Mutex<Option<Duration>> = Mutex::new(None);

/// The execution timeout when neither [`set_exec_timeout`] nor `HCCL_EXEC_TIMEOUT` gives one:
/// HCCL's own default (1836 s) would leave an interactive session hanging for half an hour on a
/// rank that never comes.
pub const DEFAULT_EXEC_TIMEOUT: Duration = Duration::from_secs(120);

/// Sets how long a rank waits for its peers inside a collective before its stream fails
/// (`HCCL_EXEC_TIMEOUT`, whole seconds; zero waits forever), for communicators built from now
/// on. `None` goes back to `HCCL_EXEC_TIMEOUT` from the environment, else
/// [`DEFAULT_EXEC_TIMEOUT`].
pub fn set_exec_timeout(timeout: Option<Duration>) {
    *EXEC_TIMEOUT.lock().unwrap_or_else(|p| p.into_inner()) = timeout;
}

/// The execution timeout communicators built now get (see [`set_exec_timeout`]); `None` for
/// none.
pub fn exec_timeout() -> Option<Duration> {
    let seconds = match *EXEC_TIMEOUT.lock().unwrap_or_else(|p| p.into_inner()) {
        // HCCL counts whole seconds: a fraction rounds up, so only zero means never.
        Some(t) => t.as_secs() + u64::from(t.subsec_nanos() > 0),
        None => std::env::var(env::HCCL_EXEC_TIMEOUT)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(DEFAULT_EXEC_TIMEOUT.as_secs()),
    };
    (seconds > 0).then(|| Duration::from_secs(seconds))
}

/// Hands the execution timeout to HCCL before a communicator is built. HCCL reads it from
/// `HCCL_EXEC_TIMEOUT` (the v5 `HcclCommConfig` of CANN 8.1 has no field for it, and
/// `HcclCommInitAll` takes no config), so it is written there, unless the user set the
/// variable and no timeout in code.
fn apply_exec_timeout() {
    let explicit = EXEC_TIMEOUT
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .is_some();
    if explicit || std::env::var_os(env::HCCL_EXEC_TIMEOUT).is_none() {
        let seconds = exec_timeout().map_or(0, |t| t.as_secs());
        std::env::set_var(env::HCCL_EXEC_TIMEOUT, seconds.to_string());
    }
}

/// The communicators built over this process's devices, cached by device list.
fn local_cache() -> MutexGuard<'static, HashMap<Vec<AscendDevice>, Arc<Communicator>>> {
    static CACHE: OnceLock<Mutex<HashMap<Vec<AscendDevice>, Arc<Communicator>>>> = OnceLock::new();
    CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// Every communicator of the process, so a device reset can find those it destroys.
fn live() -> MutexGuard<'static, Vec<Weak<Communicator>>> {
    static LIVE: Mutex<Vec<Weak<Communicator>>> = Mutex::new(Vec::new());
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

fn register(c: Communicator) -> Arc<Communicator> {
    let c = Arc::new(c);
    let mut live = live();
    live.retain(|w| w.strong_count() > 0);
    live.push(Arc::downgrade(&c));
    c
}

/// The live communicators with a rank on `device`.
fn on_device(device: &AscendDevice) -> Vec<Arc<Communicator>> {
    live()
        .iter()
        .filter_map(Weak::upgrade)
        .filter(|c| c.rank_on(device).is_some())
        .collect()
}

/// Retires every communicator with a rank on `device` (called by [`super::reset_device`] before
/// it waits for the device's work): a transfer being issued finishes first, and none is issued
/// afterwards, so nothing reaches the stream being reset.
pub(crate) fn retire_device(device: &AscendDevice) {
    local_cache().retain(|devices, _| !devices.contains(device));
    for c in on_device(device) {
        let _order = c.order.lock().unwrap_or_else(|p| p.into_inner());
        c.retire(format!("{device} was reset"));
    }
}

/// Destroys the ranks on `device` of every communicator (called by [`super::reset_device`]
/// after the device's work is done and before `aclrtResetDevice`: HCCL destroys a communicator
/// before the reset of its device). Ranks on other devices are destroyed when their
/// communicator is dropped, after their own work.
pub(crate) fn release_device(device: &AscendDevice) {
    for c in on_device(device) {
        c.retire(format!("{device} was reset"));
        if let Some(r) = c.rank_on(device) {
            r.destroy(c.api);
        }
    }
}

/// Polls `HcclGetCommAsyncError` for the ranks on `device` of every live communicator:
/// a transfer of one failed on its device. Such a communicator is retired (its ranks' sequences
/// can no longer be trusted to match) and the failure returned. Never waits for the device.
pub fn check_async_errors(device: &AscendDevice) -> AclResult<()> {
    for c in on_device(device) {
        if c.retired.get().is_some() {
            continue;
        }
        if let Some(r) = c.rank_on(device) {
            c.check_rank(r)?;
        }
    }
    Ok(())
}

impl Communicator {
    /// The communicator whose ranks are `devices`, in that order, all in this process; created
    /// on first use (`HcclCommInitAll`) and kept for the process.
    /// A reset of one of the devices destroys it; the next call builds a new one.
    /// `devices` are the core's or an adapter's own device type (converting to the core's).
    pub fn local(devices: &[impl Copy + Into<AscendDevice>]) -> AclResult<Arc<Communicator>> {
        let devices = &devices.iter().map(|&d| d.into()).collect::<Vec<_>>()[..];
        let mut cache = local_cache();
        if let Some(c) = cache.get(devices) {
            return Ok(c.clone());
        }
        let c = register(Self::create_local(devices)?);
        cache.insert(devices.to_vec(), c.clone());
        Ok(c)
    }

    fn create_local(devices: &[AscendDevice]) -> AclResult<Self> {
        let describe = || {
            devices
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let Some(first) = devices.first() else {
            return Err(AclError::InvalidArgument(
                "a communicator needs at least one device".into(),
            ));
        };
        if devices
            .iter()
            .any(|d| std::mem::discriminant(d) != std::mem::discriminant(first))
        {
            return Err(AclError::InvalidArgument(format!(
                "a communicator cannot mix real and emulated NPUs ({})",
                describe()
            )));
        }
        for (i, d) in devices.iter().enumerate() {
            if devices[..i].contains(d) {
                return Err(AclError::InvalidArgument(format!(
                    "{d} is listed twice in the communicator's devices ({})",
                    describe()
                )));
            }
        }
        let api = hccl_api(first)?;
        let contexts = devices
            .iter()
            .map(DeviceContext::get)
            .collect::<AclResult<Vec<_>>>()?;
        let init = api.require(api.optional.HcclCommInitAll, "HcclCommInitAll", "8.0.RC3")?;
        let mut ids: Vec<i32> = devices.iter().map(|d| d.index() as i32).collect();
        let mut comms = vec![std::ptr::null_mut(); devices.len()];
        apply_exec_timeout();
        contexts[0].bind();
        // SAFETY: both arrays hold one entry per device.
        let code = unsafe { init(ids.len() as u32, ids.as_mut_ptr(), comms.as_mut_ptr()) };
        check(api, &contexts[0], code, "HcclCommInitAll")
            .map_err(|e| e.with_context(|| format!("a communicator of {}", describe())))?;
        let c = Self {
            api,
            size: devices.len() as u32,
            ranks: contexts
                .into_iter()
                .zip(comms)
                .enumerate()
                .map(|(rank, (ctx, comm))| LocalRank::new(rank as u32, ctx, comm))
                .collect(),
            retired: OnceLock::new(),
            order: Mutex::new(()),
        };
        c.connect().map_err(|e| {
            e.with_context(|| format!("connecting a communicator of {}", describe()))
        })?;
        Ok(c)
    }

    /// The first transfer of an `HcclCommInitAll` communicator connects its ranks and blocks
    /// each issuing thread until every rank has issued it: a one-byte broadcast from rank 0,
    /// issued on every device's thread at once.
    fn connect(&self) -> AclResult<()> {
        let scratch = self
            .ranks
            .iter()
            .map(|r| r.ctx.alloc(1))
            .collect::<AclResult<Vec<_>>>()?;
        let api = self.api;
        // SAFETY: every receiver is awaited below, before `scratch` and `self` go away.
        let pending: Vec<_> = self
            .ranks
            .iter()
            .zip(&scratch)
            .map(|(r, buf)| unsafe {
                dispatch(&r.ctx.device(), move || {
                    r.ctx.bind();
                    // SAFETY: a one-byte buffer of the rank's device, on its stream.
                    let code = (api.fns.HcclBroadcast)(
                        buf.ptr(),
                        1,
                        HCCL_DATA_TYPE_UINT8,
                        0,
                        r.comm,
                        r.ctx.stream(),
                    );
                    check(api, &r.ctx, code, "HcclBroadcast").map_err(|e| {
                        e.with_context(|| format!("rank {} on {}", r.rank, r.ctx.device()))
                    })
                })
            })
            .collect();
        let results: Vec<AclResult<()>> = pending.into_iter().map(collect).collect();
        results.into_iter().collect()
    }

    /// This process's rank `rank` of a communicator of `size` ranks across processes (or
    /// machines), on `device`. Rank 0 serves the root info on `address` (`host:port`); the
    /// others fetch it from there, waiting for rank 0 up to `HCCL_CONNECT_TIMEOUT`. HCCL's own
    /// data path then uses `HCCL_IF_IP`. Blocks until every rank has joined.
    ///
    /// The ranks prove to each other that they share the secret of
    /// `BURN_ASCEND_RENDEZVOUS_SECRET` (or of the file `BURN_ASCEND_RENDEZVOUS_SECRET_FILE`
    /// names), at least 16 bytes; without one this is an error. See
    /// [`Communicator::rendezvous_with_secret`].
    pub fn rendezvous(
        device: impl Into<AscendDevice>,
        rank: u32,
        size: u32,
        address: &str,
    ) -> AclResult<Arc<Communicator>> {
        let secret = super::rendezvous::secret_from_env()?;
        Self::rendezvous_with_secret(device, rank, size, address, &secret)
    }

    /// [`Communicator::rendezvous`] with the shared secret given (at least 16 bytes, the same
    /// on every rank): HCCL authenticates nothing, so the secret is what keeps anyone who
    /// reaches `address` from taking the root info (and joining the communicator) or handing
    /// the ranks a forged one. Rank 0 drops peers that do not prove it and keeps serving.
    pub fn rendezvous_with_secret(
        device: impl Into<AscendDevice>,
        rank: u32,
        size: u32,
        address: &str,
        secret: &[u8],
    ) -> AclResult<Arc<Communicator>> {
        Self::rendezvous_ranks_with_secret(&[device.into()], rank, size, address, secret)
    }

    /// [`Communicator::rendezvous`] for several ranks of this process: ranks `first_rank ..
    /// first_rank + devices.len()` on `devices`, in order (one process per machine, each with
    /// its NPUs). Each rank joins on a thread of its own, as HCCL's init returns only once
    /// every rank of the communicator has called it.
    pub fn rendezvous_ranks(
        devices: &[impl Copy + Into<AscendDevice>],
        first_rank: u32,
        size: u32,
        address: &str,
    ) -> AclResult<Arc<Communicator>> {
        let secret = super::rendezvous::secret_from_env()?;
        Self::rendezvous_ranks_with_secret(devices, first_rank, size, address, &secret)
    }

    /// [`Communicator::rendezvous_ranks`] with the shared secret given (see
    /// [`Communicator::rendezvous_with_secret`]).
    pub fn rendezvous_ranks_with_secret(
        devices: &[impl Copy + Into<AscendDevice>],
        first_rank: u32,
        size: u32,
        address: &str,
        secret: &[u8],
    ) -> AclResult<Arc<Communicator>> {
        let devices: Vec<AscendDevice> = devices.iter().map(|&d| d.into()).collect();
        let Some(first) = devices.first() else {
            return Err(AclError::InvalidArgument(
                "a communicator needs at least one device".into(),
            ));
        };
        let last = first_rank as usize + devices.len();
        if last > size as usize {
            return Err(AclError::InvalidArgument(format!(
                "ranks {first_rank}..{last} are not all among {size} ranks"
            )));
        }
        for (i, d) in devices.iter().enumerate() {
            if devices[..i].contains(d)
                || std::mem::discriminant(d) != std::mem::discriminant(first)
            {
                return Err(AclError::InvalidArgument(format!(
                    "{d} is listed twice, or with NPUs of another kind, in the communicator's \
                     devices"
                )));
            }
        }
        let api = hccl_api(first)?;
        let joined: Vec<AclResult<LocalRank>> = std::thread::scope(|s| {
            let joins: Vec<_> = devices
                .iter()
                .enumerate()
                .map(|(i, &device)| {
                    let rank = first_rank + i as u32;
                    s.spawn(move || join_rank(api, device, rank, size, address, secret))
                })
                .collect();
            joins
                .into_iter()
                .map(|j| j.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        if joined.iter().any(Result::is_err) {
            for rank in joined.iter().flatten() {
                rank.destroy(api);
            }
        }
        let ranks = joined.into_iter().collect::<AclResult<Vec<_>>>()?;
        Ok(register(Self {
            api,
            size,
            ranks,
            retired: OnceLock::new(),
            order: Mutex::new(()),
        }))
    }

    /// Why the communicator may no longer be used, if it may not (a reset of one of its devices,
    /// a partial issue, a failed transfer).
    pub fn retired(&self) -> Option<&str> {
        self.retired.get().map(String::as_str)
    }

    /// Ranks in the communicator.
    pub fn size(&self) -> usize {
        self.size as usize
    }

    /// The ranks this process holds, in rank order.
    pub fn local_ranks(&self) -> &[LocalRank] {
        &self.ranks
    }

    /// The local rank on `device`, if the communicator has one there.
    pub fn rank_on(&self, device: &AscendDevice) -> Option<&LocalRank> {
        self.ranks.iter().find(|r| r.ctx.device() == *device)
    }

    /// HCCL's table.
    pub fn api(&self) -> &'static HcclApi {
        self.api
    }

    /// Issues one transfer: `issue(api, i, comm, stream)` is called for each of `ranks` (local
    /// ranks; `i` is the position in `ranks`), in order, each on its device's issuing thread
    /// with the device bound, and returns the `HcclResult` of the HCCL call it made. A failure
    /// names `what` (the op and its operands) and the rank; a partial issue retires the
    /// communicator.
    pub fn issue(
        &self,
        ranks: &[&LocalRank],
        function: &str,
        what: &dyn Fn() -> String,
        issue: impl Fn(&HcclApi, usize, HcclComm, aclrtStream) -> i32 + Sync,
    ) -> AclResult<()> {
        let _order = self.order.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(why) = self.retired.get() {
            return Err(AclError::DeviceLost(format!(
                "{}: the communicator was retired ({why}); build a new one",
                what()
            )));
        }
        // Checked for every rank before any is issued: a rank left alone would wait for its
        // peers until the execution timeout.
        for r in ranks {
            r.ctx.check_alive()?;
            self.check_rank(r)?;
        }
        for (i, r) in ranks.iter().enumerate() {
            let api = self.api;
            let issue = &issue;
            // Checked on the issuing thread, whose recent error message explains the failure.
            let issued = on_issuer(&r.ctx.device(), move || {
                r.ctx.bind();
                check(api, &r.ctx, issue(api, i, r.comm, r.ctx.stream()), function)
            });
            let Err(e) = issued else { continue };
            let at = format!("{}, rank {} on {}", what(), r.rank, r.ctx.device());
            // Unless no rank of the communicator has this transfer (this call holds them all and
            // failed at the first), the others' sequences are now ahead of this rank's: they
            // wait for it until the execution timeout, and every later transfer would pair with
            // the wrong one.
            if i == 0 && ranks.len() == self.size() {
                return Err(e.with_context(|| at));
            }
            let why = format!(
                "a partial issue of {}: rank {} failed {}; those wait for it until the \
                 execution timeout ({})",
                what(),
                r.rank,
                if i > 0 {
                    "after the ranks before it were issued"
                } else {
                    "while its peers' parts are issued by other calls"
                },
                exec_timeout().map_or("none".into(), |t| format!("{} s", t.as_secs()))
            );
            self.retire(why.clone());
            return Err(e.with_context(|| {
                format!("{at}; the communicator is retired after {why}; build a new one")
            }));
        }
        Ok(())
    }

    /// Refuses further use of the communicator, for `why`, and drops it from the cache of
    /// [`Communicator::local`].
    fn retire(&self, why: String) {
        if self.retired.set(why).is_ok() {
            local_cache().retain(|_, c| !std::ptr::eq(Arc::as_ptr(c), self));
        }
    }

    /// Fails (and retires the communicator) if `rank` reports an asynchronous error; a library
    /// without `HcclGetCommAsyncError` reports none.
    fn check_rank(&self, rank: &LocalRank) -> AclResult<()> {
        if self.api.optional.HcclGetCommAsyncError.is_none() {
            return Ok(());
        }
        match self.async_error(rank)? {
            None => Ok(()),
            Some(code) => {
                let message = format!(
                    "a transfer of rank {} on {} failed on the device ({})",
                    rank.rank,
                    rank.ctx.device(),
                    self.api.error_string(code)
                );
                self.retire(message.clone());
                Err(AclError::Hccl {
                    code,
                    function: "HcclGetCommAsyncError".into(),
                    message,
                    context: Some("the communicator is retired; build a new one".into()),
                })
            }
        }
    }

    /// The first failure HCCL saw in a transfer of local rank `rank` (`HcclGetCommAsyncError`),
    /// if any.
    pub fn async_error(&self, rank: &LocalRank) -> AclResult<Option<i32>> {
        if let Some(why) = self.retired.get() {
            return Err(AclError::DeviceLost(format!(
                "the communicator was retired ({why})"
            )));
        }
        let get = self.api.require(
            self.api.optional.HcclGetCommAsyncError,
            "HcclGetCommAsyncError",
            "8.0.RC1",
        )?;
        let mut code = 0;
        // SAFETY: valid out-pointer.
        let status = unsafe { get(rank.comm, &mut code) };
        check(self.api, &rank.ctx, status, "HcclGetCommAsyncError")?;
        Ok((code != 0).then_some(code))
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        for r in &self.ranks {
            if !r.destroyed.load(Ordering::Acquire) {
                // Transfers still queued hold the communicator on the device: finish them
                // first.
                let _ = r.ctx.synchronize();
                r.destroy(self.api);
            }
        }
    }
}

/// Rank `rank` of `size` joining a root-info communicator on `device` (the root info served or
/// fetched at `address`); returns once every rank has joined.
fn join_rank(
    api: &'static HcclApi,
    device: AscendDevice,
    rank: u32,
    size: u32,
    address: &str,
    secret: &[u8],
) -> AclResult<LocalRank> {
    let ctx = DeviceContext::get(&device)?;
    let info = super::rendezvous::exchange_root_info(address, rank, size, secret, || {
        let mut info = HcclRootInfo::default();
        ctx.bind();
        // SAFETY: valid out-pointer.
        let code = unsafe { (api.fns.HcclGetRootInfo)(&mut info) };
        check(api, &ctx, code, "HcclGetRootInfo").map(|_| info)
    })?;
    let mut comm = std::ptr::null_mut();
    apply_exec_timeout();
    ctx.bind();
    let code = match api.optional.HcclCommInitRootInfoConfig {
        Some(init) => {
            let capability = api
                .optional
                .HcclGetCommConfigCapability
                // SAFETY: takes no argument.
                .map_or(0, |f| unsafe { f() });
            let config = CommConfig::new(buffer_mb(), false, "", capability);
            // SAFETY: valid pointers; the config outlives the call.
            unsafe { init(size, &info, rank, config.as_ptr(), &mut comm) }
        }
        // SAFETY: valid pointers.
        None => unsafe { (api.fns.HcclCommInitRootInfo)(size, &info, rank, &mut comm) },
    };
    check(api, &ctx, code, "HcclCommInitRootInfo").map_err(|e| {
        e.with_context(|| format!("rank {rank} of {size} on {device} (root at {address})"))
    })?;
    Ok(LocalRank::new(rank, ctx, comm))
}

/// `HCCL_BUFFSIZE` as the communicator config states it explicitly (older parsers take "not
/// set" literally).
fn buffer_mb() -> u32 {
    std::env::var(env::HCCL_BUFFSIZE)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(200)
}

/// An HCCL result as an error with HCCL's text and the runtime's recent error message (CANN
/// routes HCCL's detailed errors through the same error manager as AscendCL's).
fn check(api: &HcclApi, ctx: &DeviceContext, code: i32, function: &str) -> AclResult<()> {
    api.check(code, function).map_err(|e| match e {
        AclError::Hccl {
            code,
            function,
            message,
            context,
        } => {
            let recent = ctx.bind().recent_error_message();
            AclError::Hccl {
                code,
                function,
                message: if recent.is_empty() {
                    message
                } else {
                    format!("{message}: {recent}")
                },
                context,
            }
        }
        other => other,
    })
}
