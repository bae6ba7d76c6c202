//! A model test of the request queue against a mock driver.
//!
//! Proptest generates a configuration — one to four hardware queues, per-queue or shared host
//! tags, blocking or not, a depth of 2 to 16, a reserved tag or none, one to four CPUs, an
//! optional device budget, a driver with or without `queue_rqs`, and one or two request queues
//! on one [`Host`], each with or without the test FIFO elevator (wrapped to check the calls it
//! gets) and with small limits so that bios split and merge — and a sequence of operations:
//! submissions (plain, sequential streams, through a [`Plug`], `NOWAIT`), resubmissions of
//! what the queue handed back, out-of-order completions (single or batched, some with an
//! error), requeues, requeue-list kicks, clock advances with timeout checks, quiesce and
//! unquiesce of a queue or the host, freezes, stopped hardware queues, CPU changes, runs of
//! kicked queues, and a driver that accepts, pushes back with [`Status::Resource`] /
//! [`Status::DevResource`], rejects with an error, or runs out of budget.
//!
//! Checked after every operation:
//! * every bio ends exactly once, with the status the model expects: the one
//!   [`QueueLimits::check`] gives a bad bio, [`Status::Again`] for one its submitter gave up
//!   on, else the first error of the requests that carried it (all bios of a merged request
//!   end with its status; a split parent ends with the first error of its pieces), else
//!   [`Status::Ok`]; the pieces that ended tile the bio exactly, with the right offsets;
//! * what the queue hands back is the bio itself or the unsubmitted tail of it;
//! * every request the driver gets is started, on its own hardware queue, with the deadline
//!   the set's timeout gives it, contiguous, within the queue's limits, not already held, and
//!   never while its queue is quiesced (or, without an elevator, its hardware queue stopped);
//!   without an elevator, a request handed back for a resource is the next one offered on
//!   its hardware queue;
//! * the host's in-driver count is what the driver holds, the budget taken per queue is what
//!   the driver holds of it (never given back twice), every request issued with `last ==
//!   false` is committed, [`Driver::complete`] runs once per ended request;
//! * the elevator prepares each request (but flushes) once, holds it at most once, and is
//!   told of its completion, requeue and end only while it is prepared;
//! * [`RequestQueue::check_timeouts`] fires exactly for the held requests past their deadline
//!   and not yet handled;
//! * nothing is stranded: with nothing in the driver, no hardware queue that may dispatch has
//!   work unless a kick is pending for it.
//!
//! At the end everything is let go (unquiesced, unfrozen, started, the driver accepting) and
//! drained — kicked queues run, requeue lists kicked, everything held completed, handed-back
//! bios resubmitted — checking after each step that nothing is stranded, until nothing is left;
//! then no tag, usage, budget, bio slot, scheduler tag or in-driver request may remain and
//! every bio must have ended.
//!
//! Two checks have switches ([`COMMIT_PER_HCTX`], [`FLUSH_REQUEUE_KEPT_FROM_ELEVATOR`]),
//! both on: each once caught a bug, and a test at the end keeps its reproducer.

// The queue runs real atomics, which loom's only work inside `loom::model`.
#![cfg(not(loom))]

#[path = "common/fifo.rs"]
mod fifo;

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use blkmq_core::{
    Bio, BioFlags, Driver, Elevator, ElvCx, HctxCx, Host, IoStats, Op, OpGroup, Platform, Plug,
    QueueConfig, QueueLimits, Rejected, Request, RequestInit, RequestQueue, Rq, RqBatch, RqIo,
    RqState, Status, TagSet, TagSetFlags, TimeoutAction,
};
use proptest::prelude::*;

/// The device's size in sectors: small, so that random bios touch and merge.
const CAPACITY: u64 = 256;
/// Requests time out this long after they start.
const TIMEOUT_NS: u64 = 1_000;
/// Operations per sequence, at most.
const MAX_OPS: usize = 150;
/// Rounds of the final drain before it counts as stuck.
const MAX_DRAIN_ROUNDS: usize = 1_000;

/// Whether the driver checks the doorbell per hardware queue: every request accepted with
/// `last == false` on a hardware queue must be followed, within the same dispatch, by a
/// `last` request or a `commit_rqs` on that same hardware queue. Off: per request queue (any
/// hardware queue's `last` or commit counts).
///
/// On since a fix; it caught this bug: with an elevator, a request that a runner of another
/// hardware queue dispatched and had to give back is put on the runner's dispatch list
/// (`dispatch_elevator` -> `give_up` -> `put_back`), so `issue_batch` issues requests of
/// several hardware queues in one batch while it computes `last` and sends `commit_rqs` for
/// the runner's hardware queue only: a request issued with `last == false` on another
/// hardware queue is never committed. See `commit_reaches_the_hctx_the_request_went_to`.
const COMMIT_PER_HCTX: bool = true;

/// Whether the checking elevator insists on not being told of a requeued flush, which it
/// never prepared nor holds (the queue keeps flushes from the elevator everywhere else, as
/// Linux does). Off: such a call is let pass.
///
/// On since a fix; it caught this bug: `RequestQueue::requeue_request` calls
/// `Elevator::requeue_request` for every request of an elevated queue, flushes included,
/// while submission, insertion and completion leave flushes out; an elevator that keeps
/// per-request data by key then reads the stale data of the key's previous request. See
/// `elevator_is_not_told_of_a_requeued_flush`.
const FLUSH_REQUEUE_KEPT_FROM_ELEVATOR: bool = true;

/// Which of the checks held back by the switches above to make.
#[derive(Clone, Copy, Debug)]
struct Strict {
    commit_per_hctx: bool,
    flush_requeue: bool,
}

/// The checks the model test makes.
const STRICT: Strict = Strict {
    commit_per_hctx: COMMIT_PER_HCTX,
    flush_requeue: FLUSH_REQUEUE_KEPT_FROM_ELEVATOR,
};

// ----- the platform -----

/// A platform the test drives: a CPU it chooses, a clock it advances, kicks it records.
struct ModelPlatform {
    nr_cpus: usize,
    cpu: AtomicUsize,
    clock: AtomicU64,
    /// The hardware queues kicked (a bit each) since the test last ran the kicked queues.
    kicked: AtomicU64,
}

impl ModelPlatform {
    fn new(nr_cpus: usize) -> Self {
        Self {
            nr_cpus,
            cpu: AtomicUsize::new(0),
            clock: AtomicU64::new(0),
            kicked: AtomicU64::new(0),
        }
    }

    fn kick_pending(&self) -> bool {
        self.kicked.load(Ordering::SeqCst) != 0
    }

    /// Whether hardware queue `hctx` (of some request queue) was kicked.
    fn is_kicked(&self, hctx: usize) -> bool {
        self.kicked.load(Ordering::SeqCst) & (1 << hctx) != 0
    }

    /// Clears the pending kicks, returning whether there was one.
    fn take_kick(&self) -> bool {
        self.kicked.swap(0, Ordering::SeqCst) != 0
    }
}

impl Platform for ModelPlatform {
    type RawMutex = spin::mutex::SpinMutex<()>;

    fn nr_cpus(&self) -> usize {
        self.nr_cpus
    }

    fn current_cpu(&self) -> usize {
        self.cpu.load(Ordering::SeqCst)
    }

    fn now_ns(&self) -> u64 {
        self.clock.load(Ordering::SeqCst)
    }

    fn kick(&self, hctx: usize) {
        self.kicked.fetch_or(1 << hctx, Ordering::SeqCst);
    }
}

// ----- what happened, in order -----

/// Something the model must account for, in the order it happened.
#[derive(Clone, Copy, Debug)]
enum Event {
    /// A piece of bio `id` ended inside a request (the driver rejected the request with an
    /// error, or the test ended it).
    Piece {
        id: usize,
        status: Status,
        op: Op,
        sector: u64,
        sectors: u32,
        offset: u32,
    },
    /// Bio `id`'s `end_io` ran.
    End { id: usize, status: Status },
    /// A request of queue `queue` (the model's index) and hardware queue `hctx` ends (the
    /// driver rejected it with an error, or the test ended it): its operation, sectors and
    /// bios, for the accounting check.
    Request {
        queue: usize,
        hctx: usize,
        op: Op,
        sectors: u64,
        bios: u64,
    },
}

thread_local! {
    /// The events of the running case (proptest runs a test's cases on one thread).
    static EVENTS: RefCell<Vec<Event>> = const { RefCell::new(Vec::new()) };
}

fn push_event(event: Event) {
    EVENTS.with(|events| events.borrow_mut().push(event));
}

fn take_events() -> Vec<Event> {
    EVENTS.with(|events| std::mem::take(&mut *events.borrow_mut()))
}

/// Every bio's `end_io`: its id is in `private`.
fn ended(bio: Bio, status: Status) {
    push_event(Event::End {
        id: bio.private as usize,
        status,
    });
}

