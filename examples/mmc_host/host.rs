//! An MMC host driver against the simulated SD card, the scenarios of seed 000 run
//! through it, and the comparisons with the seed's figures: the code the `mmc_host`
//! example prints and `tests/mmc_host.rs` checks.

use std::error::Error;
use std::fmt::Write as _;
use std::sync::{Mutex, MutexGuard};

use blkmq_core::{
    BioFlags, Driver, Elevator, HctxCx, IssuerId, Platform, QueueConfig, QueueLimits, Rejected,
    RequestInit, Rq, Status, TagSet,
};
use blkmq_sched_bfq::Bfq;
use blkmq_sched_deadline::Deadline;
use blkmq_sim::{
    CardParams, CmdId, Command, Dd, DdResult, Find, FindParams, FioJob, IOZONE_TESTS, Iozone,
    IozoneGrid, IozoneParams, IozoneTest, IrqCx, LegacyMmc, MmcCard, Pattern, QUEUE_THREAD_WAKE_NS,
    QueueId, Sim, SimDriver, SimPlatform, SimStats, real_line, side_by_side,
};

/// What can go wrong setting up or running a scenario.
pub(crate) type Fallible<T> = Result<T, Box<dyn Error + Send + Sync>>;

// ----- the host driver -----

/// Requests a scheduler holds: Linux's MMC queue announces a depth of 64 to blk-mq, which
/// gives a scheduler twice that, whatever the two slots of the card.
pub(crate) const SCHED_REQUESTS: usize = 128;
/// The largest request an sdhci host takes (`max_req_size`, 512 KiB), in sectors.
pub(crate) const HOST_MAX_SECTORS: u32 = 1024;
/// The host's scatter-gather entries per request (`max_segs`).
pub(crate) const HOST_MAX_SEGMENTS: u32 = 128;
/// The largest scatter-gather entry (`max_seg_size`: 64 KiB, the ADMA descriptor length).
pub(crate) const HOST_MAX_SEGMENT_SIZE: u32 = 64 * 1024;

/// The interrupt line of the card's "command done" interrupt.
const CARD_IRQ: u64 = 0;

/// How a host driver uses the card's two slots (the command on the bus and the one the
/// host may prepare meanwhile).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HostStyle {
    /// One request at a time, by the old `mmc_queue_thread()` loop that the naive switch to
    /// blk-mq kept: the thread wakes ([`QUEUE_THREAD_WAKE_NS`]) to take the request,
    /// prepares and starts it, and wakes again at the card's interrupt to end it; the next
    /// one's preparation starts only then.
    OneAtATime,
    /// One command on the bus and the next one prepared behind it, started by the
    /// interrupt that ends the first: preparation hides behind the transfer.
    Pipelined,
}

/// What the driver did, for the report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct HostStats {
    /// Requests started at once on an idle card from `queue_rq`.
    pub(crate) started_idle: u64,
    /// Requests prepared in `queue_rq` while another was on the bus.
    pub(crate) prepared_behind: u64,
    /// `queue_rq` calls answered with [`Status::Resource`] (both slots taken).
    pub(crate) resource_busy: u64,
    /// Interrupts handled.
    pub(crate) interrupts: u64,
    /// Prepared commands the interrupt handler started.
    pub(crate) started_from_irq: u64,
}

/// The card and the requests in its two slots, behind the driver's lock.
struct HostState {
    card: MmcCard,
    on_bus: Option<(CmdId, Rq)>,
    prepared: Option<(CmdId, Rq)>,
    next_id: CmdId,
    stats: HostStats,
}

