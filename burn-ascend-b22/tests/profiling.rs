//! Burn 0.22's profiling windows on the emulated NPU: device time from ACL events that grows with
//! the work inside the window and stays within the host time around it, nested and overlapping
//! windows, a close from another stream refused, and abandoned windows leaving no event behind.
//!
//! The emulated device's clock is its stream worker's (the emulator models no per-stream device
//! time): the measurement is the time the worker spent on the window's work, which the host time
//! around the whole call bounds.
//!
//! The tests count live events, so they take one lock and never overlap.

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use burn_ascend_b22::emulator::live_events;
use burn_ascend_b22::runtime::DeviceContext;
use burn_ascend_b22::{Ascend, AscendDevice};
use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::FloatTensor;
use burn_backend::{
    try_read_sync, Backend, ProfileDuration, ProfileOptions, ProfileToken, TensorData, TimingMethod,
};
use burn_std::future::block_on;

fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn npu() -> AscendDevice {
    AscendDevice::Emulated(0)
}

/// A `[n, n]` f32 matrix of small distinct values.
fn matrix(n: usize, device: &AscendDevice) -> FloatTensor<Ascend> {
    let values: Vec<f32> = (0..n * n).map(|i| ((i % 17) as f32 - 8.0) / 8.0).collect();
    Ascend::float_from_data(TensorData::new(values, [n, n]), device)
}

/// Queues `count` products `a @ a` (results dropped): work on the stream, no upload.
fn matmuls(a: &FloatTensor<Ascend>, count: usize) {
    for _ in 0..count {
        drop(Ascend::float_matmul(a.clone(), a.clone()));
    }
}

/// The device time a duration resolves to.
fn resolve(duration: ProfileDuration) -> Duration {
    assert_eq!(duration.timing_method(), TimingMethod::Device);
    block_on(duration.resolve())
        .expect("the window carried a measurement")
        .duration()
}

/// `count` products inside `Backend::profile`: the device time and the host time of the whole
/// call, resolution included.
fn profiled(a: &FloatTensor<Ascend>, count: usize) -> (Duration, Duration) {
    let host = Instant::now();
    let ((), duration) = Ascend::profile(&npu(), ProfileOptions::default(), || matmuls(a, count))
        .expect("the window opens and closes");
    let device = resolve(duration);
    (device, host.elapsed())
}

fn open_windows(device: &AscendDevice) -> usize {
    DeviceContext::get(&device.into())
        .expect("the device opens")
        .open_windows()
}

#[test]
fn a_window_measures_device_time_that_grows_with_the_work_inside_it() {
    let _serial = serial();
    let a = matrix(192, &npu());
    // The first products also fill the host caches (executors, memory): not the work compared.
    profiled(&a, 10);
    let (empty, empty_host) = profiled(&a, 0);
    let (one, one_host) = profiled(&a, 1);
    let (ten, ten_host) = profiled(&a, 10);
    for (device, host) in [(empty, empty_host), (one, one_host), (ten, ten_host)] {
        assert!(
            device <= host,
            "{device:?} of device time in {host:?} of host time"
        );
    }
    assert!(one > Duration::ZERO, "one product measured {one:?}");
    assert!(
        ten > one && one > empty,
        "ten products {ten:?}, one {one:?}, none {empty:?}"
    );
    // The window still computed: the products inside it are Burn's results as usual.
    let (product, duration) = Ascend::profile(&npu(), ProfileOptions::default().flush(), || {
        Ascend::float_matmul(matrix(2, &npu()), matrix(2, &npu()))
    })
    .unwrap();
    assert!(resolve(duration) > Duration::ZERO);
    let values = try_read_sync(Ascend::float_into_data(product))
        .unwrap()
        .unwrap()
        .try_into_vec::<f32>()
        .unwrap();
    // [[-1, -0.875], [-0.75, -0.625]] squared.
    assert_eq!(values, vec![1.65625, 1.421875, 1.21875, 1.046875]);
}

#[test]
fn nested_and_overlapping_windows_are_each_measured() {
    let _serial = serial();
    let a = matrix(128, &npu());
    Ascend::sync(&npu()).unwrap();
    let token = |t: Result<Option<ProfileToken>, _>| t.unwrap().expect("the backend opens windows");
    let end = |t| resolve(Ascend::profile_end(&npu(), t, ProfileOptions::default()).unwrap());

    let outer = token(Ascend::profile_start(&npu()));
    matmuls(&a, 4);
    let inner = token(Ascend::profile_start(&npu()));
    matmuls(&a, 4);
    let inner_time = end(inner);
    matmuls(&a, 4);
    let outer_time = end(outer);
    assert!(
        Duration::ZERO < inner_time && inner_time < outer_time,
        "inner {inner_time:?}, outer {outer_time:?}"
    );

    // Overlapping: `first` closes while `second` is open, then `second` closes after more work.
    let first = token(Ascend::profile_start(&npu()));
    matmuls(&a, 4);
    let second = token(Ascend::profile_start(&npu()));
    matmuls(&a, 4);
    let first_end = Ascend::profile_end(&npu(), first, ProfileOptions::default()).unwrap();
    matmuls(&a, 4);
    let second_time = end(second);
    let first_time = resolve(first_end);
    assert!(first_time > Duration::ZERO && second_time > Duration::ZERO);
    assert_ne!(first.id, second.id);
    assert_eq!(open_windows(&npu()), 0);
}

