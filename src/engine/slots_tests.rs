use super::*;

fn member<'a>(ids: &'a [i32], hints: &'a CacheHints) -> Member<'a> {
    Member { ids: Some(ids), hints, lora: None, max_new: 8 }
}

fn slots_of(layout: &Layout) -> Vec<usize> {
    layout.jobs.iter().map(|(s, _)| *s).collect()
}

/// Runs `layout` as the runtime would: each job's slot gets its input and
/// `reply`, a filler slot one id and one generated.
fn run(slots: &mut Slots, layout: Layout, ids: &[&str], reply: i32) -> Vec<(usize, Disagreement)> {
    if layout.clear {
        slots.cleared();
    }
    let size = slots.caches.len();
    let mut used: Vec<Option<SlotJob>> = (0..size).map(|_| None).collect();
    let mut generated = vec![vec![reply]; size];
    let mut sizes = vec![0; size];
    for ((slot, plan), id) in layout.jobs.into_iter().zip(ids) {
        let plan = plan.unwrap();
        sizes[slot] = (plan.cached + plan.input.len() + 1) as i32;
        generated[slot] = vec![reply];
        used[slot] = Some(SlotJob { id: (*id).into(), plan });
    }
    slots.settle(&used, &[], None, &generated, Some(&sizes))
}

#[test]
fn each_conversation_keeps_its_slot_and_a_filler_costs_its_slot_its_conversation() {
    let mut slots = Slots::new(3, false);
    let hints = CacheHints::default();
    let first = [member(&[1, 2], &hints), member(&[5, 6], &hints), member(&[8], &hints)];
    assert!(slots.layout(&first, 100, None).clear, "what a fresh handle holds is not known");
    slots.cleared();
    let first = slots.layout(&first, 100, None);
    assert!(!first.clear, "empty slots need no clearing");
    assert_eq!(slots_of(&first), vec![0, 1, 2]);
    assert!(run(&mut slots, first, &["a", "b", "c"], 9).is_empty());
    assert_eq!(slots.held(), (3, 5));
    let at = |ms| Instant::now() + std::time::Duration::from_millis(ms);
    let c_ended = at(3);
    slots.left(&[(0, at(1)), (1, at(2)), (2, c_ended)]);

    // b's follow-up before a's: each in its own slot, c's gets a filler.
    let next = slots.layout(&[member(&[5, 6, 9, 7], &hints), member(&[1, 2, 9, 4], &hints)], 100, None);
    assert!(!next.clear);
    assert_eq!(slots_of(&next), vec![1, 0]);
    let plans: Vec<&Plan> = next.jobs.iter().map(|(_, p)| p.as_ref().unwrap()).collect();
    assert_eq!((plans[0].cached, plans[0].input.clone()), (3, vec![7]), "only what follows is sent");
    assert_eq!(plans[1].cached, 3);
    assert!(run(&mut slots, next, &["b2", "a2"], 3).is_empty());
    let a_ended = at(5);
    slots.left(&[(1, at(4)), (0, a_ended)]);
    assert!(slots.is_warm(&[1, 2, 9, 4, 3, 1], None));
    assert!(!slots.is_warm(&[8, 9, 2], None), "the filler is in c's slot now");

    // c continues nothing and no slot is empty: every slot is cleared.
    let last = slots.layout(&[member(&[8, 9, 2], &hints), member(&[1, 2, 9, 4, 3, 1], &hints)], 100, None);
    assert!(last.clear);
    // Both came back: a to the slot it holds, c to the one it lost.
    assert_eq!(last.home, vec![Some(c_ended), Some(a_ended)]);
    let plans: Vec<&Plan> = last.jobs.iter().map(|(_, p)| p.as_ref().unwrap()).collect();
    assert_eq!((plans[0].miss, plans[1].miss), (MissReason::Other, MissReason::Displaced));
    assert_eq!(plans[1].input.len(), 6, "a displaced job prefills all of its prompt");
    assert_ne!(last.jobs[0].0, last.jobs[1].0);
}

#[test]
fn a_filler_slot_without_room_for_the_reply_is_cleared_first() {
    let mut slots = Slots::new(2, false);
    slots.cleared();
    let hints = CacheHints::default();
    let first = slots.layout(&[member(&[1, 2], &hints)], 20, None);
    // The filler's slot grew to 10 positions.
    let (slot, plan) = first.jobs.into_iter().next().unwrap();
    let mut used = vec![None, None];
    used[slot] = Some(SlotJob { id: "a".into(), plan: plan.unwrap() });
    let sizes = if slot == 0 { [3, 10] } else { [10, 3] };
    assert!(slots.settle(&used, &[], None, &[vec![9], vec![9]], Some(&sizes)).is_empty());
    let follow = |max_new| Member { max_new, ..member(&[1, 2, 9, 4], &hints) };
    assert!(!slots.layout(&[follow(9)], 20, None).clear, "10 + 1 + 9 positions fit in 20");
    assert!(slots.layout(&[follow(10)], 20, None).clear, "10 + 1 + 10 do not");
}

#[test]
fn a_size_that_disagrees_leaves_that_slot_unknown_only() {
    let mut slots = Slots::new(2, false);
    slots.cleared();
    let hints = CacheHints::default();
    let layout = slots.layout(&[member(&[1, 2], &hints), member(&[5, 6], &hints)], 100, None);
    let used: Vec<Option<SlotJob>> = layout
        .jobs
        .into_iter()
        .zip(["a", "b"])
        .map(|((_, plan), id)| Some(SlotJob { id: id.into(), plan: plan.unwrap() }))
        .collect();
    let disagreed = slots.settle(&used, &[], None, &[vec![9], vec![9]], Some(&[3, 4]));
    assert_eq!(disagreed, vec![(1, Disagreement { expected: 3, reported: Some(4) })]);
    assert!(slots.is_warm(&[1, 2, 9, 3], None));
    assert!(!slots.is_warm(&[5, 6, 9, 3], None));
    assert_eq!(slots.held(), (1, 2));
}

#[test]
fn a_view_named_before_the_run_is_settled_still_counts() {
    let mut slots = Slots::new(2, false);
    slots.cleared();
    let hints = CacheHints::default();
    let mut layout = slots.layout(&[member(&[1, 2], &hints)], 100, None);
    let plan = layout.jobs.remove(0).1;
    slots.seen("a", "nine".into(), false, 1);
    let used = vec![Some(SlotJob { id: "a".into(), plan: plan.unwrap() }), None];
    assert!(slots.settle(&used, &[], None, &[vec![9], vec![3]], Some(&[3, 2])).is_empty());
    let resent = crate::engine::Resent { start: 2, end: 3, view: "nine".into(), before: 2 };
    let hints = CacheHints { resent: Some(resent), conversation: None, stable: None };
    let follow = slots.layout(&[member(&[1, 2, 90, 4], &hints)], 100, None);
    let plan = follow.jobs[0].1.as_ref().unwrap();
    assert_eq!((plan.cached, plan.by_view, plan.input.clone()), (3, true, vec![4]));
}
