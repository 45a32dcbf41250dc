//! A communicator spanning two processes on the loopback address: this test starts two copies
//! of its own binary, one per rank; rank 0 serves HCCL's root info on a TCP address, rank 1
//! fetches it, both join the communicator (the emulated HCCL's data path over `HCCL_IF_IP`),
//! all-reduce, all-gather and exchange rows all-to-all, and check what they receive. Also: the
//! rendezvous refuses ranks that disagree on the communicator's size or lack the shared secret,
//! and a stray connection to rank 0 does not stop it.

mod common;

use std::net::TcpListener;
use std::process::{Command, Stdio};

use burn::tensor::{Tensor, TensorData};
use burn_ascend::collective::{self, Communicator, Reduce};
use burn_ascend::{Ascend, AscendDevice};

const ENV_RANK: &str = "BURN_ASCEND_TEST_RANK";
const ENV_ADDRESS: &str = "BURN_ASCEND_TEST_RENDEZVOUS";
const SECRET: &str = "the secret of this test's ranks";

/// A loopback address with a port that was free a moment ago.
fn free_address() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

fn host<const D: usize>(t: Tensor<Ascend, D>) -> Vec<f32> {
    t.into_data().to_vec().unwrap()
}

#[test]
fn two_processes_meet_through_a_tcp_rendezvous() {
    if common::skipped_on_npu("two_processes_meet_through_a_tcp_rendezvous") {
        return;
    }
    let address = free_address();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..2)
        .map(|rank| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "rank_process",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(ENV_RANK, rank.to_string())
                .env(ENV_ADDRESS, &address)
                .env(burn_ascend::runtime::ENV_RENDEZVOUS_SECRET, SECRET)
                .env("HCCL_IF_IP", "127.0.0.1")
                // A rank that waits for a dead peer fails within a minute instead of half an hour.
                .env("HCCL_EXEC_TIMEOUT", "60")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("the test binary starts")
        })
        .collect();
    let children: Vec<_> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    for (rank, out) in children.iter().enumerate() {
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "rank {rank} failed:\n{stdout}\n{stderr}"
        );
        assert!(
            stdout.contains(&format!("rank {rank} of 2: all checks passed")),
            "rank {rank} did not run its checks:\n{stdout}\n{stderr}"
        );
    }
}

/// One rank of [`two_processes_meet_through_a_tcp_rendezvous`], started by it.
#[test]
#[ignore = "a rank of two_processes_meet_through_a_tcp_rendezvous, which starts it"]
fn rank_process() {
    let (Ok(rank), Ok(address)) = (std::env::var(ENV_RANK), std::env::var(ENV_ADDRESS)) else {
        panic!("rank_process is started by two_processes_meet_through_a_tcp_rendezvous, with {ENV_RANK} and {ENV_ADDRESS} set");
    };
    let rank: usize = rank.parse().unwrap();
    // Each process has its own emulated machine; the ranks use different device ids anyway.
    let device = AscendDevice::Emulated(rank);
    let comm = Communicator::rendezvous(device, rank as u32, 2, &address).unwrap();
    assert_eq!(comm.size(), 2);
    let mine =
        Tensor::<Ascend, 1>::from_data(TensorData::new(vec![rank as f32 + 1.0; 4], [4]), &device);
    let sum = collective::all_reduce(&comm, vec![mine.clone()], Reduce::Sum).remove(0);
    assert_eq!(host(sum), [3.0; 4]);
    let mean = collective::all_reduce(&comm, vec![mine.clone()], Reduce::Mean).remove(0);
    assert_eq!(host(mean), [1.5; 4]);
    let gathered = collective::all_gather(&comm, vec![mine.reshape([1, 4])]).remove(0);
    assert_eq!(host(gathered), [1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0]);
    // Rank 0 keeps one row and sends two; rank 1 sends one row and keeps none.
    let rows = [vec![1, 2], vec![1, 0]];
    let send: Vec<f32> = (0..rows[rank].iter().sum::<usize>() * 2)
        .map(|i| (10 * rank + i) as f32)
        .collect();
    let n = send.len() / 2;
    let send = Tensor::<Ascend, 2>::from_data(TensorData::new(send, [n, 2]), &device);
    let got = collective::all_to_all_v(&comm, vec![send], &rows).remove(0);
    let want: &[f32] = if rank == 0 {
        &[0.0, 1.0, 10.0, 11.0]
    } else {
        &[2.0, 3.0, 4.0, 5.0]
    };
    assert_eq!(host(got), want);
    println!("rank {rank} of 2: all checks passed");
}

#[test]
fn ranks_that_disagree_on_the_size_are_refused() {
    if common::skipped_on_npu("ranks_that_disagree_on_the_size_are_refused") {
        return;
    }
    let address = free_address();
    let (root, other) = std::thread::scope(|s| {
        let a = address.clone();
        let join = |device, rank, size, address: String| {
            Communicator::rendezvous_with_secret(
                AscendDevice::Emulated(device),
                rank,
                size,
                &address,
                SECRET.as_bytes(),
            )
            .err()
        };
        let root = s.spawn(move || join(0, 0, 2, a));
        let other = s.spawn(move || join(1, 1, 3, address));
        (root.join().unwrap(), other.join().unwrap())
    });
    let root = root.expect("rank 0 must refuse").to_string();
    let other = other.expect("rank 1 must be refused").to_string();
    assert!(
        root.contains("rank 1 expects 3 ranks, rank 0 expects 2"),
        "{root}"
    );
    assert!(other.contains("rank 0 refused rank 1 of 3"), "{other}");
}

#[test]
fn a_port_scan_before_the_ranks_does_not_stop_the_rendezvous() {
    if common::skipped_on_npu("a_port_scan_before_the_ranks_does_not_stop_the_rendezvous") {
        return;
    }
    let address = free_address();
    let join = |device: usize, secret: &str| {
        Communicator::rendezvous_with_secret(
            AscendDevice::Emulated(device),
            device as u32,
            2,
            &address,
            secret.as_bytes(),
        )
    };
    let (root, stranger, rank) = std::thread::scope(|s| {
        let root = s.spawn(|| join(0, SECRET));
        // Connects once rank 0 listens, and closes.
        while std::net::TcpStream::connect(&address).is_err() {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let stranger = join(1, "not the secret of this job's ranks");
        let rank = join(1, SECRET);
        (root.join().unwrap(), stranger, rank)
    });
    let stranger = stranger
        .err()
        .expect("a wrong secret is refused")
        .to_string();
    assert!(
        stranger.contains("did not prove the rendezvous secret"),
        "{stranger}"
    );
    let (root, rank) = (root.unwrap(), rank.unwrap());
    assert_eq!((root.size(), rank.size()), (2, 2));
}

#[test]
fn a_rendezvous_without_a_secret_is_a_clear_error() {
    if std::env::var_os(burn_ascend::runtime::ENV_RENDEZVOUS_SECRET).is_some()
        || std::env::var_os(burn_ascend::runtime::ENV_RENDEZVOUS_SECRET_FILE).is_some()
    {
        return;
    }
    let e = Communicator::rendezvous(AscendDevice::Emulated(0), 0, 2, &free_address())
        .err()
        .expect("no secret, no rendezvous")
        .to_string();
    assert!(
        e.contains("no shared secret: set BURN_ASCEND_RENDEZVOUS_SECRET"),
        "{e}"
    );
}
