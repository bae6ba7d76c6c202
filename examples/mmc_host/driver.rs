//! The MMC host driver: how a driver for a device that runs one command at a time is
//! written on blkmq.
//!
//! # The hardware
//!
//! An sdhci-like host in front of an SD card ([`MmcCard`], simulated). The card runs one
//! command at a time on its bus. While it runs, the host may prepare one more (map its
//! buffers for DMA, set up the command: [`MmcCard::prepare`]); the prepared command starts
//! when the bus is free ([`MmcCard::start_prepared`]) without paying its preparation on an
//! idle bus. That is Linux's MMC "depth 2": two slots, the command on the bus and the one
//! prepared behind it. When a command ends the card raises its "command done" interrupt
//! (line `CARD_IRQ`). The host takes requests of up to 512 KiB in at most 128
//! scatter-gather entries of 64 KiB, as an sdhci host does ([`MmcHost::limits`]).
//!
//! # What each `Driver` method does
//!
//! * [`init_request`](Driver::init_request): nothing. The driver keeps no data in the
//!   requests (`Payload = ()`): the two slots hold the requests themselves.
//! * [`queue_rq`](Driver::queue_rq) turns the request into a card [`Command`] and puts it
//!   in a slot: on an idle card it starts the command at once and raises the interrupt for
//!   the time it ends; with a command on the bus and the second slot free it prepares the
//!   command behind it; with both slots taken it answers [`Status::Resource`]. A request
//!   the queue cannot describe (`cx.io` gives nothing) ends with [`Status::IoErr`].
//! * Budget, batches, timeouts: the trait's defaults. The two slots are the device's whole
//!   queue, and the pipelined set-ups give the hardware queue as many tags (two).
//!
//! # Where completions come from
//!
//! From the card's interrupt, [`SimDriver::interrupt`], which the simulator calls at the
//! virtual time the driver raised it for. The handler finishes the command on the bus,
//! starts the prepared one at once (so the bus does not wait for the queue), and only then,
//! with its own lock released, ends the finished request with
//! [`IrqCx::end_request`](blkmq_sim::IrqCx::end_request). Ending it frees its tag and
//! reruns the queue, which may call `queue_rq` from inside the handler to fill the slot
//! just freed. The driver has no thread and never looks at the queue: it takes requests
//! when the queue hands them over.
//!
//! # Restart and resource
//!
//! A request that finds both slots taken is handed back with [`Status::Resource`], "not
//! now": the queue keeps it at the head of the hardware queue and runs the queue again when
//! a request completes, here from the interrupt. Nothing in the driver remembers it, and
//! the card's interrupt is always on its way while a slot is taken, so the queue never
//! needs a kick (`tests/mmc_host.rs` checks both, with more tags than slots too).
//!
//! # The naive driver
//!
//! [`HostStyle::OneAtATime`] is what the naive switch to blk-mq kept of Linux's legacy
//! path: a queue thread (`mmcqd`) that takes one request, prepares and starts it, and
//! wakes again at the interrupt to end it, preparing the next only then. The same code
//! plays it, with the second slot unused and each start and completion later by the
//! thread's wake-up ([`QUEUE_THREAD_WAKE_NS`]). It is here to measure what that costs;
//! [`HostStyle::Pipelined`] is the driver to copy.

use std::sync::{Mutex, MutexGuard};

use blkmq_core::{Driver, HctxCx, Platform, QueueLimits, Rejected, RequestInit, Rq, Status};
use blkmq_sim::{CmdId, Command, IrqCx, MmcCard, QUEUE_THREAD_WAKE_NS, SimDriver, SimPlatform};

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
