//! `saved.rs`'s unit tests, in a file of their own to keep it under 600 lines.

use super::*;

fn saved(dir: &Path, max_count: usize, max_bytes: u64) -> Saved {
    Saved::open(SavedSettings { dir: dir.join("m"), max_bytes, max_count, disk: None }).unwrap()
}

/// Saves as the runtime would: writes `bytes` bytes to the planned file.
fn run(s: &mut Saved, continues: Option<u64>, held: &[i32], bytes: usize) -> u64 {
    let save = s.save(continues).unwrap();
    std::fs::write(&save.file, vec![0u8; bytes]).unwrap();
    s.saved(&save, held, held, None, None);
    save.entry
}

#[test]
fn the_longest_saved_prompt_a_new_one_continues_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = saved(dir.path(), 8, 1 << 20);
    let a = run(&mut s, None, &[1, 2], 10);
    let a2 = run(&mut s, Some(a), &[1, 2, 3, 4], 10);
    assert_eq!(a, a2, "a continued conversation keeps its entry");
    run(&mut s, None, &[5, 6], 10);
    assert_eq!(s.held(), (2, 20), "the old file of a continued entry is gone");
    let room = |_: usize, _: usize| true;
    assert_eq!(s.find(&[1, 2, 3, 4, 9], None, room, false).map(|r| (r.entry, r.held)), Some((a, 4)));
    assert_eq!(s.find(&[1, 2, 3, 4], None, room, false), None, "nothing new to run");
    assert_eq!(s.find(&[1, 2, 3, 4, 9], Some("style"), room, false), None, "another adapter");
    assert_eq!(s.find(&[1, 2, 3, 4, 9], None, |_, _| false, false), None, "over the context");
}

#[test]
fn over_budget_the_least_recently_used_go() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = saved(dir.path(), 2, 1 << 20);
    let chat = run(&mut s, None, &[1], 10);
    let other = run(&mut s, None, &[7], 10);
    run(&mut s, Some(chat), &[1, 2], 10);
    let third = run(&mut s, None, &[8], 10);
    assert_eq!(s.evictions, 1);
    let left: Vec<u64> = s.entries.iter().map(|e| e.id).collect();
    assert!(left.contains(&chat) && left.contains(&third) && !left.contains(&other), "{left:?}");
    // Bytes count as well.
    let mut s = saved(&dir.path().join("b"), 8, 25);
    run(&mut s, None, &[1], 10);
    run(&mut s, None, &[2], 10);
    run(&mut s, None, &[3], 10);
    assert_eq!(s.held(), (2, 20));
}

