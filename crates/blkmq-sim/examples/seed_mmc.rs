//! The seed 000 benchmarks (`dd`, `find`, `iozone -az -i0 -i1 -i2 -s 20m -I`) on the SD
//! card model driven as Linux's legacy MMC path drove it (its queue thread, which prepares
//! the next command while one is on the bus and wakes to start each, behind the generic
//! model driver), with no scheduler and with mq-deadline side by side, next to the seed's
//! "BEFORE" figures.
//!
//! ```text
//! cargo run --release -p blkmq-sim --example seed_mmc [-- out.svg]
//! ```

use blkmq_core::Elevator;
use blkmq_sched_deadline::Deadline;
use blkmq_sim::{
    CardParams, Dd, Find, FindParams, Iozone, IozoneGrid, IozoneParams, LegacyMmc, MmcCard,
    ModelDriver, QUEUE_THREAD_WAKE_NS, QueueId, SEED_000_BEFORE, Sim, side_by_side,
};

/// The card behind the legacy queue thread and the model driver, with or without
/// mq-deadline.
type CardSim = (Sim<ModelDriver<LegacyMmc>>, QueueId);

fn sim(deadline: bool) -> Result<CardSim, Box<dyn std::error::Error>> {
    let card = LegacyMmc::new(MmcCard::new(CardParams::default())?, QUEUE_THREAD_WAKE_NS);
    let elevator: Option<Box<dyn Elevator>> = if deadline {
        Some(Box::new(Deadline::new()))
    } else {
        None
    };
    Ok(Sim::for_model(card, 1, elevator)?)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut dd = Vec::new();
    let mut find = Vec::new();
    let mut grids = Vec::new();
    for deadline in [false, true] {
        let (mut s, q) = sim(deadline)?;
        let id = s.add_workload(q, Dd::read(0, 1 << 30));
        s.run()?;
        dd.push(s.workload(id).result().ok_or("dd")?.to_string());

        let (mut s, q) = sim(deadline)?;
        let id = s.add_workload(q, Find::new(FindParams::default()));
        s.run()?;
        find.push(s.workload(id).real_line().ok_or("find")?);

        let (mut s, q) = sim(deadline)?;
        let id = s.add_workload(q, Iozone::new(IozoneParams::default()));
        s.run()?;
        grids.push(s.workload(id).grid().clone());
    }
    let before = IozoneGrid::parse(SEED_000_BEFORE).ok_or("seed grid")?;
    println!(
        "{}",
        side_by_side(&[("none", &dd[0]), ("mq-deadline", &dd[1])])
    );
    println!(
        "{}",
        side_by_side(&[("none", &find[0]), ("mq-deadline", &find[1])])
    );
    let (a, b, c) = (
        grids[0].to_string(),
        grids[1].to_string(),
        before.to_string(),
    );
    println!(
        "{}",
        side_by_side(&[("none", &a), ("mq-deadline", &b), ("seed BEFORE", &c)])
    );
    if let Some(path) = std::env::args().nth(1) {
        std::fs::write(
            path,
            grids[0].to_svg("SD card model, iozone -I, no scheduler"),
        )?;
    }
    Ok(())
}
