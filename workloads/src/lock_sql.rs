//! The lock service's calls as every box makes them (routing.sql's `claim_acquire`, `claim_renew`, `claim_release`, the claim row, and lesson 007's `job_runs`): one text for the mover and the designs' programs alike.

pub const SQL_ACQUIRE: &str = "select claim_acquire($1, $2, $3)";
pub const SQL_RENEW: &str = "select claim_renew($1, $2, $3, $4)";
pub const SQL_RELEASE: &str = "select claim_release($1, $2, $3)";
pub const SQL_WHO: &str = "select holder, token from claims where job = $1";
pub const SQL_UNIQUE: &str =
    "insert into job_runs (job, run_on, holder) values ($1, current_date, $2) on conflict do nothing returning holder";
pub const SQL_UNIQUE_WHO: &str =
    "select holder from job_runs where job = $1 and run_on = current_date";
