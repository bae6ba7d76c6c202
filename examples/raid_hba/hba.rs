//! A megaraid-like RAID HBA driver on blkmq and the closed-loop load that drives it: the
//! code the `raid_hba` example prints, `tests/raid_hba.rs` checks and `benches/hba.rs`
//! times.
//!
//! The host has `hctxs` hardware queues over 128 CPU slots, a host-wide depth and one
//! RAID-0 volume of [`MEMBERS`] drives striped in [`STRIPE_SECTORS`]. The driver ([`Hba`])
//! takes a unit of the volume's budget (the SCSI device queue depth) per command, maps each
//! request to its member drive and pushes it onto the reply queue of its hardware queue.
//! Completion threads stand in for the reply-queue interrupts: each pops what is due on
//! its reply queues and ends it in one batch. Submitter threads keep `iodepth` 4 KiB random
//! reads in flight each, submitting a new one as soon as one completes.
//!
//! The [`Mode`]s are the tag layouts compared: one hardware queue holding the whole depth,
//! the depth split over the hardware queues, shared host tags, and shared host tags with a
//! completion path that scans every hardware queue after each completion (what Linux did
//! before the fix in seed 001).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use blkmq_core::{
    Bio, BioFlags, Driver, HctxCx, Host, Op, QueueConfig, QueueLimits, Rejected, RequestInit,
    RequestQueue, Rq, Status, StdPlatform, TagSet, TagSetFlags,
};

/// Member drives of the RAID-0 volume.
pub(crate) const MEMBERS: u64 = 8;
/// The strip: sectors on one member before the next member takes over (64 KiB).
pub(crate) const STRIPE_SECTORS: u64 = 128;
/// Sectors of every read (4 KiB).
pub(crate) const IO_SECTORS: u32 = 8;
/// Sectors of each member drive (8 GiB).
pub(crate) const MEMBER_SECTORS: u64 = 1 << 24;
/// Sectors of the volume.
pub(crate) const CAPACITY: u64 = MEMBERS * MEMBER_SECTORS;
/// CPU slots of the platform: the hardware queues are spread over them.
pub(crate) const CPUS: usize = 128;

/// How the host's tags are laid out, and how completions rerun the hardware queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// One hardware queue holding the whole depth (seed 001's before).
    Single,
    /// The depth split evenly over the hardware queues, each with its own tags.
    PerHctx,
    /// Shared host tags over every hardware queue.
    Shared,
    /// Shared host tags, and after every completion a scan of every hardware queue asking
    /// [`RequestQueue::has_work`] (running it when it has): seed 001's after.
    Naive,
}

impl Mode {
    /// Every mode, in the order the example prints them.
    pub(crate) const ALL: [Mode; 4] = [Mode::Single, Mode::PerHctx, Mode::Shared, Mode::Naive];

    /// The mode's name on the command line and in tables.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Single => "single",
            Mode::PerHctx => "per-hctx",
            Mode::Shared => "shared",
            Mode::Naive => "naive",
        }
    }

    /// The mode called `name`.
    pub(crate) fn parse(name: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// What a run is made of.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    /// Hardware queues (except in [`Mode::Single`], which has one).
    pub(crate) hctxs: usize,
    /// Host-wide depth: tags of the whole host.
    pub(crate) depth: usize,
    /// The volume's budget (SCSI device queue depth).
    pub(crate) budget: usize,
    /// Reads each submitter keeps in flight.
    pub(crate) iodepth: usize,
    /// Submitter threads.
    pub(crate) submitters: usize,
    /// Completion threads (reply-queue interrupts); zero completes inline: each submitter
    /// reaps the reply queue of its own hardware queue while it waits, as an interrupt on
    /// the submitting CPU would (every cycle of an I/O on one thread: CPU-bound).
    pub(crate) completers: usize,
    /// Reply queues (MSI-X vectors); hardware queue `h` completes on `h % reply_queues`.
    pub(crate) reply_queues: usize,
    /// Each member's modeled service time; zero completes at once (CPU-bound).
    pub(crate) latency_ns: u64,
    /// Check each read's data and every I/O's identity (see [`data_of`]).
    pub(crate) verify: bool,
    /// Seed of the random sectors.
    pub(crate) seed: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            hctxs: 128,
            depth: 4096,
            budget: 256,
            iodepth: 128,
            submitters: 1,
            completers: 1,
            reply_queues: 128,
            latency_ns: 0,
            verify: false,
            seed: 0x5eed_0001,
        }
    }
}