/// An MMC host driver for the simulated card: one hardware queue, the request on the bus
/// and (in [`HostStyle::Pipelined`]) one more prepared behind it.
///
/// * `queue_rq` starts the command when the card is idle, prepares it when one is on the
///   bus and the second slot is free, and otherwise answers [`Status::Resource`]: the
///   queue keeps the request and runs again when one completes.
/// * The card's interrupt ([`SimDriver::interrupt`]) finishes the command on the bus,
///   starts the prepared one, and only then ends the finished request: ending it frees
///   its tag and reruns the queue, which hands the driver its next request.
///
/// The driver has no thread of its own and never looks at the queue: it takes requests
/// when the queue calls it.
pub(crate) struct MmcHost {
    platform: SimPlatform,
    style: HostStyle,
    /// The wake-up of the naive driver's thread.
    thread_wake_ns: u64,
    state: Mutex<HostState>,
}

impl MmcHost {
    /// A host of `card`, raising its interrupts on `platform`.
    pub(crate) fn new(platform: SimPlatform, card: MmcCard, style: HostStyle) -> Self {
        Self {
            platform,
            style,
            thread_wake_ns: QUEUE_THREAD_WAKE_NS,
            state: Mutex::new(HostState {
                card,
                on_bus: None,
                prepared: None,
                next_id: 0,
                stats: HostStats::default(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HostState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The queue limits the host sets: its own request and segment limits, the card's
    /// capacity.
    pub(crate) fn limits(&self) -> QueueLimits {
        QueueLimits {
            max_sectors: HOST_MAX_SECTORS,
            max_segments: HOST_MAX_SEGMENTS,
            max_segment_size: HOST_MAX_SEGMENT_SIZE,
            ..QueueLimits::new(self.lock().card.params().capacity_sectors)
        }
    }

    /// What the driver did so far.
    pub(crate) fn stats(&self) -> HostStats {
        self.lock().stats
    }

    /// With the naive driver's thread waking in `wake_ns` (default
    /// [`QUEUE_THREAD_WAKE_NS`]); the pipelined driver has no thread.
    pub(crate) fn thread_wake(mut self, wake_ns: u64) -> Self {
        self.thread_wake_ns = wake_ns;
        self
    }

    /// The wake-up of the driver's own thread before each start and each completion: the
    /// naive driver's; none for the pipelined one.
    fn thread_wake_ns(&self) -> u64 {
        match self.style {
            HostStyle::OneAtATime => self.thread_wake_ns,
            HostStyle::Pipelined => 0,
        }
    }
}

impl Driver for MmcHost {
    type Platform = SimPlatform;
    type Payload = ();

    fn init_request(&self, _: RequestInit) {}

    fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _last: bool) -> Result<(), Rejected> {
        let Some(cmd) = cx.io(&rq).map(|io| Command {
            op: io.op(),
            sector: io.sector(),
            sectors: io.sectors(),
            flags: io.flags(),
        }) else {
            return Err(Rejected {
                rq,
                status: Status::IoErr,
            });
        };
        let now = self.platform.now_ns();
        let mut st = self.lock();
        let id = st.next_id;
        if st.on_bus.is_none() && st.prepared.is_none() {
            // The naive driver's thread wakes to start the command, and again to see it end.
            let wake = self.thread_wake_ns();
            if let Ok(done_at) = st.card.start(now + wake, id, cmd) {
                self.platform.raise_irq(done_at + wake, CARD_IRQ);
                st.on_bus = Some((id, rq));
                st.next_id += 1;
                st.stats.started_idle += 1;
                return Ok(());
            }
        } else if self.style == HostStyle::Pipelined
            && st.prepared.is_none()
            && st.card.prepare(now, id, cmd).is_ok()
        {
            st.prepared = Some((id, rq));
            st.next_id += 1;
            st.stats.prepared_behind += 1;
            return Ok(());
        }
        st.stats.resource_busy += 1;
        Err(Rejected {
            rq,
            status: Status::Resource,
        })
    }
}

impl SimDriver for MmcHost {
    fn interrupt(&self, cx: &IrqCx<'_, Self>, _line: u64) {
        let now = cx.now_ns();
        let finished = {
            let mut st = self.lock();
            st.stats.interrupts += 1;
            // Raised for the time the command ends, so the card has finished it.
            let Some(id) = st.card.finish(now) else {
                return;
            };
            let Some((on_bus, finished)) = st.on_bus.take() else {
                return;
            };
            debug_assert_eq!(on_bus, id, "the card finished the command on the bus");
            if st.prepared.is_some() {
                if let Some(done_at) = st.card.start_prepared(now) {
                    self.platform.raise_irq(done_at, CARD_IRQ);
                    st.on_bus = st.prepared.take();
                    st.stats.started_from_irq += 1;
                }
            }
            finished
        };
        // The lock is released: ending the request reruns the queue, which may call
        // `queue_rq` from here.
        let _ = cx.end_request(finished, Status::Ok);
    }
}

// ----- the set-ups compared -----

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

/// The figures of one set-up: `dd`, `find`, iozone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Figures {
    /// `dd if=/dev/mmcblk0 of=/dev/null bs=1M`.
    pub(crate) dd: DdResult,
    /// `time`'s real time of the `dd`.
    pub(crate) dd_real_ns: u64,
    /// `time find . > /dev/null`.
    pub(crate) find_ns: u64,
    /// `iozone -az -i0 -i1 -i2 -s 20m -I`.
    pub(crate) grid: IozoneGrid,
    /// What the host driver and the queue did over the three runs (simulated columns only).
    pub(crate) activity: Option<Activity>,
}

/// What the host driver and the queue did, summed over a column's runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Activity {
    /// The driver's own counts.
    pub(crate) host: HostStats,
    /// Queue runs the simulation had to kick (a queue that turned a request away with
    /// nothing in flight to restart it).
    pub(crate) kick_runs: u64,
    /// Bios that found no free request and waited for one.
    pub(crate) bios_waited: u64,
}

impl Activity {
    fn add(&mut self, host: HostStats, sim: &SimStats) {
        let h = &mut self.host;
        h.started_idle += host.started_idle;
        h.prepared_behind += host.prepared_behind;
        h.resource_busy += host.resource_busy;
        h.interrupts += host.interrupts;
        h.started_from_irq += host.started_from_irq;
        self.kick_runs += sim.kick_runs;
        self.bios_waited += sim.bios_waited;
    }
}

/// The seed's text before and after the naive switch to blk-mq, as posted.
pub(crate) use blkmq_sim::{SEED_000_AFTER as SEED_AFTER, SEED_000_BEFORE as SEED_BEFORE};

/// `47.781464` as nanoseconds.
fn parse_seconds(text: &str) -> Option<u64> {
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    if frac.len() > 9 {
        return None;
    }
    let frac_ns: u64 = format!("{frac:0<9}").parse().ok()?;
    Some(whole.parse::<u64>().ok()? * 1_000_000_000 + frac_ns)
}

/// `real    1m 0.56s` as nanoseconds.
fn parse_real(line: &str) -> Option<u64> {
    let rest = line.strip_prefix("real")?.trim();
    let (minutes, seconds) = rest.split_once('m')?;
    let seconds = seconds.trim().strip_suffix('s')?;
    Some(minutes.trim().parse::<u64>().ok()? * 60_000_000_000 + parse_seconds(seconds)?)
}

impl Figures {
    /// Reads the figures from the seed's text: the `dd` result line, the two `real` lines
    /// (`dd`'s, then `find`'s) and the iozone grid.
    pub(crate) fn parse_seed(text: &str) -> Option<Figures> {
        let copied = text.lines().find(|l| l.contains(" copied, "))?;
        let bytes = copied.split_whitespace().next()?.parse().ok()?;
        let (_, after) = copied.split_once(" copied, ")?;
        let elapsed_ns = parse_seconds(after.split_whitespace().next()?)?;
        let mut reals = text.lines().filter_map(parse_real);
        let dd_real_ns = reals.next()?;
        let find_ns = reals.next()?;
        Some(Figures {
            dd: DdResult {
                bytes,
                elapsed_ns,
                block_bytes: 1 << 20,
                errors: 0,
            },
            dd_real_ns,
            find_ns,
            grid: IozoneGrid::parse(text)?,
            activity: None,
        })
    }

    /// The `dd` block as the seed shows it (without `user` and `sys`).
    pub(crate) fn dd_text(&self) -> String {
        format!("{}\n{}", self.dd, real_line(self.dd_real_ns))
    }

    /// The `find` line as the seed shows it.
    pub(crate) fn find_text(&self) -> String {
        real_line(self.find_ns)
    }
}

/// Runs `dd`, `find` and iozone at `scale`, each on a fresh simulation from `make`, the bios
/// of `dd` and `find` carrying `flags` as well as their own; `host` reads the driver's counts
/// after each run, where it has them.
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
    Ok(Figures {
        dd,
        dd_real_ns: dd.elapsed_ns,
        find_ns,
        grid,
        activity: seen.then_some(activity),
    })
}

/// A simulation of the card behind [`MmcHost`], set up as `column` says.
pub(crate) fn host_sim(column: &Column, setup: Setup) -> Fallible<(Sim<MmcHost>, QueueId)> {
    let platform = SimPlatform::new(1);
    let host = MmcHost::new(platform.clone(), MmcCard::new(setup.card)?, column.style)
        .thread_wake(setup.thread_wake_ns);
    let mut config = QueueConfig::new(host.limits());
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

// ----- responsiveness -----

/// An application starting up: its first reads, 4 KiB each, one at a time, spread over
/// 64 MiB (libraries, configuration), by an issuer new to the queue.
pub(crate) const STARTUP_READS: u64 = 128;
/// When it starts: the background writers have filled the queue by then.
pub(crate) const STARTUP_AT_NS: u64 = 1_000_000_000;
/// Background writers: each a `dd` writing through the page cache, 16 bios of 128 KiB in
/// flight (writeback), far from the start-up's reads and from each other.
pub(crate) const STARTUP_WRITERS: u32 = 4;
/// What each writer writes.
pub(crate) const STARTUP_WRITE_BYTES: u64 = 48 << 20;

/// How long a column takes to serve the start-up burst, alone and under the writers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Startup {
    /// On an idle card.
    pub(crate) idle_ns: u64,
    /// Under the background writers.
    pub(crate) loaded_ns: u64,
    /// What the writers moved per second meanwhile (loaded run), in bytes.
    pub(crate) writers_bytes_per_sec: u64,
}

impl Startup {
    /// Loaded over idle.
    pub(crate) fn slowdown(&self) -> f64 {
        self.loaded_ns as f64 / self.idle_ns as f64
    }
}

/// The start-up burst on `column`, with the background writers when `loaded`: its time
/// from start to last completion, and the writers' rate over the run.
fn startup_run(column: &Column, setup: Setup, loaded: bool) -> Fallible<(u64, u64)> {
    let (mut sim, queue) = host_sim(column, setup)?;
    let mut writers = Vec::new();
    if loaded {
        for i in 0..STARTUP_WRITERS {
            let start = (u64::from(i) + 1) * (256 << 11); // 256 MiB apart, in sectors
            let dd = Dd::write(start, STARTUP_WRITE_BYTES)
                .issuer(IssuerId(100 + i))
                .window(16)
                .refill(8);
            writers.push(sim.add_workload(queue, dd));
        }
    }
    let burst = FioJob::new(IssuerId(1), Pattern::RandRead, 4096, 1, STARTUP_READS)
        .region(2 << 21, 64 << 11) // at 2 GiB, 64 MiB long
        .seed(7);
    let burst = sim.add_workload_on(queue, 0, STARTUP_AT_NS, burst);
    let report = sim.run()?;
    let ended = &report.workloads[burst.index()];
    if !ended.finished || ended.ios != STARTUP_READS {
        return Err(format!("{}: the start-up burst did not finish", column.name).into());
    }
    let written: u64 = writers
        .iter()
        .map(|w| report.workloads[w.index()].bytes_written)
        .sum();
    let span = writers
        .iter()
        .map(|w| report.workloads[w.index()].end_ns)
        .max()
        .unwrap_or(0);
    let rate = if span == 0 {
        0
    } else {
        (u128::from(written) * 1_000_000_000 / u128::from(span)) as u64
    };
    Ok((ended.elapsed_ns(), rate))
}

/// The start-up burst on `column`, idle and loaded.
pub(crate) fn run_startup(column: &Column, setup: Setup) -> Fallible<Startup> {
    let (idle_ns, _) = startup_run(column, setup, false)?;
    let (loaded_ns, writers_bytes_per_sec) = startup_run(column, setup, true)?;
    Ok(Startup {
        idle_ns,
        loaded_ns,
        writers_bytes_per_sec,
    })
}

/// The columns the responsiveness table compares: every one with the pipelined driver.
pub(crate) fn startup_columns() -> impl Iterator<Item = &'static Column> {
    COLUMNS.iter().filter(|c| c.expect == Expect::NoWorse)
}

