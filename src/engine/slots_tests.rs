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

/// A file that saved `held` from `slot`.
struct OneFile {
    held: Vec<i32>,
    slot: usize,
}

impl Restores for OneFile {
    fn best(&self, members: &[Member], _context: u32) -> Option<GroupRestore> {
        let held = &self.held;
        let restore = |m: &Member| {
            let ids = m.ids.filter(|ids| ids.len() > held.len() && ids.starts_with(held))?;
            let restore = Restore {
                entry: 1,
                file: "f".into(),
                held: held.len(),
                client: held.len(),
                held_ids: ids[..held.len()].to_vec(),
                on_disk: false,
            };
            Some((self.slot, restore))
        };
        let jobs: Vec<_> = members.iter().map(restore).collect();
        jobs.iter().any(Option::is_some).then(|| GroupRestore { file: "f".into(), jobs })
    }
}

/// Runs `layout` on a runtime that takes short batches: slots without a job get no input.
fn run_short(slots: &mut Slots, layout: Layout, ids: &[&str]) {
    if layout.clear {
        slots.cleared();
    }
    let size = slots.caches.len();
    let mut used: Vec<Option<SlotJob>> = (0..size).map(|_| None).collect();
    let mut sizes: Vec<i32> = (0..size).map(|s| slots.size(s).unwrap_or(0) as i32).collect();
    for ((slot, plan), id) in layout.jobs.into_iter().zip(ids) {
        let plan = plan.unwrap();
        sizes[slot] = (plan.cached + plan.input.len() + 1) as i32;
        used[slot] = Some(SlotJob { id: (*id).into(), plan });
    }
    let absent: Vec<bool> = used.iter().map(Option::is_none).collect();
    assert!(slots.settle(&used, &absent, None, &vec![vec![9]; size], Some(&sizes)).is_empty());
}

#[test]
fn side_tasks_that_took_the_clean_slots_are_cleared_for_a_conversation_a_file_restores() {
    let mut slots = Slots::new(3, false);
    slots.set_short(true);
    slots.cleared();
    let hints = CacheHints::default();
    // A conversation, twice (it came back), then two side tasks take the clean slots.
    let first = slots.layout(&[member(&[1, 2], &hints)], 100, None);
    run_short(&mut slots, first, &["a1"]);
    let again = slots.layout(&[member(&[1, 2, 9, 4], &hints)], 100, None);
    assert!(!slots.likely_cleared(&again), "two clean slots left, one newcomer lately");
    run_short(&mut slots, again, &["a2"]);
    for (task, id) in [([50], "t1"), ([60], "t2")] {
        let layout = slots.layout(&[member(&task, &hints)], 100, None);
        assert!(!layout.clear);
        run_short(&mut slots, layout, &[id]);
    }
    // Its third turn leaves no clean slot where newcomers came: it saves.
    let third = slots.layout(&[member(&[1, 2, 9, 4, 9, 5], &hints)], 100, None);
    assert_eq!(third.jobs[0].1.as_ref().unwrap().cached, 5, "resident");
    assert!(slots.likely_cleared(&third));
    run_short(&mut slots, third, &["a3"]);
    // The next task finds no clean slot: every slot is cleared.
    let file = OneFile { held: vec![1, 2, 9, 4, 9, 5], slot: 0 };
    let task = slots.layout(&[member(&[70], &hints)], 100, Some(&file));
    assert!(task.clear && task.restore.is_none());
    run_short(&mut slots, task, &["t3"]);
    // The conversation continues no slot, and clean ones are left: the
    // task's slot keeps nothing expected back, so the slots are cleared
    // again for the file.
    let fourth = [member(&[1, 2, 9, 4, 9, 5, 9, 6], &hints)];
    let back = slots.layout(&fourth, 100, Some(&file));
    assert!(back.clear);
    assert_eq!(back.restore, Some("f".into()));
    let (slot, plan) = &back.jobs[0];
    assert_eq!((*slot, plan.as_ref().unwrap().restore.as_ref().map(|r| r.held)), (0, Some(6)));

    // Had a conversation that came back held a slot, keeping more than the
    // file spares, the job would have taken a clean slot instead.
    let mut slots = Slots::new(2, false);
    slots.set_short(true);
    slots.cleared();
    for (ids, id) in [(&[30, 31][..], "b1"), (&[30, 31, 9, 32, 33, 34, 35], "b2")] {
        let layout = slots.layout(&[member(ids, &hints)], 100, None);
        run_short(&mut slots, layout, &[id]);
    }
    let kept = slots.layout(&fourth, 100, Some(&file));
    assert!(!kept.clear, "b holds 7 ids, the file spares 6");
    assert_eq!(kept.jobs[0].0, 1);
}
