//! The set-ups compared and the runs of seed 000's benchmarks through them: the simulated
//! [`COLUMNS`] (a driver style, a tag depth, merging or not, a scheduler), the card's
//! [`Setup`], the [`Scale`] of the benchmarks, the legacy path the card was calibrated
//! with, and [`run_all`], which runs every one of them.

use blkmq_core::{BioFlags, Elevator, QueueConfig, TagSet};
use blkmq_sched_bfq::Bfq;
use blkmq_sched_deadline::Deadline;
use blkmq_sim::{
    CardParams, Dd, Find, FindParams, Iozone, IozoneParams, LegacyMmc, MmcCard,
    QUEUE_THREAD_WAKE_NS, QueueId, Sim, SimDriver, SimPlatform,
};

use super::Fallible;
use super::driver::{HOST_MAX_SEGMENTS, HostStats, HostStyle, MmcHost};
use super::figures::{Activity, Counters, Figures};
use super::startup::{Startup, run_startup, startup_columns};

/// Requests a scheduler holds: Linux's MMC queue announces a depth of 64 to blk-mq, which
/// gives a scheduler twice that, whatever the two slots of the card.
pub(crate) const SCHED_REQUESTS: usize = 128;

/// One simulated column: a host driver style, its tag depth, whether `dd`'s bios may
/// merge, and the I/O scheduler. Adding a scheduler is adding an entry to [`COLUMNS`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Column {
    /// Its title.
    pub(crate) name: &'static str,
    /// How the driver uses the card.
    pub(crate) style: HostStyle,
    /// Driver tags (the hardware queue's depth).
    pub(crate) depth: usize,
    /// Whether `dd`'s bios are kept from merging (`BioFlags::NOMERGE`).
    pub(crate) nomerge: bool,
    /// The I/O scheduler, made anew for every simulation.
    pub(crate) elevator: fn() -> Option<Box<dyn Elevator>>,
    /// Where the column should land against the seed's BEFORE.
    pub(crate) expect: Expect,
}

/// The direction a column is expected to take against BEFORE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expect {
    /// The seed's regression: `dd` slower and `find` longer.
    Regression,
    /// No worse: `dd` and the iozone read columns at least as fast, `find` no longer.
    NoWorse,
}

fn no_elevator() -> Option<Box<dyn Elevator>> {
    None
}

fn mq_deadline() -> Option<Box<dyn Elevator>> {
    Some(Box::new(Deadline::new()))
}

fn bfq() -> Option<Box<dyn Elevator>> {
    Some(Box::new(Bfq::new()))
}

/// The simulated columns, in print order.
pub(crate) const COLUMNS: [Column; 4] = [
    // The seed's AFTER: no scheduler, nothing merges, one tag, one request at a time.
    Column {
        name: "naive",
        style: HostStyle::OneAtATime,
        depth: 1,
        nomerge: true,
        elevator: no_elevator,
        expect: Expect::Regression,
    },
    Column {
        name: "none",
        style: HostStyle::Pipelined,
        depth: 2,
        nomerge: false,
        elevator: no_elevator,
        expect: Expect::NoWorse,
    },
    Column {
        name: "mq-deadline",
        style: HostStyle::Pipelined,
        depth: 2,
        nomerge: false,
        elevator: mq_deadline,
        expect: Expect::NoWorse,
    },
    Column {
        name: "bfq",
        style: HostStyle::Pipelined,
        depth: 2,
        nomerge: false,
        elevator: bfq,
        expect: Expect::NoWorse,
    },
];

/// The card the scenarios run on, and the wake-up of the queue thread that the legacy path
/// and the naive driver start their commands from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Setup {
    /// The card.
    pub(crate) card: CardParams,
    /// The queue thread's wake-up.
    pub(crate) thread_wake_ns: u64,
}

