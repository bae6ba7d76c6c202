//! RAID-0: N members of any model, striped by chunk.

use std::collections::VecDeque;

use blkmq_core::{Op, QueueLimits};

use super::{CmdId, Command, DeviceModel, DeviceStats, ParamError, require};

/// The parameters of a [`Raid0`] volume.
///
/// ```
/// use blkmq_sim::Raid0Params;
/// let p = Raid0Params::default();
/// assert_eq!((p.chunk_sectors, p.queue_depth), (128, None));
/// ```
///
/// # Where the defaults come from
///
/// A 64 KiB chunk, the stripe size hardware RAID controllers have long defaulted to
/// (Linux md's default is 512 KiB since mdadm 3.1; set `chunk_sectors` to compare). The
/// volume holds as many commands as its members together, as a controller's volume queue
/// depth usually is the sum of its drives' (the seed 001 controller: 8 drives).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Raid0Params {
    /// The stripe unit in sectors (default 128: 64 KiB).
    pub chunk_sectors: u64,
    /// Commands the volume holds (default `None`: the members' queue depths summed).
    pub queue_depth: Option<usize>,
}

impl Default for Raid0Params {
    fn default() -> Self {
        Self {
            chunk_sectors: 128,
            queue_depth: None,
        }
    }
}

/// A command split over the members.
#[derive(Clone, Copy, Debug)]
struct Parent {
    id: CmdId,
    remaining: u32,
}

/// A RAID-0 volume over members of one model.
///
/// ```
/// use blkmq_core::Op;
/// use blkmq_sim::{Command, DeviceModel, Ideal, IdealParams, Raid0, Raid0Params};
///
/// let members = (0..4).map(|_| Ideal::new(IdealParams::default()).unwrap()).collect();
/// let mut raid = Raid0::new(members, Raid0Params::default()).unwrap();
/// assert_eq!(raid.map(128 * 5 + 3), (1, 128 + 3)); // chunk 5: member 1, its chunk 1
/// // 256 KiB from sector 0 touches all four members, 64 KiB each, in parallel.
/// raid.submit(0, 9, Command::new(Op::Read, 0, 512)).unwrap();
/// let one = IdealParams::default().latency_ns + blkmq_sim::transfer_ns(65536, 1_000_000_000);
/// assert_eq!(raid.next_completion(), Some(one));
/// let mut done = Vec::new();
/// raid.complete(one, &mut done);
/// assert_eq!(done, [9]);
/// ```
///
/// # Striping
///
/// Chunk `c` of the volume (`chunk_sectors` long) lives on member `c mod N`, at that
/// member's chunk `c / N`. A command becomes one piece per member it touches (the chunks
/// of one command on one member are contiguous there); it ends when its last piece does.
/// A piece a member cannot take yet waits, in order, for that member to complete
/// something. A flush goes to every member.
///
/// Its [`limits`](DeviceModel::limits) are the members' tightest, with `chunk_sectors` set
/// to a power-of-two chunk, as Linux md sets it: the queue then splits requests at chunk
/// boundaries. A hardware RAID controller sets no such limit; clear it
/// (`limits.chunk_sectors = 0`) to model one.
#[derive(Debug)]
pub struct Raid0<M> {
    members: Vec<M>,
    params: Raid0Params,
    depth: usize,
    capacity: u64,
    parents: Vec<Option<Parent>>,
    free_slots: Vec<usize>,
    /// Pieces each member could not take yet: (piece id, command).
    pending: Vec<VecDeque<(CmdId, Command)>>,
    in_flight: usize,
    stats: DeviceStats,
    scratch: Vec<CmdId>,
}

impl<M: DeviceModel> Raid0<M> {
    /// A volume striped over `members`.
    ///
    /// # Errors
    /// No members, a zero chunk or queue depth.
    ///
    /// ```
    /// use blkmq_sim::{Ideal, IdealParams, Raid0, Raid0Params};
    /// let none: Vec<Ideal> = Vec::new();
    /// assert_eq!(Raid0::new(none, Raid0Params::default()).unwrap_err().what, "members");
    /// ```
    pub fn new(members: Vec<M>, params: Raid0Params) -> Result<Self, ParamError> {
        require(
            !members.is_empty(),
            "members",
            "a volume needs at least one",
        )?;
        require(params.chunk_sectors > 0, "chunk_sectors", "must not be 0")?;
        let depth = params
            .queue_depth
            .unwrap_or_else(|| members.iter().map(|m| m.queue_depth()).sum());
        require(depth > 0, "queue_depth", "must be at least 1")?;
        let smallest = members.iter().map(|m| m.capacity()).min().unwrap_or(0);
        let per_member = smallest / params.chunk_sectors * params.chunk_sectors;
        let capacity = per_member * members.len() as u64;
        require(capacity > 0, "chunk_sectors", "larger than a member")?;
        let nr = members.len();
        Ok(Self {
            members,
            params,
            depth,
            capacity,
            parents: Vec::new(),
            free_slots: Vec::new(),
            pending: (0..nr).map(|_| VecDeque::new()).collect(),
            in_flight: 0,
            stats: DeviceStats::default(),
            scratch: Vec::new(),
        })
    }

