//! `burn-ascend-server`: serve devices to Burn 0.22 programs over burn-remote's WebSocket
//! transport until Ctrl+C or SIGTERM.

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;

use clap::Parser;

use burn_ascend_server::backend::DEFAULT_DEVICE;

#[derive(Parser)]
#[command(version, about)]
struct Cli {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    address: IpAddr,
    /// Port to listen on (0: one the OS picks, printed at start).
    #[arg(long, default_value_t = 3000)]
    port: u16,
    /// A device to serve (repeatable); clients pick one by its position in this list.
    #[arg(long = "device", default_value = DEFAULT_DEVICE)]
    devices: Vec<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let run = || -> Result<(), burn_ascend_server::ServerError> {
        let devices = burn_ascend_server::devices(&cli.devices)?;
        let (transport, url) = burn_ascend_server::listen(SocketAddr::new(cli.address, cli.port))?;
        // The first line of stdout is the address to dial: scripts and tests read it.
        println!("{url}");
        eprintln!("serving {} on {url}", cli.devices.join(", "));
        burn_ascend_server::server(devices).serve(transport)?;
        Ok(())
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("burn-ascend-server: {e}");
            ExitCode::FAILURE
        }
    }
}
