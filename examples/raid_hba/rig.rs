//! The closed-loop load that drives the HBA: a [`Rig`] is a host laid out for one
//! [`Mode`] with its RAID-0 volume, and [`Rig::run`] keeps `iodepth` 4 KiB random reads in
//! flight from each submitter thread until the run's reads are done.
//!
//! Completion threads stand in for the reply-queue interrupts: each takes what is due on
//! its reply queues ([`Hba::take_due`]) and ends it in one batch. With no completion
//! threads, each submitter reaps the reply queue of its own hardware queue while it waits,
//! as an interrupt on the submitting CPU would. Every completion is checked against what
//! was submitted (with `verify`, the data and the member too) and timed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use blkmq_core::{
    Bio, BioFlags, Host, Op, QueueConfig, QueueLimits, RequestQueue, Rq, Status, StdPlatform,
    TagSet, TagSetFlags,
};

use super::driver::{CAPACITY, Hba, IO_SECTORS, STRIPE_SECTORS, data_of_bio, mix, stripe};
use super::setup::{Config, Mode};
use super::stats::Stats;

/// CPU slots of the platform: the hardware queues are spread over them.
pub(crate) const CPUS: usize = 128;

/// The volume sector of read `seq` of submitter `sid`: 4 KiB aligned, anywhere.
pub(crate) fn sector_of(seed: u64, sid: u64, seq: u64) -> u64 {
    let slots = CAPACITY / IO_SECTORS as u64;
    (mix(seed ^ mix((sid << 48) | seq)) % slots) * IO_SECTORS as u64
}

/// Bits of a bio's `private` holding the read's sequence number (the rest: the submitter).
const SEQ_BITS: u32 = 48;

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
            [hctx % self.host.driver().reply_queues()]
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
        let mine: Vec<usize> = (cid..self.host.driver().reply_queues())
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
            driver.take_due(r, now_ns, batch);
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
        queue
            .end_requests(batch.drain(..).map(|rq| (rq, Status::Ok)))
            .unwrap();
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
