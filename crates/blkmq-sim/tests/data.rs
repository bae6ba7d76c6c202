//! The data store: a checked run gives its bios real bytes, a `ModelDriver` that keeps data
//! stores and returns them, and every byte read equals the byte last written there,
//! through merges (plugged neighbours, the elevator), splits (bios past the device's
//! limits) and devices that reorder; a checked run times exactly as an unchecked one.

use blkmq_core::Op;
use blkmq_sched_deadline::Deadline;
use blkmq_sim::{
    CardParams, Cx, DataCheck, DeviceModel, Disk, DiskParams, Done, Io, MmcCard, ModelDriver, Sim,
    SimPlatform, SimReport, SimRng, Ssd, SsdParams, Workload,
};

/// Rounds of: disjoint writes of random lengths (some past the device's largest request),
/// in plugged runs of neighbours; a discard now and then; once all ended, reads of random
/// ranges in plugged runs; once those ended, the next round. Later rounds overwrite
/// earlier ones, so what a read must see is the last write, not any.
struct Rounds {
    rng: SimRng,
    rounds: u32,
    round: u32,
    /// Sectors the rounds play over.
    span: u64,
    /// Writes in a round.
    writes: u32,
    /// Reads in a round.
    reads: u32,
    /// Largest I/O, in sectors.
    max_io: u32,
    /// The device's largest request, in sectors.
    max_sectors: u32,
    /// The requests the bios would be without merges: each bio cut to `max_sectors`.
    pieces: u64,
    /// Whether the device discards (a discard now and then when it does).
    discard: bool,
    in_flight: u32,
    reading: bool,
    read_bytes: u64,
    reads_done: u64,
}

impl Rounds {
    fn new(seed: u64, rounds: u32, max_sectors: u32) -> Self {
        // Past the largest request: splits.
        let max_io = max_sectors * 3 / 2;
        Self {
            rng: SimRng::new(seed),
            rounds,
            round: 0,
            span: 8 * u64::from(max_io),
            writes: 16,
            reads: 16,
            max_io,
            max_sectors,
            pieces: 0,
            discard: false,
            in_flight: 0,
            reading: false,
            read_bytes: 0,
            reads_done: 0,
        }
    }

    fn len(&mut self) -> u32 {
        // 4 KiB aligned: mostly up to 32 KiB, one in six up to `max_io`.
        let most = if self.rng.chance(1, 6) {
            self.max_io / 8
        } else {
            8
        };
        8 * (1 + self.rng.below(u64::from(most)) as u32)
    }

    /// Submits `ios` in plugged runs of one to four.
    fn submit(&mut self, cx: &mut Cx<'_>, ios: Vec<Io>) {
        let mut rest = &ios[..];
        for io in &ios {
            self.pieces += match io.op {
                Op::Discard => 1,
                _ => u64::from(io.sectors.div_ceil(self.max_sectors)),
            };
        }
        while !rest.is_empty() {
            let n = (1 + self.rng.below(4) as usize).min(rest.len());
            cx.submit_plugged(rest[..n].iter().copied());
            self.in_flight += n as u32;
            rest = &rest[n..];
        }
    }

    fn write_round(&mut self, cx: &mut Cx<'_>) {
        self.reading = false;
        // Disjoint: each write in its own slot of the span, neighbours often touching.
        let slot = self.span / u64::from(self.writes);
        let mut ios = Vec::new();
        for i in 0..u64::from(self.writes) {
            let len = self.len().min(slot as u32);
            let at = i * slot
                + if self.rng.chance(1, 2) {
                    0
                } else {
                    slot - u64::from(len)
                };
            let op = if self.discard && self.rng.chance(1, 8) {
                Op::Discard
            } else {
                Op::Write
            };
            ios.push(Io::new(op, at, len));
        }
        self.submit(cx, ios);
    }

    fn read_round(&mut self, cx: &mut Cx<'_>) {
        self.reading = true;
        let mut ios = Vec::new();
        let mut at = self.rng.below(self.span / 8) * 8;
        for _ in 0..self.reads {
            let len = self.len();
            if at + u64::from(len) > self.span {
                at = 0;
            }
            ios.push(Io::read(at, len));
            // Mostly the next range on: neighbours merge.
            at += u64::from(len) + if self.rng.chance(1, 3) { 64 } else { 0 };
        }
        self.submit(cx, ios);
    }
}

impl Workload for Rounds {
    fn name(&self) -> String {
        "rounds".into()
    }

    fn start(&mut self, cx: &mut Cx<'_>) {
        self.write_round(cx);
    }

    fn completed(&mut self, cx: &mut Cx<'_>, done: &Done) {
        assert!(done.status.is_ok(), "{done:?}");
        if done.op == Op::Read {
            self.read_bytes += done.bytes;
            self.reads_done += 1;
        }
        self.in_flight -= 1;
        if self.in_flight > 0 {
            return;
        }
        if !self.reading {
            self.read_round(cx);
        } else {
            self.round += 1;
            if self.round < self.rounds {
                self.write_round(cx);
            }
        }
    }

    fn is_finished(&self) -> bool {
        self.round == self.rounds
    }

    fn claimed_bytes(&self) -> u64 {
        0
    }
}

