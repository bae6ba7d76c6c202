//! The seed 000 benchmarks (`dd`, `find`, `iozone -az -i0 -i1 -i2 -s 20m -I`) on the SD
//! card model behind the generic model driver (which prepares the next command while one
//! is on the bus, as Linux's legacy MMC path did), with no scheduler and with
//! mq-deadline side by side, next to the seed's "BEFORE" figures.
//!
//! ```text
//! cargo run --release -p blkmq-sim --example seed_mmc [-- out.svg]
//! ```

use blkmq_core::Elevator;
use blkmq_sched_deadline::Deadline;
use blkmq_sim::{
    CardParams, Dd, Find, FindParams, Iozone, IozoneGrid, IozoneParams, MmcCard, ModelDriver,
    QueueId, Sim, side_by_side,
};

/// The seed's iozone grid before the switch to blk-mq.
const BEFORE: &str = "\
(kBytes/second)
                                                    random    random
    kB  reclen    write  rewrite    read    reread    read     write
 20480       4     2112     2157     6052     6060     6025       40
 20480       8     4820     5074     9163     9121     9125       81
 20480      16     5755     5242    12317    12320    12280      165
 20480      32     6176     6261    14981    14987    14962      336
 20480      64     6547     5875    16826    16828    16810      692
 20480     128     6762     6828    17899    17896    17896     1408
 20480     256     6802     6871    16960    17513    18373     3048
 20480     512     7220     7252    18675    18746    18741     7228
 20480    1024     7222     7304    18436    17858    18246     7322
 20480    2048     7316     7398    18744    18751    18526     7419
 20480    4096     7520     7636    20774    20995    20703     7609
 20480    8192     7519     7704    21850    21489    21467     7663
 20480   16384     7395     7782    22399    22210    22215     7781
";

/// The card behind the model driver, with or without mq-deadline.
type CardSim = (Sim<ModelDriver<MmcCard>>, QueueId);

fn sim(deadline: bool) -> Result<CardSim, Box<dyn std::error::Error>> {
    let card = MmcCard::new(CardParams::default())?;
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
    let before = IozoneGrid::parse(BEFORE).ok_or("seed grid")?;
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
