extern crate std;

use super::*;

/// One unit of service at weight 1, in virtual time.
const U: u64 = 1 << SERVICE_SHIFT;
const MS: u64 = 1_000_000;

/// One full turn: select, charge `service`, expire with `requeue`.
fn turn(s: &mut Wf2q, now: u64, service: u64, requeue: Option<u64>) -> EntityId {
    let q = s.select(now).expect("something to serve");
    s.served(q, service);
    s.expire(q, requeue, now);
    check(s);
    q
}

// ---- invariants ------------------------------------------------------------------------

/// Walks the tree at `n`: checks AVL shape, order and (for active trees) `min_start`;
/// collects the nodes in order; returns the height.
fn walk(s: &Wf2q, n: u32, active: bool, out: &mut Vec<u32>) -> u8 {
    if n == NIL {
        return 0;
    }
    let e = &s.ents[n as usize];
    let hl = walk(s, e.left, active, out);
    out.push(n);
    let hr = walk(s, e.right, active, out);
    assert!(hl.abs_diff(hr) <= 1, "unbalanced at {n}");
    assert_eq!(e.height, 1 + hl.max(hr));
    if active {
        let mut m = e.start;
        for c in [e.left, e.right] {
            if c != NIL {
                m = m.min(s.ents[c as usize].min_start);
            }
        }
        assert_eq!(e.min_start, m, "min_start of {n}");
    }
    hl.max(hr) + 1
}

fn check(s: &Wf2q) {
    let live = |i: usize| s.ents[i].state != State::Free;
    for g in 0..s.ents.len() {
        if !live(g) || !s.ents[g].is_group {
            continue;
        }
        let sd = &s.scheds[g];
        let kids: Vec<usize> = (0..s.ents.len())
            .filter(|&i| live(i) && s.ents[i].parent == g as u32)
            .collect();
        assert_eq!(sd.children as usize, kids.len());
        let backlogged = kids.iter().filter(|&&i| s.ents[i].backlogged()).count();
        assert_eq!(sd.active_children as usize, backlogged);
        let in_service: Vec<usize> = kids
            .iter()
            .copied()
            .filter(|&i| s.ents[i].state == State::InService)
            .collect();
        assert!(in_service.len() <= 1);
        assert_eq!(sd.in_service, in_service.first().map_or(NIL, |&i| i as u32));
        if g != ROOT_IDX as usize {
            assert_eq!(s.ents[g].backlogged(), backlogged > 0, "group {g}");
            if s.ents[g].state == State::InService {
                assert_eq!(in_service.len(), 1, "in-service group {g} serves a child");
            }
        }
        for c in Class::ALL {
            let st = &sd.trees[c.idx()];
            let of = |state: &[State]| {
                let mut v: Vec<u32> = kids
                    .iter()
                    .filter(|&&i| s.ents[i].class == c && state.contains(&s.ents[i].state))
                    .map(|&i| i as u32)
                    .collect();
                v.sort_by_key(|&i| (s.ents[i as usize].finish, i));
                v
            };
            let mut nodes = Vec::new();
            walk(s, st.active, true, &mut nodes);
            assert_eq!(nodes, of(&[State::Active]), "active tree {g}/{c:?}");
            nodes.clear();
            walk(s, st.idle, false, &mut nodes);
            assert_eq!(nodes, of(&[State::Idle]), "idle tree {g}/{c:?}");
            for &i in &nodes {
                assert!(ts_gt(s.ents[i as usize].finish, st.vtime), "stale idle {i}");
            }
            let weight = |v: Vec<u32>| {
                v.iter()
                    .map(|&i| u64::from(s.ents[i as usize].weight))
                    .sum::<u64>()
            };
            assert_eq!(
                st.wsum,
                weight(of(&[State::Idle, State::Active, State::InService]))
            );
            let active = of(&[State::Active, State::InService]);
            assert_eq!(st.active_count as usize, active.len());
            assert_eq!(st.active_weight, weight(active));
        }
    }
    let leaf = s.in_service_leaf;
    if leaf != NIL {
        let mut x = leaf;
        while x != ROOT_IDX {
            assert_eq!(s.ents[x as usize].state, State::InService);
            x = s.ents[x as usize].parent;
        }
    } else {
        assert!(s.ents.iter().all(|e| e.state != State::InService));
    }
}