    /// The parameters.
    ///
    /// ```
    /// use blkmq_sim::{Ideal, IdealParams, Raid0, Raid0Params};
    /// let raid = Raid0::new(vec![Ideal::new(IdealParams::default()).unwrap()], Raid0Params::default()).unwrap();
    /// assert_eq!(raid.params().chunk_sectors, 128);
    /// ```
    pub fn params(&self) -> &Raid0Params {
        &self.params
    }

    /// The members.
    ///
    /// ```
    /// use blkmq_sim::{DeviceModel, Ideal, IdealParams, Raid0, Raid0Params};
    /// let members = (0..8).map(|_| Ideal::new(IdealParams::default()).unwrap()).collect();
    /// let raid = Raid0::new(members, Raid0Params::default()).unwrap();
    /// assert_eq!(raid.members().len(), 8);
    /// assert_eq!(raid.queue_depth(), 8 * 32);
    /// ```
    pub fn members(&self) -> &[M] {
        &self.members
    }

    /// The member and the sector on it that hold volume sector `sector`.
    ///
    /// ```
    /// use blkmq_sim::{Ideal, IdealParams, Raid0, Raid0Params};
    /// let members = (0..3).map(|_| Ideal::new(IdealParams::default()).unwrap()).collect();
    /// let raid = Raid0::new(members, Raid0Params { chunk_sectors: 8, queue_depth: None }).unwrap();
    /// assert_eq!(raid.map(0), (0, 0));
    /// assert_eq!(raid.map(8), (1, 0));
    /// assert_eq!(raid.map(25), (0, 9)); // chunk 3: member 0, its chunk 1
    /// ```
    pub fn map(&self, sector: u64) -> (usize, u64) {
        let chunk = self.params.chunk_sectors;
        let n = self.members.len() as u64;
        let c = sector / chunk;
        ((c % n) as usize, (c / n) * chunk + sector % chunk)
    }

    /// The pieces of `cmd`: (member, command on it), by member.
    ///
    /// ```
    /// use blkmq_core::Op;
    /// use blkmq_sim::{Command, Ideal, IdealParams, Raid0, Raid0Params};
    /// let members = (0..2).map(|_| Ideal::new(IdealParams::default()).unwrap()).collect();
    /// let raid = Raid0::new(members, Raid0Params { chunk_sectors: 8, queue_depth: None }).unwrap();
    /// // Sectors 4..28: chunks 0 (half), 1, 2, 3 (half).
    /// let pieces = raid.pieces(&Command::new(Op::Write, 4, 24));
    /// assert_eq!(pieces, [(0, Command::new(Op::Write, 4, 12)), (1, Command::new(Op::Write, 0, 12))]);
    /// ```
    pub fn pieces(&self, cmd: &Command) -> Vec<(usize, Command)> {
        let mut out: Vec<(usize, Command)> = Vec::new();
        if cmd.op == Op::Flush {
            for m in 0..self.members.len() {
                out.push((m, *cmd));
            }
            return out;
        }
        let chunk = self.params.chunk_sectors;
        let mut at = cmd.sector;
        let end = cmd.end_sector();
        while at < end {
            let len = (chunk - at % chunk).min(end - at);
            let (m, ms) = self.map(at);
            match out
                .iter_mut()
                .find(|(pm, p)| *pm == m && p.end_sector() == ms)
            {
                Some((_, piece)) => piece.sectors += len,
                None => out.push((
                    m,
                    Command {
                        sector: ms,
                        sectors: len,
                        ..*cmd
                    },
                )),
            }
            at += len;
        }
        out.sort_by_key(|(m, p)| (*m, p.sector));
        out
    }