/// The responsiveness table.
pub(crate) fn startup_table(rows: &[(Column, Startup)]) -> String {
    let mut out = format!(
        "{:<12} {:>12} {:>14} {:>10} {:>14}\n",
        "column", "idle card", "under writes", "slowdown", "writers MB/s"
    );
    for (column, s) in rows {
        let _ = writeln!(
            out,
            "{:<12} {:>10.1}ms {:>12.1}ms {:>9.2}x {:>14.2}",
            column.name,
            s.idle_ns as f64 / 1e6,
            s.loaded_ns as f64 / 1e6,
            s.slowdown(),
            s.writers_bytes_per_sec as f64 / 1e6
        );
    }
    out
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

// ----- comparisons -----

/// One figure of the seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Figure {
    /// `dd`'s rate.
    Dd,
    /// `find`'s real time.
    Find,
    /// An iozone cell: record size in kB, test.
    Iozone(u64, IozoneTest),
}

impl Figure {
    /// Its name and unit in the tables.
    pub(crate) fn name(self) -> String {
        match self {
            Figure::Dd => "dd (MB/s)".into(),
            Figure::Find => "find (s)".into(),
            Figure::Iozone(reclen, test) => format!("iozone {reclen} kB {} (kB/s)", test.name()),
        }
    }

