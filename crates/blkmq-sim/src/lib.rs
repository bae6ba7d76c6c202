//! A deterministic discrete-event simulator for blkmq: the real block layer under a
//! virtual clock, in front of device models, driven by workloads, reported in the seeds'
//! own formats.
//!
//! * [`SimPlatform`]: the [`Platform`](blkmq_core::Platform) on virtual time — a clock
//!   only the event loop moves, a current CPU the loop sets, kicks and interrupts turned
//!   into events.
//! * [`Sim`]: the event loop. Events are ordered by (time, sequence number): device
//!   interrupts, kicks, elevator timers
//!   ([`RequestQueue::next_timer`](blkmq_core::RequestQueue::next_timer)), timeout checks,
//!   workload starts and wake-ups. It calls the library as a kernel would — `submit`,
//!   the driver's `queue_rq`, `end_request` — on one thread; what runs outside a
//!   submission or a completion (kicked queues, timers, timeouts, tag idling) is the
//!   host's one service entry point, [`Host::service`](blkmq_core::Host::service), each
//!   part at the time the loop's model of kblockd gives it
//!   ([`Host::service_only`](blkmq_core::Host::service_only)).
//! * Device models behind [`DeviceModel`]: [`MmcCard`] (with its own start / prepare /
//!   interrupt interface for a hand-written driver, and [`LegacyMmc`], the card behind
//!   Linux's legacy MMC queue thread), [`Disk`], [`Ssd`], [`Raid0`], [`Ideal`];
//!   [`ModelDriver`] drives any of them. A hand-written driver implements
//!   [`SimDriver`] for its interrupts.
//! * Workloads ([`Workload`]): [`Dd`], [`Find`], [`Iozone`], [`FioJob`], [`Replay`] of a
//!   [`Trace`].
//! * Reports: [`SimReport`] (per workload, per issuer with [`LatencyStats`]),
//!   [`DdResult`] and [`real_line`] in busybox's formats, [`IozoneGrid`] in iozone's (and
//!   as SVG), [`side_by_side`] for comparing schedulers.
//! * Pictures: [`BarChart`], [`iozone_grids_svg`] and [`latency_histograms_svg`], SVG
//!   documents that write every figure they draw as text.
//!
//! * Data (opt-in): a [`ModelDriver`] that [keeps data](ModelDriver::keep_data) stores
//!   what writes carry and fills reads, and a run that [checks data](Sim::check_data)
//!   gives its bios buffers in the platform's [`SimMemory`] and compares every byte read
//!   with the last written ([`DataCheck`]). Off by default; a run with it on merges,
//!   splits and times exactly as one without.
//!
//! Runs repeat exactly: the only randomness is [`SimRng`], seeded; nothing reads a wall
//! clock or depends on hash order.
//!
//! ```
//! use blkmq_sched_deadline::Deadline;
//! use blkmq_sim::{CardParams, Dd, MmcCard, Sim, side_by_side};
//!
//! let mut results = Vec::new();
//! for deadline in [false, true] {
//!     let card = MmcCard::new(CardParams::default()).unwrap();
//!     let elevator = deadline.then(|| Box::new(Deadline::new()) as _);
//!     let (mut sim, queue) = Sim::for_model(card, 1, elevator).unwrap();
//!     // 4 MiB through 128 KiB readahead, 4 bios in flight, refilled 2 at a time.
//!     let dd = sim.add_workload(queue, Dd::read(0, 4 << 20).window(4).refill(2));
//!     let report = sim.run().unwrap();
//!     assert_eq!(report.stats.end_io_calls, report.stats.bios_submitted);
//!     results.push(sim.workload(dd).result().unwrap().to_string());
//! }
//! println!("{}", side_by_side(&[("none", &results[0]), ("mq-deadline", &results[1])]));
//! ```

#![deny(unsafe_op_in_unsafe_fn)]
#![forbid(unsafe_code)]

mod data;
mod device;
mod driver;
mod platform;
mod report;
mod rng;
mod seed;
mod sim;
mod svg;
mod workload;

pub use data::{DataCheck, SimMemory};
pub use device::{
    CardParams, CmdId, Command, DeviceModel, DeviceStats, Disk, DiskParams, Ideal, IdealParams,
    LegacyMmc, MmcCard, ParamError, QUEUE_THREAD_WAKE_NS, Raid0, Raid0Params, Ssd, SsdParams,
    Transfer, transfer_ns,
};
pub use driver::{IrqCx, ModelDriver, SimDriver};
pub use platform::SimPlatform;
pub use report::{
    IssuerReport, LatencyStats, SimReport, SimStats, WorkloadReport, busybox_size, dd_line,
    issuer_table, real_line, side_by_side,
};
pub use rng::SimRng;
pub use seed::{SEED_000_AFTER, SEED_000_BEFORE};
pub use sim::{QueueId, Sim, SimConfig, SimError, WorkloadId};
pub use svg::{Bar, BarChart, iozone_grids_svg, latency_histograms_svg};
pub use workload::{
    Cx, Dd, DdResult, Done, Find, FindParams, FioJob, IOZONE_TESTS, Io, Iozone, IozoneGrid,
    IozoneParams, IozoneTest, Pattern, Replay, Trace, TraceError, TraceRecord, Workload,
};