// ---- hand-computed schedules ---------------------------------------------------------

/// Leaves A, B, C with weights 1:2:4, all activated at V = 0 with budget 7 and always
/// using their whole budget. In units of Q = U/4 (U = 1 << SERVICE_SHIFT): a turn moves
/// F - S by 7*4/w Q: A 28, B 14, C 7; V moves by 7 sectors / wsum 7 = U = 4 Q.
///
/// ```text
/// start: A(0,28) B(0,14) C(0,7)      V=0
/// T1 V=0:  all eligible, min F = C(7)         -> C, V=4,  C(7,14)
/// T2 V=4:  C ineligible (7>4); B(14) < A(28)  -> B, V=8,  B(14,28)
/// T3 V=8:  C(7,14) eligible, F 14 < A's 28    -> C, V=12, C(14,21)
/// T4 V=12: B and C ineligible (S=14 > 12)     -> A, V=16, A(28,56)
///          although C's F=21 is the smallest
/// T5 V=16: B(14,28), C(14,21) eligible        -> C, V=20, C(21,28)
/// T6 V=20: C ineligible (21); B(14,28)        -> B, V=24, B(28,42)
/// T7 V=24: C(21,28) only eligible             -> C, V=28, C(28,35)
/// ```
/// After T7 every timestamp is the start one plus 28 Q: the order C B C A C B C
/// repeats, giving A, B and C service 1:2:4 per 7 turns.
#[test]
fn weights_1_2_4_serve_order_and_vtime() {
    const Q: u64 = U / 4;
    let mut s = Wf2q::new();
    let a = s.add_leaf(Wf2q::ROOT, 1, Class::Be).unwrap();
    let b = s.add_leaf(Wf2q::ROOT, 2, Class::Be).unwrap();
    let c = s.add_leaf(Wf2q::ROOT, 4, Class::Be).unwrap();
    for q in [a, b, c] {
        s.activate(q, 7, 0);
    }
    assert_eq!(
        [a, b, c].map(|q| (s.start(q), s.finish(q))),
        [(0, 28 * Q), (0, 14 * Q), (0, 7 * Q)]
    );
    let period = [c, b, c, a, c, b, c];
    // (S, F) of the served leaf after its requeue, in Q, for the first period.
    let after = [
        (7, 14),
        (14, 28),
        (14, 21),
        (28, 56),
        (21, 28),
        (28, 42),
        (28, 35),
    ];
    for k in 0..21u64 {
        if k == 3 {
            // T4: C has the smallest finish but is not eligible.
            assert!(s.finish(c) < s.finish(a) && s.finish(c) < s.finish(b));
            assert!(s.start(c) > s.vtime(Wf2q::ROOT, Class::Be));
        }
        let q = turn(&mut s, 0, 7, Some(7));
        let i = (k % 7) as usize;
        assert_eq!(q, period[i], "turn {}", k + 1);
        assert_eq!(
            s.vtime(Wf2q::ROOT, Class::Be),
            (k + 1) * U,
            "V after turn {}",
            k + 1
        );
        let shift = (k / 7) * 28 * Q;
        assert_eq!(
            (s.start(q), s.finish(q)),
            (after[i].0 * Q + shift, after[i].1 * Q + shift)
        );
    }
}

/// A (w 1, budget 4) and B (w 1, budget 8) start at V = 0: A(0, 4U), B(0, 8U).
/// A is served 4: V = 4U/2 = 2U; requeued with budget 1: A(4U, 5U).
/// Now A's F = 5U < B's 8U, but A's S = 4U > V = 2U: B is served.
#[test]
fn ineligible_entity_is_skipped_despite_smallest_finish() {
    let mut s = Wf2q::new();
    let a = s.add_leaf(Wf2q::ROOT, 1, Class::Be).unwrap();
    let b = s.add_leaf(Wf2q::ROOT, 1, Class::Be).unwrap();
    s.activate(a, 4, 0);
    s.activate(b, 8, 0);
    assert_eq!(turn(&mut s, 0, 4, Some(1)), a);
    assert_eq!(s.vtime(Wf2q::ROOT, Class::Be), 2 * U);
    assert_eq!((s.start(a), s.finish(a)), (4 * U, 5 * U));
    assert!(s.finish(a) < s.finish(b));
    assert_eq!(s.select(0), Some(b));
    // Selecting did not move V: B was eligible.
    assert_eq!(s.vtime(Wf2q::ROOT, Class::Be), 2 * U);
}