    /// Whether a larger value is better (rates), or a smaller one (times).
    pub(crate) fn higher_is_better(self) -> bool {
        !matches!(self, Figure::Find)
    }

    /// How far the model may be from the seed in the calibration (a fraction).
    pub(crate) fn calibration_limit(self) -> f64 {
        match self {
            Figure::Dd => 0.05,
            Figure::Find => 0.10,
            Figure::Iozone(..) => 0.20,
        }
    }

    /// The value as the tables print it.
    fn show(self, value: f64) -> String {
        match self {
            Figure::Dd => format!("{value:.3}"),
            Figure::Find => format!("{value:.4}"),
            Figure::Iozone(..) => format!("{value:.0}"),
        }
    }
}

impl Figures {
    /// The value of `figure`: `dd` in MB/s as busybox counts them (2^20 bytes), `find` in
    /// seconds, iozone in kB/s.
    pub(crate) fn value(&self, figure: Figure) -> Option<f64> {
        match figure {
            Figure::Dd => {
                let seconds = self.dd.elapsed_ns.max(1) as f64 / 1e9;
                Some(self.dd.bytes as f64 / seconds / f64::from(1 << 20))
            }
            Figure::Find => Some(self.find_ns as f64 / 1e9),
            Figure::Iozone(reclen, test) => self.grid.get(reclen, test).map(|v| v as f64),
        }
    }
}

