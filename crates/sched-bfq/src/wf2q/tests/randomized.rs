//! Randomized runs: `select` against a brute-force scan, and fairness bounds.

use super::*;
use alloc::vec;
use proptest::prelude::*;

/// Brute-force reference of `select`: the same rule by linear scans over the arena.
fn brute_select(s: &Wf2q, now: u64) -> Option<EntityId> {
    let mut g = ROOT_IDX;
    loop {
        let kids: Vec<u32> = (0..s.ents.len() as u32)
            .filter(|&i| {
                let e = &s.ents[i as usize];
                e.state == State::Active && e.parent == g
            })
            .collect();
        let has = |c: Class| kids.iter().any(|&i| s.ents[i as usize].class == c);
        let sd = &s.scheds[g as usize];
        let class = if has(Class::Idle)
            && now.saturating_sub(sd.idle_class_since_ns) >= IDLE_CLASS_TIMEOUT_NS
        {
            Class::Idle
        } else {
            *Class::ALL.iter().find(|&&c| has(c))?
        };
        let cands: Vec<&u32> = kids
            .iter()
            .filter(|&&i| s.ents[i as usize].class == class)
            .collect();
        let min_start = cands
            .iter()
            .map(|&&i| s.ents[i as usize].start)
            .min()
            .unwrap();
        let v = sd.trees[class.idx()].vtime.max(min_start);
        let x = **cands
            .iter()
            .filter(|&&&i| s.ents[i as usize].start <= v)
            .min_by_key(|&&&i| (s.ents[i as usize].finish, i))
            .unwrap();
        if !s.ents[x as usize].is_group {
            return Some(EntityId(x));
        }
        g = x;
    }
}

#[derive(Clone, Debug)]
enum Op {
    Activate(usize, u64),
    /// Serve the selected leaf `service` sectors (capped by its budget when `cap`), then
    /// requeue with a budget or let it go idle.
    Turn {
        service: u64,
        cap: bool,
        requeue: Option<u64>,
    },
    /// Expire an active leaf that is not in service.
    Dequeue(usize, Option<u64>),
    /// Charge a leaf that is not in service (injected I/O).
    Inject(usize, u64),
    Weight(usize, u32),
    ClassOf(usize, u8),
    Move(usize, usize),
    Time(u64),
}

fn class_of(n: u8) -> Class {
    Class::ALL[usize::from(n % 3)]
}

fn op() -> impl Strategy<Value = Op> {
    let budget = 0u64..200;
    prop_oneof![
        3 => (any::<usize>(), budget.clone()).prop_map(|(l, b)| Op::Activate(l, b)),
        6 => (0u64..200, any::<bool>(), proptest::option::weighted(0.7, budget.clone()))
            .prop_map(|(service, cap, requeue)| Op::Turn { service, cap, requeue }),
        1 => (any::<usize>(), proptest::option::of(budget)).prop_map(|(l, b)| Op::Dequeue(l, b)),
        1 => (any::<usize>(), 0u64..100).prop_map(|(l, n)| Op::Inject(l, n)),
        1 => (any::<usize>(), prop_oneof![1u32..=1000, Just(MAX_WEIGHT)]).prop_map(|(e, w)| Op::Weight(e, w)),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(e, c)| Op::ClassOf(e, c)),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(l, g)| Op::Move(l, g)),
        1 => (0u64..150 * MS).prop_map(Op::Time),
    ]
}

/// (parent index, weight, class number) of an entity to build.
type Node = (usize, u32, u8);

/// A hierarchy: groups (each under the root or an earlier group) and leaves.
fn shape() -> impl Strategy<Value = (Vec<Node>, Vec<Node>)> {
    let weight = prop_oneof![1u32..=1000, Just(MAX_WEIGHT), Just(1u32)];
    (
        proptest::collection::vec((any::<usize>(), weight.clone(), any::<u8>()), 0..4),
        proptest::collection::vec((any::<usize>(), weight, any::<u8>()), 1..10),
    )
}