/// Runs `Rounds` on `model`, with mq-deadline when `deadline`, checking data when
/// `checked`: the report, the check, and the workload's read bytes and reads.
fn rounds<M: DeviceModel>(model: M, deadline: bool, checked: bool) -> Outcome {
    let platform = SimPlatform::new(2);
    let max_sectors = model.limits().max_sectors;
    let discard = model.limits().max_discard_sectors > 0;
    let mut driver = ModelDriver::new(platform.clone(), model);
    if checked {
        driver = driver.keep_data();
    }
    let tags = driver.tag_set();
    let mut config = driver.queue_config();
    if deadline {
        config = config.elevator(Box::new(Deadline::new()));
    }
    let mut sim = Sim::new(platform, tags, driver).unwrap();
    let queue = sim.add_queue(config).unwrap();
    if checked {
        sim.check_data();
    }
    let w = sim.add_workload(
        queue,
        Rounds {
            discard,
            ..Rounds::new(0xda7a, 4, max_sectors)
        },
    );
    let report = sim.run().unwrap();
    let rounds = sim.workload(w);
    Outcome {
        report,
        check: sim.data_check(),
        read_bytes: rounds.read_bytes,
        reads: rounds.reads_done,
        pieces: rounds.pieces,
        commands: sim.host().driver().with_model(|m| m.stats().commands),
    }
}

/// What [`rounds`] found.
struct Outcome {
    report: SimReport,
    check: Option<DataCheck>,
    read_bytes: u64,
    reads: u64,
    pieces: u64,
    commands: u64,
}

fn check_model<M: DeviceModel>(make: impl Fn() -> M) {
    for deadline in [false, true] {
        let Outcome {
            report,
            check,
            read_bytes,
            reads,
            pieces,
            commands,
        } = rounds(make(), deadline, true);
        let check = check.unwrap();
        let name = format!("{} (deadline: {deadline})", make().name());
        assert!(check.is_clean(), "{name}: {check:?}");
        // Nothing raced: every read was compared, every byte of it.
        assert_eq!(check.reads_racing, 0, "{name}");
        assert_eq!(check.reads_checked, reads, "{name}");
        assert_eq!(check.bytes_checked, read_bytes, "{name}");
        assert!(check.writes >= 64, "{name}: {check:?}");
        // Splits: more pieces than bios; merges: fewer commands than pieces.
        assert!(pieces > report.stats.bios_submitted, "{name}");
        assert!(
            commands < pieces,
            "{name}: {commands} commands, {pieces} pieces"
        );
        // And the same run unchecked: the same report, byte for byte.
        let plain = rounds(make(), deadline, false);
        assert!(plain.check.is_none());
        assert_eq!(
            format!("{:?}", plain.report),
            format!("{report:?}"),
            "{name}"
        );
        assert_eq!(plain.commands, commands, "{name}");
    }
}

#[test]
fn every_byte_read_is_the_last_written_on_an_ssd() {
    check_model(|| Ssd::new(SsdParams::default()).unwrap());
}

#[test]
fn every_byte_read_is_the_last_written_on_a_reordering_disk() {
    check_model(|| Disk::new(DiskParams::ncq()).unwrap());
}

#[test]
fn every_byte_read_is_the_last_written_on_a_card() {
    check_model(|| MmcCard::new(CardParams::default()).unwrap());
}

#[test]
fn a_driver_that_keeps_no_data_is_caught() {
    let platform = SimPlatform::new(1);
    let driver = ModelDriver::new(platform.clone(), Ssd::new(SsdParams::default()).unwrap());
    let (tags, config) = (driver.tag_set(), driver.queue_config());
    let mut sim = Sim::new(platform, tags, driver).unwrap();
    let queue = sim.add_queue(config).unwrap();
    sim.check_data();
    let rounds = Rounds {
        discard: true,
        ..Rounds::new(1, 2, 2560)
    };
    sim.add_workload(queue, rounds);
    sim.run().unwrap();
    let check = sim.data_check().unwrap();
    assert!(
        !check.is_clean() && check.first_wrong_sector.is_some(),
        "{check:?}"
    );
}

/// Writes sectors 0..64 and, at the same time, reads them.
struct Race {
    left: u32,
}

impl Workload for Race {
    fn name(&self) -> String {
        "race".into()
    }
    fn start(&mut self, cx: &mut Cx<'_>) {
        cx.submit(Io::write(0, 64));
        cx.submit(Io::read(0, 64));
        cx.submit(Io::read(64, 64)); // no write near it
    }
    fn completed(&mut self, _: &mut Cx<'_>, _: &Done) {
        self.left -= 1;
    }
    fn is_finished(&self) -> bool {
        self.left == 0
    }
    fn claimed_bytes(&self) -> u64 {
        0
    }
}

#[test]
fn a_read_racing_a_write_is_not_compared() {
    let platform = SimPlatform::new(1);
    let driver =
        ModelDriver::new(platform.clone(), Ssd::new(SsdParams::default()).unwrap()).keep_data();
    let (tags, config) = (driver.tag_set(), driver.queue_config());
    let mut sim = Sim::new(platform, tags, driver).unwrap();
    let queue = sim.add_queue(config).unwrap();
    sim.check_data();
    sim.add_workload(queue, Race { left: 3 });
    sim.run().unwrap();
    let check = sim.data_check().unwrap();
    assert_eq!(
        (check.reads_racing, check.reads_checked, check.bytes_checked),
        (1, 1, 64 * 512)
    );
    assert!(check.is_clean());
    // What the write carried is on the device now.
    let mut stored = [0u8; 512];
    assert!(sim.host().driver().read_data(0, &mut stored));
    assert!(stored.iter().any(|&b| b != 0));
}