/// Records a piece event for every bio of `rq`, about to end with `status`. Pieces of a split
/// bio keep its `payload`, which holds the bio's id.
fn record_pieces<D: Driver>(queue: &RequestQueue<D>, rq: &Rq, status: Status) {
    queue.for_each_bio(rq, |bio| {
        push_event(Event::Piece {
            id: bio.payload as usize,
            status,
            op: bio.op,
            sector: bio.sector,
            sectors: bio.sectors,
            offset: bio.data.pos().skip / 512,
        });
    });
}

// ----- the driver -----

/// A request the driver holds.
struct Held {
    rq: Rq,
    /// The model's index of its queue.
    queue: usize,
    hctx: usize,
    /// When it times out, as the model reckons it.
    deadline: u64,
    /// The timeout fired and the driver took it on ([`TimeoutAction::Done`]).
    timed_out: bool,
}

/// What the driver does with the next request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Accept,
    /// Hands every request back with this status ([`Status::Resource`] or
    /// [`Status::DevResource`]).
    Busy(Status),
}

struct DriverState {
    /// The addresses of the request queues, by model index.
    queues: Vec<usize>,
    elevated: Vec<bool>,
    /// Which hardware queues the test stopped, per queue.
    stopped: Vec<Vec<bool>>,
    mode: Mode,
    /// Errors to reject the next requests with, before `mode` applies.
    fail_next: VecDeque<Status>,
    held: Vec<Held>,
    budget_limit: Option<usize>,
    /// Budget units taken, per queue.
    budget: Vec<usize>,
    on_timeout: TimeoutAction,
    /// Timeouts the driver was told of, per queue.
    fired: Vec<usize>,
    /// Requests accepted with `last == false` and not yet committed, per (queue, hctx), or
    /// per (queue, 0) unless `commit_per_hctx`.
    uncommitted: BTreeMap<(usize, usize), usize>,
    commit_per_hctx: bool,
    /// Without an elevator: the request last handed back for a resource on (queue, hctx),
    /// which must be the next one offered there (it waits at the head).
    retry: BTreeMap<(usize, usize), usize>,
    /// Calls of `Driver::complete`.
    completes: usize,
    /// Requests rejected with an error (which the queue ends).
    error_rejects: usize,
    /// Broken promises seen from inside the driver.
    violations: Vec<String>,
}

impl DriverState {
    fn index_of<D: Driver>(&self, queue: &RequestQueue<D>) -> usize {
        let addr = std::ptr::from_ref(queue) as usize;
        self.queues
            .iter()
            .position(|&q| q == addr)
            .expect("a request queue the test did not make")
    }

    /// Where the driver keeps the doorbell count of `hctx` of queue `qi`.
    fn doorbell(&self, qi: usize, hctx: usize) -> (usize, usize) {
        (qi, if self.commit_per_hctx { hctx } else { 0 })
    }

    fn held_by(&self, queue: usize) -> usize {
        self.held.iter().filter(|h| h.queue == queue).count()
    }
}

/// The mock driver; `BATCH` says whether it takes flushed plugs through `queue_rqs`.
struct Mock<const BATCH: bool> {
    state: Mutex<DriverState>,
}

impl<const BATCH: bool> Mock<BATCH> {
    fn new(
        queues: usize,
        hw_queues: usize,
        budget_limit: Option<usize>,
        commit_per_hctx: bool,
    ) -> Self {
        Self {
            state: Mutex::new(DriverState {
                queues: Vec::new(),
                elevated: Vec::new(),
                stopped: vec![vec![false; hw_queues]; queues],
                mode: Mode::Accept,
                fail_next: VecDeque::new(),
                held: Vec::new(),
                budget_limit,
                budget: vec![0; queues],
                on_timeout: TimeoutAction::ResetTimer,
                fired: vec![0; queues],
                uncommitted: BTreeMap::new(),
                commit_per_hctx,
                retry: BTreeMap::new(),
                completes: 0,
                error_rejects: 0,
                violations: Vec::new(),
            }),
        }
    }

    /// The driver's state. The queue never calls the driver back while the driver is inside
    /// one of its calls, and the test never calls the queue while it holds this.
    fn state(&self) -> MutexGuard<'_, DriverState> {
        self.state
            .try_lock()
            .expect("the driver was re-entered while its state was borrowed")
    }

    /// One request offered to the driver (`queue_rq`, or an item of `queue_rqs` with
    /// `batched`).
    fn take(
        &self,
        cx: &HctxCx<'_, Self>,
        rq: Rq,
        last: bool,
        batched: bool,
    ) -> Result<(), Rejected> {
        let queue = cx.queue();
        let hctx = cx.hctx();
        let now = queue.platform().now_ns();
        let mut bios = Vec::new();
        cx.for_each_bio(&rq, |bio| bios.push(*bio));
        let mut st = self.state();
        let qi = st.index_of(queue);
        let mut bad = Vec::new();
        if queue.is_quiesced() {
            bad.push(format!("queue {qi}: a request issued while quiesced"));
        }
        if !st.elevated[qi] && st.stopped[qi][hctx] {
            bad.push(format!(
                "queue {qi}: a request issued on stopped hctx {hctx}"
            ));
        }
        match cx.request(&rq) {
            None => bad.push(format!("queue {qi}: issued a request it does not know")),
            Some(request) => {
                let addr = std::ptr::from_ref(request) as usize;
                if let Some(first) = st.retry.remove(&(qi, hctx)) {
                    if first != addr {
                        bad.push(format!(
                            "queue {qi} hctx {hctx}: another request issued before the one \
                             handed back for a resource"
                        ));
                    }
                }
                let again = st.held.iter().any(|h| {
                    h.queue == qi
                        && queue
                            .request(&h.rq)
                            .is_some_and(|r| std::ptr::eq(r, request))
                });
                if again {
                    bad.push(format!(
                        "queue {qi}: a request issued while the driver holds it"
                    ));
                }
                if request.hctx() != hctx {
                    bad.push(format!(
                        "queue {qi}: a request of hctx {} issued on hctx {hctx}",
                        request.hctx()
                    ));
                }
                if request.state() != RqState::InFlight {
                    bad.push(format!("queue {qi}: issued in state {:?}", request.state()));
                }
                if request.deadline_ns() != now + TIMEOUT_NS {
                    bad.push(format!(
                        "queue {qi}: deadline {} at {now}",
                        request.deadline_ns()
                    ));
                }
            }
        }
        match cx.io(&rq) {
            None => bad.push(format!("queue {qi}: a request without I/O")),
            Some(io) => {
                if let Err(why) = check_request(queue.limits(), io, &bios) {
                    bad.push(format!("queue {qi}: {why}: {io:?} {bios:?}"));
                }
            }
        }
        st.violations.extend(bad);
        let verdict = match st.fail_next.pop_front() {
            Some(error) => Err(error),
            None => match st.mode {
                Mode::Accept => Ok(()),
                Mode::Busy(status) => Err(status),
            },
        };
        match verdict {
            Ok(()) => {
                let doorbell = st.doorbell(qi, hctx);
                let count = st.uncommitted.entry(doorbell).or_default();
                if last || batched {
                    *count = 0;
                } else {
                    *count += 1;
                }
                st.held.push(Held {
                    rq,
                    queue: qi,
                    hctx,
                    deadline: now + TIMEOUT_NS,
                    timed_out: false,
                });
                Ok(())
            }
            Err(status) => {
                let resource = matches!(status, Status::Resource | Status::DevResource);
                if resource && !st.elevated[qi] {
                    if let Some(request) = cx.request(&rq) {
                        let addr = std::ptr::from_ref(request) as usize;
                        st.retry.insert((qi, hctx), addr);
                    }
                }
                if !resource {
                    // The queue ends it with this status.
                    st.error_rejects += 1;
                    if let Some(io) = queue.io(&rq) {
                        push_event(Event::Request {
                            queue: qi,
                            hctx,
                            op: io.op(),
                            sectors: io.sectors(),
                            bios: bios.len() as u64,
                        });
                    }
                    for bio in &bios {
                        push_event(Event::Piece {
                            id: bio.payload as usize,
                            status,
                            op: bio.op,
                            sector: bio.sector,
                            sectors: bio.sectors,
                            offset: bio.data.pos().skip / 512,
                        });
                    }
                }
                Err(Rejected { rq, status })
            }
        }
    }
}

/// Most sectors one request of `op` may hold.
fn max_for(limits: &QueueLimits, op: Op) -> u64 {
    u64::from(match op {
        Op::Discard => limits.max_discard_sectors,
        Op::WriteZeroes => limits.max_write_zeroes_sectors,
        _ => limits.max_sectors,
    })
}

