//! Two LUNs on one tag set, driven by the event loop through the host's service entry
//! point: with the other LUN quiet, the busy one gets the whole depth back within two idle
//! intervals, with nothing in the workloads or the driver asking for it; the timeouts the
//! service's own periodic check fires on the way are counted.

use blkmq_core::{IDLE_INTERVAL_NS, IssuerId, TagSet};
use blkmq_sim::{FioJob, Ideal, IdealParams, ModelDriver, Pattern, Sim, SimPlatform};

const LATENCY_NS: u64 = 1_000_000;
const DEPTH: usize = 24;

#[test]
fn a_quiet_lun_gives_its_share_back_in_the_simulator() {
    let platform = SimPlatform::new(1);
    let ideal = Ideal::new(IdealParams {
        latency_ns: LATENCY_NS,
        bandwidth: 0,
        queue_depth: DEPTH,
        ..IdealParams::default()
    })
    .unwrap();
    let driver = ModelDriver::new(platform.clone(), ideal);
    let (a, b) = (driver.queue_config(), driver.queue_config());
    let mut sim = Sim::new(platform, TagSet::builder(DEPTH), driver).unwrap();
    let busy = sim.add_queue(a).unwrap();
    let quiet = sim.add_queue(b).unwrap();
    // The quiet LUN: a short burst at depth 32, capped at its share of 12, then nothing.
    let burst = 12 * 10;
    sim.add_workload(
        quiet,
        FioJob::new(IssuerId(2), Pattern::RandRead, 4096, 32, burst),
    );
    // The busy one: depth 32 for long after the burst.
    let ios = (DEPTH as u64) * 1_000;
    sim.add_workload(
        busy,
        FioJob::new(IssuerId(1), Pattern::RandRead, 4096, 32, ios),
    );
    let report = sim.run().unwrap();
    let busy_ns = report.workloads[1].elapsed_ns();
    // Shared at 12 while the burst runs (10 rounds) and at most two idle intervals after,
    // the whole depth of 24 after that; at 12 throughout it would take twice as long.
    let shared_rounds = 10 + 2 * IDLE_INTERVAL_NS / LATENCY_NS;
    let whole = (ios - shared_rounds * 12).div_ceil(DEPTH as u64);
    let bound = (shared_rounds + whole + 2) * LATENCY_NS;
    assert!(
        busy_ns <= bound,
        "the busy LUN took {busy_ns} ns, more than {bound} ns: it never got the quiet one's share"
    );
    assert!(
        bound < ios / 12 * LATENCY_NS,
        "the bound tells the two apart"
    );
    // Both went idle once quiet: the last one when its job ended.
    assert_eq!(sim.host().set().active_queues(0), 0);
    assert_eq!(report.stats.end_io_calls, burst + ios);
}

#[test]
fn timeouts_the_service_fires_for_shared_luns_are_counted() {
    let platform = SimPlatform::new(1);
    let slow = Ideal::new(IdealParams {
        latency_ns: 3_500_000_000,
        bandwidth: 0,
        queue_depth: DEPTH,
        ..IdealParams::default()
    })
    .unwrap();
    let driver = ModelDriver::new(platform.clone(), slow);
    let (a, b) = (driver.queue_config(), driver.queue_config());
    let tags = TagSet::builder(DEPTH).timeout_ns(1_000_000_000);
    let mut sim = Sim::new(platform, tags, driver).unwrap();
    let (a, b) = (sim.add_queue(a).unwrap(), sim.add_queue(b).unwrap());
    sim.add_workload(a, FioJob::new(IssuerId(1), Pattern::RandRead, 4096, 1, 1));
    sim.add_workload(b, FioJob::new(IssuerId(2), Pattern::RandRead, 4096, 1, 1));
    // No timeout check of the loop's own: the service's periodic one, called for tag
    // idling between the LUNs, is what finds the requests past their deadline.
    let report = sim.run().unwrap();
    let fired = sim.queue(a).timed_out() + sim.queue(b).timed_out();
    assert!(fired > 0);
    assert_eq!(report.stats.timeouts, fired);
    assert_eq!(report.stats.end_io_calls, 2);
}
