//! No two commands run by `tenure lock` hold one lease at once, under chaos.
//!
//! Four workers loop `tenure lock STORE shared --ttl 1500ms -- HOLD` while a
//! chaos thread picks victims among the running `tenure` processes, their
//! guards (`tenure __guard`) and their commands, and sends them SIGKILL, or
//! SIGSTOP held past the TTL and then SIGCONT. It never stops a `tenure` and
//! its own guard at the same time, nor a guard whose `tenure` it killed: then
//! nothing enforces the lease's deadline on the command, and only fencing
//! tokens protect its writes (the stated limit, tested on its own below).
//!
//! Each command ([`chaos::HOLD`]) stamps its hold on CLOCK_BOOTTIME every 10 ms
//! with its `TENURE_TOKEN`; a hold is the span from its first to its last stamp
//! (see [`chaos::Hold`] for why that is a lower bound, and what it can miss).
//! The checker sorts the holds and asserts that none overlaps another; on a
//! failure it prints both, with their tokens. Its own tests on synthetic holds
//! show that it finds overlaps.

use crate::chaos;
use crate::common;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chaos::*;
use common::*;
use rustix::process::Signal;

const WORKERS: usize = 4;
/// How long the chaos lasts on each store.
const CHAOS_FOR: Duration = Duration::from_secs(18);
const TTL: &str = "1500ms";
const TTL_MS: u64 = 1500;
/// Every `tenure lock` of a worker: a short TTL, a small skew margin (one
/// machine), quick polls, and a bounded wait so that the workers end soon
/// after the chaos.
const FLAGS: [&str; 8] = ["--ttl", TTL, "--max-skew", "200ms", "--poll", "100ms", "--timeout", "6s"];

/// A run: its id, exit code, terminating signal, and stderr.
type Outcome = (String, Option<i32>, Option<i32>, String);

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Role {
    Tenure,
    Guard,
    Command,
}

/// Signals sent so far: what is stopped (until when), which `tenure`s were killed.
#[derive(Default)]
struct Chaos {
    stopped: Vec<(u32, Instant)>,
    killed_tenures: Vec<u32>,
    done: BTreeMap<String, usize>,
}

impl Chaos {
    fn is_stopped(&self, pid: u32) -> bool {
        self.stopped.iter().any(|&(p, _)| p == pid)
    }

    fn resume_due(&mut self, now: Instant) {
        self.stopped.retain(|&(pid, until)| {
            let due = until <= now;
            if due {
                try_signal(pid, Signal::CONT);
            }
            !due
        });
    }

    fn resume_all(&mut self) {
        for (pid, _) in self.stopped.drain(..) {
            try_signal(pid, Signal::CONT);
        }
    }

    /// One blow at worker `tenure`'s process of `role`, if the rules allow it.
    fn strike(&mut self, rng: &mut Rng, tenure: u32, role: Role) {
        if self.killed_tenures.contains(&tenure) {
            return;
        }
        let guard = children(tenure).first().copied();
        let command = guard.and_then(|g| children(g).first().copied());
        let victim = match role {
            Role::Tenure => Some(tenure),
            Role::Guard => guard,
            Role::Command => command,
        };
        let Some(victim) = victim else { return };
        let kill = rng.chance(40);
        // The stated limit: a `tenure` that is stopped or dead *and* its guard
        // stopped leave the command unguarded. Never both.
        let forbidden = match role {
            Role::Tenure => guard.is_some_and(|g| self.is_stopped(g)),
            Role::Guard => !kill && self.is_stopped(tenure),
            Role::Command => false,
        };
        if forbidden || (!kill && self.is_stopped(victim)) {
            return;
        }
        if kill {
            if !try_signal(victim, Signal::KILL) {
                return;
            }
            self.stopped.retain(|&(p, _)| p != victim);
            if role == Role::Tenure {
                self.killed_tenures.push(tenure);
            }
        } else {
            if !try_signal(victim, Signal::STOP) {
                return;
            }
            let hold = Duration::from_millis(rng.range(TTL_MS + 100, 2 * TTL_MS + 500));
            self.stopped.push((victim, Instant::now() + hold));
        }
        let what = format!("{} {:?}", if kill { "SIGKILL" } else { "SIGSTOP past the TTL" }, role);
        *self.done.entry(what).or_default() += 1;
    }
}

