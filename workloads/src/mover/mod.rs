//! The reference mover (DESIGN section 5): config, pacing, history lines, database access, the state machine and its stall probe, with the pure parts public for tests.

pub mod config;
pub mod db;
pub mod env;
pub mod etcd;
pub mod history;
mod lock_client;
pub mod pacing;
pub mod redis;
pub mod run;
pub mod stalls;
pub mod zookeeper;

pub use config::{
    switch_name, Args, BadInput, Election, Env, Fencing, OnLost, OnRenewFailure, Settings,
};
pub use run::{Exit, Mover};