/// `dd`, `find`, then every iozone cell of `grid`, row by row.
pub(crate) fn all_figures(grid: &IozoneGrid) -> Vec<Figure> {
    let mut out = vec![Figure::Dd, Figure::Find];
    for (reclen, _) in &grid.rows {
        out.extend(IOZONE_TESTS.iter().map(|&t| Figure::Iozone(*reclen, t)));
    }
    out
}

/// The figures an [`Expect`] speaks of: `dd` and `find`, and for [`Expect::NoWorse`] the
/// read, reread and random read cells of `grid`.
pub(crate) fn directed_figures(expect: Expect, grid: &IozoneGrid) -> Vec<Figure> {
    let mut out = vec![Figure::Dd, Figure::Find];
    if expect == Expect::NoWorse {
        for (reclen, _) in &grid.rows {
            for test in [IozoneTest::Read, IozoneTest::Reread, IozoneTest::RandomRead] {
                out.push(Figure::Iozone(*reclen, test));
            }
        }
    }
    out
}

/// `(value - reference) / reference`.
pub(crate) fn relative(value: f64, reference: f64) -> f64 {
    (value - reference) / reference
}

/// One line of the calibration: the model's legacy path against the seed's BEFORE.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Calibration {
    /// The figure.
    pub(crate) figure: Figure,
    /// The seed's BEFORE.
    pub(crate) seed: f64,
    /// The model's.
    pub(crate) model: f64,
    /// `(model - seed) / seed`.
    pub(crate) error: f64,
    /// Whether `|error|` is within the figure's limit.
    pub(crate) ok: bool,
}

