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
//! valid), from one thread, one rank after another, under a process-wide lock: HCCL asks that
//! the transfers of a device be issued serially, and the same order on every device is what
//! matches them. Issue never waits for the peers; the ranks meet on the devices.
//!
//! A communicator lives in its devices' contexts: [`super::reset_device`] destroys the reset
//! device's rank before `aclrtResetDevice` (HCCL's order) and retires the whole communicator,
//! whose later use is an error; [`Communicator::local`] then builds a new one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use super::context::DeviceContext;
use super::device::AscendDevice;
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
    /// Set when a reset of one of its devices destroyed the communicator: why.
    retired: OnceLock<String>,
}

// SAFETY: HCCL handles may be used from any thread; issue is serialised by `issue_lock`.
unsafe impl Send for Communicator {}
unsafe impl Sync for Communicator {}

/// Serialises the issue of transfers in the process (HCCL rule: per device, serially).
fn issue_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
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

/// Destroys the ranks on `device` of every communicator and retires those communicators
/// (called by [`super::reset_device`] after the device's work is done and before
/// `aclrtResetDevice`: HCCL destroys a communicator before the reset of its device). Ranks on
/// other devices are destroyed when their communicator is dropped, after their own work.
pub(crate) fn release_device(device: &AscendDevice) {
    let _serial = issue_lock();
    local_cache().retain(|devices, _| !devices.contains(device));
    let affected: Vec<Arc<Communicator>> = live()
        .iter()
        .filter_map(Weak::upgrade)
        .filter(|c| c.rank_on(device).is_some())
        .collect();
    for c in affected {
        let _ = c.retired.set(format!("{device} was reset"));
        if let Some(r) = c.rank_on(device) {
            r.destroy(c.api);
        }
    }
}

impl Communicator {
    /// The communicator whose ranks are `devices`, in that order, all in this process; created
    /// on first use (`HcclCommInitAll`) and kept for the process.
    /// A reset of one of the devices destroys it; the next call builds a new one.
    pub fn local(devices: &[AscendDevice]) -> AclResult<Arc<Communicator>> {
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
        contexts[0].bind();
        // SAFETY: both arrays hold one entry per device.
        let code = unsafe { init(ids.len() as u32, ids.as_mut_ptr(), comms.as_mut_ptr()) };
        check(api, &contexts[0], code, "HcclCommInitAll")
            .map_err(|e| e.with_context(|| format!("a communicator of {}", describe())))?;
        Ok(Self {
            api,
            size: devices.len() as u32,
            ranks: contexts
                .into_iter()
                .zip(comms)
                .enumerate()
                .map(|(rank, (ctx, comm))| LocalRank::new(rank as u32, ctx, comm))
                .collect(),
            retired: OnceLock::new(),
        })
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
        device: AscendDevice,
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
        device: AscendDevice,
        rank: u32,
        size: u32,
        address: &str,
        secret: &[u8],
    ) -> AclResult<Arc<Communicator>> {
        if rank >= size {
            return Err(AclError::InvalidArgument(format!(
                "rank {rank} is not one of {size} ranks"
            )));
        }
        let api = hccl_api(&device)?;
        let ctx = DeviceContext::get(&device)?;
        let info = super::rendezvous::exchange_root_info(address, rank, size, secret, || {
            let mut info = HcclRootInfo::default();
            ctx.bind();
            // SAFETY: valid out-pointer.
            let code = unsafe { (api.fns.HcclGetRootInfo)(&mut info) };
            check(api, &ctx, code, "HcclGetRootInfo").map(|_| info)
        })?;
        let mut comm = std::ptr::null_mut();
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
        Ok(register(Self {
            api,
            size,
            ranks: vec![LocalRank::new(rank, ctx, comm)],
            retired: OnceLock::new(),
        }))
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
    /// ranks; `i` is the position in `ranks`), in order, with the rank's device bound to the
    /// thread, and returns the `HcclResult` of the HCCL call it made. A failure names `what`
    /// (the op and its operands) and the rank.
    pub fn issue(
        &self,
        ranks: &[&LocalRank],
        function: &str,
        what: &dyn Fn() -> String,
        mut issue: impl FnMut(&HcclApi, usize, HcclComm, aclrtStream) -> i32,
    ) -> AclResult<()> {
        let _serial = issue_lock();
        if let Some(why) = self.retired.get() {
            return Err(AclError::DeviceLost(format!(
                "{}: the communicator no longer exists ({why}, which destroyed it); build a new \
                 one",
                what()
            )));
        }
        // Checked for every rank before any is issued: a rank left alone would wait for its
        // peers until HCCL_EXEC_TIMEOUT.
        for r in ranks {
            r.ctx.check_alive()?;
        }
        for (i, r) in ranks.iter().enumerate() {
            r.ctx.bind();
            let code = issue(self.api, i, r.comm, r.ctx.stream());
            check(self.api, &r.ctx, code, function).map_err(|e| {
                e.with_context(|| format!("{}, rank {} on {}", what(), r.rank, r.ctx.device()))
            })?;
        }
        Ok(())
    }

    /// The first failure HCCL saw in a transfer of local rank `rank` (`HcclGetCommAsyncError`),
    /// if any.
    pub fn async_error(&self, rank: &LocalRank) -> AclResult<Option<i32>> {
        if let Some(why) = self.retired.get() {
            return Err(AclError::DeviceLost(format!(
                "the communicator no longer exists ({why}, which destroyed it)"
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
