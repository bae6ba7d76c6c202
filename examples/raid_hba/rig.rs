//! The closed-loop load that drives the HBA: a [`Rig`] is a host laid out for one
//! [`Mode`] with its RAID-0 volume, and [`Rig::run`] keeps `iodepth` 4 KiB random reads in
//! flight from each submitter thread until the run's reads are done.
//!
//! Completion threads stand in for the reply-queue interrupts: each takes what is due on
//! its reply queues ([`Hba::take_due`]) and ends it in one batch. With no completion
//! threads, each submitter reaps the reply queue of its own hardware queue while it waits,
//! as an interrupt on the submitting CPU would. Every completion is checked against what
//! was submitted (with `verify`, the data and the member too) and timed.
//!
//! With `verify`, each run first writes the volume's first [`VERIFY_SECTORS`] with a
//! pattern of its own ([`pattern`]), through 256 KiB bios whose data is a table of
//! scattered 16 KiB buffers (each bio split at the strips, each piece to its member); its
//! reads then fall in that range, each into a 4 KiB buffer of its submitter's, and the
//! completion compares the bytes with the pattern. Without `verify`, bios name no buffer
//! and the members move no bytes: the per-read cost measured is the block layer's.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::thread;
use std::time::{Duration, Instant};

use blkmq_core::{
    Bio, BioFlags, Host, Op, QueueConfig, QueueLimits, RequestQueue, Rq, SECTOR_SIZE, Segment,
    Status, StdPlatform, TagSet, TagSetFlags,
};

use super::driver::{
    CAPACITY, Hba, IO_SECTORS, STRIPE_SECTORS, VERIFY_SECTORS, mix, pattern, stripe,
};
use super::setup::{Config, Mode};
use super::stats::Stats;

/// CPU slots of the platform: the hardware queues are spread over them.
pub(crate) const CPUS: usize = 128;

/// The volume sector of read `seq` of submitter `sid`: 4 KiB aligned, anywhere in the
/// first `span` sectors.
pub(crate) fn sector_of(seed: u64, sid: u64, seq: u64, span: u64) -> u64 {
    let slots = span / IO_SECTORS as u64;
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
    /// Verify runs so far: each writes a pattern of its own.
    generation: AtomicU64,
    /// In verify mode, what the volume's first `VERIFY_SECTORS` hold (the last run's
    /// pattern).
    expected: RwLock<Vec<u8>>,
}

/// Bytes of one read.
const IO_BYTES: usize = IO_SECTORS as usize * SECTOR_SIZE as usize;

/// A submitter's read buffers in verify mode: one 4 KiB slot per read in flight, owned by
/// that read from its submission until its completion has checked the bytes.
struct Buffers {
    /// The slots, from byte `skip` on: page-aligned, as a device's DMA wants its buffers
    /// (the queue refuses data off its `dma_alignment`).
    bytes: Box<[UnsafeCell<u8>]>,
    skip: usize,
    nr: usize,
    /// A bit per slot: set while a read owns it.
    busy: Box<[AtomicU64]>,
}

// SAFETY: a slot's bytes are written (by the driver, in `queue_rq`) and read (by the
// completion) only by whoever holds the read that owns the slot, one at a time, the
// handover ordered by the reply queue's lock and the `busy` bit's release and acquire.
unsafe impl Sync for Buffers {}