/// A 64-bit mix (splitmix64's finaliser).
pub(crate) fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The member drive and its sector for a volume sector.
pub(crate) fn stripe(sector: u64) -> (u64, u64) {
    let strip = sector / STRIPE_SECTORS;
    let member = strip % MEMBERS;
    (
        member,
        (strip / MEMBERS) * STRIPE_SECTORS + sector % STRIPE_SECTORS,
    )
}

/// What member `member` returns for its sector `member_sector`.
pub(crate) fn data_of(member: u64, member_sector: u64) -> u64 {
    mix((member << 56) ^ member_sector)
}

/// What a read of the 4 KiB at volume sector `sector` returns.
fn data_of_bio(sector: u64) -> u64 {
    let (member, member_sector) = stripe(sector);
    data_of(member, member_sector)
}

/// The volume sector of read `seq` of submitter `sid`: 4 KiB aligned, anywhere.
pub(crate) fn sector_of(seed: u64, sid: u64, seq: u64) -> u64 {
    let slots = CAPACITY / IO_SECTORS as u64;
    (mix(seed ^ mix((sid << 48) | seq)) % slots) * IO_SECTORS as u64
}

/// Bits of a bio's `private` holding the read's sequence number (the rest: the submitter).
const SEQ_BITS: u32 = 48;

/// The driver's data in every request (Linux's `scsi_cmnd` private area).
#[derive(Debug, Default)]
pub(crate) struct Cmd {
    /// What the member "returned": filled in by `queue_rq` when verifying.
    pub(crate) data: AtomicU64,
    /// The member drive the command went to.
    pub(crate) member: AtomicU64,
}

/// A command on a reply queue: due at `due_ns` (platform time).
struct Reply {
    rq: Rq,
    due_ns: u64,
}

/// The HBA driver.
pub(crate) struct Hba {
    /// The reply queues, one per MSI-X vector.
    replies: Box<[Mutex<VecDeque<Reply>>]>,
    /// Budget units left.
    budget: AtomicUsize,
    /// Commands each member drive took.
    member_ios: [AtomicU64; MEMBERS as usize],
    /// Commands turned down for want of room.
    rejects: AtomicU64,
    latency_ns: u64,
    verify: bool,
}

impl Hba {
    fn new(cfg: &Config) -> Self {
        Self {
            replies: (0..cfg.reply_queues.max(1))
                .map(|_| Mutex::new(VecDeque::with_capacity(cfg.depth)))
                .collect(),
            budget: AtomicUsize::new(cfg.budget),
            member_ios: Default::default(),
            rejects: AtomicU64::new(0),
            latency_ns: cfg.latency_ns,
            verify: cfg.verify,
        }
    }

    /// Budget units left (all of them once the volume is idle).
    pub(crate) fn budget_left(&self) -> usize {
        self.budget.load(Ordering::Acquire)
    }

    /// Commands each member drive took.
    pub(crate) fn member_ios(&self) -> [u64; MEMBERS as usize] {
        core::array::from_fn(|m| self.member_ios[m].load(Ordering::Relaxed))
    }

    /// Commands still on the reply queues.
    pub(crate) fn pending(&self) -> usize {
        self.replies.iter().map(|r| lock(r).len()).sum()
    }
}

