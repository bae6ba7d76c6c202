//! BFQ on simulated devices, against the guarantees it is for: bandwidth split by weight,
//! budget timeouts for seeky queues, strict classes with the idle-class guard, idling for
//! readers that think, and start-up latency under heavy background I/O.
//!
//! Every figure comes from the virtual clock of `blkmq-sim`, so each run is exact and the
//! same on every machine.

use blkmq_core::{BioFlags, Elevator, IoPrio, IoPrioClass, IssuerId, Op, QueueConfig};
use blkmq_sched_bfq::{Bfq, Tunables};
use blkmq_sched_deadline::Deadline;
use blkmq_sim::*;

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000 * MS;
/// Scheduler tags: enough for every issuer of these tests to have requests queued.
const NR_REQUESTS: usize = 256;
/// A gigabyte in sectors: readers keep this far apart on the disk.
const GB: u64 = 2 << 20;

/// One issuer's I/O: sequential or random, `depth` in flight, an optional think time
/// between a completion and the next submission, until `stop_ns`.
#[derive(Clone, Debug)]
struct Stream {
    issuer: IssuerId,
    prio: IoPrio,
    op: Op,
    flags: BioFlags,
    start: u64,
    span: u64,
    sectors: u32,
    depth: usize,
    think_ns: u64,
    random: bool,
    rng: SimRng,
    stop_ns: u64,
    limit: u64,
    // What happened.
    next: u64,
    issued: u64,
    in_flight: usize,
    waking: usize,
    stopped: bool,
    done_ios: u64,
    done_bytes: u64,
    first_done_ns: Option<u64>,
    last_done_ns: u64,
}

impl Stream {
    /// Sequential sync reads of `kib` KiB at depth 1 from `start`, for 10 seconds.
    fn reader(issuer: u32, start: u64, kib: u32) -> Self {
        Self {
            issuer: IssuerId(issuer),
            prio: IoPrio::default(),
            op: Op::Read,
            flags: BioFlags::empty(),
            start,
            span: GB,
            sectors: kib * 2,
            depth: 1,
            think_ns: 0,
            random: false,
            rng: SimRng::new(u64::from(issuer)),
            stop_ns: 10 * SEC,
            limit: u64::MAX,
            next: 0,
            issued: 0,
            in_flight: 0,
            waking: 0,
            stopped: false,
            done_ios: 0,
            done_bytes: 0,
            first_done_ns: None,
            last_done_ns: 0,
        }
    }

    /// Random sync reads of `kib` KiB at depth 1 over `span` sectors from `start`.
    fn seeky(issuer: u32, start: u64, span: u64, kib: u32) -> Self {
        Self {
            random: true,
            span,
            ..Self::reader(issuer, start, kib)
        }
    }

    /// Sequential buffered (async) writes of `kib` KiB, `depth` in flight.
    fn writer(issuer: u32, start: u64, kib: u32, depth: usize) -> Self {
        Self {
            op: Op::Write,
            depth,
            ..Self::reader(issuer, start, kib)
        }
    }

    fn think(self, ns: u64) -> Self {
        Self {
            think_ns: ns,
            ..self
        }
    }

    fn prio(self, prio: IoPrio) -> Self {
        Self { prio, ..self }
    }

    fn until(self, stop_ns: u64) -> Self {
        Self { stop_ns, ..self }
    }

    fn ios(self, limit: u64) -> Self {
        Self { limit, ..self }
    }

    fn issue(&mut self, cx: &mut Cx<'_>) {
        if cx.now_ns() >= self.stop_ns || self.issued >= self.limit {
            self.stopped = true;
            return;
        }
        let sectors = u64::from(self.sectors);
        let offset = if self.random {
            self.rng.below(self.span / sectors) * sectors
        } else {
            let at = self.next % (self.span - self.span % sectors);
            self.next += sectors;
            at
        };
        let io = Io::new(self.op, self.start + offset, self.sectors)
            .flags(self.flags)
            .prio(self.prio)
            .issuer(self.issuer);
        self.issued += 1;
        self.in_flight += 1;
        cx.submit(io);
    }

    /// Bytes per second done from its first submission to `stop_ns`.
    fn rate(&self, from_ns: u64) -> f64 {
        self.done_bytes as f64 / ((self.stop_ns - from_ns) as f64 / SEC as f64)
    }
}