/// Whether a request issued to the driver is well formed: its bios contiguous, of its
/// operation, within the device and the queue's limits.
fn check_request(limits: &QueueLimits, io: &RqIo, bios: &[Bio]) -> Result<(), String> {
    let Some(first) = bios.first() else {
        return Err("no bio".into());
    };
    if bios.len() != io.nr_bios() as usize {
        return Err(format!("{} bios, nr_bios {}", bios.len(), io.nr_bios()));
    }
    if first.sector != io.sector() {
        return Err("does not start at its first bio".into());
    }
    let mut end = first.sector;
    let mut segments = 0;
    for bio in bios {
        if bio.op != io.op() {
            return Err("bios of different operations".into());
        }
        if bio.sector != end {
            return Err("bios not contiguous".into());
        }
        end = bio.end_sector();
        segments += limits.segments(bio.op, bio.sector, bio.sectors);
    }
    if end != io.end_sector() || end - io.sector() != io.sectors() {
        return Err("sectors do not add up".into());
    }
    if bios.len() > 1 {
        let unmergeable = BioFlags::NOMERGE | BioFlags::FUA | BioFlags::PREFLUSH;
        if io.op() == Op::Flush || bios.iter().any(|b| b.flags.intersects(unmergeable)) {
            return Err("merged what may not merge".into());
        }
    }
    if io.op() == Op::Flush {
        return if io.sectors() == 0 {
            Ok(())
        } else {
            Err("a flush with data".into())
        };
    }
    if io.end_sector() > limits.capacity {
        return Err("past the capacity".into());
    }
    if io.sectors() == 0 || io.sectors() > max_for(limits, io.op()) {
        return Err("size outside the limits".into());
    }
    if limits.chunk_sectors != 0 {
        let chunk = u64::from(limits.chunk_sectors);
        if io.sector() % chunk + io.sectors() > chunk {
            return Err("crosses a chunk boundary".into());
        }
    }
    if io.segments() != segments || segments > limits.max_segments {
        return Err(format!(
            "{} segments counted, {segments} in fact",
            io.segments()
        ));
    }
    Ok(())
}

impl<const BATCH: bool> Driver for Mock<BATCH> {
    type Platform = ModelPlatform;
    type Payload = ();

    const QUEUE_RQS: bool = BATCH;

    fn init_request(&self, _init: RequestInit) {}

    fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, last: bool) -> Result<(), Rejected> {
        self.take(cx, rq, last, false)
    }

    fn commit_rqs(&self, cx: &HctxCx<'_, Self>) {
        let mut st = self.state();
        let qi = st.index_of(cx.queue());
        let doorbell = st.doorbell(qi, cx.hctx());
        st.uncommitted.insert(doorbell, 0);
    }

    fn queue_rqs(&self, cx: &HctxCx<'_, Self>, batch: &mut RqBatch<'_>) {
        while let Some(rq) = batch.next() {
            if let Err(rejected) = self.take(cx, rq, false, true) {
                batch.reject(rejected);
                return;
            }
        }
    }

    fn get_budget(&self, cx: &HctxCx<'_, Self>) -> bool {
        let mut st = self.state();
        let qi = st.index_of(cx.queue());
        if st.budget_limit.is_some_and(|limit| st.budget[qi] >= limit) {
            return false;
        }
        st.budget[qi] += 1;
        true
    }

    fn put_budget(&self, cx: &HctxCx<'_, Self>) {
        let mut st = self.state();
        let qi = st.index_of(cx.queue());
        if st.budget[qi] == 0 {
            st.violations
                .push(format!("queue {qi}: budget given back that was not taken"));
        } else {
            st.budget[qi] -= 1;
        }
    }

    fn timeout(&self, cx: &HctxCx<'_, Self>, request: &Request<()>) -> TimeoutAction {
        let queue = cx.queue();
        let now = queue.platform().now_ns();
        let mut st = self.state();
        let qi = st.index_of(queue);
        let action = st.on_timeout;
        st.fired[qi] += 1;
        let found = st.held.iter().position(|h| {
            h.queue == qi
                && queue
                    .request(&h.rq)
                    .is_some_and(|r| std::ptr::eq(r, request))
        });
        let Some(i) = found else {
            st.violations.push(format!(
                "queue {qi}: a timeout for a request the driver does not hold"
            ));
            return action;
        };
        let held = &mut st.held[i];
        let problem = if held.timed_out {
            Some("fired again after the driver took it on")
        } else if held.deadline > now {
            Some("fired before its deadline")
        } else if held.hctx != cx.hctx() {
            Some("reported on another hctx")
        } else {
            None
        };
        match action {
            TimeoutAction::Done => held.timed_out = true,
            TimeoutAction::ResetTimer => held.deadline = now + TIMEOUT_NS,
        }
        if let Some(problem) = problem {
            st.violations
                .push(format!("queue {qi}: a timeout {problem}"));
        }
        action
    }

    fn complete(&self, _cx: &HctxCx<'_, Self>, _request: &Request<()>) {
        self.state().completes += 1;
    }
}

// ----- the elevator -----

/// What [`Checked`] saw go wrong, shared with the test.
type Complaints = Arc<Mutex<Vec<String>>>;

/// The test FIFO elevator, checking the calls it gets against the requests' lives: a request
/// is prepared once (every one but a flush), inserted only while prepared and not already
/// held, finished once, and told of a completion or requeue only while prepared.
struct Checked {
    fifo: fifo::Fifo,
    /// Keys of the requests prepared and not yet finished.
    prepared: BTreeSet<usize>,
    /// Keys of the requests inserted and not yet dispatched.
    inside: BTreeSet<usize>,
    complaints: Complaints,
    /// Complain of a requeued flush too (see [`FLUSH_REQUEUE_KEPT_FROM_ELEVATOR`]).
    flush_requeue: bool,
}

impl Checked {
    fn new(complaints: Complaints, flush_requeue: bool) -> Self {
        Self {
            fifo: fifo::Fifo::new(),
            prepared: BTreeSet::new(),
            inside: BTreeSet::new(),
            complaints,
            flush_requeue,
        }
    }

    fn complain(&self, what: String) {
        self.complaints
            .lock()
            .expect("the complaints lock")
            .push(what);
    }

    fn is_flush(cx: &ElvCx<'_>, rq: &Rq) -> bool {
        cx.io(rq).is_ok_and(|io| io.op() == Op::Flush)
    }
}

impl Elevator for Checked {
    fn name(&self) -> &'static str {
        "checked-fifo"
    }

    fn depth_updated(&mut self, nr_requests: usize, nr_keys: usize) {
        self.fifo.depth_updated(nr_requests, nr_keys);
    }

    fn prepare_request(&mut self, cx: &ElvCx<'_>, rq: &mut Rq) {
        let key = cx.key(rq);
        if Self::is_flush(cx, rq) {
            self.complain(format!("elevator: flush {key} prepared"));
        }
        if !self.prepared.insert(key) {
            self.complain(format!("elevator: request {key} prepared twice"));
        }
    }

    fn insert_requests(
        &mut self,
        cx: &ElvCx<'_>,
        rqs: &mut dyn Iterator<Item = Rq>,
        at_head: bool,
    ) {
        let rqs: Vec<Rq> = rqs.collect();
        for rq in &rqs {
            let key = cx.key(rq);
            if !self.prepared.contains(&key) {
                self.complain(format!("elevator: request {key} inserted unprepared"));
            }
            if !self.inside.insert(key) {
                self.complain(format!("elevator: request {key} inserted twice"));
            }
        }
        self.fifo.insert_requests(cx, &mut rqs.into_iter(), at_head);
    }

    fn dispatch_request(&mut self, cx: &ElvCx<'_>, hctx: usize) -> Option<Rq> {
        let rq = self.fifo.dispatch_request(cx, hctx)?;
        self.inside.remove(&cx.key(&rq));
        Some(rq)
    }

    fn has_work(&self, hctx: usize) -> bool {
        self.fifo.has_work(hctx)
    }

    fn finish_request(&mut self, cx: &ElvCx<'_>, rq: &Rq) {
        let key = cx.key(rq);
        if !self.prepared.remove(&key) {
            self.complain(format!("elevator: request {key} finished unprepared"));
        }
        if self.inside.contains(&key) {
            self.complain(format!(
                "elevator: request {key} finished while queued in it"
            ));
        }
    }

    fn completed_request(&mut self, cx: &ElvCx<'_>, rq: &Rq) {
        let key = cx.key(rq);
        if !self.prepared.contains(&key) {
            self.complain(format!("elevator: request {key} completed unprepared"));
        }
    }

    fn requeue_request(&mut self, cx: &ElvCx<'_>, rq: &Rq) {
        let key = cx.key(rq);
        let flush = Self::is_flush(cx, rq);
        if !self.prepared.contains(&key) && (self.flush_requeue || !flush) {
            let what = if flush { "flush" } else { "request" };
            self.complain(format!("elevator: {what} {key} requeued unprepared"));
        }
    }
}

// ----- what proptest generates -----

/// One request queue of the host.
#[derive(Clone, Debug)]
struct QueueSpec {
    elevator: bool,
    /// Scheduler tags, as a fraction of what is allowed (`None`: the default).
    nr_requests: Option<u8>,
    /// 4096-byte logical blocks (else 512).
    big_blocks: bool,
    max_sectors: u32,
    max_segments: u32,
    /// Segments end at every 4 KiB.
    seg_4k: bool,
    chunk_sectors: u32,
    max_discard_sectors: u32,
    /// A volatile write cache the device honours FUA for: flushes reach the driver (else
    /// they end at once, and PREFLUSH and FUA are dropped).
    write_cache: bool,
    /// I/O accounting on ([`QueueConfig::accounting`]).
    accounting: bool,
}