/// The chaos run on `kind` (see the module doc).
fn no_overlap_under_chaos(kind: Kind) {
    let Some(store) = Store::open(kind, "overlap") else { return };
    let target = store.direct();
    let mut rng = Rng::from_env();
    let live: Arc<Mutex<Vec<Option<u32>>>> = Arc::new(Mutex::new(vec![None; WORKERS]));
    let outcomes: Arc<Mutex<Vec<Outcome>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let logs: Vec<_> = (0..WORKERS).map(|w| store.path(&format!("holds-{w}.log"))).collect();

    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (live, outcomes, stop, target, log) =
                (live.clone(), outcomes.clone(), stop.clone(), target.clone(), logs[w].clone());
            let mut rng = Rng::seeded(rng.next());
            std::thread::spawn(move || {
                for i in 0.. {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let run = format!("w{w}r{i}");
                    let hold = hold_command(&log, &run, rng.range(20, 400), None, None);
                    let hold: Vec<&str> = hold.iter().map(String::as_str).collect();
                    let child = target
                        .lock("shared", &FLAGS, &hold)
                        .stdout(Stdio::null())
                        .stderr(Stdio::piped())
                        .spawn()
                        .expect("spawn tenure lock");
                    live.lock().expect("live")[w] = Some(child.id());
                    let out = wait_output(child, Duration::from_secs(60));
                    live.lock().expect("live")[w] = None;
                    use std::os::unix::process::ExitStatusExt;
                    let outcome = (run, out.status.code(), out.status.signal(), stderr(&out));
                    outcomes.lock().expect("outcomes").push(outcome);
                }
            })
        })
        .collect();

    let mut chaos = Chaos::default();
    let end = Instant::now() + CHAOS_FOR;
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(rng.range(100, 400)));
        chaos.resume_due(Instant::now());
        let w = rng.range(0, WORKERS as u64) as usize;
        let Some(tenure) = live.lock().expect("live")[w] else { continue };
        let role = [Role::Tenure, Role::Guard, Role::Command][rng.range(0, 3) as usize];
        chaos.strike(&mut rng, tenure, role);
    }
    stop.store(true, Ordering::SeqCst);
    chaos.resume_all();
    for w in workers {
        w.join().expect("worker");
    }

    let holds: Vec<Hold> =
        logs.iter().flat_map(|log| parse_holds(&std::fs::read_to_string(log).unwrap_or_default())).collect();
    let outcomes = outcomes.lock().expect("outcomes");
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    for (run, code, sig, err) in outcomes.iter() {
        assert!(!err.contains("panicked"), "run {run} panicked: {err}");
        *tally.entry(format!("{code:?}/{sig:?}")).or_default() += 1;
    }
    let killed = holds.iter().filter(|h| !h.finished).count();
    eprintln!(
        "{kind:?}: {} holds ({killed} cut short), {} runs by exit code/signal {tally:?}, chaos {:?}",
        holds.len(),
        outcomes.len(),
        chaos.done
    );
    assert_no_overlap(&holds, &format!("{kind:?} store under chaos"));
    assert!(holds.len() >= 2, "the lease changed hands at least once ({} holds)", holds.len());
    assert!(!chaos.done.is_empty(), "the chaos struck at least once");
}

#[test]
fn no_two_commands_overlap_under_chaos_on_the_directory_store() {
    no_overlap_under_chaos(Kind::Dir);
}

#[test]
fn no_two_commands_overlap_under_chaos_on_tenure_serve() {
    no_overlap_under_chaos(Kind::Serve);
}

#[test]
fn no_two_commands_overlap_under_chaos_on_etcd() {
    no_overlap_under_chaos(Kind::Etcd);
}

#[test]
fn no_two_commands_overlap_under_chaos_on_s3_moto() {
    no_overlap_under_chaos(Kind::Moto);
}