impl Setup {
    /// The seed's: the simulator's card defaults, fitted to the seed's BEFORE with its
    /// queue thread's wake-up (the calibration below checks them; no parameter needed
    /// changing).
    pub(crate) fn seed() -> Setup {
        Setup {
            card: CardParams::default(),
            thread_wake_ns: QUEUE_THREAD_WAKE_NS,
        }
    }

    /// The same fit with a thread that wakes in `wake_ns`: what the thread does not take
    /// of the fitted times, the card's commands and the host's preparation do (each
    /// command start and each completion at depth 1 waits one wake-up; so does each start
    /// behind another command).
    pub(crate) fn with_thread_wake(wake_ns: u64) -> Option<Setup> {
        let seed = Setup::seed();
        let fitted = |ns: u64| (ns + QUEUE_THREAD_WAKE_NS).checked_sub(wake_ns);
        let mut card = seed.card;
        card.prepare_ns = fitted(card.prepare_ns)?;
        card.read.command_ns = fitted(card.read.command_ns)?;
        card.write.command_ns = fitted(card.write.command_ns)?;
        Some(Setup {
            card,
            thread_wake_ns: wake_ns,
        })
    }
}

/// How much of each benchmark to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Scale {
    /// `dd`'s length.
    pub(crate) dd_bytes: u64,
    /// iozone's smallest and largest record (sizes double in between).
    pub(crate) min_record: u64,
    /// See `min_record`.
    pub(crate) max_record: u64,
}

impl Scale {
    /// The seed's: `dd` of 1 GiB, iozone records from 4 KiB to 16 MiB.
    pub(crate) const SEED: Scale = Scale {
        dd_bytes: 1 << 30,
        min_record: 4 << 10,
        max_record: 16 << 20,
    };

    /// Quicker: `dd` of 64 MiB, iozone records from 4 KiB to 2 MiB (the records of one
    /// request and the first that take several).
    pub(crate) const SMALL: Scale = Scale {
        dd_bytes: 64 << 20,
        min_record: 4 << 10,
        max_record: 2 << 20,
    };
}

/// Runs `dd`, `find` and iozone at `scale`, each on a fresh simulation from `make`, the bios
/// of `dd` and `find` carrying `flags` as well as their own; `host` reads the driver's counts
/// after each run, where it has them. The queue's I/O accounting is read after iozone's
/// run, the one of the three with reads and writes of every size.
fn measure<D: SimDriver>(
    scale: Scale,
    flags: BioFlags,
    make: impl Fn() -> Fallible<(Sim<D>, QueueId)>,
    host: impl Fn(&D) -> Option<HostStats>,
) -> Fallible<Figures> {
    let mut activity = Activity::default();
    let mut seen = false;
    let mut run = |sim: &mut Sim<D>| -> Fallible<()> {
        let report = sim.run()?;
        if let Some(h) = host(sim.host().driver()) {
            activity.add(h, &report.stats);
            seen = true;
        }
        Ok(())
    };

    let (mut sim, queue) = make()?;
    let dd = sim.add_workload(queue, Dd::read(0, scale.dd_bytes).flags(flags));
    run(&mut sim)?;
    let dd = sim.workload(dd).result().ok_or("dd did not finish")?;

    let (mut sim, queue) = make()?;
    let walk = FindParams::default();
    let walk = FindParams {
        flags: walk.flags | flags,
        ..walk
    };
    let find = sim.add_workload(queue, Find::new(walk));
    run(&mut sim)?;
    let find_ns = sim
        .workload(find)
        .elapsed_ns()
        .ok_or("find did not finish")?;

    let (mut sim, queue) = make()?;
    let sweep = IozoneParams {
        min_record: scale.min_record,
        max_record: scale.max_record,
        ..IozoneParams::default()
    };
    let iozone = sim.add_workload(queue, Iozone::new(sweep));
    run(&mut sim)?;
    let grid = sim.workload(iozone).grid().clone();
    let counters = sim.queue(queue).stats().map(|stats| {
        let latency = sim.queue(queue).latency().unwrap_or_default();
        Counters { stats, latency }
    });
    Ok(Figures {
        dd,
        dd_real_ns: dd.elapsed_ns,
        find_ns,
        grid,
        activity: seen.then_some(activity),
        counters,
    })
}