/// A, B (w 1, budget 8) at V = 0: both (0, 8U); A wins the tie on id.
/// A served 8: V = 8U/2 = 4U; requeued: A(8U, 16U).
/// B deactivated while waiting: F = 8U > V, remembered (wsum stays 2).
/// Select: A's S = 8U > V = 4U, nothing eligible: V jumps to 8U, which also reaches
/// B's finish: B is forgotten (wsum 1). A is served.
#[test]
fn vtime_jumps_to_smallest_start() {
    let mut s = Wf2q::new();
    let a = s.add_leaf(Wf2q::ROOT, 1, Class::Be).unwrap();
    let b = s.add_leaf(Wf2q::ROOT, 1, Class::Be).unwrap();
    s.activate(a, 8, 0);
    s.activate(b, 8, 0);
    assert_eq!(turn(&mut s, 0, 8, Some(8)), a);
    assert_eq!(s.vtime(Wf2q::ROOT, Class::Be), 4 * U);
    s.expire(b, None, 0);
    check(&s);
    assert!(s.is_remembered(b));
    assert_eq!(s.vtime_weight_sum(Wf2q::ROOT, Class::Be), 2);
    assert_eq!(s.select(0), Some(a));
    assert_eq!(s.vtime(Wf2q::ROOT, Class::Be), 8 * U);
    assert!(!s.is_remembered(b));
    assert_eq!(s.vtime_weight_sum(Wf2q::ROOT, Class::Be), 1);
    check(&s);
}

/// A, B (w 1, budget 8) at V = 0; A served 8: V = 4U; A goes idle with F = 8U > V:
/// remembered. Coming back at once, A starts at max(V, F) = 8U, not at V = 4U, and
/// finishes at 16U; a newcomer C starts at V = 4U. B (S = 0) is served next.
#[test]
fn idle_entity_coming_back_at_once_starts_at_old_finish() {
    let mut s = Wf2q::new();
    let a = s.add_leaf(Wf2q::ROOT, 1, Class::Be).unwrap();
    let b = s.add_leaf(Wf2q::ROOT, 1, Class::Be).unwrap();
    let c = s.add_leaf(Wf2q::ROOT, 1, Class::Be).unwrap();
    s.activate(a, 8, 0);
    s.activate(b, 8, 0);
    assert_eq!(turn(&mut s, 0, 8, None), a);
    assert_eq!(s.vtime(Wf2q::ROOT, Class::Be), 4 * U);
    assert!(!s.is_active(a) && s.is_remembered(a));
    s.activate(a, 8, 0);
    s.activate(c, 8, 0);
    check(&s);
    assert_eq!((s.start(a), s.finish(a)), (8 * U, 16 * U));
    assert_eq!((s.start(c), s.finish(c)), (4 * U, 12 * U));
    // wsum: A was still counted, C joins: 3.
    assert_eq!(s.vtime_weight_sum(Wf2q::ROOT, Class::Be), 3);
    assert_eq!(s.select(0), Some(b));
}

/// A (w 1, budget 8), B (w 1, budget 16) at V = 0: A(0, 8U), B(0, 16U).
/// A served 8: V = 8U/2 = 4U; A goes idle, remembered (F = 8U > 4U), wsum 2.
/// B served 4: V = 4U + 4U/2 = 6U < 8U: A still remembered.
/// B served 4: V = 8U: A's finish reached, A forgotten, wsum 1.
/// B served 8: V = 8U + 8U/1 = 16U (now advancing at wsum 1).
/// A activated: starts at V = 16U.
#[test]
fn idle_entity_forgotten_once_vtime_passes_finish() {
    let mut s = Wf2q::new();
    let a = s.add_leaf(Wf2q::ROOT, 1, Class::Be).unwrap();
    let b = s.add_leaf(Wf2q::ROOT, 1, Class::Be).unwrap();
    s.activate(a, 8, 0);
    s.activate(b, 16, 0);
    assert_eq!(turn(&mut s, 0, 8, None), a);
    assert!(s.is_remembered(a));
    assert_eq!(s.select(0), Some(b));
    s.served(b, 4);
    assert_eq!(s.vtime(Wf2q::ROOT, Class::Be), 6 * U);
    assert!(s.is_remembered(a));
    assert_eq!(s.vtime_weight_sum(Wf2q::ROOT, Class::Be), 2);
    s.served(b, 4);
    assert_eq!(s.vtime(Wf2q::ROOT, Class::Be), 8 * U);
    assert!(!s.is_remembered(a));
    assert_eq!(s.vtime_weight_sum(Wf2q::ROOT, Class::Be), 1);
    s.served(b, 8);
    assert_eq!(s.vtime(Wf2q::ROOT, Class::Be), 16 * U);
    s.expire(b, Some(16), 0);
    s.activate(a, 8, 0);
    check(&s);
    assert_eq!((s.start(a), s.finish(a)), (16 * U, 24 * U));
    // B: S = 0 + 16U (its service), F = 32U; A (16U, 24U) goes first.
    assert_eq!((s.start(b), s.finish(b)), (16 * U, 32 * U));
    assert_eq!(s.select(0), Some(a));
}

