//! Loom models of the dispatch engine's restart and run protocols: no interleaving of a
//! submission that gives up and the completion that makes room for it strands a request.
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p blkmq-core --release --test loom_queue`.
//!
//! Each model builds a [`Host`] whose driver can hold only so much (room on the device, or a
//! budget), fills it, and races a submission that must give up against the completion that
//! makes room. Once the threads are joined and the platform's kicks are served
//! ([`Host::run_kicked`], as a platform's deferred work would), the new request (with two
//! submitters, one of them) must be on the device before anything else completes: a request
//! left on a dispatch list then waits for a completion that may never come. The models with a second request in flight through
//! the race check the restart's second look on its own: the hardware queue's completions
//! seen before and after the attempt, the mark before a hardware queue's next attempt, the
//! round a first give-up on several hardware queues goes once more (with nothing in flight,
//! a give-up that misses a completion still kicks the platform). The rest is drained only by completing what
//! the device holds and serving kicks: nobody runs a hardware queue by hand.
//!
//! The models through an elevator (a FIFO) check the same, and that a run which takes the
//! elevator's last request and stops never strands a request inserted meanwhile.
//!
//! One more races a completion against a timeout handler's claim of the same dispatch: the
//! owner's plain stores to the request's state against the handler's compare-exchange.
//!
//! The library's locks are `lock_api::Mutex<P::RawMutex, _>`. A spin lock on `core` atomics
//! would spin where loom cannot see it, so the platform here supplies
//! [`blkmq_core::testing::LoomRawMutex`], whose state is a loom atomic and whose waiting
//! yields to loom's scheduler.

#![cfg(loom)]

use std::cell::Cell;
use std::sync::Arc;

use std::collections::VecDeque;

use blkmq_core::testing::LoomRawMutex;
use blkmq_core::{
    Bio, Driver, Elevator, ElvCx, HctxCx, Host, Op, Platform, QueueConfig, QueueLimits, Rejected,
    Request, RequestInit, RequestQueue, Rq, RqState, Status, TagSet, TagSetBuilder, TagSetFlags,
    TimeoutAction,
};
use loom::sync::Mutex;
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::thread;

loom::lazy_static! {
    /// Whether the bio of [`completion_vs_a_timeout_handler`] has ended.
    static ref BIO_ENDED: AtomicBool = AtomicBool::new(false);
}

/// The end of the bio of [`completion_vs_a_timeout_handler`].
fn bio_ended(_: Bio, status: Status) {
    assert_eq!(status, Status::Ok);
    assert!(
        !BIO_ENDED.swap(true, Ordering::SeqCst),
        "the bio ended twice"
    );
}

loom::thread_local! {
    /// The CPU the calling model thread runs on (0 unless it says otherwise).
    static CPU: Cell<usize> = Cell::new(0);
}

/// Runs the calling model thread on `cpu` from now on.
fn pin(cpu: usize) {
    CPU.with(|c| c.set(cpu));
}

/// CPUs from a per-thread setting, a clock that stands still, and kicks counted.
///
/// With `sole`, each thread is the sole holder of the CPU it runs on
/// ([`Platform::exclusive_cpu`]), which the models keep true (no two threads write with one
/// CPU at once), and the platform fences all: `fence_all` is a `SeqCst` fence, the model of
/// a call that makes every thread pass one (the holders' side of it is a fence too, under
/// loom: see `percpu.rs`).
struct LoomPlatform {
    nr_cpus: usize,
    kicks: AtomicUsize,
    sole: bool,
}

impl Platform for LoomPlatform {
    type RawMutex = LoomRawMutex;

    fn nr_cpus(&self) -> usize {
        self.nr_cpus
    }

    fn current_cpu(&self) -> usize {
        CPU.with(Cell::get)
    }

    fn exclusive_cpu(&self) -> Option<usize> {
        self.sole.then(|| CPU.with(Cell::get))
    }

    fn can_fence_all(&self) -> bool {
        self.sole
    }

    fn fence_all(&self) {
        loom::sync::atomic::fence(Ordering::SeqCst);
    }

    fn now_ns(&self) -> u64 {
        0
    }

    fn kick(&self, _hctx: usize) {
        self.kicks.fetch_add(1, Ordering::SeqCst);
    }
}

/// A device with room for `slots` requests at once and, optionally, a budget of `budget`
/// units. It holds what it takes until the test ends it.
struct Device {
    slots: usize,
    /// Requests on the device now: taken in `queue_rq`, given back in `complete`.
    busy: AtomicUsize,
    budget: Option<usize>,
    /// Budget units out.
    budget_used: AtomicUsize,
    /// Requests taken so far.
    taken: AtomicUsize,
    /// The requests it holds, for the test to end.
    held: Mutex<Vec<Rq>>,
    /// Calls of `queue_rq` under way, per hardware queue: never more than one (only a
    /// hardware queue's runner calls it).
    issuing: [AtomicUsize; 2],
    /// Its timeout handler claims an expired request ([`Request::try_complete`]) rather
    /// than resetting the timer.
    claims: bool,
    /// Claims it won.
    won: AtomicUsize,
}

impl Device {
    fn new(slots: usize, budget: Option<usize>) -> Self {
        Self {
            slots,
            busy: AtomicUsize::new(0),
            budget,
            budget_used: AtomicUsize::new(0),
            taken: AtomicUsize::new(0),
            held: Mutex::new(Vec::new()),
            issuing: [AtomicUsize::new(0), AtomicUsize::new(0)],
            claims: false,
            won: AtomicUsize::new(0),
        }
    }

    /// One whose timeout handler claims the expired request.
    fn claiming(self) -> Self {
        Self {
            claims: true,
            ..self
        }
    }

    /// Takes one unit of `count` if fewer than `max` are out.
    fn take(count: &AtomicUsize, max: usize) -> bool {
        let mut now = count.load(Ordering::SeqCst);
        while now < max {
            match count.compare_exchange(now, now + 1, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return true,
                Err(seen) => now = seen,
            }
        }
        false
    }

    /// Gives one unit of `count` back; it must have been out.
    fn give(count: &AtomicUsize, what: &str) {
        let before = count.fetch_sub(1, Ordering::SeqCst);
        assert!(before > 0, "{what} given back more often than taken");
    }

    fn taken(&self) -> usize {
        self.taken.load(Ordering::SeqCst)
    }

    /// The requests it holds now, handed over to the caller.
    fn take_held(&self) -> Vec<Rq> {
        core::mem::take(&mut *self.held.lock().unwrap())
    }
}

impl Driver for Device {
    type Platform = LoomPlatform;
    type Payload = ();

    fn init_request(&self, _: RequestInit) {}

    fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _last: bool) -> Result<(), Rejected> {
        let issuing = &self.issuing[cx.hctx()];
        assert_eq!(
            issuing.fetch_add(1, Ordering::SeqCst),
            0,
            "two calls of queue_rq at once on hardware queue {}",
            cx.hctx()
        );
        let taken = if Self::take(&self.busy, self.slots) {
            self.held.lock().unwrap().push(rq);
            self.taken.fetch_add(1, Ordering::SeqCst);
            Ok(())
        } else {
            Err(Rejected {
                rq,
                status: Status::Resource,
            })
        };
        issuing.fetch_sub(1, Ordering::SeqCst);
        taken
    }

    fn get_budget(&self, _: &HctxCx<'_, Self>) -> bool {
        match self.budget {
            Some(max) => Self::take(&self.budget_used, max),
            None => true,
        }
    }

    fn timeout(&self, _: &HctxCx<'_, Self>, request: &Request<()>) -> TimeoutAction {
        if !self.claims {
            return TimeoutAction::ResetTimer;
        }
        // Read before the claim: a bio that has ended was ended by an owner that had marked
        // the request complete first, so the claim must lose.
        let ended = BIO_ENDED.load(Ordering::SeqCst);
        if request.try_complete(request.generation()) {
            assert!(
                !ended,
                "a timeout handler won a request whose bio had ended"
            );
            self.won.fetch_add(1, Ordering::SeqCst);
        }
        TimeoutAction::Done
    }

    fn put_budget(&self, _: &HctxCx<'_, Self>) {
        if self.budget.is_some() {
            Self::give(&self.budget_used, "budget");
        }
    }

    fn complete(&self, _: &HctxCx<'_, Self>, _: &Request<()>) {
        // Every request the models end was taken by the device first.
        Self::give(&self.busy, "a device slot");
    }
}

/// First in, first out: the least elevator, to model the runs through one.
#[derive(Default)]
struct Fifo(VecDeque<Rq>);

impl Elevator for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
    }

    fn insert_requests(&mut self, _: &ElvCx<'_>, rqs: &mut dyn Iterator<Item = Rq>, head: bool) {
        for rq in rqs {
            if head {
                self.0.push_front(rq);
            } else {
                self.0.push_back(rq);
            }
        }
    }

    fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> {
        self.0.pop_front()
    }

    fn has_work(&self, _: usize) -> bool {
        !self.0.is_empty()
    }
}

/// One host and one request queue over it.
struct World {
    host: Arc<Host<Device>>,
    queue: Arc<RequestQueue<Device>>,
}

impl World {
    /// A queue of capacity 1024 sectors on a host with `tags`, over `nr_cpus` CPUs, and a
    /// device as given.
    fn new(tags: TagSetBuilder, nr_cpus: usize, device: Device) -> Self {
        Self::with_config(
            tags,
            nr_cpus,
            device,
            QueueConfig::new(QueueLimits::new(1024)),
        )
    }

    /// As [`new`](Self::new), the queue with a [`Fifo`] elevator.
    fn with_fifo(tags: TagSetBuilder, nr_cpus: usize, device: Device) -> Self {
        let config = QueueConfig::new(QueueLimits::new(1024)).elevator(Box::new(Fifo::default()));
        let world = Self::with_config(tags, nr_cpus, device, config);
        // The elevator's lock makes its loom flag on first use: make it here, before the
        // model's threads, so that none of them races its making.
        assert_eq!(world.queue.elevator_name(), Some("fifo"));
        world
    }

    /// As [`new`](Self::new), each thread its CPU's sole holder when `sole` (see
    /// [`LoomPlatform`]).
    fn holders(tags: TagSetBuilder, nr_cpus: usize, device: Device, sole: bool) -> Self {
        let config = QueueConfig::new(QueueLimits::new(1024));
        Self::with_platform(tags, nr_cpus, device, config, sole)
    }

    fn with_config(
        tags: TagSetBuilder,
        nr_cpus: usize,
        device: Device,
        config: QueueConfig,
    ) -> Self {
        Self::with_platform(tags, nr_cpus, device, config, false)
    }

    fn with_platform(
        tags: TagSetBuilder,
        nr_cpus: usize,
        device: Device,
        config: QueueConfig,
        sole: bool,
    ) -> Self {
        let platform = LoomPlatform {
            nr_cpus,
            kicks: AtomicUsize::new(0),
            sole,
        };
        let host = Host::new(tags.max_queues(1), platform, device).unwrap();
        let queue = host.add_queue(config).unwrap();
        Self { host, queue }
    }

    fn device(&self) -> &Device {
        self.host.driver()
    }

    /// Submits a read of 8 sectors at `sector`; the queue must take it.
    fn submit(&self, sector: u64) {
        assert!(
            self.queue.submit(Bio::new(Op::Read, sector, 8)).is_ok(),
            "the queue refused a bio"
        );
    }

    /// Fills the device before the race with `n` requests (at sectors 0, 16, ...), which it
    /// takes, and hands them back: the first for the racing completion to end, the rest to
    /// stay in flight through the race.
    fn prefill(&self, n: usize) -> Vec<Rq> {
        for i in 0..n {
            self.submit(16 * i as u64);
        }
        let held = self.device().take_held();
        assert_eq!(held.len(), n, "the device did not take the first requests");
        held
    }

    /// The hardware queue of each request the device holds now.
    fn held_hctxs(&self) -> Vec<usize> {
        let held = self.device().held.lock().unwrap();
        held.iter()
            .map(|rq| self.queue.request(rq).unwrap().hctx())
            .collect()
    }

    /// Serves the platform's kicks, as its deferred work would.
    fn serve_kicks(&self) -> bool {
        let kicks = self.host.set().platform().kicks.swap(0, Ordering::SeqCst);
        if kicks == 0 {
            return false;
        }
        assert!(self.host.run_kicked() > 0, "kicked, but no queue marked");
        true
    }

    /// Right after the race, with nothing else completed: serves the kicks and checks that
    /// the device has taken `expected` requests so far. The completion freed room for them,
    /// so a request still queued now waits for nothing but a completion that may never come.
    fn check_taken(&self, expected: usize) {
        self.serve_kicks();
        assert_eq!(
            self.device().taken(),
            expected,
            "a request was stranded after the race (host {:?}, queue {:?})",
            self.host,
            self.queue,
        );
    }

    /// Ends `in_flight` (left from the prefill), then serves kicks and ends what the device
    /// holds until neither is left; checks that `expected` requests reached the device in all
    /// and that nothing is left behind.
    fn drain(&self, in_flight: impl IntoIterator<Item = Rq>, expected: usize) {
        for rq in in_flight {
            self.queue.end_request(rq, Status::Ok).unwrap();
        }
        for _ in 0..=expected {
            let kicked = self.serve_kicks();
            let held = self.device().take_held();
            if !kicked && held.is_empty() {
                break;
            }
            for rq in held {
                self.queue.end_request(rq, Status::Ok).unwrap();
            }
        }
        assert_eq!(self.device().taken(), expected, "a request was stranded");
        for hctx in 0..self.queue.nr_hw_queues() {
            assert!(!self.queue.has_work(hctx), "hardware queue {hctx} has work");
        }
        assert_eq!(self.host.in_driver(), 0);
        assert_eq!(self.queue.usage(), 0);
        assert_eq!(self.host.set().busy(), 0);
    }
}

/// Runs `f` in every interleaving loom finds with at most `bound` preemptions (`None`: all
/// of them), unless `LOOM_MAX_PREEMPTIONS` says otherwise.
fn model(bound: Option<usize>, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = bound;
    }
    // A run through an elevator (two tag sets, the scheduler's and the driver's, each
    // walked when dropped) takes more steps than loom's default allows one execution.
    builder.max_branches = builder.max_branches.max(10_000);
    let f = Arc::new(f);
    builder.check(move || {
        // Building a host needs more than the model's default stack: run the body on a
        // thread with a larger one.
        let f = f.clone();
        spawn(move || f()).join().unwrap();
    });
}

/// A model thread with a 1 MiB stack.
fn spawn<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> thread::JoinHandle<T> {
    thread::Builder::new().stack_size(1 << 20).spawn(f).unwrap()
}

/// The race every model but the last runs: the device is full (of `1 + others` requests,
/// all of hardware queue 0), a submitter on `cpu` (of hardware queue `cpu`) submits one
/// more, which it must give up on, and the first of the held requests completes meanwhile.
/// Right after, the new request must be on the device; at the end, every request has been
/// through it.
/// A model thread per sector, each submitting a bio there.
fn submitters(world: &Arc<World>, sectors: [u64; 2]) -> Vec<thread::JoinHandle<()>> {
    sectors
        .into_iter()
        .map(|sector| {
            let world = world.clone();
            spawn(move || world.submit(sector))
        })
        .collect()
}

fn give_up_vs_completion(world: World, cpu: usize, others: usize) {
    let world = Arc::new(world);
    let held = world.prefill(1 + others);
    for rq in &held {
        assert_eq!(world.queue.request(rq).unwrap().hctx(), 0);
    }
    let mut held = held.into_iter();
    let first = held.next().unwrap();
    let submitter = {
        let world = world.clone();
        spawn(move || {
            pin(cpu);
            world.submit(64);
        })
    };
    world.queue.end_request(first, Status::Ok).unwrap();
    submitter.join().unwrap();
    world.check_taken(2 + others);
    assert_eq!(
        world.held_hctxs(),
        [cpu],
        "the new request, on its hardware queue"
    );
    world.drain(held, 2 + others);
}

/// One hardware queue, no elevator, a device with room for one request, which it holds. A
/// submitter's request is rejected ([`Status::Resource`]) while the held one completes: the
/// completion must rerun the queue, or the dispatcher must see the completion and go round
/// again, or (nothing being left in flight) the platform must be kicked. The new request
/// reaches the device at once.
#[test]
fn resource_give_up_vs_completion() {
    model(None, || {
        let world = World::new(TagSet::builder(2), 1, Device::new(1, None));
        give_up_vs_completion(world, 0, 0);
    });
}

/// As [`resource_give_up_vs_completion`], with a second request on the device (room for
/// two) that stays in flight through the race: the kick is not there to fall back on, and
/// the give-up's second look alone (its hardware queue's completions, seen before the
/// attempt and again after the mark) must catch a completion that drained before the
/// give-up was marked. The new request must not wait for the other request to complete.
#[test]
fn resource_give_up_vs_completion_with_another_in_flight() {
    model(None, || {
        let world = World::new(TagSet::builder(4), 1, Device::new(2, None));
        give_up_vs_completion(world, 0, 1);
    });
}

/// As [`resource_give_up_vs_completion`], with host-wide tags over two hardware queues: the
/// device's slots are held by requests of hardware queue 0 and the submitter runs on the CPU
/// of hardware queue 1. The completion on queue 0 must restart queue 1. Run with and without
/// a second request in flight.
#[test]
fn shared_tags_give_up_restarted_across_hardware_queues() {
    for others in [0, 1] {
        model(None, move || {
            let tags = TagSet::builder(4)
                .hw_queues(2)
                .flags(TagSetFlags::SHARED_HOST_TAGS);
            let world = World::new(tags, 2, Device::new(1 + others, None));
            give_up_vs_completion(world, 1, others);
        });
    }
}

/// Shared tags over two hardware queues and a device with room for two, holding two
/// requests of hardware queue 0. A submitter on hardware queue 1 is refused while the first
/// of them completes; the second stays in flight through the race. The give-up must count
/// that request (every hardware queue's count of requests in the driver, not its own only)
/// and so never fall back on the platform: no kick, and the new request on the device right
/// after the race.
#[test]
fn give_up_counts_requests_in_flight_on_other_hardware_queues() {
    model(None, || {
        let tags = TagSet::builder(4)
            .hw_queues(2)
            .flags(TagSetFlags::SHARED_HOST_TAGS);
        let world = Arc::new(World::new(tags, 2, Device::new(2, None)));
        let mut held = world.prefill(2).into_iter();
        let (completing, stays) = (held.next().unwrap(), held.next().unwrap());
        let submitter = {
            let world = world.clone();
            spawn(move || {
                pin(1);
                world.submit(64);
            })
        };
        world.queue.end_request(completing, Status::Ok).unwrap();
        submitter.join().unwrap();
        assert_eq!(
            world.host.set().platform().kicks.load(Ordering::SeqCst),
            0,
            "a kick with a request in flight"
        );
        world.check_taken(3);
        assert_eq!(
            world.held_hctxs(),
            [1],
            "the new request, on its hardware queue"
        );
        world.drain([stays], 3);
    });
}

/// A device with room to spare but a budget of one unit per request it holds. The submitter
/// gives up for lack of budget while a held request completes (giving its unit back): the
/// new request reaches the device at once. Run with and without a second request in flight.
#[test]
fn budget_give_up_vs_completion() {
    for others in [0, 1] {
        model(None, move || {
            let world = World::new(TagSet::builder(4), 1, Device::new(4, Some(1 + others)));
            give_up_vs_completion(world, 0, others);
        });
    }
}

/// Two submitters and a completion, with room for one request on the device, which holds
/// one. Right after the race one new request is on the device; the other follows when that
/// one completes. Only completions and kicks move them: nobody runs a queue by hand.
#[test]
fn two_submitters_and_a_completion() {
    model(Some(3), || {
        let world = Arc::new(World::new(TagSet::builder(4), 1, Device::new(1, None)));
        let first = world.prefill(1).pop().unwrap();
        let submitters = submitters(&world, [64, 128]);
        world.queue.end_request(first, Status::Ok).unwrap();
        for s in submitters {
            s.join().unwrap();
        }
        world.check_taken(2);
        world.drain([], 3);
    });
}

/// As [`resource_give_up_vs_completion`], through an elevator: the submitter inserts, finds
/// the hardware queue idle, takes the request back out under the same hold of the
/// elevator's lock and is refused by the full device while the held request completes.
/// Run with and without a second request in flight.
#[test]
fn elevator_give_up_vs_completion() {
    for others in [0, 1] {
        model(Some(3), move || {
            let world = World::with_fifo(TagSet::builder(4), 1, Device::new(1 + others, None));
            give_up_vs_completion(world, 0, others);
        });
    }
}

/// Two submitters through an elevator to a device with room for both and nothing in
/// flight: no completion will come to rerun anything. Whichever runs the hardware queue may
/// take its request out seeing no more work, and stop, while the other inserts: the other's
/// insertion must make a run of its own (or make the runner go round again), so both
/// requests are on the device when the submitters return, with no kick to serve.
#[test]
fn elevator_two_submitters_reach_an_idle_device() {
    model(Some(3), || {
        let world = Arc::new(World::with_fifo(
            TagSet::builder(4),
            1,
            Device::new(2, None),
        ));
        for s in submitters(&world, [0, 64]) {
            s.join().unwrap();
        }
        assert_eq!(world.host.set().platform().kicks.load(Ordering::SeqCst), 0);
        assert_eq!(
            world.device().taken(),
            2,
            "a request was stranded in the elevator"
        );
        world.drain([], 2);
    });
}

/// A freeze against a submitter on one CPU and a completion on another, over a usage count
/// kept per CPU: the completion lets go on CPU 1 of a request taken on CPU 0, the submitter
/// enters on CPU 0. Whenever the freezer sees the queue drained, nothing is inside: the
/// submission that raced the freeze was refused (its request would stay on the device,
/// counted, so "drained" then would be a lie), and the count agrees afterwards.
#[test]
fn freeze_drains_against_entering_submitters_and_completions() {
    freeze_drains(false);
}

/// As [`freeze_drains_against_entering_submitters_and_completions`], each thread its CPU's
/// sole holder on a platform that fences all: the submitter and the completion count with
/// plain stores, the freeze's fence standing for theirs.
#[test]
fn freeze_drains_against_entering_submitters_and_completions_sole_holders() {
    freeze_drains(true);
}

fn freeze_drains(sole: bool) {
    model(Some(3), move || {
        let world = Arc::new(World::holders(
            TagSet::builder(4),
            2,
            Device::new(4, None),
            sole,
        ));
        let mut held = world.prefill(1);
        let first = held.pop().unwrap();
        let completer = {
            let world = world.clone();
            spawn(move || {
                pin(1);
                world.queue.end_request(first, Status::Ok).unwrap();
            })
        };
        let submitter = {
            let world = world.clone();
            spawn(move || {
                pin(0);
                world.queue.submit(Bio::new(Op::Read, 64, 8)).is_ok()
            })
        };
        pin(1);
        world.queue.freeze_start();
        let drained = world.queue.is_drained();
        completer.join().unwrap();
        let entered = submitter.join().unwrap();
        assert!(
            !(drained && entered),
            "the freeze saw the queue drained while a submission was inside"
        );
        // Once both are done the count is exact: the entered request, or nothing.
        assert_eq!(world.queue.usage(), usize::from(entered));
        assert_eq!(world.queue.is_drained(), !entered);
        world.queue.unfreeze();
        world.drain([], 1 + usize::from(entered));
    });
}

/// A reader inside the tags (a [`TagsGuard`](blkmq_core::TagsGuard), `enter_any` as a
/// timeout check's) that takes its reference on CPU 0 and lets go on CPU 1, before or after
/// the freeze (a reader may enter a frozen queue), while a request stays in flight: the
/// freezer never sees the queue drained, however the reader's two moves fall between its
/// reads of the CPUs' parts, and the count is exact once the reader has left and the request
/// ended.
#[test]
fn freeze_counts_readers_that_move_between_cpus() {
    freeze_counts_readers(false);
}

/// As [`freeze_counts_readers_that_move_between_cpus`], each thread its CPU's sole holder on
/// a platform that fences all: the reader's let-go on CPU 1 is a plain store.
#[test]
fn freeze_counts_readers_that_move_between_cpus_sole_holders() {
    freeze_counts_readers(true);
}

fn freeze_counts_readers(sole: bool) {
    model(Some(3), move || {
        let world = Arc::new(World::holders(
            TagSet::builder(4),
            2,
            Device::new(4, None),
            sole,
        ));
        let in_flight = world.prefill(1);
        let reader = {
            let world = world.clone();
            spawn(move || {
                pin(0);
                let tags = world.queue.queue_tags();
                let busy = tags.set().busy();
                pin(1);
                drop(tags);
                busy
            })
        };
        pin(1);
        world.queue.freeze_start();
        assert!(
            !world.queue.is_drained(),
            "the freeze saw the queue drained with a request in flight"
        );
        assert_eq!(reader.join().unwrap(), 1);
        assert_eq!(world.queue.usage(), 1);
        world.queue.unfreeze();
        world.drain(in_flight, 1);
    });
}

/// What a thread of [`run_batch_race`] does.
#[derive(Clone, Copy)]
enum Step {
    /// Submits a read of 8 sectors there; the queue must take it.
    Submit(u64),
    /// Ends the request the device holds from the prefill.
    EndHeld,
}

impl Step {
    fn run(self, world: &World, held: Option<Rq>) {
        match self {
            Step::Submit(sector) => world.submit(sector),
            Step::EndHeld => world
                .queue
                .end_request(held.expect("the held request"), Status::Ok)
                .unwrap(),
        }
    }
}

/// One hardware queue over two CPUs, each thread its CPU's sole holder, a device with room
/// for `room` requests, holding one when a step ends it. A thread on CPU 0 does `batch`
/// inside a run batch ([`RequestQueue::run_batch`]) while a thread on CPU 1 does `other`.
/// Right after both, with the platform's kicks served, two requests have reached the device;
/// at the end every request has been through it, and the device was never called by both
/// at once.
fn run_batch_race(room: usize, batch: Step, other: Step) {
    model(Some(3), move || {
        let world = Arc::new(World::holders(
            TagSet::builder(4),
            2,
            Device::new(room, None),
            true,
        ));
        let ends = |step| matches!(step, Step::EndHeld);
        let mut held = if ends(batch) || ends(other) {
            world.prefill(1).pop()
        } else {
            None
        };
        let held_by_batch = if ends(batch) { held.take() } else { None };
        let batch = {
            let world = world.clone();
            spawn(move || {
                pin(0);
                world
                    .queue
                    .run_batch(0, || batch.run(&world, held_by_batch));
            })
        };
        let other = {
            let world = world.clone();
            spawn(move || {
                pin(1);
                other.run(&world, held);
            })
        };
        batch.join().unwrap();
        other.join().unwrap();
        world.check_taken(2);
        world.drain([], 2);
    });
}

/// A device with room for two. The thread on CPU 0 submits inside a run batch (issued at
/// once, without claiming the runner) while a thread on CPU 1 submits too and finds the
/// runner taken: its request must reach the device when the batch ends, if not before.
#[test]
fn run_batch_issue_vs_a_submitter() {
    run_batch_race(2, Step::Submit(0), Step::Submit(64));
}

/// A device with room for one, holding one. A submitter on CPU 1 is refused (the request
/// waits on the dispatch list for a restart) while the held request completes inside a run
/// batch on CPU 0: the completion is counted out of the driver at the batch's end, whose
/// restart pass (or the runner's own next round, the claim being the batch's) must run what
/// waits.
#[test]
fn completion_in_a_run_batch_restarts_a_refused_submission() {
    run_batch_race(1, Step::EndHeld, Step::Submit(64));
}

/// A device with room for one, holding one. Inside a run batch on CPU 0 a submission is
/// refused while the held request completes on CPU 1: the give-up's restart protocol holds
/// inside a batch as in a run.
#[test]
fn give_up_in_a_run_batch_vs_completion() {
    run_batch_race(1, Step::Submit(64), Step::EndHeld);
}

/// An interrupt's completion (`end_request`, as the owner of the request) against a timeout
/// handler that claims the same dispatch (`Request::try_complete`, from
/// `check_timeouts`). The owner marks the request complete with a plain store: whichever
/// order they take, the bio ends once, a claim never wins once the bio has ended (see
/// [`Device::timeout`]), and afterwards the request is free, its tag back, and no claim of
/// that dispatch wins.
#[test]
fn completion_vs_a_timeout_handler() {
    model(None, || {
        let world = Arc::new(World::new(
            TagSet::builder(2),
            1,
            Device::new(1, None).claiming(),
        ));
        assert!(
            world
                .queue
                .submit(Bio::new(Op::Read, 0, 8).end_io(bio_ended))
                .is_ok()
        );
        let rq = world
            .device()
            .take_held()
            .pop()
            .expect("the device took it");
        // The request stays where it is as long as the queue does.
        let request = world.queue.request(&rq).unwrap();
        let generation = request.generation();
        let handler = {
            let world = world.clone();
            spawn(move || world.queue.check_timeouts(u64::MAX - 1))
        };
        world.queue.end_request(rq, Status::Ok).unwrap();
        let fired = handler.join().unwrap();
        assert!(BIO_ENDED.load(Ordering::SeqCst), "the bio never ended");
        assert!(world.device().won.load(Ordering::SeqCst) <= fired);
        assert_eq!(world.host.set().busy(), 0);
        assert_eq!(request.snapshot(), (generation, RqState::Free));
        assert!(!request.try_complete(generation));
    });
}