#[test]
fn past_the_ram_budget_the_least_recently_used_spill_to_disk_and_past_its_budget_go() {
    let dir = tempfile::tempdir().unwrap();
    let disk = DiskTier { dir: dir.path().join("disk/m"), max_bytes: 15 };
    let settings = SavedSettings { dir: dir.path().join("ram/m"), max_bytes: 1 << 20, max_count: 1, disk: Some(disk) };
    let mut s = Saved::open(settings).unwrap();
    let a = run(&mut s, None, &[1], 10);
    let b = run(&mut s, None, &[2], 10);
    let spills = s.take_spills();
    assert_eq!(spills.len(), 1);
    assert_eq!(spills[0].entry, a);
    let room = |_: usize, _: usize| true;
    assert!(!s.find(&[1, 9], None, room, false).unwrap().on_disk, "loadable from RAM while being copied");
    std::fs::copy(&spills[0].from, &spills[0].to).unwrap();
    s.spilled(&spills[0], Ok(()));
    assert!(!spills[0].from.exists() && spills[0].to.exists());
    assert_eq!((s.held(), s.on_disk(), s.evictions), ((2, 20), (1, 10), 0));
    assert!(s.find(&[1, 9], None, room, false).unwrap().on_disk);

    // A third: b spills too, and the disk tier (15 bytes) keeps one.
    let c = run(&mut s, None, &[3], 10);
    let spills = s.take_spills();
    assert_eq!(spills[0].entry, b);
    std::fs::copy(&spills[0].from, &spills[0].to).unwrap();
    s.spilled(&spills[0], Ok(()));
    assert_eq!((s.held(), s.on_disk(), s.evictions), ((2, 20), (1, 10), 1));
    assert!(s.find(&[1, 9], None, room, false).is_none(), "the least recently used left the disk tier");

    // Continued while its copy ran: the copy is dropped, the new RAM file kept.
    let d = run(&mut s, None, &[4], 10);
    let spills = s.take_spills();
    assert_eq!(spills.len(), 1);
    assert_eq!((spills[0].entry, d == c), (c, false));
    std::fs::copy(&spills[0].from, &spills[0].to).unwrap();
    run(&mut s, Some(c), &[3, 5], 10);
    s.spilled(&spills[0], Ok(()));
    assert!(!spills[0].to.exists(), "the stale copy is removed");
    assert!(!s.find(&[3, 5, 9], None, room, false).unwrap().on_disk);

    // A copy that ends while its RAM file is being loaded leaves it until the load is over.
    let e = run(&mut s, None, &[5], 10);
    let spills = s.take_spills();
    let (spilling, from) = (spills[0].entry, spills[0].from.clone());
    assert_ne!(spilling, e);
    s.loading(Some(&from));
    std::fs::copy(&spills[0].from, &spills[0].to).unwrap();
    s.spilled(&spills[0], Ok(()));
    assert!(from.exists(), "still being read");
    s.loading(None);
    assert!(!from.exists());
}

#[test]
fn a_failed_image_restore_drops_only_the_files_with_images() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = saved(dir.path(), 8, 1 << 20);
    run(&mut s, None, &[1, 2], 10);
    let image = run(&mut s, None, &[1, i32::MIN, -5, i32::MIN], 10);
    assert_eq!(s.resident(), Some(image));
    s.switch_off_images("spared nothing".into());
    assert_eq!((s.held(), s.resident()), ((1, 10), None));
    assert!(!s.keeps_images() && !s.is_off());
    assert!(s.find(&[1, 2, 3], None, |_, _| true, false).is_some(), "text conversations keep their files");

    // A multimodal run that wrote no file switches off only the files with images.
    let mut s = saved(&dir.path().join("b"), 8, 1 << 20);
    run(&mut s, None, &[1, 2], 10);
    let save = s.save(None).unwrap();
    s.saved(&save, &[1, i32::MIN, -5, i32::MIN], &[1, i32::MIN, -5, i32::MIN], None, None);
    assert!(!s.keeps_images() && !s.is_off());
    assert_eq!(s.held(), (1, 10));
}

#[test]
fn a_missing_file_switches_the_files_off() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = saved(dir.path(), 8, 1 << 20);
    run(&mut s, None, &[1], 10);
    let save = s.save(None).unwrap();
    s.saved(&save, &[2], &[2], None, None);
    assert!(s.is_off());
    assert_eq!(s.held(), (0, 0));
    assert_eq!(s.save(None), None);
}

#[test]
fn a_prompt_with_images_is_restored_only_from_a_file_holding_its_own_ids() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = saved(dir.path(), 8, 1 << 20);
    let same = run(&mut s, None, &[1, 2], 10);
    // A longer file whose reply stood for the client's view of it (other ids).
    let save = s.save(None).unwrap();
    std::fs::write(&save.file, vec![0u8; 10]).unwrap();
    s.saved(&save, &[1, 2, 7, 8], &[1, 2, 3, 4], None, None);
    assert_eq!(s.find(&[1, 2, 3, 4, 9], None, |_, _| true, false).map(|r| r.held), Some(4));
    let found = s.find(&[1, 2, 3, 4, 9], None, |_, _| true, true);
    assert_eq!(found.map(|r| (r.entry, r.held)), Some((same, 2)), "the shorter file that holds the client's ids");
}
