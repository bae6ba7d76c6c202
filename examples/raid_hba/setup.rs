//! What a run is made of: the tag layout compared ([`Mode`]) and the load's and the
//! host's sizes ([`Config`]).

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
    /// [`RequestQueue::has_work`](blkmq_core::RequestQueue::has_work) (running it when it
    /// has): seed 001's after.
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
    /// Check each read's data and every I/O's identity (see [`data_of`](super::driver::data_of)).
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
