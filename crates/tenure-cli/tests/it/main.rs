//! tenure-cli's integration tests, one binary: each module was a test file of
//! its own (one link instead of one per file). Shared helpers are modules here.

mod chaos;
mod common;
mod fuse;
mod hostile;
mod nfs_harness;
mod serve_common;

mod bag_cli;
mod bag_hostile;
mod bag_people;
mod bag_server;
mod bag_torture;
mod bag_witness;
mod bench_cli;
mod etcd_cli;
mod generate_cli;
mod hostile_input;
mod hostile_store;
mod hung_storage;
mod late_grant;
mod lock_cli;
mod lock_counter;
mod lock_detached;
mod lock_first_contact;
mod lock_flock;
mod lock_guard;
mod lock_hung;
mod lock_once;
mod lock_slots;
mod lock_terminal;
mod lock_watchdog;
mod nfs_bag;
mod nfs_lock;
mod nfs_outage;
#[cfg(feature = "object")]
mod object_store_cli;
mod overlap;
mod serve_restart;
mod serve_status;
mod serve_tls;
mod status_cli;
mod store_dir_cli;
mod watch_cli;
