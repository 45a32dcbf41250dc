//! Burn 0.22 programs that name no backend, run on a device of an in-process
//! `burn-ascend-server` (through Burn's remote backend) and on Burn's own CPU backend.
//!
//! - [`programs`]: an MLP trained on either device.
//! - [`moe`]: the example's MoE decoder with burn-ascend-client's fused ops (remote devices
//!   only), decoding greedily over a paged KV cache from a safetensors weights file.
#![warn(missing_docs)]

pub mod moe;
pub mod programs;

use std::net::{Ipv4Addr, SocketAddr};

use burn::remote::RemoteHost;
use burn::tensor::Device;

/// A `burn-ascend-server` serving its default device on a free local port, on its own Tokio
/// runtime; dropping it stops the server and ends its sessions.
pub struct LocalServer {
    runtime: Option<tokio::runtime::Runtime>,
    url: String,
}

impl LocalServer {
    /// Starts the server; it accepts clients once this returns (the port is bound).
    pub fn start() -> Self {
        let devices = burn_ascend_server::devices(&[burn_ascend_server::backend::DEFAULT_DEVICE])
            .expect("the default device exists");
        let (transport, url) =
            burn_ascend_server::listen(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
                .expect("a free local port");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a Tokio runtime");
        let serving = burn_ascend_server::server(devices).serve_async(transport);
        runtime.spawn(async move {
            if let Err(e) = serving.await {
                panic!("burn-ascend-server stopped: {e}");
            }
        });
        Self {
            runtime: Some(runtime),
            url,
        }
    }

    /// The address a client dials, `ws://127.0.0.1:port`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The server's first device, as a Burn 0.22 program connects it.
    pub fn device(&self) -> Device {
        Device::remote_options(&RemoteHost::websocket(&self.url))
            .init()
            .unwrap_or_else(|e| panic!("connecting to {}: {e}", self.url))
    }

    /// The server's first device in a session of its own: burn-remote keeps one session per
    /// address and credential in a process, so `client` (sent as the credential, which the
    /// server does not check) tells this session from the others, as another program's would be.
    pub fn session(&self, client: &str) -> Device {
        Device::remote_options(&RemoteHost::websocket(&self.url).with_credential(client))
            .init()
            .unwrap_or_else(|e| panic!("connecting to {} as {client}: {e}", self.url))
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        // Without waiting: the sessions' worker threads end when their sockets close.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
