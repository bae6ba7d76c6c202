//! Model tests of BFQ:
//!
//! * no request lost or duplicated: random operation sequences — several issuers, every
//!   class, reads and writes, merges, requeues, completions with errors, clock steps and
//!   idle timers, tunable, group, weight and depth changes — through the checked model of
//!   `blkmq_model::bfq` (every bio dispatched once per insertion and ended once with its
//!   status, requests well formed, counters and tags consistent, everything drained);
//! * long-run service proportional to the weights: always-backlogged sync issuers with
//!   random weights (10 to 100, Linux's range of I/O priority weights, where a run of this
//!   length makes the bound tight enough to mean something), served at a fixed rate with `low_latency` off and a fixed
//!   `max_budget`, stay within a bound proportional to `max_budget` of their weighted
//!   shares at every point of the run.

use arbitrary::{Arbitrary, Unstructured};
use blkmq_core::{
    Alloc, Bio, Elevator, ElvCx, IssuerId, Op, QueueLimits, QueueTags, Status, StdPlatform, TagSet,
};
use blkmq_model::bfq::{self, Config};
use blkmq_sched_bfq::Bfq;
use proptest::prelude::*;
use proptest::test_runner::Config as ProptestConfig;

/// The ops `bytes` decode to, one after another, after a [`Config`].
fn decode(bytes: &[u8]) -> Option<(Config, Vec<bfq::Op>)> {
    let mut u = Unstructured::new(bytes);
    let config = Config::arbitrary(&mut u).ok()?;
    let mut list = Vec::new();
    while !u.is_empty() {
        list.push(bfq::Op::arbitrary(&mut u).ok()?);
    }
    Some((config, list))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Every promise of the operation-sequence model holds over random sequences.
    #[test]
    fn no_request_is_lost_or_duplicated(bytes in proptest::collection::vec(any::<u8>(), 16..2048)) {
        if let Some((config, list)) = decode(&bytes) {
            if let Err(failure) = bfq::run(&config, &list) {
                return Err(TestCaseError::fail(format!("{config:?}\n{failure}")));
            }
        }
    }
}

// ----- proportional service -----

/// The fixed maximum budget (sectors).
const MAX_BUDGET: u64 = 2048;
/// Sectors of every request.
const RQ_SECTORS: u32 = 64;
/// Requests each issuer keeps queued: it is never without one.
const BACKLOG: usize = 4;
/// The device's fixed rate: ns per sector served (a request completes this long after it
/// is dispatched, one at a time).
const NS_PER_SECTOR: u64 = 1_000;
/// Requests served in a run: many turns of every issuer.
const REQUESTS: usize = 20_000;

/// The bound on the normalized service gap, in units of `MAX_BUDGET / min(w)`.
///
/// B-WF2Q+ serves a queue only while it is eligible, its virtual start `S <= V`, and a turn
/// adds at most one budget `B` of service, so a backlogged queue's normalized service
/// `N_i = s_i / w_i` (its start advanced from where it began) never runs more than
/// `B / w_i` ahead of the virtual time `V`. It cannot lag more than `B / w_i + B / w_min`
/// behind either: a backlogged queue with `S_i <= V` not served loses only to queues whose
/// finish, at most `B / w` after their start, is earlier than its own, and the virtual time
/// jumps only to a start not yet served. So `|N_i - N_j| <= (B / w_i) + (B / w_j + B /
/// w_min) <= 3 B / w_min`; one more `B / w_min` covers the turn in progress at the moment of
/// a check (its service is counted as it is dispatched, while its finish is charged only
/// when the turn ends). Hence `c = 4`.
const C: u64 = 4;

/// Always-backlogged sync readers over bare tags, served one request at a time.
struct Device {
    tags: QueueTags<(), StdPlatform>,
    limits: QueueLimits,
    bfq: Bfq,
    now: u64,
    /// Per issuer: its weight, the next sector it reads, sectors served.
    issuers: Vec<(u32, u64, u64)>,
}

