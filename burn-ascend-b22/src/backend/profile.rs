//! Burn 0.22's profiling windows on the core's timed ACL events (`runtime::profile`): a window
//! opens with an event recorded on the device's stream and closes with another; its
//! [`ProfileDuration`] is device time ([`TimingMethod::Device`](burn_backend::TimingMethod)),
//! read when it is resolved (the wait for the end event is there, not in the close). The token
//! carries the window's id and the stream it was opened on (the device's context), where it
//! must be closed.
//!
//! Every op reaches the stream when it is called: the backend holds nothing queued on the
//! host, so [`ProfileOptions::flush`] has nothing to force out before the end is recorded.

use burn_ascend_core::runtime::profile::{self, WindowId};
use burn_backend::ProfileTicks;
pub(super) use burn_backend::{ProfileDuration, ProfileOptions, ProfileToken};
use burn_std::profile::Instant;

use super::*;

pub(super) fn start(device: &AscendDevice) -> Result<Option<ProfileToken>, ExecutionError> {
    let window = context(device)
        .profile_start()
        .map_err(|e| execution_error(&format!("profile_start on {device}"), &e))?;
    Ok(Some(ProfileToken {
        id: window.id,
        opened_on: window.opened_on,
    }))
}

pub(super) fn end(
    device: &AscendDevice,
    token: ProfileToken,
    _options: ProfileOptions,
) -> Result<ProfileDuration, ExecutionError> {
    let window = context(device)
        .profile_end(window(token))
        .map_err(|e| execution_error(&format!("profile_end on {device}"), &e))?;
    let device = *device;
    Ok(ProfileDuration::new_device_time_maybe(async move {
        match window.measure() {
            Ok(duration) => {
                // Device time has no host epoch: the window is placed at its reading.
                let now = Instant::now();
                Some(ProfileTicks::from_start_end(now, now + duration))
            }
            Err(e) => {
                log::error!("a profiling window on {device} resolved no measurement: {e}");
                None
            }
        }
    }))
}

pub(super) fn abandon(token: ProfileToken) {
    profile::abandon(window(token));
}

fn window(token: ProfileToken) -> WindowId {
    WindowId {
        id: token.id,
        opened_on: token.opened_on,
    }
}
