//! Burn 0.22's graph methods on the core's ACL graphs (`runtime::graph`): start and stop
//! bracket a capture of the device's stream, replay runs the recorded work again against the
//! buffers it had (the core's rules: tensors made during the capture belong to the graph's
//! pool; nothing may synchronise with the device while capturing).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use burn_ascend_core::runtime::graph::{self, Capture, Graph};

use super::*;

/// A captured graph of one device: Burn 0.22's `GraphPrimitive` for [`Ascend`].
#[derive(Clone, Debug)]
pub struct AscendGraph(Arc<Graph>);

impl AscendGraph {
    /// The core's graph.
    pub fn graph(&self) -> &Graph {
        &self.0
    }
}

/// The capture in progress on each device, between start and stop.
fn captures() -> &'static Mutex<HashMap<AscendDevice, Capture>> {
    static CAPTURES: OnceLock<Mutex<HashMap<AscendDevice, Capture>>> = OnceLock::new();
    CAPTURES.get_or_init(Default::default)
}

pub(super) fn start(device: &AscendDevice) -> Result<(), ExecutionError> {
    let capture = graph::begin(&device.into())
        .map_err(|e| execution_error(&format!("starting a graph capture on {device}"), &e))?;
    captures()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(*device, capture);
    Ok(())
}

pub(super) fn stop(device: &AscendDevice) -> Result<AscendGraph, ExecutionError> {
    let op = format!("stopping a graph capture on {device}");
    let capture = captures()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(device)
        .ok_or_else(|| {
            execution_error(
                &op,
                &AclError::InvalidArgument("no capture was started on this device".into()),
            )
        })?;
    let graph = capture.end().map_err(|e| execution_error(&op, &e))?;
    Ok(AscendGraph(Arc::new(graph)))
}

pub(super) fn replay(device: &AscendDevice, graph: &AscendGraph) -> Result<(), ExecutionError> {
    let op = format!("replaying a graph on {device}");
    if graph.0.device() != burn_ascend_core::runtime::AscendDevice::from(device) {
        let e =
            AclError::InvalidArgument(format!("the graph was captured on {}", graph.0.device()));
        return Err(execution_error(&op, &e));
    }
    graph.0.replay().map_err(|e| execution_error(&op, &e))
}