fn build(
    groups: &[(usize, u32, u8)],
    leaves: &[(usize, u32, u8)],
) -> (Wf2q, Vec<EntityId>, Vec<EntityId>) {
    let mut s = Wf2q::new();
    let mut gs = vec![Wf2q::ROOT];
    for &(p, w, c) in groups {
        let g = s.add_group(gs[p % gs.len()], w, class_of(c)).unwrap();
        gs.push(g);
    }
    let mut ls = Vec::new();
    for &(p, w, c) in leaves {
        ls.push(s.add_leaf(gs[p % gs.len()], w, class_of(c)).unwrap());
    }
    (s, gs, ls)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Random operations keep every invariant, and `select` always picks what the
    /// brute-force scan of the same rule picks.
    #[test]
    fn select_matches_brute_force((groups, leaves) in shape(), ops in proptest::collection::vec(op(), 1..200)) {
        let (mut s, gs, ls) = build(&groups, &leaves);
        let mut now = 0u64;
        for op in ops {
            match op {
                Op::Activate(l, b) => s.activate(ls[l % ls.len()], b, now),
                Op::Turn { service, cap, requeue } => {
                    let expected = brute_select(&s, now);
                    let got = s.select(now);
                    prop_assert_eq!(got, expected);
                    if let Some(q) = got {
                        let service = if cap { service.min(s.budget(q)) } else { service };
                        s.served(q, service);
                        prop_assert_eq!(s.service(q), service);
                        s.expire(q, requeue, now);
                        prop_assert_eq!(s.is_active(q), requeue.is_some());
                    }
                }
                Op::Dequeue(l, b) => {
                    let q = ls[l % ls.len()];
                    if s.in_service() != Some(q) {
                        let was = s.is_active(q);
                        s.expire(q, b, now);
                        prop_assert_eq!(s.is_active(q), was && b.is_some());
                    }
                }
                Op::Inject(l, n) => {
                    let q = ls[l % ls.len()];
                    if s.in_service() != Some(q) {
                        s.served(q, n);
                    }
                }
                Op::Weight(e, w) => {
                    let all: Vec<EntityId> = gs.iter().chain(&ls).copied().collect();
                    s.set_weight(all[e % all.len()], w).unwrap();
                }
                Op::ClassOf(e, c) => {
                    let all: Vec<EntityId> = gs.iter().chain(&ls).copied().collect();
                    s.set_class(all[e % all.len()], class_of(c)).unwrap();
                }
                Op::Move(l, g) => {
                    let q = ls[l % ls.len()];
                    let r = s.set_parent(q, gs[g % gs.len()]);
                    prop_assert_eq!(r.is_ok(), !s.is_active(q));
                }
                Op::Time(dt) => now += dt,
            }
            check(&s);
        }
        // Draining: every backlogged leaf is served and nothing is lost.
        let mut turns = 0;
        while let Some(q) = s.select(now) {
            s.served(q, 1);
            s.expire(q, None, now);
            turns += 1;
            prop_assert!(turns <= ls.len());
        }
        prop_assert!(ls.iter().all(|&q| !s.is_active(q)));
        check(&s);
    }
}

/// The largest budget in the fairness runs (sectors).
const BMAX: u64 = 64;

