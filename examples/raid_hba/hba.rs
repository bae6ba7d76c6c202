//! A megaraid-like RAID HBA driver on blkmq and the closed-loop load that drives it: the
//! code the `raid_hba` example prints, `tests/raid_hba.rs` checks and `benches/hba.rs`
//! times.
//!
//! The host has `hctxs` hardware queues over [`CPUS`](rig::CPUS) CPU slots, a host-wide
//! depth and one RAID-0 volume of [`MEMBERS`](driver::MEMBERS) drives striped in
//! [`STRIPE_SECTORS`](driver::STRIPE_SECTORS). Start with the driver; the rest is what
//! runs it and what it measures:
//!
//! * `driver.rs`: the driver ([`Hba`](driver::Hba)) and its hardware: what each `Driver`
//!   method does, where the completions come from, how budget and "not now" work for it.
//! * `setup.rs`: what a run is made of: the [`Mode`]s, the tag layouts compared (one
//!   hardware queue holding the whole depth, the depth split over the hardware queues,
//!   shared host tags, and shared host tags with a completion path that scans every
//!   hardware queue after each completion, what Linux did before the fix in seed 001), and
//!   the [`Config`].
//! * `rig.rs`: the host built for a mode ([`Rig`]) and the load: submitter threads that
//!   keep `iodepth` 4 KiB random reads in flight each, completion threads standing in for
//!   the reply-queue interrupts, and the checks of every completion.
//! * `stats.rs`: what a run measured ([`Stats`](stats::Stats)), the rounds combined, and
//!   the [`targets`](stats::targets) the example judges.

pub(crate) mod driver;
pub(crate) mod rig;
pub(crate) mod setup;
pub(crate) mod stats;

pub(crate) use rig::Rig;
pub(crate) use setup::{Config, Mode};