impl Workload for Stream {
    fn name(&self) -> String {
        format!("issuer {}", self.issuer.0)
    }

    fn start(&mut self, cx: &mut Cx<'_>) {
        for _ in 0..self.depth {
            self.issue(cx);
        }
    }

    fn completed(&mut self, cx: &mut Cx<'_>, done: &Done) {
        assert!(done.status.is_ok(), "{done:?}");
        self.in_flight -= 1;
        if done.completed_ns <= self.stop_ns {
            self.done_ios += 1;
            self.done_bytes += done.bytes;
            self.first_done_ns.get_or_insert(done.completed_ns);
            self.last_done_ns = done.completed_ns;
        }
        if self.think_ns > 0 {
            self.waking += 1;
            cx.wake_after(self.think_ns, 0);
        } else {
            self.issue(cx);
        }
    }

    fn woken(&mut self, cx: &mut Cx<'_>, _: u64) {
        self.waking -= 1;
        self.issue(cx);
    }

    fn is_finished(&self) -> bool {
        self.stopped && self.in_flight == 0 && self.waking == 0
    }

    fn claimed_bytes(&self) -> u64 {
        self.done_bytes
    }
}

#[derive(Clone, Copy, Debug)]
enum Sched {
    None,
    Deadline,
    Bfq(Tunables),
}

impl Sched {
    fn bfq() -> Self {
        Sched::Bfq(Tunables::default())
    }

    fn bfq_no_low_latency() -> Self {
        Sched::Bfq(Tunables {
            low_latency: false,
            ..Tunables::default()
        })
    }

    fn name(self) -> &'static str {
        match self {
            Sched::None => "none",
            Sched::Deadline => "mq-deadline",
            Sched::Bfq(_) => "bfq",
        }
    }
}

type DiskSim = Sim<ModelDriver<Disk>>;

/// One queue on the default disk (7200 rpm, no internal queue).
fn disk_sim(sched: Sched) -> (DiskSim, QueueId) {
    let platform = SimPlatform::new(4);
    let driver = ModelDriver::new(platform.clone(), Disk::new(DiskParams::default()).unwrap());
    let tags = driver.tag_set();
    let mut config: QueueConfig = driver.queue_config();
    let elevator: Option<Box<dyn Elevator>> = match sched {
        Sched::None => None,
        Sched::Deadline => Some(Box::new(Deadline::new())),
        Sched::Bfq(t) => Some(Box::new(Bfq::with_tunables(t).unwrap())),
    };
    if let Some(e) = elevator {
        config = config.elevator(e).nr_requests(NR_REQUESTS);
    }
    let mut sim = Sim::new(platform, tags, driver).unwrap();
    let q = sim.add_queue(config).unwrap();
    (sim, q)
}

fn bfq<R>(sim: &DiskSim, q: QueueId, f: impl FnOnce(&mut Bfq) -> R) -> R {
    sim.queue(q).with_elevator(f).expect("bfq is the elevator")
}

/// Runs `streams` (each starting at its time, on its own CPU) and returns them as they
/// ended.
fn run(sim: &mut DiskSim, q: QueueId, streams: Vec<(u64, Stream)>) -> Vec<Stream> {
    let ids: Vec<_> = streams
        .into_iter()
        .enumerate()
        .map(|(i, (at, s))| sim.add_workload_on(q, i % 4, at, s))
        .collect();
    sim.run().unwrap();
    ids.into_iter().map(|id| sim.workload(id).clone()).collect()
}

/// Each reader's share of the bytes, against the share its weight asks for.
fn shares(streams: &[Stream], weights: &[u32]) -> Vec<(f64, f64)> {
    let bytes: u64 = streams.iter().map(|s| s.done_bytes).sum();
    let weight: u32 = weights.iter().sum();
    streams
        .iter()
        .zip(weights)
        .map(|(s, &w)| {
            (
                s.done_bytes as f64 / bytes as f64,
                f64::from(w) / f64::from(weight),
            )
        })
        .collect()
}