/// Two-level shapes for the fairness runs: each leaf is (parent, weight, steady); a
/// steady leaf stays backlogged throughout, the others (always under the root, so every
/// group stays backlogged) come and go.
fn fair_shape() -> impl Strategy<Value = (Vec<u32>, Vec<(usize, u32, bool)>)> {
    (
        proptest::collection::vec(1u32..=8, 0..3),
        proptest::collection::vec((any::<usize>(), 1u32..=8, any::<bool>()), 2..7),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random budgets and partial service, with leaves going idle and coming back:
    /// - no starvation: while an entity waits, its siblings receive a bounded service;
    /// - continuously backlogged siblings (leaves, or groups of steady leaves) receive
    ///   service in the ratio of their weights, within a bound proportional to BMAX.
    #[test]
    fn service_follows_weights_without_starvation(
        (group_weights, leaves) in fair_shape(),
        seed in proptest::collection::vec((1u64..=BMAX, 1u64..=BMAX, 0u8..8), 1500),
    ) {
        let mut s = Wf2q::new();
        let groups: Vec<EntityId> = group_weights
            .iter()
            .map(|&w| s.add_group(Wf2q::ROOT, w, Class::Be).unwrap())
            .collect();
        let mut ids = Vec::new();
        let mut steady = Vec::new();
        for (k, &(p, w, st)) in leaves.iter().enumerate() {
            // At least one leaf stays backlogged: there is always something to serve.
            let st = st || k == 0;
            let parent = if st && p % (groups.len() + 1) > 0 {
                groups[p % (groups.len() + 1) - 1]
            } else {
                Wf2q::ROOT
            };
            let q = s.add_leaf(parent, w, Class::Be).unwrap();
            s.activate(q, BMAX, 0);
            ids.push(q);
            steady.push(st);
        }
        // Entities whose service is compared: steady leaves, and groups with children
        // (all steady).
        let mut steady_ents: Vec<EntityId> =
            ids.iter().zip(&steady).filter(|(_, st)| **st).map(|(q, _)| *q).collect();
        steady_ents.extend(groups.iter().filter(|&&g| ids.iter().any(|&q| s.parent(q) == Some(g))));
        let all: Vec<EntityId> = groups.iter().chain(&ids).copied().collect();
        let mut received = vec![0u64; s.ents.len()];
        // Service given to an entity's siblings since it last was served or became
        // backlogged, and the largest such amount seen.
        let mut waited = vec![0u64; s.ents.len()];
        let mut max_waited = vec![0u64; s.ents.len()];
        for &(budget, used, toggle) in &seed {
            let q = s.select(0).unwrap();
            let used = used.min(s.budget(q));
            s.served(q, used);
            let on_path = |e: EntityId| {
                let mut x = q;
                loop {
                    if x == e {
                        return true;
                    }
                    match s.parent(x) {
                        Some(p) => x = p,
                        None => return false,
                    }
                }
            };
            for &e in &all {
                let i = e.0 as usize;
                if on_path(e) {
                    received[i] += used;
                    waited[i] = 0;
                } else if s.is_active(e) && on_path(s.parent(e).unwrap()) {
                    waited[i] += used;
                    max_waited[i] = max_waited[i].max(waited[i]);
                }
            }
            let i = ids.iter().position(|&l| l == q).unwrap();
            let requeue = (steady[i] || toggle != 0).then_some(budget);
            s.expire(q, requeue, 0);
            // An intermittent leaf: one idle one comes back now and then.
            let j = usize::from(toggle) % ids.len();
            if !steady[j] && !s.is_active(ids[j]) && toggle % 2 == 1 {
                s.activate(ids[j], budget, 0);
                waited[ids[j].0 as usize] = 0;
            }
        }
        check(&s);
        // No starvation, per level: while an entity waits, its start is at most
        // 2 BMAX / w ahead of its siblings' V (after a requeue, or coming back at an old
        // finish), V gains 1 / (sum of sibling weights) per sector served there, and
        // each sibling ahead of it overshoots by at most one budget.
        for &e in &all {
            let p = s.parent(e).unwrap();
            let siblings: Vec<EntityId> = all.iter().copied().filter(|&x| s.parent(x) == Some(p)).collect();
            let w_sum: u64 = siblings.iter().map(|&x| u64::from(s.weight(x))).sum();
            let limit = 2 * BMAX * w_sum / u64::from(s.weight(e)) + siblings.len() as u64 * BMAX;
            prop_assert!(
                max_waited[e.0 as usize] <= limit,
                "{:?} waited while {} sectors went to siblings (limit {})", e, max_waited[e.0 as usize], limit
            );
        }
        // Fairness among continuously backlogged siblings.
        for (a, &x) in steady_ents.iter().enumerate() {
            for &y in &steady_ents[a + 1..] {
                if s.parent(x) != s.parent(y) {
                    continue;
                }
                let (wx, wy) = (u64::from(s.weight(x)), u64::from(s.weight(y)));
                let (sx, sy) = (received[x.0 as usize], received[y.0 as usize]);
                let gap = (sx * wy).abs_diff(sy * wx);
                prop_assert!(
                    gap <= 2 * BMAX * (wx + wy),
                    "{:?} w{} got {}, {:?} w{} got {}", x, wx, sx, y, wy, sy
                );
            }
        }
    }
}