#[derive(Clone, Debug)]
struct Config {
    hw_queues: usize,
    shared_tags: bool,
    /// [`TagSetFlags::BLOCKING`]: completions rerun waiting queues through kicks.
    blocking: bool,
    depth: usize,
    reserved: usize,
    cpus: usize,
    budget: Option<usize>,
    /// The driver takes flushed plugs whole (`queue_rqs`).
    batch: bool,
    queues: Vec<QueueSpec>,
}

/// A bio as generated (the test gives it its id and callback).
#[derive(Clone, Copy, Debug)]
struct BioSpec {
    op: Op,
    sector: u64,
    sectors: u32,
    flags: BioFlags,
    /// Starts where the previous bio of its queue ended instead (a sequential stream,
    /// which merges).
    follow: bool,
}

#[derive(Clone, Debug)]
enum Act {
    Submit {
        queue: u8,
        bio: BioSpec,
    },
    /// Through `submit_wait` with `NOWAIT`, for a bio that needs no split.
    SubmitNowait {
        queue: u8,
        bio: BioSpec,
    },
    /// `count` bios of `blocks` 4 KiB blocks each, one after the other from `slot`, the same
    /// operation: plainly or through one plug.
    Stream {
        queue: u8,
        write: bool,
        slot: u8,
        blocks: u8,
        count: u8,
        plugged: bool,
    },
    /// Into a plug, then flush it (or drop it).
    Plugged {
        bios: Vec<(u8, BioSpec)>,
        drop_plug: bool,
    },
    /// Submit a handed-back bio again.
    Resubmit {
        pick: u8,
        plugged: bool,
    },
    /// The submitter of a handed-back bio (a whole one) ends it itself.
    GiveUp {
        pick: u8,
    },
    Complete {
        pick: u8,
        status: Status,
    },
    CompleteBatch {
        picks: Vec<(u8, Status)>,
    },
    Requeue {
        pick: u8,
        kick: bool,
    },
    KickRequeue {
        queue: u8,
    },
    Timeouts {
        advance: u64,
        done: bool,
    },
    /// `None`: the host.
    Quiesce(Option<u8>),
    Unquiesce(Option<u8>),
    Freeze {
        queue: u8,
    },
    Unfreeze {
        queue: u8,
    },
    Stop {
        queue: u8,
        hctx: u8,
    },
    Start {
        queue: u8,
        hctx: u8,
    },
    SetMode(Mode),
    FailNext(Status),
    SetCpu(u8),
    RunKicked,
}

fn queue_spec() -> impl Strategy<Value = QueueSpec> {
    (
        any::<bool>(),
        proptest::option::weighted(0.3, any::<u8>()),
        proptest::bool::weighted(0.15),
        prop_oneof![Just(8u32), Just(16), Just(32), Just(64), Just(128)],
        prop_oneof![3 => Just(128u32), 1 => 1u32..=4],
        proptest::bool::weighted(0.3),
        prop_oneof![3 => Just(0u32), 1 => Just(32), 1 => Just(64)],
        prop_oneof![Just(0u32), Just(16)],
        any::<bool>(),
    )
        .prop_map(
            |(
                elevator,
                nr_requests,
                big_blocks,
                max_sectors,
                max_segments,
                seg_4k,
                chunk_sectors,
                max_discard_sectors,
                accounting,
            )| QueueSpec {
                elevator,
                nr_requests,
                big_blocks,
                max_sectors,
                max_segments,
                seg_4k,
                chunk_sectors,
                max_discard_sectors,
                write_cache: false,
                accounting,
            },
        )
}

fn config() -> impl Strategy<Value = Config> {
    (
        1usize..=4,
        any::<bool>(),
        proptest::bool::weighted(0.2),
        2usize..=16,
        prop_oneof![4 => Just(0usize), 1 => Just(1)],
        1usize..=4,
        proptest::option::weighted(0.3, 1usize..=4),
        proptest::bool::weighted(0.25),
        proptest::collection::vec(queue_spec(), 1..=2),
    )
        .prop_map(
            |(hw_queues, shared_tags, blocking, depth, reserved, cpus, budget, batch, queues)| {
                Config {
                    hw_queues,
                    shared_tags,
                    blocking,
                    depth,
                    reserved,
                    cpus,
                    budget,
                    batch,
                    queues,
                }
            },
        )
}

fn bio_spec() -> impl Strategy<Value = BioSpec> {
    let op = prop_oneof![
        9 => Just(Op::Read),
        8 => Just(Op::Write),
        2 => Just(Op::Flush),
        1 => Just(Op::Discard),
    ];
    let place = prop_oneof![
        // Aligned: small ones merge with their neighbours, long ones split.
        9 => (0u64..32, 1u32..=2).prop_map(|(slot, blocks)| (slot * 8, blocks * 8)),
        3 => (0u64..32, 3u32..=12).prop_map(|(slot, blocks)| (slot * 8, blocks * 8)),
        3 => (0..CAPACITY, 1u32..=24),
        1 => (0..CAPACITY).prop_map(|sector| (sector, 0)),
        1 => (CAPACITY - 16..CAPACITY + 16, 1u32..=24),
    ];
    let flags = prop_oneof![
        10 => Just(BioFlags::empty()),
        2 => Just(BioFlags::SYNC),
        1 => Just(BioFlags::NOMERGE),
        1 => Just(BioFlags::FUA),
        1 => Just(BioFlags::PREFLUSH | BioFlags::SYNC),
    ];
    (
        op,
        place,
        flags,
        proptest::bool::weighted(0.2),
        any::<bool>(),
    )
        .prop_map(|(op, (sector, sectors), flags, flush_with_data, follow)| {
            let sectors = match op {
                Op::Flush if flush_with_data => 8,
                Op::Flush => 0,
                _ => sectors,
            };
            BioSpec {
                op,
                sector,
                sectors,
                flags,
                follow,
            }
        })
}

fn error_status() -> impl Strategy<Value = Status> {
    prop_oneof![
        Just(Status::IoErr),
        Just(Status::Medium),
        Just(Status::NoSpace),
        Just(Status::Offline),
    ]
}

fn end_status() -> impl Strategy<Value = Status> {
    prop_oneof![6 => Just(Status::Ok), 1 => error_status(), 1 => Just(Status::Timeout)]
}

fn target() -> impl Strategy<Value = Option<u8>> {
    proptest::option::weighted(0.6, any::<u8>())
}

fn act() -> impl Strategy<Value = Act> {
    prop_oneof![
        14 => (any::<u8>(), bio_spec()).prop_map(|(queue, bio)| Act::Submit { queue, bio }),
        2 => (any::<u8>(), bio_spec()).prop_map(|(queue, bio)| Act::SubmitNowait { queue, bio }),
        4 => (proptest::collection::vec((any::<u8>(), bio_spec()), 1..8), proptest::bool::weighted(0.2))
            .prop_map(|(bios, drop_plug)| Act::Plugged { bios, drop_plug }),
        4 => (any::<u8>(), any::<bool>(), 0u8..32, 1u8..=2, 2u8..=6, any::<bool>()).prop_map(
            |(queue, write, slot, blocks, count, plugged)| Act::Stream {
                queue,
                write,
                slot,
                blocks,
                count,
                plugged,
            },
        ),
        4 => (any::<u8>(), any::<bool>()).prop_map(|(pick, plugged)| Act::Resubmit { pick, plugged }),
        1 => any::<u8>().prop_map(|pick| Act::GiveUp { pick }),
        10 => (any::<u8>(), end_status()).prop_map(|(pick, status)| Act::Complete { pick, status }),
        4 => proptest::collection::vec((any::<u8>(), end_status()), 1..5)
            .prop_map(|picks| Act::CompleteBatch { picks }),
        3 => (any::<u8>(), any::<bool>()).prop_map(|(pick, kick)| Act::Requeue { pick, kick }),
        2 => any::<u8>().prop_map(|queue| Act::KickRequeue { queue }),
        2 => (0u64..=2_500, any::<bool>()).prop_map(|(advance, done)| Act::Timeouts { advance, done }),
        2 => target().prop_map(Act::Quiesce),
        2 => target().prop_map(Act::Unquiesce),
        1 => any::<u8>().prop_map(|queue| Act::Freeze { queue }),
        1 => any::<u8>().prop_map(|queue| Act::Unfreeze { queue }),
        1 => (any::<u8>(), any::<u8>()).prop_map(|(queue, hctx)| Act::Stop { queue, hctx }),
        1 => (any::<u8>(), any::<u8>()).prop_map(|(queue, hctx)| Act::Start { queue, hctx }),
        3 => prop_oneof![
            2 => Just(Mode::Accept),
            1 => Just(Mode::Busy(Status::Resource)),
            1 => Just(Mode::Busy(Status::DevResource)),
        ]
        .prop_map(Act::SetMode),
        1 => error_status().prop_map(Act::FailNext),
        2 => any::<u8>().prop_map(Act::SetCpu),
        4 => Just(Act::RunKicked),
    ]
}

// ----- the model -----