fn weighted_readers(sizes_kib: [u32; 3]) -> Vec<(Stream, f64, f64)> {
    let weights = [100, 200, 400];
    let (mut sim, q) = disk_sim(Sched::bfq_no_low_latency());
    bfq(&sim, q, |b| {
        for (i, w) in weights.into_iter().enumerate() {
            b.set_issuer_weight(IssuerId(i as u32 + 1), w).unwrap();
        }
    });
    let readers = (0..3)
        .map(|i| {
            (
                0,
                Stream::reader(i as u32 + 1, i as u64 * 300 * GB, sizes_kib[i]),
            )
        })
        .collect();
    let done = run(&mut sim, q, readers);
    let split = shares(&done, &weights);
    for (s, (got, want)) in done.iter().zip(&split) {
        let stats = bfq(&sim, q, |b| b.issuer_stats(s.issuer)).unwrap();
        println!(
            "issuer {}: {} KiB requests, {:.1} MB/s, share {:.4} (weight asks {:.4}), {stats:?}",
            s.issuer.0,
            s.sectors / 2,
            s.rate(0) / 1e6,
            got,
            want
        );
    }
    done.into_iter()
        .zip(split)
        .map(|(s, (got, want))| (s, got, want))
        .collect()
}

#[test]
fn three_readers_share_the_disk_by_weight() {
    for (s, got, want) in weighted_readers([128, 128, 128]) {
        assert!(
            (got / want - 1.0).abs() <= 0.05,
            "issuer {} got {got:.4} of the bandwidth, its weight asks {want:.4}",
            s.issuer.0
        );
    }
}

#[test]
fn the_split_is_by_bandwidth_not_by_requests() {
    // The lightest reader asks for 4x larger requests: it still gets 1/7 of the bytes, so
    // a quarter of the requests it would get if requests were counted.
    let done = weighted_readers([512, 128, 128]);
    for (s, got, want) in &done {
        assert!(
            (got / want - 1.0).abs() <= 0.05,
            "issuer {} got {got:.4} of the bandwidth, its weight asks {want:.4}",
            s.issuer.0
        );
    }
    let (small, big) = (&done[1].0, &done[0].0);
    assert!(
        small.done_ios > 6 * big.done_ios,
        "{} vs {} requests",
        small.done_ios,
        big.done_ios
    );
}

/// Bytes per second of `stream` alone on the disk for its whole run.
fn alone(sched: Sched, stream: Stream) -> f64 {
    let (mut sim, q) = disk_sim(sched);
    run(&mut sim, q, vec![(0, stream)])[0].rate(0)
}

#[test]
fn a_seeky_reader_is_cut_by_the_budget_timeout() {
    // The sequential reader reads ahead as `dd` through the page cache does: four 128 KiB
    // reads in flight. With requests waiting, the scheduler sees the disk never holds more
    // than one: it does not queue commands, so idling for any reader keeps its head in
    // place, and the seeky reader keeps the disk for its turn.
    let sequential = Stream {
        depth: 4,
        ..Stream::reader(1, 0, 128)
    };
    let seeky = Stream::seeky(2, 500 * GB, 100 * GB, 4);
    let (seq_alone, seeky_alone) = (
        alone(Sched::bfq(), sequential.clone()),
        alone(Sched::bfq(), seeky.clone()),
    );
    // Equal bandwidth for both: each gets b with b / seq + b / seeky = 1 second a second.
    let equal = 2.0 / (1.0 / seq_alone + 1.0 / seeky_alone);
    let (mut sim, q) = disk_sim(Sched::bfq());
    let done = run(&mut sim, q, vec![(0, sequential), (0, seeky)]);
    let total = done[0].rate(0) + done[1].rate(0);
    let stats = bfq(&sim, q, |b| b.stats());
    let seeky_stats = bfq(&sim, q, |b| b.issuer_stats(IssuerId(2))).unwrap();
    println!(
        "alone: sequential {:.2} MB/s, seeky {:.3} MB/s; equal-bandwidth split {:.3} MB/s; \
         together: sequential {:.2} MB/s, seeky {:.3} MB/s, total {:.2} MB/s; {stats:?}; \
         seeky queue {seeky_stats:?}",
        seq_alone / 1e6,
        seeky_alone / 1e6,
        equal / 1e6,
        done[0].rate(0) / 1e6,
        done[1].rate(0) / 1e6,
        total / 1e6,
    );
    assert!(seeky_stats.seeky);
    assert!(seeky_stats.budget_timeouts > 0, "{seeky_stats:?}");
    assert!(stats.budget_timeouts > 0, "{stats:?}");
    assert!(
        total >= 2.0 * equal,
        "total {total:.0} B/s against an equal split of {equal:.0} B/s"
    );
    // The seeky reader still gets served: time, not bandwidth, is what it is given.
    assert!(done[1].done_ios > 0);
}

