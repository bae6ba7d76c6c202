use super::*;
use alloc::collections::BTreeSet;
use alloc::vec::Vec;
use proptest::prelude::*;

proptest! {
    /// The forest against a sorted set: same order, same bounds, same neighbours.
    #[test]
    fn forest_matches_a_sorted_set(ops in proptest::collection::vec((0usize..32, 0u64..64, any::<bool>()), 1..200)) {
        let mut forest = SectorForest::new(2, 32);
        let mut model: [BTreeSet<(u64, usize)>; 2] = [BTreeSet::new(), BTreeSet::new()];
        let mut sectors = [0u64; 32];
        for (key, sector, insert) in ops {
            let t = key % 2;
            if insert && !forest.contains(key) {
                forest.insert(t, key, sector);
                sectors[key] = sector;
                model[t].insert((sector, key));
            } else if forest.contains(key) {
                prop_assert_eq!(forest.tree_of(key), Some(t));
                forest.remove(key);
                model[t].remove(&(sectors[key], key));
            }
            for (t, set) in model.iter().enumerate() {
                prop_assert_eq!(forest.is_empty(t), set.is_empty());
                for pos in [0u64, 10, 31, 63] {
                    let want = set.range((pos, 0)..).next().map(|&(_, k)| k);
                    prop_assert_eq!(forest.lower_bound(t, pos), want);
                }
                let order: Vec<usize> = set.iter().map(|&(_, k)| k).collect();
                prop_assert_eq!(forest.first(t), order.first().copied());
                prop_assert_eq!(forest.last(t), order.last().copied());
                for w in order.windows(2) {
                    prop_assert_eq!(forest.next(w[0]), Some(w[1]));
                    prop_assert_eq!(forest.prev(w[1]), Some(w[0]));
                }
                if let (Some(&first), Some(&last)) = (order.first(), order.last()) {
                    prop_assert_eq!(forest.prev(first), None);
                    prop_assert_eq!(forest.next(last), None);
                }
            }
        }
    }

    /// The lists against vectors.
    #[test]
    fn lists_match_vectors(ops in proptest::collection::vec((0usize..16, 0u8..4), 1..200)) {
        let mut lists = KeyLists::new(2, 16);
        let mut model: [Vec<usize>; 2] = [Vec::new(), Vec::new()];
        for (key, what) in ops {
            let l = key % 2;
            if lists.contains(key) {
                lists.remove(key);
                model[l].retain(|&k| k != key);
            } else {
                match what {
                    0 => { lists.push_back(l, key); model[l].push(key); }
                    1 => { lists.push_front(l, key); model[l].insert(0, key); }
                    _ => match model[l].first().copied() {
                        Some(before) => {
                            lists.insert_before(before, key);
                            model[l].insert(0, key);
                        }
                        None => { lists.push_back(l, key); model[l].push(key); }
                    },
                }
            }
            for (l, v) in model.iter().enumerate() {
                prop_assert_eq!(lists.len(l), v.len());
                prop_assert_eq!(lists.front(l), v.first().copied());
                let walked: Vec<usize> =
                    core::iter::successors(lists.front(l), |&k| lists.next(k)).collect();
                prop_assert_eq!(&walked, v);
            }
        }
    }
}

#[test]
fn end_hash_finds_by_end() {
    let mut hash = EndHash::new(8);
    hash.insert(1, 100);
    hash.insert(2, 100);
    hash.insert(3, 200);
    assert_eq!(hash.find(100, |k| k == 2), Some(2));
    assert_eq!(hash.find(200, |_| true), Some(3));
    hash.remove(3);
    assert_eq!(hash.find(200, |_| true), None);
    hash.insert(1, 300); // moves
    assert_eq!(hash.find(100, |k| k == 1), None);
    assert_eq!(hash.find(300, |_| true), Some(1));
}

#[test]
fn trees_and_lists_grow() {
    let mut forest = SectorForest::new(1, 4);
    let mut lists = KeyLists::new(1, 4);
    forest.insert(0, 0, 5);
    lists.push_back(0, 0);
    let (t, l) = (forest.add_tree(), lists.add_list());
    forest.insert(t, 1, 1);
    lists.push_back(l, 1);
    assert_eq!((forest.first(0), forest.first(t)), (Some(0), Some(1)));
    assert_eq!(
        (lists.front(0), lists.front(l), lists.total()),
        (Some(0), Some(1), 2)
    );
}
