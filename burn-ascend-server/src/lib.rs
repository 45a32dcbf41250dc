//! burn-ascend-server: serves a backend's devices to Burn 0.22 programs through Burn's remote
//! backend (`burn-remote`'s [`BackendServer`] on its WebSocket transport).
//!
//! A Burn 0.22 program reaches a served device as a remote device (`burn` with the
//! `remote-websocket` feature): `BURN_DEVICE=remote BURN_REMOTE_ADDRESS=ws://host:port`, or
//! `Device::remote_options(&RemoteHost::websocket("ws://host:port")).init()`. The backend type
//! and its device names live in [`backend`], the one module that names them.
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

/// The server hosting `devices`, with the backend's custom operations.
pub fn server(devices: Vec<ServedDevice>) -> BackendServer<ServedBackend> {
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