#[test]
fn real_time_starves_best_effort_while_backlogged() {
    let rt = IoPrio::new(IoPrioClass::RealTime, 4).unwrap();
    let (mut sim, q) = disk_sim(Sched::bfq());
    let done = run(
        &mut sim,
        q,
        vec![
            (0, Stream::seeky(1, 0, 100 * GB, 4).prio(rt).ios(200)),
            (MS, Stream::seeky(2, 500 * GB, 100 * GB, 4).ios(200)),
        ],
    );
    let (rt, be) = (&done[0], &done[1]);
    println!(
        "real time: {} I/Os, last at {} ms; best effort: {} I/Os, first at {:?} ns",
        rt.done_ios,
        rt.last_done_ns / MS,
        be.done_ios,
        be.first_done_ns
    );
    assert_eq!((rt.done_ios, be.done_ios), (200, 200));
    // Nothing of best effort ends before real time has nothing left.
    assert!(be.first_done_ns.unwrap() > rt.last_done_ns);
}

#[test]
fn the_idle_class_gets_its_guard_service() {
    let idle = IoPrio::new(IoPrioClass::Idle, 7).unwrap();
    let (mut sim, q) = disk_sim(Sched::bfq());
    let be = sim.add_workload_on(q, 0, 0, Stream::reader(1, 0, 128).until(4 * SEC));
    let idle = sim.add_workload_on(
        q,
        1,
        0,
        Timed::new(Stream::reader(2, 500 * GB, 128).prio(idle).until(4 * SEC)),
    );
    sim.run().unwrap();
    let (be, idle) = (sim.workload(be), sim.workload(idle));
    let gaps: Vec<u64> = idle.ends.windows(2).map(|w| w[1] - w[0]).collect();
    let longest = gaps.iter().copied().max().unwrap_or(0);
    println!(
        "best effort {} I/Os, idle {} I/Os at {:?} ms",
        be.done_ios,
        idle.stream.done_ios,
        idle.ends.iter().map(|t| t / MS).collect::<Vec<_>>()
    );
    // The guard is looked at when a turn ends: the idle class waits 200 ms, then at most
    // one best-effort turn (its budget timeout, 125 ms) and its own request.
    let bound = 200 * MS + Tunables::default().timeout_sync_ns + 15 * MS;
    assert!(idle.ends[0] <= bound, "first at {} ms", idle.ends[0] / MS);
    assert!(longest <= bound, "a gap of {} ms", longest / MS);
    assert!(idle.stream.done_ios >= 4 * SEC / bound);
    // One request per guard turn: far less than best effort.
    assert!(idle.stream.done_bytes * 20 < be.done_bytes);
}

/// A stream that also records when each of its I/Os ended.
#[derive(Clone, Debug)]
struct Timed {
    stream: Stream,
    ends: Vec<u64>,
}

impl Timed {
    fn new(stream: Stream) -> Self {
        Self {
            stream,
            ends: Vec::new(),
        }
    }
}

impl Workload for Timed {
    fn name(&self) -> String {
        self.stream.name()
    }

    fn start(&mut self, cx: &mut Cx<'_>) {
        self.stream.start(cx)
    }

    fn completed(&mut self, cx: &mut Cx<'_>, done: &Done) {
        self.ends.push(done.completed_ns);
        self.stream.completed(cx, done)
    }

    fn woken(&mut self, cx: &mut Cx<'_>, token: u64) {
        self.stream.woken(cx, token)
    }

    fn is_finished(&self) -> bool {
        self.stream.is_finished()
    }

    fn claimed_bytes(&self) -> u64 {
        self.stream.claimed_bytes()
    }
}