impl Buffers {
    fn new(slots: usize) -> Self {
        const PAGE: usize = 4096;
        let bytes: Box<[UnsafeCell<u8>]> = (0..slots * IO_BYTES + PAGE - 1)
            .map(|_| UnsafeCell::new(0))
            .collect();
        let skip = (PAGE - bytes.as_ptr() as usize % PAGE) % PAGE;
        Self {
            bytes,
            skip,
            nr: slots,
            busy: (0..slots.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn slots(&self) -> usize {
        self.nr
    }

    /// A free slot, now owned; `None` when every slot is owned.
    fn take(&self) -> Option<usize> {
        for (w, word) in self.busy.iter().enumerate() {
            let bits = word.load(Ordering::Acquire);
            let free = !bits;
            if free != 0 {
                let slot = w * 64 + free.trailing_zeros() as usize;
                if slot < self.slots() {
                    word.fetch_or(1 << (slot % 64), Ordering::AcqRel);
                    return Some(slot);
                }
            }
        }
        None
    }

    /// Gives slot `slot` back.
    fn give(&self, slot: usize) {
        self.busy[slot / 64].fetch_and(!(1 << (slot % 64)), Ordering::Release);
    }

    /// The address of slot `slot`'s first byte.
    fn addr(&self, slot: usize) -> u64 {
        // `UnsafeCell<u8>` is a `u8`; a pointer from the whole slice may reach any slot.
        UnsafeCell::raw_get(self.bytes.as_ptr()) as u64 + (self.skip + slot * IO_BYTES) as u64
    }

    /// The slot whose first byte is at `addr`.
    fn slot_of(&self, addr: u64) -> Option<usize> {
        let off = addr.checked_sub(self.addr(0))? as usize;
        (off % IO_BYTES == 0 && off / IO_BYTES < self.slots()).then_some(off / IO_BYTES)
    }

    /// Whether slot `slot` holds `want`. Only for the holder of the read that owns the slot,
    /// once the driver has moved its data.
    fn holds(&self, slot: usize, want: &[u8]) -> bool {
        let start = self.addr(slot) as usize as *const u8;
        // SAFETY: the caller owns the slot (its read's completion), whose 4 KiB lie inside
        // `bytes`; the driver's copy into it happened before the request reached the
        // reply queue the caller took it from, and nothing else writes it now.
        let got = unsafe { std::slice::from_raw_parts(start, IO_BYTES) };
        got == want
    }
}

/// One submitter's shared counters.
struct Sub {
    completed: AtomicU64,
    /// In verify mode, a bit per read: set when it completes.
    seen: Box<[AtomicU64]>,
    /// In verify mode, its read buffers.
    bufs: Buffers,
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
            generation: AtomicU64::new(0),
            expected: RwLock::new(Vec::new()),
        }
    }

    /// The sectors reads fall in: the whole volume, or in verify mode what was written.
    fn span(&self) -> u64 {
        if self.cfg.verify {
            VERIFY_SECTORS
        } else {
            CAPACITY
        }
    }

    /// Writes the volume's first `VERIFY_SECTORS` with the next generation's pattern,
    /// 256 KiB at a time, each bio's data a table of 16 KiB pieces laid back to front in
    /// one buffer (so none is contiguous with the next); completions are taken here.
    fn fill(&self) {
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let mut expected = vec![0u8; (VERIFY_SECTORS * SECTOR_SIZE) as usize];
        pattern(0, generation, &mut expected);
        const BIO: usize = 256 << 10;
        const PIECE: usize = 16 << 10;
        // Page-aligned, as a device's DMA wants it (the queue refuses data off its
        // `dma_alignment`).
        let mut space = vec![0u8; BIO + 4095];
        let skip = (4096 - space.as_ptr() as usize % 4096) % 4096;
        let buf = &mut space[skip..skip + BIO];
        for start in (0..expected.len()).step_by(BIO) {
            // Piece `i` of the bio (disk order) sits at `BIO - (i + 1) * PIECE`.
            for i in 0..BIO / PIECE {
                let at = BIO - (i + 1) * PIECE;
                let from = start + i * PIECE;
                buf[at..at + PIECE].copy_from_slice(&expected[from..from + PIECE]);
            }
            // `Vec::as_mut_ptr` makes no reference: the addresses stay valid until `buf`
            // is next borrowed, after the bio ended.
            let base = buf.as_mut_ptr() as u64;
            let table: Vec<Segment> = (0..BIO / PIECE)
                .map(|i| Segment::new(base + (BIO - (i + 1) * PIECE) as u64, PIECE as u32))
                .collect();
            let sector = start as u64 / SECTOR_SIZE;
            let bio = Bio::new(Op::Write, sector, (BIO as u64 / SECTOR_SIZE) as u32);
            // SAFETY: the table (and the buffer it names) stays as it is until `drain`
            // below has seen the queue empty, i.e. until the bio has ended.
            let mut next = Some(unsafe { bio.segments_raw(&table) });
            while let Some(bio) = next.take() {
                if let Err(back) = self.queue.submit(bio) {
                    next = Some(back);
                }
                self.drain();
            }
        }
        *self.expected.write().unwrap_or_else(|e| e.into_inner()) = expected;
    }

    /// In verify mode, the sectors of the written range that are not on the member, at
    /// the member sector, RAID-0 chunking puts them, holding the last run's pattern.
    pub(crate) fn members_wrong(&self) -> u64 {
        let generation = self.generation.load(Ordering::Relaxed);
        let (mut want, mut got) = ([0u8; SECTOR_SIZE as usize], [0u8; SECTOR_SIZE as usize]);
        let driver = self.host.driver();
        (0..VERIFY_SECTORS)
            .filter(|&sector| {
                let (member, member_sector) = stripe(sector);
                pattern(sector, generation, &mut want);
                !driver.member_data(member, member_sector, &mut got) || got != want
            })
            .count() as u64
    }

    /// Ends what the members complete until nothing is left in the queue.
    fn drain(&self) {
        use blkmq_core::Platform;
        let driver = self.host.driver();
        let mut batch = Vec::new();
        while self.queue.usage() > 0 || driver.pending() > 0 {
            let now_ns = if self.cfg.latency_ns == 0 {
                0
            } else {
                self.queue.platform().now_ns()
            };
            for r in 0..driver.reply_queues() {
                driver.take_due(r, now_ns, &mut batch);
            }
            if batch.is_empty() {
                thread::yield_now();
                continue;
            }
            let ended = self
                .queue
                .end_requests(batch.drain(..).map(|rq| (rq, Status::Ok)));
            ended.expect("the volume's own requests");
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
        let data_errors = self.host.driver().data_errors();
        if cfg.verify {
            self.fill();
        }
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
                bufs: Buffers::new(if cfg.verify { cfg.iodepth } else { 0 }),
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
            st.errors += self.host.driver().data_errors() - data_errors;
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
            let slot = if self.cfg.verify {
                // A read in flight holds each slot; fewer than `iodepth` are.
                let Some(slot) = sub.bufs.take() else {
                    wait(seen, &mut out);
                    continue;
                };
                Some(slot)
            } else {
                None
            };
            let t0 = Instant::now();
            let mut bio = Bio::new(
                Op::Read,
                sector_of(self.cfg.seed, sid as u64, seq, self.span()),
                IO_SECTORS,
            )
            .private(((sid as u64) << SEQ_BITS) | seq)
            .payload(t0.duration_since(epoch).as_nanos() as u64);
            if let Some(slot) = slot {
                bio = bio.buffer(sub.bufs.addr(slot));
            }
            let took = self.queue.submit(bio).is_ok();
            out.busy += t0.elapsed();
            if took {
                out.submitted += 1;
            } else {
                if let Some(slot) = slot {
                    sub.bufs.give(slot);
                }
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
        let expected = verify.then(|| self.expected.read().unwrap_or_else(|e| e.into_inner()));
        self.queue.for_each_bio(rq, |bio| {
            let sid = (bio.private >> SEQ_BITS) as usize;
            let seq = bio.private & ((1 << SEQ_BITS) - 1);
            done.latencies
                .push(at_ns.saturating_sub(bio.payload).min(u64::from(u32::MAX)) as u32);
            let Some(sub) = subs.get(sid) else {
                done.errors += 1;
                return;
            };
            if let Some(expected) = &expected {
                if bio.sector != sector_of(self.cfg.seed, sid as u64, seq, self.span()) {
                    done.errors += 1;
                }
                // The bytes the member returned, against what the run wrote there.
                let at = (bio.sector * SECTOR_SIZE) as usize;
                let want = expected.get(at..at + IO_BYTES);
                match bio.segs().next().and_then(|seg| sub.bufs.slot_of(seg.addr)) {
                    Some(slot) => {
                        if want.is_none_or(|want| !sub.bufs.holds(slot, want)) {
                            done.errors += 1;
                        }
                        sub.bufs.give(slot);
                    }
                    None => done.errors += 1,
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
            if cmd.member.load(Ordering::Relaxed) != stripe(sector).0 {
                done.errors += 1;
            }
        }
    }
}
