//! `DistributedOps` for [`Ascend`] (Burn 0.22 requires it of every backend): `all_reduce` and
//! `sync_collective` on HCCL, as the 0.21 adapter's `DistributedBackend`; the gradient-sync
//! server hooks keep Burn's defaults.
//!
//! Burn calls `all_reduce` once per device, one device after another from one thread, and
//! resolves each result (which calls `sync_collective`) before the next device's call. So
//! `all_reduce` issues only the given device's rank of the communicator of the sorted device
//! list and returns at once (the ranks meet on the devices), and `sync_collective` does not
//! wait for the device: its stream already orders every later use of the result after the
//! collective, and waiting would block the host on a rank whose peers are only issued after
//! it returns. It reports a failure a collective of the device already met
//! (`HcclGetCommAsyncError`); later ones reach the next read of the device.

use burn_backend::distributed::{CollectiveTensor, DistributedOps, ReduceOperation};
use burn_backend::{Device as _, DeviceId};

use super::*;
use crate::ops::collective::{all_reduce, Reduce};
use crate::runtime::collective::check_async_errors;
use crate::runtime::Communicator;

impl DistributedOps<Ascend> for Ascend {
    fn all_reduce(
        tensor: AscendTensor,
        op: ReduceOperation,
        device_ids: Vec<DeviceId>,
    ) -> CollectiveTensor<Ascend> {
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