/// RT is served strictly before BE while backlogged, whatever the timestamps, but does
/// not preempt a BE leaf in service.
#[test]
fn rt_strictly_before_be() {
    let mut s = Wf2q::new();
    let be = s.add_leaf(Wf2q::ROOT, 1000, Class::Be).unwrap();
    let rt = s.add_leaf(Wf2q::ROOT, 1, Class::Rt).unwrap();
    s.activate(be, 8, 0);
    assert_eq!(s.select(0), Some(be));
    s.activate(rt, 8, 0);
    assert_eq!(
        s.select(0),
        Some(be),
        "no preemption of the leaf in service"
    );
    s.served(be, 8);
    s.expire(be, Some(8), 0);
    for t in 0..50 {
        assert_eq!(turn(&mut s, t * MS, 8, Some(8)), rt);
    }
    // RT's virtual time moved, BE's did not: classes have their own clocks.
    assert_eq!(s.vtime(Wf2q::ROOT, Class::Rt), 50 * 8 * U);
    assert_eq!(s.vtime(Wf2q::ROOT, Class::Be), 8 * U / 1000);
    assert_eq!(turn(&mut s, 60 * MS, 8, None), rt);
    assert_eq!(s.select(60 * MS), Some(be));
}

/// IDLE waits while BE is backlogged, but gets a turn once it has waited 200 ms since
/// it became backlogged (at 0) or was last chosen (at 200 ms).
#[test]
fn idle_class_served_after_timeout_despite_be() {
    let mut s = Wf2q::new();
    let be = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    let idle = s.add_leaf(Wf2q::ROOT, 100, Class::Idle).unwrap();
    s.activate(be, 8, 0);
    s.activate(idle, 8, 0);
    let mut order = Vec::new();
    for t in (0..=450).step_by(50) {
        order.push(turn(&mut s, t * MS, 8, Some(8)));
    }
    //         0   50  100 150 200   250 300 350 400   450
    let expected = [be, be, be, be, idle, be, be, be, idle, be];
    assert_eq!(order, expected);
    // Exactly at the limit minus one nanosecond: still BE.
    assert_eq!(turn(&mut s, 600 * MS - 1, 8, Some(8)), be);
    assert_eq!(turn(&mut s, 600 * MS, 8, Some(8)), idle);
    // With BE gone, IDLE is served at once.
    s.expire(be, None, 601 * MS);
    assert_eq!(s.select(601 * MS), Some(idle));
}