/// The calibration of every figure the model ran that the seed has.
pub(crate) fn calibration(seed: &Figures, legacy: &Figures) -> Vec<Calibration> {
    all_figures(&legacy.grid)
        .into_iter()
        .filter_map(|figure| {
            let (s, m) = (seed.value(figure)?, legacy.value(figure)?);
            let error = relative(m, s);
            Some(Calibration {
                figure,
                seed: s,
                model: m,
                error,
                ok: error.abs() <= figure.calibration_limit(),
            })
        })
        .collect()
}

/// One direction check: a column's figure against the seed's BEFORE and against the
/// model's BEFORE (the legacy path on the same card).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Direction {
    /// The column.
    pub(crate) column: &'static str,
    /// What it should do.
    pub(crate) expect: Expect,
    /// The figure.
    pub(crate) figure: Figure,
    /// The column's value.
    pub(crate) value: f64,
    /// The seed's BEFORE.
    pub(crate) seed: f64,
    /// The model's BEFORE.
    pub(crate) legacy: f64,
    /// Whether the value goes the expected way against the seed's BEFORE.
    pub(crate) vs_seed: bool,
    /// Whether it goes the expected way against the model's BEFORE.
    pub(crate) vs_legacy: bool,
}

impl Direction {
    /// Whether the column's figure is exactly the model's BEFORE (the same card time).
    pub(crate) fn ties_legacy(&self) -> bool {
        self.value == self.legacy
    }

    /// Why a check misses, when the figures tell.
    pub(crate) fn note(&self) -> String {
        match (self.vs_seed, self.vs_legacy, self.ties_legacy()) {
            (false, true, true) => format!(
                "= model BEFORE, {:+.2}% off the seed",
                relative(self.legacy, self.seed) * 100.0
            ),
            (_, false, true) => "= model BEFORE: nothing to overlap or merge".into(),
            _ => String::new(),
        }
    }
}

/// Whether `value` goes the `expect`ed way against `reference` for `figure`.
fn goes(expect: Expect, figure: Figure, value: f64, reference: f64) -> bool {
    let no_worse = if figure.higher_is_better() {
        value >= reference
    } else {
        value <= reference
    };
    match expect {
        Expect::NoWorse => no_worse,
        Expect::Regression => !no_worse,
    }
}

/// Every direction check of every column.
pub(crate) fn directions(seed: &Figures, results: &Results) -> Vec<Direction> {
    let mut out = Vec::new();
    for (column, figures) in &results.columns {
        for figure in directed_figures(column.expect, &figures.grid) {
            let (Some(value), Some(s), Some(legacy)) = (
                figures.value(figure),
                seed.value(figure),
                results.legacy.value(figure),
            ) else {
                continue;
            };
            out.push(Direction {
                column: column.name,
                expect: column.expect,
                figure,
                value,
                seed: s,
                legacy,
                vs_seed: goes(column.expect, figure, value, s),
                vs_legacy: goes(column.expect, figure, value, legacy),
            });
        }
    }
    out
}

