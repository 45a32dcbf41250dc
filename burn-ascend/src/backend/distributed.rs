//! Burn's distributed API on HCCL (feature `distributed`): `DistributedBackend for Ascend`,
//! which `Autodiff<Ascend>` and `Fusion<Ascend>` forward.
//!
//! Burn's gradient-sync server calls [`all_reduce`](DistributedBackend::all_reduce) from its own
//! thread, once per device, one device after another, and only later lets each device's
//! training thread call [`sync_collective`](DistributedBackend::sync_collective). So
//! `all_reduce` issues only the given device's rank of the communicator of the sorted device
//! list and returns at once (the ranks meet on the devices); `sync_collective` waits for the
//! device's queued work and reports any failure of it.

use burn_backend::distributed::{CollectiveTensor, DistributedBackend, ReduceOperation};
use burn_backend::DeviceId;
use burn_std::device::Device as _;

use super::*;
use crate::ops::collective::{all_reduce, Reduce};
use crate::runtime::Communicator;

impl DistributedBackend for Ascend {
    fn all_reduce(
        tensor: AscendTensor,
        op: ReduceOperation,
        device_ids: Vec<DeviceId>,
    ) -> CollectiveTensor<Self> {
        let mut devices: Vec<AscendDevice> =
            device_ids.into_iter().map(AscendDevice::from_id).collect();
        devices.sort();
        let op = match op {
            ReduceOperation::Sum => Reduce::Sum,
            ReduceOperation::Mean => Reduce::Mean,
        };
        let reduced = Communicator::local(&devices)
            .and_then(|comm| all_reduce(&comm, std::slice::from_ref(&tensor), op))
            .map(|mut out| out.remove(0));
        CollectiveTensor::new(run("all_reduce", reduced))
    }

    fn sync_collective(device: &AscendDevice) {
        run("sync_collective", context(device).synchronize());
    }
}
