//! Traffic counters of the emulated HCCL: per kind of transfer, how many ran and what they put
//! on the links (counted once per transfer, by the process that computed it: for root-info
//! communicators across processes, the root's).

use std::sync::Mutex;

use super::semantics::{Kind, Traffic};

static TOTALS: Mutex<[KindTraffic; 6]> = Mutex::new([KindTraffic::ZERO; 6]);

/// The transfers of one kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KindTraffic {
    /// Transfers completed.
    pub calls: u64,
    /// Their link traffic, summed.
    pub traffic: Traffic,
}

impl KindTraffic {
    const ZERO: KindTraffic = KindTraffic {
        calls: 0,
        traffic: Traffic {
            rounds: 0,
            link_bytes: 0,
            min_link_bytes: 0,
            critical_bytes: 0,
        },
    };
}

/// What the emulated HCCL has moved in this process, per kind of transfer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HcclCounters {
    per_kind: [KindTraffic; 6],
}

impl HcclCounters {
    /// The transfers of `kind`.
    pub fn of(&self, kind: Kind) -> KindTraffic {
        self.per_kind[index(kind)]
    }

    /// All kinds together.
    pub fn total(&self) -> KindTraffic {
        self.per_kind
            .iter()
            .fold(KindTraffic::default(), |a, b| add(a, *b, 1))
    }

    /// The transfers between `earlier` and `self`.
    pub fn since(&self, earlier: &HcclCounters) -> HcclCounters {
        let mut per_kind = self.per_kind;
        for (k, e) in per_kind.iter_mut().zip(earlier.per_kind) {
            *k = add(*k, e, -1);
        }
        HcclCounters { per_kind }
    }
}

fn add(a: KindTraffic, b: KindTraffic, sign: i64) -> KindTraffic {
    let f = |x: u64, y: u64| (x as i64 + sign * y as i64) as u64;
    KindTraffic {
        calls: f(a.calls, b.calls),
        traffic: Traffic {
            rounds: f(a.traffic.rounds, b.traffic.rounds),
            link_bytes: f(a.traffic.link_bytes, b.traffic.link_bytes),
            min_link_bytes: f(a.traffic.min_link_bytes, b.traffic.min_link_bytes),
            critical_bytes: f(a.traffic.critical_bytes, b.traffic.critical_bytes),
        },
    }
}

fn index(kind: Kind) -> usize {
    Kind::ALL.iter().position(|k| *k == kind).unwrap()
}

pub(crate) fn record(kind: Kind, t: Traffic) {
    let mut totals = TOTALS.lock().unwrap();
    let one = KindTraffic {
        calls: 1,
        traffic: t,
    };
    totals[index(kind)] = add(totals[index(kind)], one, 1);
}

/// The transfers completed so far (a transfer is counted once every participant has joined it,
/// so synchronise the streams first).
pub fn hccl_counters() -> HcclCounters {
    HcclCounters {
        per_kind: *TOTALS.lock().unwrap(),
    }
}
