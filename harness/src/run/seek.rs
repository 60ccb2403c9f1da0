//! The campaign seeks what it has not met: before each run whose scenario draws its schedule
//! (`[nemesis.random]`), the dangerous moments no run of the campaign has reached yet turn the
//! profile toward the faults that reach them (`RunOptions::seek`). The run's scenario is stored as it ran, profile
//! included, so `chaos run --replay DIR` runs the very schedule again.

use chaos_history::Moment;
use chaos_nemesis::RandomProfile;

/// Turn `profile` toward the faults that reach `missing`; what changed, one phrase each (none
/// when nothing a profile draws reaches them).
pub fn adjust(profile: &mut RandomProfile, missing: &[Moment]) -> Vec<String> {
    let mut said = Vec::new();
    let wants = |ms: &[Moment]| ms.iter().any(|m| missing.contains(m));
    // A holder paused (or killed) at one of its writes for about a lease: its lease runs out
    // while it is stopped, it wakes and writes, a newer holder may have written meanwhile.
    let on_holder = [
        Moment::HolderStoppedPastLease,
        Moment::WriteAfterExpiry,
        Moment::TwoHolders,
        Moment::StaleWrite,
    ];
    if wants(&on_holder) {
        profile.holder_faults += 2;
        // A holder fault is a pause or a kill, as the profile allows: a killed holder never
        // wakes to write, so a pause must be among them.
        allow(profile, "pause", &mut said);
        said.push("2 more holder faults".into());
    }
    // Three grants while the first still writes: holders lost one after another.
    if wants(&[Moment::ThreeGrants]) {
        profile.holder_faults += 2;
        profile.holder_write[1] = profile.holder_write[1].max(profile.holder_write[0] + 1);
        allow(profile, "kill", &mut said);
        said.push("2 more holder faults".into());
    }
    // A killed holder leaves the lease to run out with nobody to take over at once.
    if wants(&[Moment::Vacancy]) {
        allow(profile, "kill", &mut said);
    }
    // The new holder cut from the lock right after its grant: its renewals go unanswered.
    if wants(&[Moment::RenewalFailed, Moment::LockUnavailable]) {
        profile.role_faults += 2;
        allow(profile, "down", &mut said);
        said.push("2 more cuts of a new holder's lock link".into());
    }
    // A node stopped: the lock among them.
    if wants(&[Moment::LockUnavailable]) {
        allow(profile, "stop", &mut said);
    }
    said
}

/// Let the profile draw `kind` too.
fn allow(p: &mut RandomProfile, kind: &str, said: &mut Vec<String>) {
    if !p.faults.iter().any(|k| k == kind) {
        p.faults.push(kind.to_string());
        said.push(format!("draws {kind}"));
    }
}

/// The lease moments none of `reached` met, in `Moment` order (the failover's left out: a
/// generated schedule runs the mover).
pub fn missing<'a>(reached: impl Iterator<Item = &'a Moment>) -> Vec<Moment> {
    let met: Vec<Moment> = reached.copied().collect();
    (Moment::ALL.into_iter())
        .filter(|m| !m.failover() && *m != Moment::LockForgotGrant && !met.contains(m))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile() -> RandomProfile {
        serde_json::from_value(serde_json::json!({
            "faults": ["pause", "latency"], "interval_ms": [1000, 2000], "duration_ms": [1000, 2000]
        }))
        .unwrap()
    }

    #[test]
    fn nothing_missing_changes_nothing_and_each_moment_draws_its_faults() {
        let mut p = profile();
        assert!(adjust(&mut p, &[]).is_empty());
        assert_eq!((p.holder_faults, p.role_faults), (0, 0));
        let said = adjust(&mut p, &[Moment::Vacancy, Moment::LockUnavailable]);
        assert!(p.faults.contains(&"kill".to_string()) && p.faults.contains(&"stop".to_string()));
        assert_eq!(p.role_faults, 2, "{said:?}");
        assert_eq!(p.holder_faults, 0);
        let mut q = profile();
        adjust(&mut q, &[Moment::StaleWrite, Moment::ThreeGrants]);
        assert_eq!(q.holder_faults, 4);
        let mut latency_only = profile();
        latency_only.faults = vec!["latency".into()];
        adjust(&mut latency_only, &[Moment::StaleWrite]);
        assert!(
            latency_only.faults.contains(&"pause".to_string()),
            "a killed holder never writes again"
        );
    }

    #[test]
    fn missing_leaves_out_what_a_generated_mover_run_cannot_reach() {
        let all = missing([].iter());
        assert!(!all.contains(&Moment::PromotionWhileWritable));
        assert!(!all.contains(&Moment::LockForgotGrant));
        let met = [Moment::Vacancy];
        assert!(!missing(met.iter()).contains(&Moment::Vacancy));
    }
}
