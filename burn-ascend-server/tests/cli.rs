//! The binary as a user runs it: started on a free port, it prints the address to dial, a
//! Burn 0.22 program computes on its device, and an unknown device is refused by name.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use burn::remote::RemoteHost;
use burn::tensor::{Device, Tensor};

const SERVER: &str = env!("CARGO_BIN_EXE_burn-ascend-server");

/// The child server, killed when dropped (a failing test must not leave it running).
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_program_computes_on_the_served_device() {
    let mut child = Command::new(SERVER)
        .args(["--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the server starts");
    let stdout = child.stdout.take().expect("piped stdout");
    let server = Server(child);
    let mut url = String::new();
    BufReader::new(stdout)
        .read_line(&mut url)
        .expect("the server prints its address");
    let url = url.trim();
    assert!(url.starts_with("ws://127.0.0.1:"), "printed {url:?}");

    let device = Device::remote_options(&RemoteHost::websocket(url))
        .init()
        .expect("the served device connects");
    let x = Tensor::<1>::from_floats([1.0, -2.0, 3.5], &device);
    let y: Vec<f32> = (x.clone() * x + 1.0)
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    assert_eq!(y, [2.0, 5.0, 13.25]);
    drop(server);
}

#[test]
fn an_unknown_device_is_refused_by_name() {
    let mut server = Server(
        Command::new(SERVER)
            .args(["--port", "0", "--device", "npu:9"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the server starts"),
    );
    // A server that accepted the device would serve forever: fail instead of hanging.
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = server.0.try_wait().expect("the server's status") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the server accepted the unknown device `npu:9` and kept running"
        );
        sleep(Duration::from_millis(20));
    };
    assert!(!status.success());
    let mut stderr = String::new();
    server
        .0
        .stderr
        .take()
        .expect("piped stderr")
        .read_to_string(&mut stderr)
        .expect("the server's stderr");
    assert!(stderr.contains("unknown device `npu:9`"), "{stderr}");
}
