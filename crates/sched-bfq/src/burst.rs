//! Burst detection (Linux's `bfq_handle_burst`): many queues created close together are
//! the start of one large job (a compile, a boot), not interactive tasks; raising them
//! would only slow the truly interactive ones down.
//!
//! A new queue joins the current burst when it is created within [`BURST_INTERVAL_NS`] of
//! the previous member, under the same group; otherwise it starts a new burst. When a burst
//! reaches [`LARGE_BURST`] members it is large: all its members, and every later one while
//! it lasts, are marked and get no raising.

use crate::queue::NO_QUEUE;
use crate::tunables::MS;

/// The longest gap between two queue creations of one burst.
pub(crate) const BURST_INTERVAL_NS: u64 = 180 * MS;
/// Members that make a burst large.
pub(crate) const LARGE_BURST: usize = 8;

/// What a new queue's arrival meant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Joined {
    /// A member of a burst that is not (yet) large.
    Small,
    /// It made its burst large: these earlier members are now in it too.
    MadeLarge([u32; LARGE_BURST], usize),
    /// A member of a burst already large.
    Large,
}

/// The current burst.
#[derive(Clone, Debug)]
pub(crate) struct Burst {
    /// Members so far, while the burst is not large.
    members: [u32; LARGE_BURST],
    len: usize,
    large: bool,
    last_ns: Option<u64>,
    group: u32,
}

impl Default for Burst {
    fn default() -> Self {
        Self {
            members: [NO_QUEUE; LARGE_BURST],
            len: 0,
            large: false,
            last_ns: None,
            group: 0,
        }
    }
}

impl Burst {
    /// Queue `q` of `group` was created and became backlogged at `now`.
    pub(crate) fn arrived(&mut self, q: u32, group: u32, now: u64) -> Joined {
        let continues = self
            .last_ns
            .is_some_and(|last| now.saturating_sub(last) <= BURST_INTERVAL_NS)
            && self.group == group;
        self.last_ns = Some(now);
        if !continues {
            self.large = false;
            self.members = [NO_QUEUE; LARGE_BURST];
            self.members[0] = q;
            self.len = 1;
            self.group = group;
            return Joined::Small;
        }
        if self.large {
            return Joined::Large;
        }
        if self.len + 1 >= LARGE_BURST {
            self.large = true;
            let members = self.members;
            let len = self.len;
            self.members = [NO_QUEUE; LARGE_BURST];
            self.len = 0;
            return Joined::MadeLarge(members, len);
        }
        self.members[self.len] = q;
        self.len += 1;
        Joined::Small
    }

    /// Queue `q` is going away: it leaves the member list.
    pub(crate) fn forget(&mut self, q: u32) {
        if let Some(i) = self.members[..self.len].iter().position(|&m| m == q) {
            self.members.copy_within(i + 1..self.len, i);
            self.len -= 1;
            self.members[self.len] = NO_QUEUE;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eight_close_arrivals_make_a_large_burst() {
        let mut b = Burst::default();
        for q in 0..7 {
            assert_eq!(b.arrived(q, 0, u64::from(q) * 100 * MS), Joined::Small);
        }
        match b.arrived(7, 0, 700 * MS) {
            Joined::MadeLarge(members, len) => assert_eq!(&members[..len], &[0, 1, 2, 3, 4, 5, 6]),
            other => panic!("{other:?}"),
        }
        assert_eq!(b.arrived(8, 0, 800 * MS), Joined::Large);
        // A pause longer than the interval ends it.
        assert_eq!(b.arrived(9, 0, 981 * MS), Joined::Small);
    }

    #[test]
    fn another_group_starts_another_burst() {
        let mut b = Burst::default();
        for q in 0..7 {
            b.arrived(q, 0, 0);
        }
        b.forget(3);
        assert_eq!(b.arrived(7, 0, 0), Joined::Small); // 7 members again
        assert_eq!(b.arrived(8, 1, 0), Joined::Small); // a new burst
        assert!(!b.large && b.len == 1);
    }
}