// ----- the report -----

fn mark(ok: bool) -> &'static str {
    if ok { "ok" } else { "MISS" }
}

/// Blocks side by side under a header line.
fn section(header: &str, blocks: &[(&str, String)]) -> String {
    let refs: Vec<(&str, &str)> = blocks.iter().map(|(t, b)| (*t, b.as_str())).collect();
    format!("{header}\n{}", side_by_side(&refs))
}

/// The three benchmarks of several set-ups side by side, in the seed's formats.
pub(crate) fn side_by_side_figures(columns: &[(&str, &Figures)]) -> String {
    let block = |f: fn(&Figures) -> String| -> Vec<(&str, String)> {
        columns
            .iter()
            .map(|(t, figures)| (*t, f(figures)))
            .collect()
    };
    let count = columns.first().map_or(0, |(_, f)| f.dd.bytes >> 20);
    [
        section(
            &format!("time dd if=/dev/mmcblk0 of=/dev/null bs=1M count={count}"),
            &block(Figures::dd_text),
        ),
        section("time find . > /dev/null", &block(Figures::find_text)),
        section(
            "iozone -az -i0 -i1 -i2 -s 20m -I -f /mnt/foo.test",
            &block(|f| f.grid.to_string()),
        ),
    ]
    .join("\n")
}

/// What each column's driver and queue did.
pub(crate) fn activity_table(results: &Results) -> String {
    let mut out = format!(
        "{:<12} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}\n",
        "column", "started", "prepared", "from irq", "busy", "irqs", "kicked", "waited"
    );
    for (column, figures) in &results.columns {
        let a = figures.activity.unwrap_or_default();
        let h = a.host;
        let _ = writeln!(
            out,
            "{:<12} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
            column.name,
            h.started_idle,
            h.prepared_behind,
            h.started_from_irq,
            h.resource_busy,
            h.interrupts,
            a.kick_runs,
            a.bios_waited
        );
    }
    out
}

/// The calibration table: every figure, the seed's BEFORE, the model's, the error, its
/// limit and a mark.
pub(crate) fn calibration_table(rows: &[Calibration]) -> String {
    let mut out = format!(
        "{:<34} {:>12} {:>12} {:>8} {:>6}\n",
        "figure", "seed BEFORE", "model", "error", "limit"
    );
    for c in rows {
        let _ = writeln!(
            out,
            "{:<34} {:>12} {:>12} {:>+7.2}% {:>5.0}%  {}",
            c.figure.name(),
            c.figure.show(c.seed),
            c.figure.show(c.model),
            c.error * 100.0,
            c.figure.calibration_limit() * 100.0,
            mark(c.ok)
        );
    }
    let missed = rows.iter().filter(|c| !c.ok).count();
    let worst = rows.iter().map(|c| c.error.abs()).fold(0.0_f64, f64::max);
    let _ = writeln!(
        out,
        "{} of {} figures within their limits; largest error {:.2}%",
        rows.len() - missed,
        rows.len(),
        worst * 100.0
    );
    out
}