/// A simulation of the card behind [`MmcHost`], set up as `column` says.
pub(crate) fn host_sim(column: &Column, setup: Setup) -> Fallible<(Sim<MmcHost>, QueueId)> {
    let platform = SimPlatform::new(1);
    let host = MmcHost::new(platform.clone(), MmcCard::new(setup.card)?, column.style)
        .thread_wake(setup.thread_wake_ns);
    // Accounting on, for the latency pictures; it reads the virtual clock and changes no
    // figure.
    let mut config = QueueConfig::new(host.limits()).accounting(true);
    if let Some(elevator) = (column.elevator)() {
        config = config.elevator(elevator).nr_requests(SCHED_REQUESTS);
    }
    // Room for every request in the driver to hold a full merge, as Linux, whose bios are
    // allocated per I/O, always has.
    let tags = TagSet::builder(column.depth).bio_slots(column.depth * HOST_MAX_SEGMENTS as usize);
    let mut sim = Sim::new(platform, tags, host)?;
    let queue = sim.add_queue(config)?;
    Ok((sim, queue))
}

/// The figures of `column` at `scale`.
pub(crate) fn run_column(column: &Column, setup: Setup, scale: Scale) -> Fallible<Figures> {
    let flags = if column.nomerge {
        BioFlags::NOMERGE
    } else {
        BioFlags::empty()
    };
    measure(
        scale,
        flags,
        || host_sim(column, setup),
        |host| Some(host.stats()),
    )
}

/// The card driven as Linux's legacy single-queue path drove it, the set-up the card's
/// parameters were fitted with: its queue thread ([`LegacyMmc`]), which prepares the next
/// request while one is on the bus and wakes to start every command, behind the
/// simulator's generic driver and a sorting and merging elevator.
pub(crate) fn run_legacy(setup: Setup, scale: Scale) -> Fallible<Figures> {
    measure(
        scale,
        BioFlags::empty(),
        || {
            let card = LegacyMmc::new(MmcCard::new(setup.card)?, setup.thread_wake_ns);
            Ok(Sim::for_model(card, 1, mq_deadline())?)
        },
        |_| None,
    )
}

/// Every simulated figure of a run.
#[derive(Clone, Debug)]
pub(crate) struct Results {
    /// The scale it ran at.
    pub(crate) scale: Scale,
    /// The card driven as the legacy path did (the model's BEFORE).
    pub(crate) legacy: Figures,
    /// Each of [`COLUMNS`], in order.
    pub(crate) columns: Vec<(Column, Figures)>,
    /// The start-up burst of each of [`startup_columns`].
    pub(crate) startup: Vec<(Column, Startup)>,
}

/// Runs the legacy calibration and every column at `scale`, one thread each.
pub(crate) fn run_all(setup: Setup, scale: Scale) -> Fallible<Results> {
    std::thread::scope(|s| {
        let legacy = s.spawn(move || run_legacy(setup, scale));
        let columns: Vec<_> = COLUMNS
            .iter()
            .map(|column| s.spawn(move || run_column(column, setup, scale)))
            .collect();
        let startups: Vec<_> = startup_columns()
            .map(|column| s.spawn(move || run_startup(column, setup)))
            .collect();
        fn join<T>(r: std::thread::Result<Fallible<T>>) -> Fallible<T> {
            r.map_err(|_| "a simulation panicked")?
        }
        let legacy = join(legacy.join())?;
        let mut figures = Vec::new();
        for (column, handle) in COLUMNS.iter().zip(columns) {
            figures.push((*column, join(handle.join())?));
        }
        let mut startup = Vec::new();
        for (column, handle) in startup_columns().zip(startups) {
            startup.push((*column, join(handle.join())?));
        }
        Ok(Results {
            scale,
            legacy,
            columns: figures,
            startup,
        })
    })
}