/// Groups G1 (w 1) and G2 (w 3) under the root, each with two leaves of weight 1,
/// every budget 12, every turn using it all.
///
/// Root level, in U: G1 moves 12/1 = 12 per turn, G2 12/3 = 4, V moves 12/4 = 3.
/// ```text
/// start G1(0,12) G2(0,4)    V=0
/// T1 V=0:  G2 (F 4)                      V=3   G2(4,8)
/// T2 V=3:  G2 ineligible (4>3) -> G1     V=6   G1(12,24)
/// T3 V=6:  G2(4,8)                       V=9   G2(8,12)
/// T4 V=9:  G2(8,12)                      V=12  G2(12,16)
/// T5 V=12: G2(12,16) < G1(12,24)         V=15  G2(16,20)
/// T6 V=15: G2 ineligible (16) -> G1      V=18  G1(24,36)
/// T7..T9:  G2, G2, G2                    V=27
/// ```
/// From T2 the root serves G1, G2, G2, G2 over and over. Inside each group the two
/// leaves (0,12) tie, the lower id goes first, then they alternate (V there moves 6 per
/// turn of the group). Over 400 turns: G1 1 + 99, G2 300... exactly 100 : 300.
#[test]
fn two_level_groups_share_1_to_3() {
    let mut s = Wf2q::new();
    let g1 = s.add_group(Wf2q::ROOT, 1, Class::Be).unwrap();
    let g2 = s.add_group(Wf2q::ROOT, 3, Class::Be).unwrap();
    let a1 = s.add_leaf(g1, 1, Class::Be).unwrap();
    let a2 = s.add_leaf(g1, 1, Class::Be).unwrap();
    let b1 = s.add_leaf(g2, 1, Class::Be).unwrap();
    let b2 = s.add_leaf(g2, 1, Class::Be).unwrap();
    for q in [a1, a2, b1, b2] {
        s.activate(q, 12, 0);
    }
    check(&s);
    assert_eq!((s.start(g1), s.finish(g1)), (0, 12 * U));
    assert_eq!((s.start(g2), s.finish(g2)), (0, 4 * U));
    let first = [b1, a1, b2, b1, b2, a2, b1, b2, b1];
    let groups = [
        (4, 8),
        (12, 24),
        (8, 12),
        (12, 16),
        (16, 20),
        (24, 36),
        (20, 24),
        (24, 28),
        (28, 32),
    ];
    for (k, (&leaf, &(st, fi))) in first.iter().zip(&groups).enumerate() {
        assert_eq!(turn(&mut s, 0, 12, Some(12)), leaf, "turn {}", k + 1);
        assert_eq!(s.vtime(Wf2q::ROOT, Class::Be), 3 * (k as u64 + 1) * U);
        let g = s.parent(leaf).unwrap();
        assert_eq!(
            (s.start(g), s.finish(g)),
            (st * U, fi * U),
            "turn {}",
            k + 1
        );
    }
    let mut per_group = [0u64; 2];
    let mut s = {
        let mut t = Wf2q::new();
        let g1 = t.add_group(Wf2q::ROOT, 1, Class::Be).unwrap();
        let g2 = t.add_group(Wf2q::ROOT, 3, Class::Be).unwrap();
        for g in [g1, g2, g1, g2] {
            let q = t.add_leaf(g, 1, Class::Be).unwrap();
            t.activate(q, 12, 0);
        }
        t
    };
    for _ in 0..400 {
        let q = turn(&mut s, 0, 12, Some(12));
        per_group[usize::from(s.parent(q) == Some(EntityId(2)))] += 12;
    }
    assert_eq!(per_group, [100 * 12, 300 * 12]);
}

/// A group's budget follows the child it would serve next: with children of budgets 8
/// and 32, the group's finish is computed from the eligible child with the smallest
/// finish, and is recomputed when a child arrives or leaves.
#[test]
fn group_budget_follows_next_child() {
    let mut s = Wf2q::new();
    let g = s.add_group(Wf2q::ROOT, 2, Class::Be).unwrap();
    let big = s.add_leaf(g, 1, Class::Be).unwrap();
    let small = s.add_leaf(g, 1, Class::Be).unwrap();
    s.activate(big, 32, 0);
    // Only `big`: group F = 0 + 32U/2.
    assert_eq!((s.budget(g), s.finish(g)), (32, 16 * U));
    s.activate(small, 8, 0);
    check(&s);
    // `small` (0, 8U) now comes first: group repositioned, F = 0 + 8U/2.
    assert_eq!((s.budget(g), s.start(g), s.finish(g)), (8, 0, 4 * U));
    s.expire(small, None, 0);
    check(&s);
    // Gone again (remembered, as its F = 8U > V = 0): back to `big`'s budget.
    assert!(s.is_remembered(small));
    assert_eq!((s.budget(g), s.finish(g)), (32, 16 * U));
    // Serving `big` 32 sectors: the group's own V moves 32U/wsum 2 = 16U (`small` still
    // counts), root V 32U/2 = 16U. On expiry the group restarts at F = 0 + 32U/2 = 16U.
    assert_eq!(turn(&mut s, 0, 32, None), big);
    assert!(!s.is_active(g));
    assert_eq!(s.vtime(g, Class::Be), 16 * U);
    assert_eq!(s.finish(g), 16 * U);
    // 16U <= root V 16U: the group is forgotten, not remembered.
    assert!(!s.is_remembered(g));
}

