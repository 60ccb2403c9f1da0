//! The counting of triggered faults (`Triggers`), without servers.

use super::*;
use chaos_nemesis::Who;

fn armed(index: usize, target: &str, when: Trigger) -> Armed {
    Armed {
        index,
        fault: Fault {
            when: Some(when.clone()),
            ..Fault::at(
                0,
                Some(20_000),
                FaultKind::Pause {
                    target: target.into(),
                    freezer: false,
                },
            )
        },
        when,
        seen: 0,
        fired: false,
    }
}

fn when(on: Event, by: Who, nth: u32) -> Trigger {
    Trigger {
        on,
        by,
        nth,
        inside: None,
        delay_s: 0.0,
        shard: None,
    }
}

#[test]
fn a_link_from_a_role_becomes_the_link_of_the_box_that_holds_it() {
    let mut cut = armed(0, "", when(Event::Grant, Who::Any, 2));
    cut.fault.kind = FaultKind::Down {
        link: "previous-holder->shard*".into(),
    };
    let mut t = Triggers {
        armed: vec![cut],
        ..Default::default()
    };
    assert!(t.claim_changed(Some("box-2"), 7, 10).is_empty());
    let f = t.claim_changed(Some("box-4"), 8, 20);
    assert_eq!(f.len(), 1);
    assert_eq!(
        f[0].kind.target(),
        "box-2->shard*",
        "the previous holder's links"
    );
    assert_eq!(f[0].no_target, None);
}

#[test]
fn the_nth_renewal_by_the_holder_pauses_whoever_holds_the_claim_then() {
    let mut t = Triggers {
        armed: vec![armed(0, "holder", when(Event::Renew, Who::Holder, 2))],
        ..Default::default()
    };
    assert!(t.claim_changed(Some("box-2"), 7, 10).is_empty(), "a grant");
    assert!(
        t.claim_changed(Some("box-2"), 7, 20).is_empty(),
        "1st renewal"
    );
    let f = t.claim_changed(Some("box-2"), 7, 30);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].kind.target(), "box-2");
    assert_eq!(f[0].describe, "the 2nd renew by holder");
    assert!(
        t.claim_changed(Some("box-2"), 7, 40).is_empty(),
        "fires once"
    );
    assert!(t.unfired().is_empty());
}

#[test]
fn a_grant_to_another_box_makes_the_old_holder_the_previous_one() {
    let mut t = Triggers {
        armed: vec![
            armed(0, "previous-holder", when(Event::Grant, Who::Any, 2)),
            armed(1, "holder", when(Event::Grant, Who::Box("box-9".into()), 1)),
        ],
        ..Default::default()
    };
    t.claim_changed(Some("box-2"), 7, 10);
    let f = t.claim_changed(Some("box-3"), 8, 50);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].kind.target(), "box-2", "the previous holder");
    assert_eq!(
        t.unfired(),
        vec![(1, "the 1st grant by box-9".to_string(), false)]
    );
}

/// A box's first write heard before its grant (two roads, two delays) is the holder's all
/// the same: the 2nd write by holder fires on box-1's 2nd write, not its 3rd; a trigger by
/// any box counts the early write once; a stale write long before a grant stays a stranger's.
#[test]
fn a_write_heard_just_before_its_box_s_grant_counts_as_the_holder_s() {
    let write = WireEvent::Write {
        tag: "UPDATE".into(),
        rows: 1,
        in_txn: false,
    };
    let mut t = Triggers {
        armed: vec![
            armed(0, "holder", when(Event::Write, Who::Holder, 2)),
            armed(1, "holder", when(Event::Write, Who::Any, 3)),
        ],
        early_window_ms: 10_000,
        ..Default::default()
    };
    assert!(t.link_event("box-1->shard1", &write, 100).is_empty());
    assert!(
        t.claim_changed(Some("box-1"), 7, 150).is_empty(),
        "1 write counted"
    );
    let f = t.link_event("box-1->shard1", &write, 200);
    assert_eq!(f.len(), 1, "the 2nd write by holder");
    assert_eq!((f[0].index, f[0].kind.target()), (0, "box-1"));
    let f = t.link_event("box-1->shard1", &write, 300);
    assert_eq!(
        f[0].index, 1,
        "the 3rd write by any box, the early one counted once"
    );

    let mut t = Triggers {
        armed: vec![armed(0, "holder", when(Event::Write, Who::Holder, 1))],
        early_window_ms: 10_000,
        ..Default::default()
    };
    t.link_event("box-3->shard1", &write, 100);
    assert!(
        t.claim_changed(Some("box-3"), 9, 20_200).is_empty(),
        "a write 20 s before the grant was not the grant's"
    );
}

#[test]
fn a_role_nobody_holds_is_said_and_events_before_at_do_not_count() {
    let mut t = Triggers {
        armed: vec![armed(0, "previous-holder", when(Event::Grant, Who::Any, 1))],
        ..Default::default()
    };
    t.armed[0].fault.at_ms = 5;
    assert!(
        t.claim_changed(Some("box-1"), 3, 1).is_empty(),
        "before it is armed"
    );
    t.claim_changed(None, 3, 2);
    let f = t.claim_changed(Some("box-1"), 4, 10);
    // box-1 released, then took it again: nobody else held it before.
    assert_eq!(f[0].no_target.as_deref(), Some("previous-holder"));
}
