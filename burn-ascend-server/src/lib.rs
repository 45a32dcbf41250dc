//! burn-ascend-server: serves a backend's devices to Burn 0.22 programs through Burn's remote
//! backend (`burn-remote`'s [`BackendServer`] on its WebSocket transport).
//!
//! A Burn 0.22 program reaches a served device as a remote device (`burn` with the
//! `remote-websocket` feature): `BURN_DEVICE=remote BURN_REMOTE_ADDRESS=ws://host:port`, or
//! `Device::remote_options(&RemoteHost::websocket("ws://host:port")).init()`. The backend type
//! and its device names live in [`backend`], the one module that names them.
//!
//! # One session's fault
//!
//! The sessions of a device share everything a fault stops: burn-remote gives each session its
//! own interpreter and worker thread, but burn-fusion runs the ops of all of them on the
//! device's one runner thread, on the device context's one stream, and a device fault (a
//! kernel's bad index, an AI Core exception) stops that context, every session's tensors with
//! it, until a reset, which frees its memory. So the server:
//! - refuses bad index values before they fault: the fused ops check theirs on the device
//!   before launch (`burn_ascend_b22::fused`), so a client's out-of-range `moe_gather` indices
//!   or `decode_attention` `kv_indices` fail its own call (its read of the op's outputs returns
//!   the error, naming the op, the shapes and the dtypes) and nothing else: the other sessions
//!   go on untouched;
//! - resets the device on any other fault ([`server`] turns on the core's `set_reset_on_fault`):
//!   the first read or sync to find it, in whichever session, resets the device and fails with
//!   an error saying so; every tensor made before then fails clearly when used (the device was
//!   reset after a fault, named), while new tensors work. The sessions stay open, and a client
//!   may go on with new tensors or reconnect.
//!
//! The server does not end the session whose work faulted: burn-remote ends a session only when
//! one of its tasks panics, and its client then learns only that the connection closed, not
//! why; and the session that finds a fault (the next to read) need not be the one whose work
//! raised it. A read's error, by contrast, reaches the client with the backend's message. One
//! gap remains: a session uploading a tensor between a fault and that first read fails the
//! upload, and burn-remote ends that session (its client's next call fails; it reconnects).
#![warn(missing_docs)]

pub mod backend;

use std::net::{SocketAddr, TcpListener};

use burn_remote::server::{BackendServer, ServeError, WebSocketTransport};

pub use backend::{ServedBackend, ServedDevice};

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A `--device` name the served backend does not have.
    #[error("unknown device `{name}`: {reason}")]
    UnknownDevice {
        /// The name as given.
        name: String,
        /// What the backend accepts.
        reason: String,
    },
    /// The address could not be bound.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// The address asked for.
        address: SocketAddr,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// burn-remote stopped with an error.
    #[error(transparent)]
    Serve(#[from] ServeError),
}

/// The devices named by `names` (see [`backend::parse_device`]), in order: a client picks one
/// by its position in this list.
pub fn devices<S: AsRef<str>>(names: &[S]) -> Result<Vec<ServedDevice>, ServerError> {
    names
        .iter()
        .map(|name| {
            backend::parse_device(name.as_ref()).map_err(|reason| ServerError::UnknownDevice {
                name: name.as_ref().to_string(),
                reason,
            })
        })
        .collect()
}

/// The server hosting `devices`, with the backend's custom operations. A device that faults
/// is reset by the first read or sync to find the fault (see "One session's fault" above);
/// this setting is the process's.
pub fn server(devices: Vec<ServedDevice>) -> BackendServer<ServedBackend> {
    burn_ascend_b22::runtime::set_reset_on_fault(true);
    BackendServer::new(devices).with_custom_ops(backend::custom_ops())
}

/// A WebSocket listener bound to `address` (port 0: one the OS picks), with the address a
/// client dials, `ws://ip:port`.
pub fn listen(address: SocketAddr) -> Result<(WebSocketTransport, String), ServerError> {
    let listener =
        TcpListener::bind(address).map_err(|source| ServerError::Bind { address, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| ServerError::Bind { address, source })?;
    Ok((
        WebSocketTransport::from_listener(listener),
        format!("ws://{bound}"),
    ))
}