/// Locks `m`, through a poisoned lock too.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Driver for Hba {
    type Platform = StdPlatform;
    type Payload = Cmd;

    fn init_request(&self, _: RequestInit) -> Cmd {
        Cmd::default()
    }

    fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _last: bool) -> Result<(), Rejected> {
        let Some(sector) = cx.io(&rq).map(|io| io.sector()) else {
            return Err(Rejected {
                rq,
                status: Status::IoErr,
            });
        };
        // `chunk_sectors` keeps a request inside one strip: one member per command.
        let (member, _) = stripe(sector);
        if let Some(cmd) = cx.request(&rq).map(|r| r.payload()) {
            if self.verify {
                let mut data = 0u64;
                cx.for_each_bio(&rq, |bio| data = data.wrapping_add(data_of_bio(bio.sector)));
                cmd.data.store(data, Ordering::Relaxed);
            }
            cmd.member.store(member, Ordering::Relaxed);
        }
        self.member_ios[member as usize].fetch_add(1, Ordering::Relaxed);
        let due_ns = if self.latency_ns == 0 {
            0
        } else {
            use blkmq_core::Platform;
            cx.queue().platform().now_ns() + self.latency_ns
        };
        let mut reply = lock(&self.replies[cx.hctx() % self.replies.len()]);
        if reply.len() == reply.capacity() {
            // The firmware's queue is full: "not now".
            self.rejects.fetch_add(1, Ordering::Relaxed);
            return Err(Rejected {
                rq,
                status: Status::Resource,
            });
        }
        reply.push_back(Reply { rq, due_ns });
        Ok(())
    }

    fn get_budget(&self, _: &HctxCx<'_, Self>) -> bool {
        self.budget
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok()
    }

    fn put_budget(&self, _: &HctxCx<'_, Self>) {
        self.budget.fetch_add(1, Ordering::AcqRel);
    }
}

/// A host and its volume, built for one mode, run as many times as wanted.
pub(crate) struct Rig {
    /// The mode it was built for.
    pub(crate) mode: Mode,
    /// The configuration it was built with.
    pub(crate) cfg: Config,
    /// The host.
    pub(crate) host: Arc<Host<Hba>>,
    /// The RAID-0 volume.
    pub(crate) queue: Arc<RequestQueue<Hba>>,
}

/// What one run measured.
#[derive(Clone, Debug, Default)]
pub(crate) struct Stats {
    /// Reads completed.
    pub(crate) ios: u64,
    /// Reads submitted.
    pub(crate) submitted: u64,
    /// Wall time from the common start until the last completion.
    pub(crate) wall: Duration,
    /// Time the submitters spent inside `submit` (their busy time).
    pub(crate) submit_busy: Duration,
    /// Time the completion threads spent handling due commands: checking, ending, scanning.
    pub(crate) complete_busy: Duration,
    /// Of that, time in the naive scan of every hardware queue.
    pub(crate) scan: Duration,
    /// Submissions turned back (no tag free) and retried.
    pub(crate) submit_retries: u64,
    /// Latency percentiles, submit to completion, in ns: p50 and p99.
    pub(crate) p50_ns: u64,
    /// See `p50_ns`.
    pub(crate) p99_ns: u64,
    /// Verification failures: wrong data or member, wrong sector, status not Ok,
    /// duplicated or lost reads.
    pub(crate) errors: u64,
    /// Reads the completion found completed twice.
    pub(crate) duplicates: u64,
    /// Reads never completed.
    pub(crate) lost: u64,
    /// Rounds summed into these figures (one for a single run).
    pub(crate) rounds: usize,
    /// The median of the rounds' IOPS.
    pub(crate) median_iops: f64,
}

impl Stats {
    /// Reads per second: the median over the rounds.
    pub(crate) fn iops(&self) -> f64 {
        self.median_iops
    }

    /// Several runs of one rig as one: counts and wall time summed; IOPS, latency
    /// percentiles and busy times per read the medians of the runs' (the busy times are
    /// those medians times the reads, so a round slowed by the machine's other load does not
    /// weigh more than the others).
    pub(crate) fn combine(runs: &[Stats]) -> Stats {
        fn median(mut v: Vec<f64>) -> f64 {
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied().unwrap_or(0.0)
        }
        let mut out = Stats {
            rounds: runs.len(),
            median_iops: median(runs.iter().map(|r| r.median_iops).collect()),
            p50_ns: median(runs.iter().map(|r| r.p50_ns as f64).collect()) as u64,
            p99_ns: median(runs.iter().map(|r| r.p99_ns as f64).collect()) as u64,
            ..Stats::default()
        };
        for r in runs {
            out.ios += r.ios;
            out.submitted += r.submitted;
            out.wall += r.wall;
            out.submit_busy += r.submit_busy;
            out.complete_busy += r.complete_busy;
            out.scan += r.scan;
            out.submit_retries += r.submit_retries;
            out.errors += r.errors;
            out.duplicates += r.duplicates;
            out.lost += r.lost;
        }
        let per_read = |f: fn(&Stats) -> Duration| {
            let ns = median(
                runs.iter()
                    .map(|r| f(r).as_nanos() as f64 / r.ios.max(1) as f64)
                    .collect(),
            );
            Duration::from_nanos((ns * out.ios as f64) as u64)
        };
        out.submit_busy = per_read(|r| r.submit_busy);
        out.complete_busy = per_read(|r| r.complete_busy);
        out.scan = per_read(|r| r.scan);
        out
    }