    /// Feeds member `m` the pieces waiting for it, in order, while it takes them.
    fn feed(&mut self, m: usize, now: u64) {
        while let Some((sub, cmd)) = self.pending[m].pop_front() {
            if let Err(cmd) = self.members[m].submit(now, sub, cmd) {
                self.pending[m].push_front((sub, cmd));
                break;
            }
        }
    }
}

impl<M: DeviceModel> DeviceModel for Raid0<M> {
    fn name(&self) -> &'static str {
        "raid0"
    }

    fn capacity(&self) -> u64 {
        self.capacity
    }

    fn queue_depth(&self) -> usize {
        self.depth
    }

    fn limits(&self) -> QueueLimits {
        let mut limits = QueueLimits::new(self.capacity);
        for m in &self.members {
            let l = m.limits();
            limits.max_sectors = limits.max_sectors.min(l.max_sectors);
            limits.max_segments = limits.max_segments.min(l.max_segments);
            limits.max_segment_size = limits.max_segment_size.min(l.max_segment_size);
            limits.rotational |= l.rotational;
        }
        limits.max_discard_sectors = self
            .members
            .iter()
            .map(|m| m.limits().max_discard_sectors)
            .min()
            .unwrap_or(0);
        let chunk = self.params.chunk_sectors;
        if chunk.is_power_of_two() && chunk <= u64::from(u32::MAX) {
            limits.chunk_sectors = chunk as u32;
            let chunk = chunk as u32;
            if limits.max_discard_sectors > chunk {
                limits.max_discard_sectors = chunk;
            }
        }
        limits
    }

    /// The slowest piece, each member as it is now.
    fn service_ns(&self, start_ns: u64, cmd: &Command) -> u64 {
        self.pieces(cmd)
            .iter()
            .map(|(m, piece)| self.members[*m].service_ns(start_ns, piece))
            .max()
            .unwrap_or(0)
    }

    fn submit(&mut self, now_ns: u64, id: CmdId, cmd: Command) -> Result<(), Command> {
        if self.in_flight >= self.depth {
            return Err(cmd);
        }
        let pieces = self.pieces(&cmd);
        let slot = match self.free_slots.pop() {
            Some(slot) => slot,
            None => {
                self.parents.push(None);
                self.parents.len() - 1
            }
        };
        self.parents[slot] = Some(Parent {
            id,
            remaining: pieces.len() as u32,
        });
        self.in_flight += 1;
        self.stats.count(&cmd);
        // A command with no piece (nothing to do on any member) has `remaining` 0 and ends
        // at the next completion pass, which `next_completion` makes immediate.
        for (k, (m, piece)) in pieces.into_iter().enumerate() {
            let sub = ((slot as u64) << 32) | k as u64;
            self.pending[m].push_back((sub, piece));
            self.feed(m, now_ns);
        }
        Ok(())
    }

    fn next_completion(&self) -> Option<u64> {
        let members = self
            .members
            .iter()
            .filter_map(|m| m.next_completion())
            .min();
        let empty = self
            .parents
            .iter()
            .any(|p| p.is_some_and(|p| p.remaining == 0));
        if empty { Some(0) } else { members }
    }

    fn complete(&mut self, now_ns: u64, done: &mut Vec<CmdId>) {
        for slot in 0..self.parents.len() {
            if let Some(p) = self.parents[slot] {
                if p.remaining == 0 {
                    done.push(p.id);
                    self.parents[slot] = None;
                    self.free_slots.push(slot);
                    self.in_flight -= 1;
                }
            }
        }
        let mut progress = true;
        while progress {
            progress = false;
            for m in 0..self.members.len() {
                let mut subs = std::mem::take(&mut self.scratch);
                self.members[m].complete(now_ns, &mut subs);
                for sub in subs.drain(..) {
                    progress = true;
                    let slot = (sub >> 32) as usize;
                    let Some(parent) = self.parents.get_mut(slot).and_then(Option::as_mut) else {
                        continue;
                    };
                    parent.remaining -= 1;
                    if parent.remaining == 0 {
                        done.push(parent.id);
                        self.parents[slot] = None;
                        self.free_slots.push(slot);
                        self.in_flight -= 1;
                    }
                }
                self.scratch = subs;
                self.feed(m, now_ns);
            }
        }
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }

    fn stats(&self) -> DeviceStats {
        let mut stats = self.stats;
        stats.busy_ns = self.members.iter().map(|m| m.stats().busy_ns).sum();
        stats.random_writes = self.members.iter().map(|m| m.stats().random_writes).sum();
        stats
    }
}
