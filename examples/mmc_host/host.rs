//! An MMC host driver against the simulated SD card, the scenarios of seed 000 run
//! through it, and the comparisons with the seed's figures: the code the `mmc_host`
//! example prints and `tests/mmc_host.rs` checks.
//!
//! Start with the driver; the rest is what runs it and what it is compared with:
//!
//! * `driver.rs`: the host driver ([`MmcHost`](driver::MmcHost)) and its hardware: what
//!   each `Driver` method does, where the completions come from, how "not now" works for
//!   it, and the naive driver it is measured against.
//! * `scenario.rs`: the set-ups compared ([`COLUMNS`](scenario::COLUMNS)), the card's
//!   [`Setup`], the [`Scale`] of the benchmarks, the legacy path the card was calibrated
//!   with, and [`run_all`].
//! * `figures.rs`: the figures of a set-up, read from the seed's text or measured.
//! * `startup.rs`: responsiveness, an application starting up under background writes.
//! * `compare.rs`: the calibration against the seed's BEFORE and the direction checks.
//! * `report.rs`: the whole [`report`](report()), what the example prints with `--full`.
//! * `summary.rs`: the report on one screen ([`summary`](summary())), what it prints by
//!   default.
//! * `pictures.rs`: the SVG pictures `--svg DIR` writes
//!   ([`write_pictures`](write_pictures())).

use std::error::Error;

pub(crate) mod compare;
pub(crate) mod driver;
pub(crate) mod figures;
pub(crate) mod pictures;
pub(crate) mod report;
pub(crate) mod scenario;
pub(crate) mod startup;
pub(crate) mod summary;

pub(crate) use pictures::write_pictures;
pub(crate) use report::report;
pub(crate) use scenario::{Scale, Setup, run_all};
pub(crate) use summary::summary;

/// What can go wrong setting up or running a scenario.
pub(crate) type Fallible<T> = Result<T, Box<dyn Error + Send + Sync>>;