#[test]
fn idling_keeps_a_thinking_reader_sequential() {
    // A reader that thinks 2 ms (below `slice_idle`) between 64 KiB reads, against a
    // sequential reader at the same weight.
    let thinker = Stream::reader(1, 0, 64).think(2 * MS);
    let thinker_alone = alone(Sched::bfq(), thinker.clone());
    let against = |sched: Sched| {
        let (mut sim, q) = disk_sim(sched);
        let done = run(
            &mut sim,
            q,
            vec![(0, thinker.clone()), (0, Stream::reader(2, 500 * GB, 128))],
        );
        let stats = bfq(&sim, q, |b| b.stats());
        (done[0].rate(0), done[1].rate(0), stats)
    };
    let (idling, other, stats) = against(Sched::bfq());
    let (no_idling, other_no_idling, _) = against(Sched::Bfq(Tunables {
        slice_idle_ns: 0,
        ..Tunables::default()
    }));
    println!(
        "thinker alone {:.2} MB/s; against a sequential reader: {:.2} MB/s ({:.0}% of alone) \
         with idling (the reader {:.2} MB/s), {:.2} MB/s ({:.0}%) without (the reader {:.2} \
         MB/s); {stats:?}",
        thinker_alone / 1e6,
        idling / 1e6,
        100.0 * idling / thinker_alone,
        other / 1e6,
        no_idling / 1e6,
        100.0 * no_idling / thinker_alone,
        other_no_idling / 1e6,
    );
    assert!(stats.idle_waits > 0);
    // Without idling, the thinker loses the disk at every think time and waits a whole
    // turn of the other reader for each read; idled for, it reads at its own pace for its
    // turns, which the budget timeout ends, so it keeps about its share of the disk's time.
    assert!(
        idling >= 2.0 * no_idling,
        "{idling:.0} vs {no_idling:.0} B/s"
    );
    assert!(
        idling >= 0.4 * thinker_alone,
        "{idling:.0} of {thinker_alone:.0} B/s"
    );
}

/// A new issuer's start-up: 64 small sync reads, one at a time, spread over 64 MiB.
fn startup(issuer: u32) -> Stream {
    Stream::seeky(issuer, 900 * GB, 128 << 10, 4)
        .ios(64)
        .until(u64::MAX)
}

/// How long the start-up burst takes against 5 sequential readers and 5 writers, and on
/// an idle disk.
fn startup_times(sched: Sched) -> (u64, u64) {
    // The background settles first: its queues are no longer new when the burst starts.
    let at = 15 * SEC;
    let (mut sim, q) = disk_sim(sched);
    let idle = run(&mut sim, q, vec![(at, startup(99))]);
    let idle_ns = idle[0].last_done_ns - at;
    let (mut sim, q) = disk_sim(sched);
    let mut streams: Vec<(u64, Stream)> = (0..5)
        .map(|i| {
            (
                0,
                Stream::reader(i + 1, u64::from(i) * 100 * GB, 128).until(20 * SEC),
            )
        })
        .collect();
    streams.extend((0..5).map(|i| {
        (
            0,
            Stream::writer(i + 11, u64::from(i) * 100 * GB + 50 * GB, 256, 8).until(20 * SEC),
        )
    }));
    streams.push((at, startup(99)));
    let done = run(&mut sim, q, streams);
    let burst = done.last().unwrap();
    assert_eq!(burst.done_ios, 64, "the burst ended");
    (burst.last_done_ns - at, idle_ns)
}

#[test]
fn a_new_issuer_starts_up_under_load_about_as_fast_as_on_an_idle_disk() {
    let mut table = String::from("start-up of 64 small reads: loaded / idle disk\n");
    let mut bfq_times = (0, 0);
    for sched in [Sched::None, Sched::Deadline, Sched::bfq()] {
        let (loaded, idle) = startup_times(sched);
        table += &format!(
            "{:>12}: {:>8.1} ms / {:>6.1} ms = {:.2}x\n",
            sched.name(),
            loaded as f64 / MS as f64,
            idle as f64 / MS as f64,
            loaded as f64 / idle as f64
        );
        if let Sched::Bfq(_) = sched {
            bfq_times = (loaded, idle);
        }
    }
    println!("{table}");
    let (loaded, idle) = bfq_times;
    assert!(loaded <= 2 * idle, "{table}");
}