#[test]
fn a_window_closes_only_on_the_stream_it_was_opened_on() {
    let _serial = serial();
    let other = AscendDevice::Emulated(1);
    let before = open_windows(&npu());
    let token = Ascend::profile_start(&npu()).unwrap().unwrap();
    assert_eq!(
        token.opened_on,
        DeviceContext::get(&npu().into()).unwrap().stream_id()
    );

    let err = Ascend::profile_end(&other, token, ProfileOptions::default())
        .err()
        .expect("a close on another device's stream is refused");
    let why = err.to_string();
    assert!(
        why.contains("opened on stream") && why.contains("profile_end"),
        "{why}"
    );
    // A token naming another stream for the same window is refused too.
    let forged = ProfileToken {
        opened_on: token.opened_on + 1000,
        ..token
    };
    assert!(Ascend::profile_end(&npu(), forged, ProfileOptions::default()).is_err());

    // Refused closes leave the window open, to be closed where it belongs.
    assert_eq!(open_windows(&npu()), before + 1);
    let duration = Ascend::profile_end(&npu(), token, ProfileOptions::default()).unwrap();
    assert!(block_on(duration.resolve()).is_some());
    assert_eq!(open_windows(&npu()), before);
    // Closed once: a second close names a window that is not open.
    let again = Ascend::profile_end(&npu(), token, ProfileOptions::default())
        .err()
        .expect("a closed window cannot close again")
        .to_string();
    assert!(again.contains("is not open"), "{again}");
}

#[test]
fn abandoned_windows_leave_no_window_or_event_open() {
    let _serial = serial();
    let a = matrix(64, &npu());
    Ascend::sync(&npu()).unwrap();
    let events = live_events();
    let windows = open_windows(&npu());

    let tokens: Vec<ProfileToken> = (0..3)
        .map(|_| {
            matmuls(&a, 1);
            Ascend::profile_start(&npu()).unwrap().unwrap()
        })
        .collect();
    assert_eq!(open_windows(&npu()), windows + 3);
    assert_eq!(live_events(), events + 3);
    for token in tokens {
        Ascend::profile_abandon(&npu(), token);
    }
    assert_eq!(open_windows(&npu()), windows);
    assert_eq!(live_events(), events);

    // A closure that panics inside `profile` abandons its window on the way out.
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        Ascend::profile(&npu(), ProfileOptions::default(), || -> u8 {
            matmuls(&a, 1);
            panic!("the profiled work failed");
        })
    }));
    assert!(unwound.is_err());
    assert_eq!(open_windows(&npu()), windows);
    assert_eq!(live_events(), events);

    // A closed window's two events go once it is measured.
    let ((), duration) =
        Ascend::profile(&npu(), ProfileOptions::default(), || matmuls(&a, 1)).unwrap();
    assert_eq!(live_events(), events + 2);
    resolve(duration);
    assert_eq!(live_events(), events);
}

/// A graph capture records work into the graph instead of running it: a window's event would be
/// a node of the graph and measuring it would invalidate the capture, so windows neither open
/// nor close while the device captures. On the second emulated NPU.
#[test]
fn no_window_opens_or_closes_during_a_graph_capture() {
    let _serial = serial();
    let device = AscendDevice::Emulated(1);
    let open = Ascend::profile_start(&device).unwrap().unwrap();
    Ascend::graph_start_capture(&device).expect("the emulated NPU captures");
    let refused_start = Ascend::profile_start(&device).err().map(|e| e.to_string());
    let refused_end = Ascend::profile_end(&device, open, ProfileOptions::default())
        .err()
        .map(|e| e.to_string());
    Ascend::graph_stop_capture(&device).expect("the capture ends");
    for why in [refused_start, refused_end] {
        let why = why.expect("refused during the capture");
        assert!(why.contains("graph is captured"), "{why}");
    }
    // After the capture the window closes and is measured.
    let duration = Ascend::profile_end(&device, open, ProfileOptions::default()).unwrap();
    assert!(block_on(duration.resolve()).is_some());
}

/// A reset gives the device a new context and stream: a window opened before it belongs to the
/// stream that is gone, and is refused a close on the new one. On the second emulated NPU.
#[test]
fn a_window_opened_before_a_device_reset_cannot_close_after_it() {
    let _serial = serial();
    let device = AscendDevice::Emulated(1);
    let token = Ascend::profile_start(&device).unwrap().unwrap();
    burn_ascend_b22::reset_device(&device).expect("the emulated NPU resets");
    let why = Ascend::profile_end(&device, token, ProfileOptions::default())
        .err()
        .expect("the stream the window was opened on is gone")
        .to_string();
    assert!(why.contains("opened on stream"), "{why}");
    Ascend::profile_abandon(&device, token);
    assert_eq!(open_windows(&device), 0);
}