/// The direction table: per column and figure, the value, the seed's BEFORE and the
/// model's, a mark against each, and why a check misses where the figures tell.
pub(crate) fn direction_table(rows: &[Direction]) -> String {
    let mut out = format!(
        "{:<12} {:<3} {:<34} {:>10} {:>11} {:<4} {:>12} {:<4}  note\n",
        "column", "", "figure", "value", "seed BEFORE", "", "model BEFORE", ""
    );
    for d in rows {
        let expect = match (d.expect, d.figure.higher_is_better()) {
            (Expect::Regression, true) => "<",
            (Expect::Regression, false) => ">",
            (Expect::NoWorse, true) => ">=",
            (Expect::NoWorse, false) => "<=",
        };
        let line = format!(
            "{:<12} {:<3} {:<34} {:>10} {:>11} {:<4} {:>12} {:<4}  {}",
            d.column,
            expect,
            d.figure.name(),
            d.figure.show(d.value),
            d.figure.show(d.seed),
            mark(d.vs_seed),
            d.figure.show(d.legacy),
            mark(d.vs_legacy),
            d.note()
        );
        let _ = writeln!(out, "{}", line.trim_end());
    }
    let seed_misses: Vec<&Direction> = rows.iter().filter(|d| !d.vs_seed).collect();
    let ties = seed_misses.iter().filter(|d| d.ties_legacy()).count();
    let _ = writeln!(
        out,
        "{} checks: {} miss against the model's BEFORE; {} miss against the seed's BEFORE, \
         {} of them ties with the model's BEFORE",
        rows.len(),
        rows.iter().filter(|d| !d.vs_legacy).count(),
        seed_misses.len(),
        ties
    );
    out
}

/// The whole report: the seed's figures, the simulated columns with what their drivers
/// did, the calibration and the direction checks.
pub(crate) fn report(results: &Results) -> Fallible<String> {
    let before = Figures::parse_seed(SEED_BEFORE).ok_or("the seed's BEFORE does not parse")?;
    let after = Figures::parse_seed(SEED_AFTER).ok_or("the seed's AFTER does not parse")?;
    let scale = results.scale;
    let columns: Vec<(&str, &Figures)> = results.columns.iter().map(|(c, f)| (c.name, f)).collect();
    let mut out = String::new();
    out.push_str(
        "=== 1. Seed 000: SD card, Linux 4.9-rc2: legacy path (BEFORE), naive blk-mq (AFTER)\n\n",
    );
    out.push_str(&side_by_side_figures(&[
        ("BEFORE", &before),
        ("AFTER", &after),
    ]));
    let _ = writeln!(
        out,
        "\n=== 2. Simulated: the card behind the host driver (dd {} MiB, iozone records {} to {} kB)\n",
        scale.dd_bytes >> 20,
        scale.min_record >> 10,
        scale.max_record >> 10
    );
    out.push_str(&side_by_side_figures(&columns));
    out.push_str(
        "\nThe drivers over the three runs: requests started on an idle card, prepared behind \
         the one on the bus,\nstarted by the interrupt, turned away busy (Resource); interrupts; \
         kicked queue runs; bios that waited for a request.\n",
    );
    out.push_str(&activity_table(results));
    out.push_str(
        "\n=== 3. Calibration: the card driven as the legacy path drove it (the model's BEFORE) \
         against the seed's BEFORE\n\n",
    );
    out.push_str(&calibration_table(&calibration(&before, &results.legacy)));
    out.push_str(
        "\n=== 4. Directions: naive should be worse than BEFORE (<, >), none and mq-deadline \
         no worse (>=, <=)\n\n",
    );
    out.push_str(&direction_table(&directions(&before, results)));
    out.push_str(
        "A tie is a column's figure equal to the model's BEFORE to the last digit: where that \
         misses the seed's\nBEFORE, the miss is the calibration's residual (section 3), not a \
         slower path. `time` truncates to 10 ms:\nthe seed's find of 3.60 s is 3.600 to 3.609 s.\n",
    );
    let _ = writeln!(
        out,
        "\n=== 5. Responsiveness: an application starting up ({STARTUP_READS} reads of 4 KiB, one \
         at a time, over 64 MiB)\n    at {} s, on an idle card and under {STARTUP_WRITERS} `dd` \
         writers of {} MiB each (16 bios of 128 KiB in flight)\n",
        STARTUP_AT_NS / 1_000_000_000,
        STARTUP_WRITE_BYTES >> 20
    );
    out.push_str(&startup_table(&results.startup));
    Ok(out)
}