/// A submitted bio, as the model sees it.
struct Rec {
    /// As submitted.
    bio: Bio,
    /// The status [`QueueLimits::check`] gives it, if it is bad.
    invalid: Option<Status>,
    /// Its submitter ended it after the queue handed it back.
    gave_up: bool,
    /// Submitted with `NOWAIT` through `submit_wait`: it may end with `Again` untouched.
    nowait: bool,
    /// The first error of the requests that carried a piece of it.
    first_error: Option<Status>,
    /// The pieces that ended in a request.
    pieces: Vec<(u64, u32)>,
    /// How it ended, once it has.
    status: Option<Status>,
    ended: bool,
}

/// A bio the queue handed back, waiting for its submitter.
struct Back {
    queue: usize,
    id: usize,
    bio: Bio,
}

struct Harness<const B: bool> {
    host: Arc<Host<Mock<B>>>,
    queues: Vec<Arc<RequestQueue<Mock<B>>>>,
    recs: Vec<Rec>,
    back: Vec<Back>,
    host_quiesced: usize,
    quiesced: Vec<usize>,
    frozen: Vec<usize>,
    stopped: Vec<Vec<bool>>,
    elevated: Vec<bool>,
    /// Requests the test ended (each calls `Driver::complete` once).
    ended_by_test: usize,
    /// Timeouts per queue, as the model counts them.
    timeouts: Vec<usize>,
    /// Where the last bio submitted to each queue ended.
    next_sector: Vec<u64>,
    /// What the elevators found wrong.
    complaints: Complaints,
    /// Per queue, what its accounting must say; `None` where it is off, or where flushes
    /// are sequenced (a step's end is no request's end).
    acct: Vec<Option<Acct>>,
}

/// What a queue's accounting must say, from the requests the model saw end.
#[derive(Clone, Debug, Default)]
struct Acct {
    /// Per operation group: requests ended, their sectors, the bios they held.
    ios: [u64; 4],
    sectors: [u64; 4],
    bios: [u64; 4],
    /// Per hardware queue: requests ended and sectors, per group.
    hctx_ios: Vec<[u64; 4]>,
    hctx_sectors: Vec<[u64; 4]>,
}

fn limits_of(spec: &QueueSpec) -> QueueLimits {
    QueueLimits {
        logical_block_size: if spec.big_blocks { 4096 } else { 512 },
        max_sectors: spec.max_sectors,
        max_segments: spec.max_segments,
        seg_boundary_mask: if spec.seg_4k { 4095 } else { 0xffff_ffff },
        chunk_sectors: spec.chunk_sectors,
        max_discard_sectors: spec.max_discard_sectors,
        write_cache: spec.write_cache,
        fua: spec.write_cache,
        ..QueueLimits::new(CAPACITY)
    }
}

impl<const B: bool> Harness<B> {
    fn new(cfg: &Config, strict: Strict) -> Self {
        let nq = cfg.queues.len();
        let mut flags = TagSetFlags::empty();
        flags.set(TagSetFlags::SHARED_HOST_TAGS, cfg.shared_tags);
        flags.set(TagSetFlags::BLOCKING, cfg.blocking);
        let tags = TagSet::builder(cfg.depth)
            .hw_queues(cfg.hw_queues)
            .reserved(cfg.reserved)
            .timeout_ns(TIMEOUT_NS)
            .flags(flags);
        let host = Host::new(
            tags,
            ModelPlatform::new(cfg.cpus),
            Mock::<B>::new(nq, cfg.hw_queues, cfg.budget, strict.commit_per_hctx),
        )
        .expect("a valid tag set");
        let mut queues = Vec::new();
        let complaints = Complaints::default();
        for spec in &cfg.queues {
            let mut config = QueueConfig::new(limits_of(spec)).accounting(spec.accounting);
            if spec.elevator {
                let elevator = Checked::new(complaints.clone(), strict.flush_requeue);
                config = config.elevator(Box::new(elevator));
                if let Some(fraction) = spec.nr_requests {
                    // Above the reserved tags, at most twice the depth.
                    let room = 2 * cfg.depth - cfg.reserved;
                    config = config.nr_requests(cfg.reserved + 1 + usize::from(fraction) % room);
                }
            }
            let queue = host.add_queue(config).expect("a valid queue");
            {
                let mut st = host.driver().state();
                st.queues.push(Arc::as_ptr(&queue) as usize);
                st.elevated.push(spec.elevator);
            }
            queues.push(queue);
        }
        Self {
            host,
            queues,
            recs: Vec::new(),
            back: Vec::new(),
            host_quiesced: 0,
            quiesced: vec![0; nq],
            frozen: vec![0; nq],
            stopped: vec![vec![false; cfg.hw_queues]; nq],
            elevated: cfg.queues.iter().map(|q| q.elevator).collect(),
            ended_by_test: 0,
            timeouts: vec![0; nq],
            next_sector: vec![0; nq],
            complaints,
            acct: cfg
                .queues
                .iter()
                .map(|q| {
                    (q.accounting && !q.write_cache).then(|| Acct {
                        hctx_ios: vec![[0; 4]; cfg.hw_queues],
                        hctx_sectors: vec![[0; 4]; cfg.hw_queues],
                        ..Acct::default()
                    })
                })
                .collect(),
        }
    }