#[test]
fn weight_and_class_changes_apply_on_requeue() {
    let mut s = Wf2q::new();
    let a = s.add_leaf(Wf2q::ROOT, 1, Class::Be).unwrap();
    s.activate(a, 8, 0);
    s.set_weight(a, 4).unwrap();
    s.set_class(a, Class::Rt).unwrap();
    assert_eq!((s.weight(a), s.class(a)), (1, Class::Be));
    assert_eq!(s.weight_sum(Wf2q::ROOT, Class::Be), 1);
    assert_eq!(turn(&mut s, 0, 8, Some(8)), a);
    assert_eq!((s.weight(a), s.class(a)), (4, Class::Rt));
    assert_eq!(s.weight_sum(Wf2q::ROOT, Class::Be), 0);
    assert_eq!(s.weight_sum(Wf2q::ROOT, Class::Rt), 4);
    // Moved to another class: starts at that class's V (0), F = 8U/4.
    assert_eq!((s.start(a), s.finish(a)), (0, 2 * U));
    // Inactive: applied at once.
    assert_eq!(turn(&mut s, 0, 8, None), a);
    s.set_weight(a, 7).unwrap();
    assert_eq!(s.weight(a), 7);
    check(&s);
}

#[test]
fn errors() {
    let mut s = Wf2q::new();
    assert_eq!(
        s.add_leaf(Wf2q::ROOT, 0, Class::Be),
        Err(Wf2qError::BadWeight(0))
    );
    assert_eq!(
        s.add_group(Wf2q::ROOT, MAX_WEIGHT + 1, Class::Be),
        Err(Wf2qError::BadWeight(MAX_WEIGHT + 1))
    );
    let g = s.add_group(Wf2q::ROOT, 100, Class::Be).unwrap();
    let q = s.add_leaf(g, 100, Class::Be).unwrap();
    let other = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    assert_eq!(s.add_leaf(q, 100, Class::Be), Err(Wf2qError::NotAGroup));
    assert_eq!(
        s.add_leaf(EntityId(99), 100, Class::Be),
        Err(Wf2qError::NoSuchEntity)
    );
    assert_eq!(s.set_parent(other, q), Err(Wf2qError::NotAGroup));
    assert_eq!(s.set_parent(g, g), Err(Wf2qError::NotAGroup));
    assert_eq!(s.set_weight(q, 0), Err(Wf2qError::BadWeight(0)));
    assert_eq!(s.remove(g), Err(Wf2qError::Busy), "group with a child");
    assert_eq!(s.remove(Wf2q::ROOT), Err(Wf2qError::Busy));
    assert_eq!(s.set_parent(Wf2q::ROOT, g), Err(Wf2qError::Busy));
    let sibling = s.add_leaf(g, 100, Class::Be).unwrap();
    s.activate(q, 8, 0);
    s.activate(sibling, 8, 0);
    assert_eq!(s.remove(q), Err(Wf2qError::Busy), "active leaf");
    assert_eq!(s.remove(g), Err(Wf2qError::Busy), "active group");
    assert_eq!(s.set_parent(q, Wf2q::ROOT), Err(Wf2qError::Busy));
    assert_eq!(s.select(0), Some(q));
    assert_eq!(s.remove(q), Err(Wf2qError::Busy), "in service");
    s.served(q, 8);
    s.expire(q, None, 0);
    // F = 8U/100 > V = 8U/200: remembered on the idle tree; removal forgets it.
    assert!(s.is_remembered(q));
    assert_eq!(s.vtime_weight_sum(g, Class::Be), 200);
    assert_eq!(s.remove(q), Ok(()));
    check(&s);
    assert_eq!(s.remove(q), Err(Wf2qError::NoSuchEntity));
    assert_eq!(s.weight(q), 0);
    assert_eq!(s.vtime_weight_sum(g, Class::Be), 100);
    assert_eq!(turn(&mut s, 0, 8, None), sibling);
    assert_eq!(s.remove(sibling), Ok(()));
    assert_eq!(s.remove(g), Ok(()));
    // Slots are reused.
    let again = s.add_leaf(Wf2q::ROOT, 5, Class::Idle).unwrap();
    assert!(again == g || again == q);
    check(&s);
}

mod examples;
mod randomized;
