//! Burn's distributed API on HCCL (feature `distributed`): `DistributedBackend for Ascend`,
//! which `Autodiff<Ascend>` and `Fusion<Ascend>` forward.
//!
//! Burn calls [`all_reduce`](DistributedBackend::all_reduce) once per device, one device after
//! another from one thread (its gradient-sync server, and its own tests), and
//! [`resolve`](burn_backend::distributed::CollectiveTensor::resolve)s each result, which calls
//! [`sync_collective`](DistributedBackend::sync_collective), before the next device's call. So
//! `all_reduce` issues only the given device's rank of the communicator of the sorted device
//! list and returns at once (the ranks meet on the devices), and `sync_collective` does not
//! wait for the device: its stream already orders every later use of the result after the
//! collective, and waiting would block the host on a rank whose peers are only issued after it
//! returns (burn-cubecl likewise hands this synchronisation to its runtime). It reports a
//! failure a collective of the device already met (`HcclGetCommAsyncError`); later ones reach
//! the next read of the device.
//!
//! [`submit_sync_collective`](DistributedBackend::submit_sync_collective) (the end of a marked
//! `backward`) also waits for every device of the server's group to reach it, for at most the
//! collectives' execution timeout. Burn 0.21's
//! server clears its bookkeeping when the last device of a round syncs; a device let go
//! earlier that starts its next `backward` before that registers its parameters into the old
//! round, they are cleared, and both devices then wait for each other forever. Holding each
//! device until all have synced closes that window. `Fusion<Ascend>` runs Burn's own server
//! hooks (keyed by the Fusion type), which this cannot reach: see the README.

use std::sync::{Condvar, Mutex};

use burn_backend::distributed::{
    close_distributed_sync_server, get_distributed_sync_client, start_distributed_sync_server,
    CollectiveTensor, DistributedBackend, DistributedConfig, ReduceOperation,
};
use burn_backend::DeviceId;
use burn_std::device::Device as _;

use super::*;
use crate::ops::collective::{all_reduce, Reduce};
use crate::runtime::collective::{check_async_errors, exec_timeout};
use crate::runtime::Communicator;

/// The devices of the running sync server and how many reached the end of the current round.
struct Round {
    devices: usize,
    arrived: usize,
    /// Bumped when the last device arrives, releasing the others.
    generation: u64,
}

static ROUND: Mutex<Round> = Mutex::new(Round {
    devices: 0,
    arrived: 0,
    generation: 0,
});
static ROUND_DONE: Condvar = Condvar::new();

fn round() -> std::sync::MutexGuard<'static, Round> {
    ROUND.lock().unwrap_or_else(|p| p.into_inner())
}

impl DistributedBackend for Ascend {
    fn start_communication_server(devices: &[AscendDevice], config: DistributedConfig) {
        {
            let mut r = round();
            r.devices = devices.len();
            r.arrived = 0;
        }
        start_distributed_sync_server::<Self>(devices, config);
    }

    fn close_communication_server(_device: &AscendDevice) {
        close_distributed_sync_server::<Self>();
        round().devices = 0;
    }

    fn submit_sync_collective(device: &AscendDevice) {
        let Some(client) = get_distributed_sync_client::<Self>() else {
            return;
        };
        client.submit_sync_collective(*device);
        let mut r = round();
        if r.devices <= 1 {
            return;
        }
        r.arrived += 1;
        if r.arrived == r.devices {
            r.arrived = 0;
            r.generation += 1;
            ROUND_DONE.notify_all();
        } else {
            let generation = r.generation;
            let same_round = |r: &mut Round| r.generation == generation;
            // A peer that never arrives (its thread failed) must not hold this device forever.
            let Some(limit) = exec_timeout() else {
                drop(
                    ROUND_DONE
                        .wait_while(r, same_round)
                        .unwrap_or_else(|p| p.into_inner()),
                );
                return;
            };
            let (mut r, waited) = ROUND_DONE
                .wait_timeout_while(r, limit, same_round)
                .unwrap_or_else(|p| p.into_inner());
            if waited.timed_out() {
                let (arrived, devices) = (r.arrived, r.devices);
                r.arrived -= 1;
                drop(r);
                panic!(
                    "submit_sync_collective on {device}: only {arrived} of {devices} devices \
                     finished their backward within {} s (the collectives' execution timeout, \
                     burn_ascend::collective::set_exec_timeout)",
                    limit.as_secs()
                );
            }
        }
    }

    fn all_reduce(
        tensor: AscendTensor,
        op: ReduceOperation,
        device_ids: Vec<DeviceId>,
    ) -> CollectiveTensor<Self> {
        let mut devices: Vec<crate::runtime::AscendDevice> = device_ids
            .into_iter()
            .map(|id| AscendDevice::from_id(id).into())
            .collect();
        devices.sort();
        let op = match op {
            ReduceOperation::Sum => Reduce::Sum,
            ReduceOperation::Mean => Reduce::Mean,
        };
        let reduced = Communicator::local(&devices)
            .and_then(|comm| all_reduce(&comm, cores(std::slice::from_ref(&tensor)), op))
            .map(|mut out| out.remove(0));
        CollectiveTensor::new(run("all_reduce", reduced))
    }

    fn sync_collective(device: &AscendDevice) {
        run(
            "sync_collective",
            context(device)
                .check_alive()
                .and_then(|()| check_async_errors(&device.into())),
        );
    }
}