impl Device {
    fn new(weights: &[u32]) -> Self {
        let set = TagSet::builder(4)
            .build(StdPlatform::new(), |_| ())
            .unwrap();
        let mut tags = set.attach().unwrap();
        let nr = weights.len() * BACKLOG + 2;
        tags.attach_scheduler(Some(nr), |_| ()).unwrap();
        let mut bfq = Bfq::new();
        bfq.set_low_latency(false);
        bfq.set_max_budget(MAX_BUDGET).unwrap();
        bfq.depth_updated(nr, tags.nr_keys());
        let mut issuers = Vec::new();
        for (i, &w) in weights.iter().enumerate() {
            bfq.set_issuer_weight(IssuerId(i as u32), w).unwrap();
            // Far apart, each sequential.
            issuers.push((w, (i as u64) << 30, 0));
        }
        Self {
            tags,
            limits: QueueLimits::new(1 << 40),
            bfq,
            now: 0,
            issuers,
        }
    }

    /// A fresh read of issuer `i`.
    fn insert(&mut self, i: usize) {
        let sector = self.issuers[i].1;
        self.issuers[i].1 += u64::from(RQ_SECTORS);
        let bio = Bio::new(Op::Read, sector, RQ_SECTORS).issuer(IssuerId(i as u32));
        let mut rq = self.tags.alloc(&Alloc::new(0, 0)).unwrap();
        self.tags.set_bio(&mut rq, bio).unwrap();
        let cx = ElvCx::new(&self.tags, &self.limits, self.now);
        self.bfq.prepare_request(&cx, &mut rq);
        self.bfq
            .insert_requests(&cx, &mut std::iter::once(rq), false);
    }

    /// Dispatches one request and completes it at the fixed rate; its issuer reads the
    /// next one at once.
    fn serve(&mut self) {
        let cx = ElvCx::new(&self.tags, &self.limits, self.now);
        let rq = self
            .bfq
            .dispatch_request(&cx, 0)
            .expect("every issuer is backlogged");
        let io = self.tags.io(&rq).unwrap();
        let (i, sectors) = (io.issuer().0 as usize, io.sectors());
        self.issuers[i].2 += sectors;
        self.now += sectors * NS_PER_SECTOR;
        let cx = ElvCx::new(&self.tags, &self.limits, self.now);
        self.bfq.completed_request(&cx, &rq);
        self.bfq.finish_request(&cx, &rq);
        self.tags.complete(rq, Status::Ok).unwrap();
        self.insert(i);
    }

    /// The largest `|s_i / w_i - s_j / w_j|` over all pairs, against
    /// `C * MAX_BUDGET / min(w)`, cross-multiplied to stay exact.
    fn check(&self) -> Result<(), TestCaseError> {
        let w_min = self.issuers.iter().map(|e| e.0).min().unwrap();
        for (a, &(wa, _, sa)) in self.issuers.iter().enumerate() {
            for &(wb, _, sb) in &self.issuers[a + 1..] {
                let (wa, wb, w_min) = (u128::from(wa), u128::from(wb), u128::from(w_min));
                let gap = (u128::from(sa) * wb).abs_diff(u128::from(sb) * wa) * w_min;
                let bound = u128::from(C * MAX_BUDGET) * wa * wb;
                prop_assert!(
                    gap <= bound,
                    "services {:?} (weight, next sector, sectors) at {} ns: |{sa}/{wa} - \
                     {sb}/{wb}| > {C} x {MAX_BUDGET} / {w_min}",
                    self.issuers,
                    self.now
                );
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// Service follows the weights within `C * max_budget / min(w)` at every point.
    #[test]
    fn service_is_proportional_to_weights(weights in proptest::collection::vec(10u32..=100, 2..=5)) {
        let mut dev = Device::new(&weights);
        for i in 0..weights.len() {
            for _ in 0..BACKLOG {
                dev.insert(i);
            }
        }
        for _ in 0..REQUESTS {
            dev.serve();
            dev.check()?;
        }
        // Everyone was served: the bound is not met by starving nobody and serving nothing.
        prop_assert!(dev.issuers.iter().all(|e| e.2 > 0), "{:?}", dev.issuers);
    }
}