/// The stated limit: with `tenure` and its guard both stopped past the TTL,
/// nothing stops the command, and the lease expires under it. The next holder
/// gets a higher token, and the two holds overlap — the earlier one with the
/// lower token, the order in which fenced writes still reject the stale holder.
///
/// Deterministic: A's command holds until B's command has finished, so the two
/// overlap whatever the timing, and only the order of tokens is in question.
#[test]
fn with_tenure_and_its_guard_both_stopped_holds_overlap_only_in_token_order() {
    let store = Store::open(Kind::Dir, "limit").expect("the directory store");
    let target = store.direct();
    let (log, b_done) = (store.path("holds.log"), store.path("b-done"));
    let flags = ["--ttl", TTL, "--max-skew", "200ms", "--timeout", "20s"];
    let a_cmd = hold_command(&log, "A", 0, Some(&b_done), None);
    let a_cmd: Vec<&str> = a_cmd.iter().map(String::as_str).collect();
    let mut a = target.lock("limit", &flags, &a_cmd).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("A");
    let a_holds = || parse_holds(&std::fs::read_to_string(&log).unwrap_or_default()).iter().any(|h| h.run == "A");
    assert!(eventually(LIMIT, a_holds), "A's command never started");
    let guard = guard_of(&a);
    signal(guard, Signal::STOP);
    signal(a.id(), Signal::STOP);

    let b_cmd = hold_command(&log, "B", 200, None, Some(&b_done));
    let b_cmd: Vec<&str> = b_cmd.iter().map(String::as_str).collect();
    let b = run(&mut target.lock("limit", &flags, &b_cmd), LIMIT);
    let a_finished =
        || parse_holds(&std::fs::read_to_string(&log).unwrap_or_default()).iter().any(|h| h.run == "A" && h.finished);
    let a_saw_b = eventually(LIMIT, a_finished);
    signal(a.id(), Signal::CONT);
    signal(guard, Signal::CONT);
    let (a_code, a_err) = finish(&mut a);
    eprintln!("A, continued after B: exit {a_code:?}: {}", a_err.trim());
    assert_eq!(b.status.code(), Some(0), "B takes the expired lease: {}", stderr(&b));
    assert!(a_saw_b, "A's command, unguarded, ran until B's was done");

    let holds = parse_holds(&std::fs::read_to_string(&log).expect("the holds"));
    let hold = |run: &str| holds.iter().find(|h| h.run == run).cloned().expect("a hold");
    let (a_hold, b_hold) = (hold("A"), hold("B"));
    assert!(b_hold.token > a_hold.token, "the next holder's token is higher: {a_hold} / {b_hold}");
    assert!(!overlaps(&holds).is_empty(), "A ran on through B's hold (the stated limit): {a_hold} / {b_hold}");
    assert_overlaps_in_token_order(&holds, "tenure and its guard both stopped");
}

// The checker itself, on synthetic holds.

fn hold(run: &str, token: u64, start_ns: u64, end_ns: u64) -> Hold {
    Hold { run: run.into(), pid: 1, token, start_ns, end_ns, finished: true }
}

#[test]
fn the_checker_finds_an_overlap_and_names_both_holds_with_their_tokens() {
    let holds = vec![hold("late", 12, 150, 300), hold("early", 11, 100, 200), hold("apart", 13, 400, 500)];
    let found = overlaps(&holds);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].0.run.as_str(), found[0].1.run.as_str()), ("early", "late"));
    let message = overlap_failure(&holds, "synthetic").expect("the checker fails");
    assert!(message.contains("token 11") && message.contains("token 12"), "{message}");
    assert!(message.contains("run early") && message.contains("run late"), "{message}");
}

#[test]
fn the_checker_sees_every_hold_inside_a_long_one_and_none_between_holds_that_only_touch() {
    // A long hold spanning two short ones: both overlaps, not only the neighbour's.
    let nested = vec![hold("long", 1, 0, 1000), hold("a", 2, 100, 200), hold("b", 3, 300, 400)];
    assert_eq!(overlaps(&nested).len(), 2);
    // One ends at the nanosecond the next starts: no moment of both.
    let touching = vec![hold("a", 1, 0, 100), hold("b", 2, 100, 200), hold("c", 3, 201, 300)];
    assert!(overlaps(&touching).is_empty());
    assert_eq!(overlap_failure(&touching, "touching holds"), None);
}

#[test]
fn the_token_order_check_accepts_a_stale_holder_with_the_lower_token_only() {
    let ordered = vec![hold("stale", 5, 0, 300), hold("next", 6, 100, 200)];
    assert_eq!(overlaps(&ordered).len(), 1);
    assert_eq!(token_order_failure(&ordered, "ordered"), None);
    let reversed = vec![hold("stale", 7, 0, 300), hold("next", 6, 100, 200)];
    let message = token_order_failure(&reversed, "reversed").expect("the check fails");
    assert!(message.contains("token 7") && message.contains("token 6"), "{message}");
}

#[test]
fn holds_are_read_from_first_to_last_stamp_and_a_missing_end_marks_one_cut_short() {
    let log = "w0r0 10 5 S 100\nw0r0 10 5 H 110\nw1r0 11 6 S 120\nw0r0 10 5 E 130\nw1r0 11 6 H 140\n";
    let holds = parse_holds(log);
    assert_eq!(holds.len(), 2);
    let (a, b) = (&holds[0], &holds[1]);
    assert_eq!((a.run.as_str(), a.token, a.start_ns, a.end_ns, a.finished), ("w0r0", 5, 100, 130, true));
    assert_eq!((b.run.as_str(), b.token, b.start_ns, b.end_ns, b.finished), ("w1r0", 6, 120, 140, false));
    assert_eq!(overlaps(&holds).len(), 1, "w1r0 started before w0r0's last stamp");
}