    fn driver(&self) -> MutexGuard<'_, DriverState> {
        self.host.driver().state()
    }

    fn platform(&self) -> &ModelPlatform {
        self.host.set().platform()
    }

    fn queue_index(&self, queue: u8) -> usize {
        usize::from(queue) % self.queues.len()
    }

    /// A new bio of `spec` for queue `qi`, with its record.
    fn new_bio(&mut self, qi: usize, spec: BioSpec, flags: BioFlags) -> (usize, Bio) {
        let id = self.recs.len();
        let sector = if spec.follow && spec.op != Op::Flush {
            self.next_sector[qi]
        } else {
            spec.sector
        };
        if spec.op != Op::Flush {
            self.next_sector[qi] = (sector + u64::from(spec.sectors)) % CAPACITY;
        }
        let bio = Bio::new(spec.op, sector, spec.sectors)
            .flags(spec.flags | flags)
            .private(id as u64)
            .payload(id as u64)
            .end_io(ended);
        self.recs.push(Rec {
            bio,
            invalid: self.queues[qi].limits().check(&bio).or_else(|| {
                // Nothing to flush: an empty flush ends at once.
                let limits = self.queues[qi].limits();
                (bio.op == Op::Flush && !limits.write_cache).then_some(Status::Ok)
            }),
            gave_up: false,
            nowait: false,
            first_error: None,
            pieces: Vec::new(),
            status: None,
            ended: false,
        });
        (id, bio)
    }

    /// What `submit` said about bio `id` (or a piece of it) on queue `qi`.
    fn submitted(
        &mut self,
        qi: usize,
        id: usize,
        fresh: bool,
        result: Result<(), Bio>,
    ) -> Result<(), TestCaseError> {
        let Err(bio) = result else {
            return Ok(());
        };
        let rec = &self.recs[id];
        prop_assert!(
            !(fresh && rec.invalid.is_some()),
            "bad bio {} handed back instead of ended",
            id
        );
        prop_assert_eq!(bio.payload, id as u64, "handed back a bio of another id");
        prop_assert_eq!(
            bio.end_sector(),
            rec.bio.end_sector(),
            "not the tail of bio {}",
            id
        );
        prop_assert!(bio.sector >= rec.bio.sector && bio.op == rec.bio.op);
        if !bio.flags.contains(BioFlags::SPLIT) {
            prop_assert_eq!(
                bio.sector,
                rec.bio.sector,
                "a part of bio {} handed back whole",
                id
            );
            prop_assert_eq!(bio.private, id as u64);
        }
        self.back.push(Back { queue: qi, id, bio });
        Ok(())
    }

    fn act(&mut self, act: &Act) -> Result<(), TestCaseError> {
        match *act {
            Act::Submit { queue, bio } => {
                let qi = self.queue_index(queue);
                let (id, bio) = self.new_bio(qi, bio, BioFlags::empty());
                let result = self.queues[qi].submit(bio);
                self.submitted(qi, id, true, result)?;
            }
            Act::SubmitNowait { queue, bio } => {
                let qi = self.queue_index(queue);
                let (id, bio) = self.new_bio(qi, bio, BioFlags::NOWAIT);
                let whole = self.queues[qi].limits().split_len(&bio) >= bio.sectors;
                if whole || self.recs[id].invalid.is_some() {
                    self.recs[id].nowait = true;
                    self.queues[qi].submit_wait(bio);
                } else {
                    let result = self.queues[qi].submit(bio);
                    self.submitted(qi, id, true, result)?;
                }
            }
            Act::Stream {
                queue,
                write,
                slot,
                blocks,
                count,
                plugged,
            } => {
                let qi = self.queue_index(queue);
                let queue = self.queues[qi].clone();
                let mut plug = Plug::new();
                let sectors = u32::from(blocks) * 8;
                let mut sector = u64::from(slot) * 8;
                for _ in 0..count {
                    let spec = BioSpec {
                        op: if write { Op::Write } else { Op::Read },
                        sector,
                        sectors,
                        flags: BioFlags::empty(),
                        follow: false,
                    };
                    sector += u64::from(sectors);
                    let (id, bio) = self.new_bio(qi, spec, BioFlags::empty());
                    let result = if plugged {
                        queue.submit_plugged(&mut plug, bio)
                    } else {
                        queue.submit(bio)
                    };
                    self.submitted(qi, id, true, result)?;
                }
                plug.flush();
            }
            Act::Plugged {
                ref bios,
                drop_plug,
            } => {
                let queues = self.queues.clone();
                let mut plug = Plug::new();
                for &(queue, spec) in bios {
                    let qi = self.queue_index(queue);
                    let (id, bio) = self.new_bio(qi, spec, BioFlags::empty());
                    let result = queues[qi].submit_plugged(&mut plug, bio);
                    self.submitted(qi, id, true, result)?;
                }
                if !drop_plug {
                    plug.flush();
                    prop_assert!(plug.is_empty(), "a flushed plug kept requests");
                }
                drop(plug);
            }
            Act::Resubmit { pick, plugged } => {
                if self.back.is_empty() {
                    return Ok(());
                }
                let back = self.back.remove(usize::from(pick) % self.back.len());
                let queue = self.queues[back.queue].clone();
                let result = if plugged {
                    let mut plug = Plug::new();
                    let result = queue.submit_plugged(&mut plug, back.bio);
                    plug.flush();
                    result
                } else {
                    queue.submit(back.bio)
                };
                self.submitted(back.queue, back.id, false, result)?;
            }
            Act::GiveUp { pick } => {
                let whole: Vec<usize> = (0..self.back.len())
                    .filter(|&i| !self.back[i].bio.flags.contains(BioFlags::SPLIT))
                    .collect();
                if whole.is_empty() {
                    return Ok(());
                }
                let back = self.back.remove(whole[usize::from(pick) % whole.len()]);
                self.recs[back.id].gave_up = true;
                back.bio.complete(Status::Again);
            }
            Act::Complete { pick, status } => {
                let held = {
                    let mut st = self.driver();
                    if st.held.is_empty() {
                        return Ok(());
                    }
                    let i = usize::from(pick) % st.held.len();
                    st.held.remove(i)
                };
                self.end_held(vec![(held, status)]);
            }
            Act::CompleteBatch { ref picks } => {
                let mut taken = Vec::new();
                {
                    let mut st = self.driver();
                    for &(pick, status) in picks {
                        if st.held.is_empty() {
                            break;
                        }
                        let i = usize::from(pick) % st.held.len();
                        taken.push((st.held.remove(i), status));
                    }
                }
                self.end_held(taken);
            }
            Act::Requeue { pick, kick } => {
                let held = {
                    let mut st = self.driver();
                    if st.held.is_empty() {
                        return Ok(());
                    }
                    let i = usize::from(pick) % st.held.len();
                    st.held.remove(i)
                };
                self.queues[held.queue]
                    .requeue_request(held.rq, kick)
                    .unwrap();
            }
            Act::KickRequeue { queue } => {
                let qi = self.queue_index(queue);
                self.queues[qi].kick_requeue_list();
            }
            Act::Timeouts { advance, done } => self.timeouts(advance, done)?,
            Act::Quiesce(None) => {
                self.host.quiesce();
                self.host_quiesced += 1;
            }
            Act::Quiesce(Some(queue)) => {
                let qi = self.queue_index(queue);
                self.queues[qi].quiesce();
                self.quiesced[qi] += 1;
            }
            Act::Unquiesce(None) => {
                if self.host_quiesced > 0 {
                    self.host_quiesced -= 1;
                    self.host.unquiesce();
                }
            }
            Act::Unquiesce(Some(queue)) => {
                let qi = self.queue_index(queue);
                if self.quiesced[qi] > 0 {
                    self.quiesced[qi] -= 1;
                    self.queues[qi].unquiesce();
                }
            }
            Act::Freeze { queue } => {
                let qi = self.queue_index(queue);
                self.queues[qi].freeze_start();
                self.frozen[qi] += 1;
            }
            Act::Unfreeze { queue } => {
                let qi = self.queue_index(queue);
                if self.frozen[qi] > 0 {
                    self.frozen[qi] -= 1;
                    self.queues[qi].unfreeze();
                }
            }
            Act::Stop { queue, hctx } => {
                let qi = self.queue_index(queue);
                let h = usize::from(hctx) % self.stopped[qi].len();
                self.stopped[qi][h] = true;
                self.driver().stopped[qi][h] = true;
                self.queues[qi].stop_hw_queue(h);
            }
            Act::Start { queue, hctx } => {
                let qi = self.queue_index(queue);
                let h = usize::from(hctx) % self.stopped[qi].len();
                self.stopped[qi][h] = false;
                self.driver().stopped[qi][h] = false;
                self.queues[qi].start_hw_queue(h);
            }
            Act::SetMode(mode) => self.driver().mode = mode,
            Act::FailNext(status) => self.driver().fail_next.push_back(status),
            Act::SetCpu(cpu) => {
                let cpu = usize::from(cpu) % self.platform().nr_cpus();
                self.platform().cpu.store(cpu, Ordering::SeqCst);
            }
            Act::RunKicked => {
                self.platform().take_kick();
                self.host.run_kicked();
            }
        }
        Ok(())
    }

    /// Ends requests taken from the driver, a batch per run of one queue (a request the
    /// driver took on after a timeout ends with [`Status::Timeout`]).
    fn end_held(&mut self, taken: Vec<(Held, Status)>) {
        let mut taken = taken.into_iter().peekable();
        while let Some((first, status)) = taken.next() {
            let qi = first.queue;
            let mut batch = vec![(first, status)];
            while let Some((next, _)) = taken.peek() {
                if next.queue != qi {
                    break;
                }
                batch.extend(taken.next());
            }
            let queue = self.queues[qi].clone();
            let batch: Vec<(Rq, Status)> = batch
                .into_iter()
                .map(|(held, status)| {
                    let status = if held.timed_out {
                        Status::Timeout
                    } else {
                        status
                    };
                    record_pieces(&queue, &held.rq, status);
                    let io = queue.io(&held.rq).expect("a held request");
                    push_event(Event::Request {
                        queue: qi,
                        hctx: held.hctx,
                        op: io.op(),
                        sectors: io.sectors(),
                        bios: u64::from(io.nr_bios()),
                    });
                    (held.rq, status)
                })
                .collect();
            self.ended_by_test += batch.len();
            if batch.len() == 1 {
                let (rq, status) = batch.into_iter().next().expect("one request");
                queue.end_request(rq, status).unwrap();
            } else {
                queue.end_requests(batch).unwrap();
            }
        }
    }

    /// Advances the clock by `advance` and checks every queue's timeouts.
    fn timeouts(&mut self, advance: u64, done: bool) -> Result<(), TestCaseError> {
        let now = self.platform().clock.fetch_add(advance, Ordering::SeqCst) + advance;
        self.driver().on_timeout = if done {
            TimeoutAction::Done
        } else {
            TimeoutAction::ResetTimer
        };
        for qi in 0..self.queues.len() {
            let (due, fired_before) = {
                let st = self.driver();
                let due = st
                    .held
                    .iter()
                    .filter(|h| h.queue == qi && !h.timed_out && h.deadline <= now)
                    .count();
                (due, st.fired[qi])
            };
            let fired = self.queues[qi].check_timeouts(now);
            let told = self.driver().fired[qi] - fired_before;
            prop_assert_eq!(fired, due, "queue {}: timeouts fired at {}", qi, now);
            prop_assert_eq!(told, due, "queue {}: timeouts the driver was told of", qi);
            self.timeouts[qi] += fired;
            prop_assert_eq!(self.queues[qi].timed_out(), self.timeouts[qi] as u64);
        }
        Ok(())
    }

    /// Accounts for the events since the last call.
    fn absorb(&mut self) -> Result<(), TestCaseError> {
        for event in take_events() {
            match event {
                Event::Piece {
                    id,
                    status,
                    op,
                    sector,
                    sectors,
                    offset,
                } => {
                    prop_assert!(id < self.recs.len(), "a piece of unknown bio {}", id);
                    let rec = &mut self.recs[id];
                    prop_assert!(!rec.ended, "a piece of bio {} ended after the bio", id);
                    prop_assert!(
                        rec.invalid.is_none(),
                        "a piece of bad bio {} was issued",
                        id
                    );
                    prop_assert_eq!(op, rec.bio.op);
                    prop_assert!(
                        sector >= rec.bio.sector
                            && sector + u64::from(sectors) <= rec.bio.end_sector(),
                        "piece {}+{} outside bio {} ({:?})",
                        sector,
                        sectors,
                        id,
                        rec.bio
                    );
                    prop_assert_eq!(
                        u64::from(offset),
                        sector - rec.bio.sector,
                        "piece offset of bio {}",
                        id
                    );
                    if !status.is_ok() && rec.first_error.is_none() {
                        rec.first_error = Some(status);
                    }
                    rec.pieces.push((sector, sectors));
                }
                Event::Request {
                    queue,
                    hctx,
                    op,
                    sectors,
                    bios,
                } => {
                    if let Some(acct) = &mut self.acct[queue] {
                        let g = OpGroup::of(op) as usize;
                        acct.ios[g] += 1;
                        acct.sectors[g] += sectors;
                        acct.bios[g] += bios;
                        acct.hctx_ios[hctx][g] += 1;
                        acct.hctx_sectors[hctx][g] += sectors;
                    }
                }
                Event::End { id, status } => {
                    prop_assert!(id < self.recs.len(), "unknown bio {} ended", id);
                    let rec = &mut self.recs[id];
                    prop_assert!(!rec.ended, "bio {} ended twice ({:?})", id, status);
                    rec.ended = true;
                    rec.status = Some(status);
                    if let Some(invalid) = rec.invalid {
                        prop_assert_eq!(status, invalid, "bad bio {} ({:?})", id, rec.bio);
                        continue;
                    }
                    if rec.gave_up || (rec.nowait && status == Status::Again) {
                        prop_assert_eq!(status, Status::Again, "bio {} given up", id);
                        prop_assert!(rec.pieces.is_empty(), "bio {} given up in part", id);
                        continue;
                    }
                    let want = rec.first_error.unwrap_or(Status::Ok);
                    prop_assert_eq!(status, want, "bio {} ({:?})", id, rec.bio);
                    rec.pieces.sort_unstable();
                    if rec.bio.sectors == 0 {
                        prop_assert_eq!(rec.pieces.len(), 1, "flush {} issued once", id);
                    } else {
                        let mut at = rec.bio.sector;
                        for &(sector, sectors) in &rec.pieces {
                            prop_assert_eq!(sector, at, "pieces of bio {}: {:?}", id, rec.pieces);
                            at += u64::from(sectors);
                        }
                        prop_assert_eq!(at, rec.bio.end_sector(), "bio {} not covered", id);
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether queue `qi`'s hardware queue `h` may dispatch now.
    fn may_dispatch(&self, qi: usize, h: usize) -> bool {
        if self.host_quiesced > 0 || self.quiesced[qi] > 0 || self.stopped[qi][h] {
            return false;
        }
        // An elevator hands any runner any request: a stopped hardware queue holds up the
        // queue's elevator.
        !(self.elevated[qi] && self.stopped[qi].iter().any(|&s| s))
    }

    /// Everything that must hold between operations.
    fn check(&mut self, after: &str) -> Result<(), TestCaseError> {
        self.absorb()?;
        {
            let complaints = self.complaints.lock().expect("the complaints lock");
            prop_assert!(complaints.is_empty(), "after {}: {:?}", after, complaints);
        }
        let in_driver = self.host.in_driver();
        {
            let st = self.driver();
            prop_assert!(
                st.violations.is_empty(),
                "after {}: {:?}",
                after,
                st.violations
            );
            prop_assert_eq!(in_driver, st.held.len(), "after {}: in driver", after);
            for qi in 0..self.queues.len() {
                prop_assert_eq!(
                    st.budget[qi],
                    st.held_by(qi),
                    "after {}: budget of queue {}",
                    after,
                    qi
                );
            }
            prop_assert!(
                st.uncommitted.values().all(|&n| n == 0),
                "after {}: requests issued without a commit: {:?}",
                after,
                st.uncommitted
            );
            prop_assert_eq!(
                st.completes,
                self.ended_by_test + st.error_rejects,
                "after {}: Driver::complete calls",
                after
            );
        }
        self.check_accounting(after, false)?;
        // Nothing stranded: with nothing in the driver to complete, no hardware queue that
        // may dispatch holds a request unless a kick is to run it (with an elevator, any
        // hardware queue's run dispatches the queue's requests).
        if in_driver == 0 {
            let platform = self.platform();
            for (qi, queue) in self.queues.iter().enumerate() {
                if self.elevated[qi] && platform.kick_pending() {
                    continue;
                }
                for h in 0..queue.nr_hw_queues() {
                    prop_assert!(
                        !self.may_dispatch(qi, h) || platform.is_kicked(h) || !queue.has_work(h),
                        "after {}: queue {} hctx {} has work, nothing in the driver, no kick",
                        after,
                        qi,
                        h
                    );
                }
            }
        }
        Ok(())
    }

    /// Lets everything go and drains it, checking after each step that nothing is stranded.
    fn drain(&mut self) -> Result<(), TestCaseError> {
        while self.host_quiesced > 0 {
            self.host_quiesced -= 1;
            self.host.unquiesce();
        }
        for qi in 0..self.queues.len() {
            while self.quiesced[qi] > 0 {
                self.quiesced[qi] -= 1;
                self.queues[qi].unquiesce();
            }
            while self.frozen[qi] > 0 {
                self.frozen[qi] -= 1;
                self.queues[qi].unfreeze();
            }
            for h in 0..self.stopped[qi].len() {
                if self.stopped[qi][h] {
                    self.stopped[qi][h] = false;
                    self.driver().stopped[qi][h] = false;
                    self.queues[qi].start_hw_queue(h);
                }
            }
        }
        {
            let mut st = self.driver();
            st.mode = Mode::Accept;
            st.fail_next.clear();
        }
        self.check("letting go")?;
        let mut rounds = 0;
        loop {
            rounds += 1;
            prop_assert!(rounds <= MAX_DRAIN_ROUNDS, "the drain makes no headway");
            let mut progress = false;
            if self.platform().take_kick() {
                self.host.run_kicked();
                self.check("drain: run kicked")?;
                progress = true;
            }
            for qi in 0..self.queues.len() {
                if self.queues[qi].requeued() > 0 {
                    self.queues[qi].kick_requeue_list();
                    self.check("drain: kick requeue list")?;
                    progress = true;
                }
            }
            let held: Vec<Held> = std::mem::take(&mut self.driver().held);
            if !held.is_empty() {
                self.end_held(held.into_iter().map(|h| (h, Status::Ok)).collect());
                self.check("drain: complete")?;
                progress = true;
            }
            for back in std::mem::take(&mut self.back) {
                let result = self.queues[back.queue].submit(back.bio);
                progress |= result.is_ok();
                self.submitted(back.queue, back.id, false, result)?;
                self.check("drain: resubmit")?;
            }
            let idle = self.driver().held.is_empty()
                && !self.platform().kick_pending()
                && self.queues.iter().all(|q| q.requeued() == 0);
            if idle && self.back.is_empty() {
                return Ok(());
            }
            // Handed-back bios that nothing in flight will ever make room for.
            prop_assert!(
                progress || !idle,
                "the queue keeps handing back {} bios with nothing in flight",
                self.back.len()
            );
        }
    }

    /// What must hold once drained.
    fn finish(&mut self) -> Result<(), TestCaseError> {
        self.absorb()?;
        prop_assert_eq!(self.host.in_driver(), 0);
        prop_assert_eq!(self.host.set().busy(), 0, "tags left busy");
        prop_assert_eq!(
            self.host.set().bio_slots_in_use(),
            0,
            "bio slots left in use"
        );
        prop_assert!(!self.platform().kick_pending(), "a kick after the drain");
        for (qi, queue) in self.queues.iter().enumerate() {
            prop_assert_eq!(queue.usage(), 0, "queue {} usage", qi);
            prop_assert_eq!(queue.requeued(), 0, "queue {} requeue list", qi);
            prop_assert_eq!(
                queue.queue_tags().sched_busy(),
                0,
                "queue {} scheduler tags",
                qi
            );
            for h in 0..queue.nr_hw_queues() {
                prop_assert!(!queue.has_work(h), "queue {} hctx {} still has work", qi, h);
            }
        }
        {
            let st = self.driver();
            prop_assert!(st.held.is_empty());
            prop_assert!(
                st.budget.iter().all(|&b| b == 0),
                "budget left: {:?}",
                st.budget
            );
        }
        let missing: Vec<usize> = (0..self.recs.len())
            .filter(|&id| !self.recs[id].ended)
            .collect();
        prop_assert!(missing.is_empty(), "bios never ended: {:?}", missing);
        self.check_accounting("the drain", true)
    }

    /// The accounting of each queue that keeps it against the model: every request's end
    /// counted once, with its sectors, on its hardware queue; the hardware queues' counters
    /// add up to the queue's; a latency sample per completion; as many requests in flight
    /// as the driver holds at least. Once `drained`: nothing in flight, and every bio that
    /// ended in a request was either the one it was made for or merged (`bios == ios +
    /// merges`, per group), so each merge was counted once, where it happened.
    fn check_accounting(&self, after: &str, drained: bool) -> Result<(), TestCaseError> {
        for (qi, queue) in self.queues.iter().enumerate() {
            let Some(want) = &self.acct[qi] else {
                continue;
            };
            let stats = queue.stats().expect("accounting on");
            let latency = queue.latency().expect("accounting on");
            for g in OpGroup::ALL {
                let i = g as usize;
                let got = stats.op(g);
                prop_assert_eq!(
                    got.ios,
                    want.ios[i],
                    "after {}: queue {} {:?} ios",
                    after,
                    qi,
                    g
                );
                prop_assert_eq!(
                    got.sectors,
                    want.sectors[i],
                    "after {}: queue {} {:?} sectors",
                    after,
                    qi,
                    g
                );
                prop_assert_eq!(
                    latency.count(g),
                    got.ios,
                    "after {}: {:?} latency",
                    after,
                    g
                );
                if drained {
                    prop_assert_eq!(
                        want.bios[i],
                        got.ios + got.merges,
                        "after {}: queue {} {:?}: bios against ios + merges",
                        after,
                        qi,
                        g
                    );
                }
            }
            let held = self.driver().held_by(qi) as u64;
            prop_assert!(
                stats.in_flight_total() >= held,
                "after {}: queue {} in flight {:?}, the driver holds {}",
                after,
                qi,
                stats.in_flight,
                held
            );
            let mut sum = IoStats::default();
            for h in 0..queue.nr_hw_queues() {
                let hs = queue.hctx_stats(h).expect("accounting on");
                for g in OpGroup::ALL {
                    let i = g as usize;
                    prop_assert_eq!(
                        hs.op(g).ios,
                        want.hctx_ios[h][i],
                        "after {}: hctx {} ios",
                        after,
                        h
                    );
                    prop_assert_eq!(
                        hs.op(g).sectors,
                        want.hctx_sectors[h][i],
                        "after {}: hctx {} sectors",
                        after,
                        h
                    );
                    sum.ops[i].ios += hs.ops[i].ios;
                    sum.ops[i].merges += hs.ops[i].merges;
                    sum.ops[i].sectors += hs.ops[i].sectors;
                    sum.ops[i].nsecs += hs.ops[i].nsecs;
                }
                sum.in_flight[0] += hs.in_flight[0];
                sum.in_flight[1] += hs.in_flight[1];
                if drained {
                    prop_assert_eq!(
                        hs.in_flight,
                        [0, 0],
                        "after {}: hctx {} in flight",
                        after,
                        h
                    );
                }
            }
            prop_assert_eq!(
                sum.ops,
                stats.ops,
                "after {}: hctxs against queue {}",
                after,
                qi
            );
            prop_assert_eq!(sum.in_flight, stats.in_flight, "after {}: in flight", after);
            if drained {
                prop_assert_eq!(
                    stats.in_flight,
                    [0, 0],
                    "after {}: queue {} in flight",
                    after,
                    qi
                );
            }
        }
        Ok(())
    }
}

/// Runs one case on a driver of the given kind.
fn run<const B: bool>(cfg: &Config, acts: &[Act], strict: Strict) -> Result<(), TestCaseError> {
    take_events();
    let mut harness = Harness::<B>::new(cfg, strict);
    for (i, act) in acts.iter().enumerate() {
        harness.act(act)?;
        harness.check(&format!("op {i} {act:?}"))?;
    }
    harness.drain()?;
    harness.finish()?;
    let Harness { host, queues, .. } = harness;
    drop(queues);
    drop(host);
    prop_assert!(
        take_events().is_empty(),
        "bios ended when the drained queues went away"
    );
    Ok(())
}

fn run_case(cfg: &Config, acts: &[Act], strict: Strict) -> Result<(), TestCaseError> {
    if cfg.batch {
        run::<true>(cfg, acts, strict)
    } else {
        run::<false>(cfg, acts, strict)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn request_queue_matches_model(
        cfg in config(),
        acts in proptest::collection::vec(act(), 0..MAX_OPS),
    ) {
        run_case(&cfg, &acts, STRICT)?;
    }
}

// ----- fixed cases -----

fn plain_queue(elevator: bool) -> QueueSpec {
    QueueSpec {
        elevator,
        nr_requests: None,
        big_blocks: false,
        max_sectors: 64,
        max_segments: 128,
        seg_4k: false,
        chunk_sectors: 0,
        max_discard_sectors: 0,
        write_cache: false,
        accounting: true,
    }
}

fn read(sector: u64, sectors: u32) -> BioSpec {
    BioSpec {
        op: Op::Read,
        sector,
        sectors,
        flags: BioFlags::empty(),
        follow: false,
    }
}

fn flush() -> BioSpec {
    BioSpec {
        op: Op::Flush,
        sector: 0,
        sectors: 0,
        flags: BioFlags::empty(),
        follow: false,
    }
}

fn plain_config(hw_queues: usize, elevator: bool) -> Config {
    Config {
        hw_queues,
        shared_tags: false,
        blocking: false,
        depth: 8,
        reserved: 0,
        cpus: hw_queues,
        budget: None,
        batch: false,
        queues: vec![plain_queue(elevator)],
    }
}

fn submit(bio: BioSpec) -> Act {
    Act::Submit { queue: 0, bio }
}

/// Every check, the ones held back by the switches included.
const ALL: Strict = Strict {
    commit_per_hctx: true,
    flush_requeue: true,
};

/// A fixed walk through the model's main promises, so that the model is seen to reach
/// them: bios queued behind a busy driver merge, a long bio splits, a merged request's
/// error reaches both its bios, a split bio ends once, after its last piece, with the
/// first error of its pieces.
#[test]
fn merged_and_split_bios_end_with_their_requests_status() {
    let mut cfg = plain_config(1, false);
    cfg.queues[0].max_sectors = 16;
    let mut harness = Harness::<false>::new(&cfg, ALL);
    let acts = [
        Act::SetMode(Mode::Busy(Status::Resource)),
        submit(read(0, 8)),
        submit(read(8, 8)),
        submit(read(16, 8)),
        submit(read(64, 40)),
        Act::SetMode(Mode::Accept),
        Act::RunKicked,
    ];
    for act in &acts {
        harness.act(act).unwrap();
        harness.check(&format!("{act:?}")).unwrap();
    }
    let queue = harness.queues[0].clone();
    let mut shapes: Vec<(u64, u32)> = harness
        .driver()
        .held
        .iter()
        .map(|h| {
            let io = queue.io(&h.rq).expect("a held request");
            (io.sector(), io.nr_bios())
        })
        .collect();
    shapes.sort_unstable();
    // Bios 1 and 2 merged; bio 3 split into three pieces of at most 16 sectors.
    assert_eq!(shapes, [(0, 1), (8, 2), (64, 1), (80, 1), (96, 1)]);
    let mut end_at = |sector: u64, status: Status| {
        let held = {
            let mut st = harness.driver();
            let i = st
                .held
                .iter()
                .position(|h| queue.io(&h.rq).is_some_and(|io| io.sector() == sector))
                .expect("a request at that sector");
            st.held.remove(i)
        };
        harness.end_held(vec![(held, status)]);
        harness
            .check(&format!("ending the request at {sector}"))
            .unwrap();
        harness.recs.iter().map(|r| r.status).collect::<Vec<_>>()
    };
    let ends = end_at(8, Status::Medium);
    assert_eq!(ends[1..3], [Some(Status::Medium); 2]);
    end_at(64, Status::IoErr);
    let ends = end_at(80, Status::Medium);
    assert_eq!(ends[3], None, "a split bio ended before its last piece");
    let ends = end_at(96, Status::Ok);
    assert_eq!(
        ends[3],
        Some(Status::IoErr),
        "not the first error of the pieces"
    );
    let ends = end_at(0, Status::Ok);
    assert_eq!(ends[0], Some(Status::Ok));
    harness.drain().unwrap();
    harness.finish().unwrap();
}

/// The bug once behind [`COMMIT_PER_HCTX`]: with an elevator, a request of hctx 0 that
/// hctx 1's runner had to give back waits on hctx 1's dispatch list; a flush queued behind
/// it there makes a batch of two, and the request goes to hctx 0 with `last == false` while
/// the flush's `last` rings hctx 1: hctx 0 is never committed.
#[test]
fn commit_reaches_the_hctx_the_request_went_to() {
    let acts = [
        Act::SetMode(Mode::Busy(Status::Resource)),
        Act::Stop { queue: 0, hctx: 0 },
        // On CPU 0: for hctx 0, which is stopped; the request waits in the elevator.
        submit(read(0, 8)),
        Act::SetCpu(1),
        // Runs hctx 1, which takes the first request (hctx 0's) and has to give it back.
        submit(read(64, 8)),
        // Behind it on hctx 1's dispatch list.
        submit(flush()),
        Act::SetMode(Mode::Accept),
        Act::RunKicked,
    ];
    run_case(&cached(plain_config(2, true)), &acts, ALL).unwrap();
}

/// The bug once behind [`FLUSH_REQUEUE_KEPT_FROM_ELEVATOR`]: a flush the driver requeues
/// is reported to the elevator, which never saw it.
#[test]
fn elevator_is_not_told_of_a_requeued_flush() {
    let acts = [
        submit(flush()),
        Act::Requeue {
            pick: 0,
            kick: true,
        },
    ];
    run_case(&cached(plain_config(1, true)), &acts, ALL).unwrap();
}

/// `config` on a device with a write cache: its flushes reach the driver.
fn cached(mut config: Config) -> Config {
    for queue in &mut config.queues {
        queue.write_cache = true;
    }
    config
}