    /// Busy CPU time per read, in ns, submission and completion together.
    pub(crate) fn cpu_ns_per_io(&self) -> f64 {
        (self.submit_busy + self.complete_busy).as_nanos() as f64 / self.ios.max(1) as f64
    }

    /// Completion busy time per read, in ns.
    pub(crate) fn complete_ns_per_io(&self) -> f64 {
        self.complete_busy.as_nanos() as f64 / self.ios.max(1) as f64
    }

    /// Naive scan time per read, in ns.
    pub(crate) fn scan_ns_per_io(&self) -> f64 {
        self.scan.as_nanos() as f64 / self.ios.max(1) as f64
    }
}

/// One submitter's shared counters.
struct Sub {
    completed: AtomicU64,
    /// In verify mode, a bit per read: set when it completes.
    seen: Box<[AtomicU64]>,
}

/// What one submitter did.
#[derive(Default)]
struct Submitted {
    submitted: u64,
    busy: Duration,
    retries: u64,
    /// Its completions, when they are inline.
    done: Done,
}

/// Spins a while, yielding now and then in case the thread it waits for is not running.
fn idle(spins: &mut u32) {
    *spins = spins.wrapping_add(1);
    if *spins % 256 == 0 {
        thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

/// What one completion thread (or inline submitter) measured.
#[derive(Default)]
struct Done {
    busy: Duration,
    scan: Duration,
    errors: u64,
    duplicates: u64,
    latencies: Vec<u32>,
    /// The submitter of each read of the batch being ended.
    ended: Vec<usize>,
}

impl Rig {
    /// A host laid out for `mode` with one volume.
    pub(crate) fn new(mode: Mode, cfg: &Config) -> Self {
        let hctxs = if mode == Mode::Single { 1 } else { cfg.hctxs };
        let builder = match mode {
            Mode::PerHctx => TagSet::builder((cfg.depth / hctxs).max(1)).hw_queues(hctxs),
            Mode::Single => TagSet::builder(cfg.depth).hw_queues(1),
            Mode::Shared | Mode::Naive => TagSet::builder(cfg.depth)
                .hw_queues(hctxs)
                .flags(TagSetFlags::SHARED_HOST_TAGS),
        };
        let host =
            Host::new(builder, StdPlatform::with_cpus(CPUS), Hba::new(cfg)).expect("a valid host");
        let mut limits = QueueLimits::new(CAPACITY);
        limits.chunk_sectors = STRIPE_SECTORS as u32;
        let queue = host
            .add_queue(QueueConfig::new(limits))
            .expect("a valid volume");
        Self {
            mode,
            cfg: cfg.clone(),
            host,
            queue,
        }
    }

    /// Nothing in flight, queued or held; every budget unit back.
    pub(crate) fn is_idle(&self) -> bool {
        let q = &self.queue;
        (0..q.nr_hw_queues()).all(|h| !q.has_work(h))
            && self.host.set().busy() == 0
            && self.host.in_driver() == 0
            && q.usage() == 0
            && self.host.driver().pending() == 0
            && self.host.driver().budget_left() == self.cfg.budget
    }

    /// Runs `ios` reads (split over the submitters) to completion.
    pub(crate) fn run(&self, ios: u64) -> Stats {
        let cfg = &self.cfg;
        let nsub = cfg.submitters.max(1);
        let ncomp = cfg.completers;
        let quota = |sid: usize| ios / nsub as u64 + u64::from((sid as u64) < ios % nsub as u64);
        let subs: Vec<Sub> = (0..nsub)
            .map(|sid| Sub {
                completed: AtomicU64::new(0),
                seen: if cfg.verify {
                    (0..quota(sid).div_ceil(64))
                        .map(|_| AtomicU64::new(0))
                        .collect()
                } else {
                    Box::new([])
                },
            })
            .collect();
        let completed = AtomicU64::new(0);
        let ready = AtomicUsize::new(0);
        let go = AtomicBool::new(false);
        let epoch = Instant::now();
        let total_threads = nsub + ncomp;
        let (sub_results, done_results) = thread::scope(|s| {
            let submitters: Vec<_> = (0..nsub)
                .map(|sid| {
                    let (subs, ready, go, completed) = (&subs, &ready, &go, &completed);
                    s.spawn(move || {
                        self.submitter(sid, quota(sid), subs, completed, ready, go, epoch)
                    })
                })
                .collect();
            let completers: Vec<_> = (0..ncomp)
                .map(|cid| {
                    let (subs, ready, go, completed) = (&subs, &ready, &go, &completed);
                    s.spawn(move || self.completer(cid, ios, subs, completed, ready, go, epoch))
                })
                .collect();
            while ready.load(Ordering::Acquire) < total_threads {
                thread::yield_now();
            }
            let start = Instant::now();
            go.store(true, Ordering::Release);
            let subs: Vec<_> = submitters
                .into_iter()
                .map(|h| h.join().expect("a submitter"))
                .collect();
            let done: Vec<_> = completers
                .into_iter()
                .map(|h| h.join().expect("a completer"))
                .collect();
            (subs, (done, start.elapsed()))
        });
        let (done, wall) = done_results;
        let mut st = Stats {
            ios: completed.load(Ordering::Acquire),
            wall,
            ..Stats::default()
        };
        let mut all_done = done;
        for sub in sub_results {
            st.submitted += sub.submitted;
            st.submit_busy += sub.busy;
            st.submit_retries += sub.retries;
            all_done.push(sub.done);
        }
        let mut lat = Vec::new();
        for d in all_done {
            st.complete_busy += d.busy;
            st.scan += d.scan;
            st.errors += d.errors;
            st.duplicates += d.duplicates;
            lat.extend(d.latencies);
        }
        if cfg.verify {
            for (sid, sub) in subs.iter().enumerate() {
                let n = quota(sid);
                let seen: u64 = sub
                    .seen
                    .iter()
                    .map(|w| u64::from(w.load(Ordering::Relaxed).count_ones()))
                    .sum();
                st.lost += n - seen.min(n);
                if sub.completed.load(Ordering::Acquire) != n {
                    st.errors += 1;
                }
            }
            st.errors += st.lost;
            if st.ios != ios || st.submitted != ios {
                st.errors += 1;
            }
        }
        st.rounds = 1;
        st.median_iops = st.ios as f64 / st.wall.as_secs_f64().max(1e-9);
        lat.sort_unstable();
        let pct = |p: f64| {
            lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
                .map_or(0, |&v| u64::from(v))
        };
        st.p50_ns = pct(0.50);
        st.p99_ns = pct(0.99);
        st
    }

    /// The CPU slot of submitter `sid`: spread over the slots, so over the hardware queues.
    fn submitter_cpu(&self, sid: usize) -> usize {
        sid * CPUS / self.cfg.submitters.max(1)
    }

    /// Keeps `iodepth` reads in flight until `quota` were submitted and, when the
    /// completions are inline (no completion threads), until they all completed.
    #[allow(clippy::too_many_arguments)]
    fn submitter(
        &self,
        sid: usize,
        quota: u64,
        subs: &[Sub],
        completed: &AtomicU64,
        ready: &AtomicUsize,
        go: &AtomicBool,
        epoch: Instant,
    ) -> Submitted {
        let cpu = self.submitter_cpu(sid);
        self.queue.platform().pin_current_thread(cpu);
        let sub = &subs[sid];
        // Inline: this thread is also the interrupt of its hardware queue's reply queue.
        let inline = self.cfg.completers == 0;
        let mine = {
            let (_, hctx) = self.queue.maps().select(cpu, Op::Read, BioFlags::empty());
            [hctx % self.host.driver().replies.len()]
        };
        let mut out = Submitted {
            done: Done {
                latencies: Vec::with_capacity(if inline { quota as usize + 1024 } else { 0 }),
                ..Done::default()
            },
            ..Submitted::default()
        };
        let mut batch: Vec<Rq> = Vec::with_capacity(if inline { self.cfg.depth } else { 0 });
        ready.fetch_add(1, Ordering::AcqRel);
        while !go.load(Ordering::Acquire) {
            std::hint::spin_loop();
        }
        let iodepth = self.cfg.iodepth as u64;
        let mut spins = 0u32;
        // Waits for a completion after `seen`: reaping the reply queue when inline.
        let mut wait = |seen: u64, out: &mut Submitted| {
            while sub.completed.load(Ordering::Acquire) == seen {
                if !inline
                    || self.reap(&mine, subs, completed, epoch, &mut out.done, &mut batch) == 0
                {
                    idle(&mut spins);
                }
            }
        };
        while out.submitted < quota {
            let seq = out.submitted;
            let seen = sub.completed.load(Ordering::Acquire);
            if seq - seen >= iodepth {
                wait(seen, &mut out);
                continue;
            }
            let t0 = Instant::now();
            let bio = Bio::new(
                Op::Read,
                sector_of(self.cfg.seed, sid as u64, seq),
                IO_SECTORS,
            )
            .private(((sid as u64) << SEQ_BITS) | seq)
            .payload(t0.duration_since(epoch).as_nanos() as u64);
            let took = self.queue.submit(bio).is_ok();
            out.busy += t0.elapsed();
            if took {
                out.submitted += 1;
            } else {
                // No tag free on this hardware queue: wait for one of ours to complete, as
                // a submitter sleeping on the tag wait queue would, then try again.
                out.retries += 1;
                wait(seen, &mut out);
            }
        }
        while inline && sub.completed.load(Ordering::Acquire) < quota {
            let seen = sub.completed.load(Ordering::Acquire);
            wait(seen, &mut out);
        }
        out
    }

    /// Ends what is due on reply queues `cid`, `cid + completers`, ... until `ios` reads
    /// completed in all.
    #[allow(clippy::too_many_arguments)]
    fn completer(
        &self,
        cid: usize,
        ios: u64,
        subs: &[Sub],
        completed: &AtomicU64,
        ready: &AtomicUsize,
        go: &AtomicBool,
        epoch: Instant,
    ) -> Done {
        let ncomp = self.cfg.completers.max(1);
        // Completion threads sit on the last slots, away from the submitters.
        self.queue
            .platform()
            .pin_current_thread(CPUS - 1 - (cid % CPUS));
        ready.fetch_add(1, Ordering::AcqRel);
        while !go.load(Ordering::Acquire) {
            std::hint::spin_loop();
        }
        let mut done = Done {
            latencies: Vec::with_capacity((ios / ncomp as u64 + 1024) as usize),
            ..Done::default()
        };
        let mut batch: Vec<Rq> = Vec::with_capacity(self.cfg.depth);
        let mut spins = 0u32;
        let mine: Vec<usize> = (cid..self.host.driver().replies.len())
            .step_by(ncomp)
            .collect();
        while completed.load(Ordering::Acquire) < ios {
            if self.reap(&mine, subs, completed, epoch, &mut done, &mut batch) == 0 {
                idle(&mut spins);
            }
        }
        done
    }

    /// One pass over the reply queues `mine`: ends every command due, in one batch, and
    /// returns how many reads that ended (zero when none was due).
    fn reap(
        &self,
        mine: &[usize],
        subs: &[Sub],
        completed: &AtomicU64,
        epoch: Instant,
        done: &mut Done,
        batch: &mut Vec<Rq>,
    ) -> u64 {
        use blkmq_core::Platform;
        let driver = self.host.driver();
        let queue = &*self.queue;
        let now_ns = if self.cfg.latency_ns == 0 {
            0
        } else {
            queue.platform().now_ns()
        };
        for &r in mine {
            let mut reply = lock(&driver.replies[r]);
            while reply.front().is_some_and(|c| c.due_ns <= now_ns) {
                if let Some(c) = reply.pop_front() {
                    batch.push(c.rq);
                }
            }
        }
        if batch.is_empty() {
            return 0;
        }
        let t0 = Instant::now();
        let at = t0.duration_since(epoch).as_nanos() as u64;
        let requests = batch.len();
        for rq in batch.iter() {
            self.account(rq, subs, at, done);
        }
        let n = done.ended.len() as u64;
        queue.end_requests(batch.drain(..).map(|rq| (rq, Status::Ok)));
        if self.mode == Mode::Naive {
            // What `blk_mq_run_hw_queues()` from every `scsi_end_request()` costs: each
            // completion asks every hardware queue whether it has work.
            let s0 = Instant::now();
            for _ in 0..requests {
                for h in 0..queue.nr_hw_queues() {
                    if queue.has_work(h) {
                        queue.run_hw_queue(h);
                    }
                }
            }
            done.scan += s0.elapsed();
        }
        // Counted once ended: the submitter's next read finds the tag free.
        for sid in done.ended.drain(..) {
            subs[sid].completed.fetch_add(1, Ordering::AcqRel);
        }
        completed.fetch_add(n, Ordering::AcqRel);
        done.busy += t0.elapsed();
        n
    }

    /// Checks one completing request and counts it against its submitter.
    fn account(&self, rq: &Rq, subs: &[Sub], at_ns: u64, done: &mut Done) {
        let verify = self.cfg.verify;
        let mut data = 0u64;
        self.queue.for_each_bio(rq, |bio| {
            let sid = (bio.private >> SEQ_BITS) as usize;
            let seq = bio.private & ((1 << SEQ_BITS) - 1);
            done.latencies
                .push(at_ns.saturating_sub(bio.payload).min(u64::from(u32::MAX)) as u32);
            let Some(sub) = subs.get(sid) else {
                done.errors += 1;
                return;
            };
            if verify {
                data = data.wrapping_add(data_of_bio(bio.sector));
                if bio.sector != sector_of(self.cfg.seed, sid as u64, seq) {
                    done.errors += 1;
                }
                let bit = 1u64 << (seq % 64);
                match sub.seen.get((seq / 64) as usize) {
                    Some(w) if w.fetch_or(bit, Ordering::Relaxed) & bit != 0 => {
                        done.duplicates += 1;
                        done.errors += 1;
                    }
                    Some(_) => {}
                    None => done.errors += 1,
                }
            }
            done.ended.push(sid);
        });
        if verify {
            let Some(cmd) = self.queue.request(rq).map(|r| r.payload()) else {
                done.errors += 1;
                return;
            };
            let sector = self.queue.io(rq).map_or(u64::MAX, |io| io.sector());
            if cmd.data.load(Ordering::Relaxed) != data
                || cmd.member.load(Ordering::Relaxed) != stripe(sector).0
            {
                done.errors += 1;
            }
        }
    }
}

/// The done-when targets, each with its measured ratio and whether it passes.
pub(crate) fn targets(results: &[(Mode, Stats)]) -> Vec<(String, f64, bool)> {
    let get = |m: Mode| results.iter().find(|(r, _)| *r == m).map(|(_, s)| s);
    let mut out = Vec::new();
    if let (Some(single), Some(shared)) = (get(Mode::Single), get(Mode::Shared)) {
        let r = shared.iops() / single.iops();
        out.push((
            "shared IOPS / single IOPS >= 0.97".to_string(),
            r,
            r >= 0.97,
        ));
        let c = shared.complete_ns_per_io() / single.complete_ns_per_io();
        out.push((
            "shared completion CPU per I/O / single <= 1.10".to_string(),
            c,
            c <= 1.10,
        ));
    }
    if let (Some(single), Some(naive)) = (get(Mode::Single), get(Mode::Naive)) {
        let r = naive.iops() / single.iops();
        out.push(("naive IOPS / single IOPS <= 0.90".to_string(), r, r <= 0.90));
    }
    out
}
