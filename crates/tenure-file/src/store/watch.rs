//! [`Backend::watch`](tenure_core::backend::Backend::watch) for the directory store:
//! a waiter sleeps until the lease's directory changes, woken by inotify.
//!
//! A contended lease changes hands in a new version file `~N` linked into the
//! lease's directory. A waiter that polls finds it one backoff later (tens to
//! hundreds of ms); a waiter parked on an inotify watch of the directory is woken
//! by the `link(2)` itself.
//!
//! # How one wait goes
//!
//! 1. **Set up**, on a blocking thread with the store's deadline (like every
//!    file-system call, see [`crate::offload`]): open the lease directory
//!    the way every operation opens it — relative to the root, each segment with
//!    `O_NOFOLLOW | O_DIRECTORY`, so a lease directory that is a symlink is
//!    refused ([`Error::Corrupt`]), never watched through; add a watch of *that
//!    open directory* through `/proc/self/fd/N` to the store's inotify
//!    instance, so no path is resolved a second time (`IN_DONT_FOLLOW` would
//!    only cover the last component of a path).
//! 2. **Only then look again**: list the directory; if its newest version is no
//!    longer the one the caller saw, return at once. A change between the
//!    caller's read and the watch is never missed.
//! 3. **Wait** on the inotify descriptor through tokio (no thread, no file-system
//!    call) until an event names a new version file (`~N` created, linked or
//!    moved in), the directory itself goes away, or the queue overflowed;
//!    temp files (`~tmp-…`) do not wake the waiter. The whole call never outlasts
//!    its `timeout`: the setup is awaited only until then (a setup stuck in a
//!    hung mount is left to the store's deadline, and counted as stuck like any
//!    other operation).
//!
//! # One inotify instance per store
//!
//! Closing an inotify descriptor whose watch was removed less than a grace
//! period before (or is removed by the close) waits for an RCU grace period in
//! the kernel: 8–16 ms measured on a 2-core VM, on the thread that closes it
//! (37 µs once the watch has been gone for 50 ms). So a store keeps one instance (`IN_NONBLOCK | IN_CLOEXEC`), created by the
//! first wait and closed with the store, and each wait adds a watch and removes
//! it when it returns (`inotify_rm_watch` takes microseconds). Waits on the same
//! directory share its watch descriptor, counted. There is no background task:
//! every waiter awaits the descriptor's readiness, whoever is woken first reads
//! the queued events and passes each on to the waits of its directory
//! ([`tokio::sync::watch`] per watch descriptor). Memory is one entry per
//! watched directory, dropped with its last waiter. If the runtime the instance
//! was registered with has gone, the instance is replaced.
//!
//! # Where it does not work
//!
//! inotify only reports changes made through this kernel. On NFS, SMB, FUSE,
//! Ceph, 9p and other network or cluster file systems, writes by other machines
//! raise no event, so [`Error::Unsupported`] is returned (callers then poll as
//! before): the store's mount is checked by its type (`/proc/self/mountinfo`,
//! without touching the mount) and the lease directory by `fstatfs(2)`. An
//! inotify instance that cannot be created (the per-user limit of instances or
//! watches is reached), or a `/proc` that is not mounted, is `Unsupported` too.

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Duration;

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::io::Errno;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;

use super::{FileBackend, parse_version};
use crate::fs::Dir;
use crate::fs::is_gone;
use tenure_core::Version;
use tenure_core::{Error, Result};

/// `f_type` of file systems on which another machine may change a directory
/// without this kernel knowing (linux/magic.h and the file systems' own headers).
const NETWORK_MAGICS: &[(u32, &str)] = &[
    (0x0000_6969, "NFS"),
    (0x0000_517B, "SMB"),
    (0xFF53_4D42, "CIFS"),
    (0xFE53_4D42, "SMB2"),
    (0x6573_5546, "FUSE"),
    (0x00C3_6400, "Ceph"),
    (0x0102_1997, "9p"),
    (0x5346_414F, "AFS"),
    (0x6B41_4653, "AFS"),
    (0x7375_7245, "Coda"),
    (0x7461_636F, "OCFS2"),
    (0x0116_1970, "GFS2"),
    (0x0BD0_0BD0, "Lustre"),
    (0x4750_4653, "GPFS"),
    (0x2003_0528, "OrangeFS"),
    (0x0000_564C, "NCP"),
];

/// Mount types (`/proc/self/mountinfo`) on which inotify misses remote changes.
fn network_fstype(fstype: &str) -> bool {
    matches!(
        fstype,
        "nfs"
            | "nfs4"
            | "cifs"
            | "smb3"
            | "smbfs"
            | "ceph"
            | "9p"
            | "afs"
            | "coda"
            | "ocfs2"
            | "gfs2"
            | "lustre"
            | "gpfs"
            | "glusterfs"
            | "beegfs"
            | "virtiofs"
    ) || fstype == "fuse"
        || fstype.starts_with("fuse.")
}

/// The events that can mean a new newest version: a version file appearing
/// (created, linked or moved in), and the directory itself going away. Removed
/// versions are not watched: writers only collect versions far below the
/// newest, one per write, and waking every waiter for each would double the
/// wake-ups; a newest version removed by hand is found at the next timeout.
fn mask() -> WatchFlags {
    WatchFlags::CREATE
        | WatchFlags::MOVED_TO
        | WatchFlags::DELETE_SELF
        | WatchFlags::MOVE_SELF
        | WatchFlags::ONLYDIR
        | WatchFlags::EXCL_UNLINK
}

/// The events of a wait line's directory that matter: an entry removed (its
/// waiter left) or closed after writing (its waiter's process ended), and the
/// directory itself going away.
pub(super) fn line_mask() -> WatchFlags {
    WatchFlags::DELETE
        | WatchFlags::MOVED_FROM
        | WatchFlags::CLOSE_WRITE
        | WatchFlags::DELETE_SELF
        | WatchFlags::MOVE_SELF
        | WatchFlags::ONLYDIR
        | WatchFlags::EXCL_UNLINK
}

/// What the setup found.
pub(super) enum Setup {
    /// The key is no longer at the version the caller saw.
    Moved,
    /// The key's directory does not exist, and the caller saw nothing either.
    Absent,
    /// Watching: told of every event of the directory.
    Watching(Registration),
}

/// A store's inotify instance, shared by its waiters (see the module docs).
#[derive(Debug)]
pub(super) struct Shared {
    fd: AsyncFd<OwnedFd>,
    /// Per watch descriptor: how many waits use it, and their news.
    watches: Mutex<HashMap<i32, Watch>>,
}

/// The waits on one watched directory.
#[derive(Debug)]
struct Watch {
    users: usize,
    /// A new version, or events lost: every wait looks again.
    news: tokio::sync::watch::Sender<u64>,
    /// Per entry name: the waits for its removal (a wait line's waiters, each
    /// on the entry just ahead of it), and how many.
    removals: HashMap<Box<[u8]>, (usize, tokio::sync::watch::Sender<u64>)>,
}

fn bump(news: &tokio::sync::watch::Sender<u64>) {
    news.send_modify(|n| *n = n.wrapping_add(1));
}

/// The store's instance, created by the first wait.
pub(super) type Slot = Arc<Mutex<Option<Arc<Shared>>>>;

impl Shared {
    #[allow(unsafe_code)]
    fn new() -> std::io::Result<Self> {
        let fd = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC)?;
        // SAFETY: `register_with_interest` needs the descriptor to stay open, and
        // to stay the same, while the `AsyncFd` has it: an `OwnedFd` owns its
        // descriptor and closes it only when dropped, after the deregistration.
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.map_err(|e| e.into_parts().1)?;
        Ok(Self { fd, watches: Mutex::default() })
    }

    /// Watches `dir` (an open directory, through `/proc/self/fd`) for `mask`.
    /// Every wait on one directory asks for the same mask (the kernel keeps
    /// one per directory): a key's versions ([`mask`]), or a wait line's
    /// removals ([`line_mask`]).
    ///
    /// `IN_MASK_ADD`: without it, adding a watch the directory already has
    /// *replaces* its mask, and the kernel clears the old mask before it sets
    /// the new one, unlocked for the event side: an event on another CPU in
    /// between is lost. That was the removal that, now and then, woke no
    /// waiter of a busy line (one hand-over in a few thousand waited for the
    /// line's recheck); a test that adds a watch in a loop while files are
    /// removed lost 76–276 of 40 000 deletions, and none with the flag.
    pub(super) fn add(self: &Arc<Self>, dir: &impl AsFd, mask: WatchFlags) -> rustix::io::Result<Registration> {
        let through = format!("/proc/self/fd/{}", dir.as_fd().as_raw_fd());
        let mut watches = self.watches.lock();
        let wd = inotify::add_watch(self.fd.get_ref(), &through, mask | WatchFlags::MASK_ADD)?;
        let entry = watches.entry(wd).or_insert_with(|| Watch {
            users: 0,
            news: tokio::sync::watch::Sender::new(0),
            removals: HashMap::new(),
        });
        entry.users += 1;
        let news = entry.news.subscribe();
        Ok(Registration { shared: self.clone(), wd, news, removal: None })
    }

    /// Reads every queued event and tells the waits it concerns. Returns once
    /// the queue is empty (`EAGAIN`).
    fn drain(&self) -> std::io::Result<()> {
        let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
        let mut reader = inotify::Reader::new(self.fd.get_ref(), &mut buf);
        loop {
            match reader.next() {
                Ok(event) if event.events().contains(ReadFlags::QUEUE_OVERFLOW) => {
                    // Events were lost: everyone looks again.
                    for watch in self.watches.lock().values() {
                        bump(&watch.news);
                    }
                }
                Ok(event) => {
                    let name = event.file_name().map(|n| n.to_bytes());
                    let watches = self.watches.lock();
                    let Some(watch) = watches.get(&event.wd()) else { continue };
                    if matters(event.events(), name) {
                        bump(&watch.news);
                    }
                    // Gone, or closed after writing: a waiter's end (see `line`).
                    if event.events().intersects(ReadFlags::DELETE | ReadFlags::MOVED_FROM | ReadFlags::CLOSE_WRITE)
                        && let Some((_, news)) = name.and_then(|n| watch.removals.get(n))
                    {
                        bump(news);
                    }
                }
                Err(Errno::AGAIN) => return Ok(()),
                Err(Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// One wait's watch; removed (when no other wait uses it) on drop.
pub(super) struct Registration {
    shared: Arc<Shared>,
    wd: i32,
    news: tokio::sync::watch::Receiver<u64>,
    /// The entry whose removal this wait is for, if any.
    removal: Option<(Box<[u8]>, tokio::sync::watch::Receiver<u64>)>,
}

impl Registration {
    /// Also wakes this wait when the entry `name` of the watched directory is
    /// removed (the directory must be watched with [`line_mask`]).
    pub(super) fn on_removal_of(&mut self, name: &[u8]) {
        let mut watches = self.shared.watches.lock();
        let Some(watch) = watches.get_mut(&self.wd) else { return };
        let entry = watch.removals.entry(name.into()).or_insert_with(|| (0, tokio::sync::watch::Sender::new(0)));
        entry.0 += 1;
        self.removal = Some((name.into(), entry.1.subscribe()));
    }

    /// Until something this wait is for happened (`true`), its senders are
    /// gone (`false`: the instance was replaced), or `deadline` (`false`).
    /// Whoever is woken first by the descriptor reads the events for all.
    pub(super) async fn wait(&mut self, deadline: Instant) -> std::io::Result<bool> {
        let shared = self.shared.clone();
        let removed = async {
            match &mut self.removal {
                Some((_, news)) => news.changed().await.is_ok(),
                None => std::future::pending().await,
            }
        };
        tokio::pin!(removed);
        loop {
            tokio::select! {
                changed = self.news.changed() => return Ok(changed.is_ok()),
                removed = &mut removed => return Ok(removed),
                ready = shared.fd.readable() => {
                    let mut ready = ready?;
                    shared.drain()?;
                    ready.clear_ready();
                }
                () = tokio::time::sleep_until(deadline) => return Ok(false),
            }
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut watches = self.shared.watches.lock();
        let Some(watch) = watches.get_mut(&self.wd) else { return };
        if let Some((name, _)) = &self.removal
            && let Some(entry) = watch.removals.get_mut(name)
        {
            entry.0 -= 1;
            if entry.0 == 0 {
                watch.removals.remove(name);
            }
        }
        watch.users -= 1;
        if watch.users == 0 {
            watches.remove(&self.wd);
            // Fails harmlessly if the kernel already dropped it (IN_IGNORED).
            let _ = inotify::remove_watch(self.shared.fd.get_ref(), self.wd);
        }
    }
}

impl FileBackend {
    pub(super) fn unsupported(&self, why: impl std::fmt::Display) -> Error {
        Error::unsupported(&*self.url, format!("watching lease directories: {why}; waiters poll instead"))
    }

    /// Whether the store's root is on a network mount, by the mount table's text
    /// (looked up once per store).
    fn root_on_network(&self) -> Option<String> {
        self.network
            .get_or_init(|| {
                crate::mounts::mount_of(&self.root)
                    .filter(|m| network_fstype(&m.fstype))
                    .map(|m| format!("{} is a {} mount", m.point.display(), m.fstype))
            })
            .clone()
    }

    /// This store, as if its root were on a network mount (`why`): for tests of
    /// what waiters do on NFS, where this machine has none.
    #[cfg(test)]
    pub(super) fn pretending_network(self, why: &str) -> Self {
        let _ = self.network.set(Some(why.to_string()));
        self
    }

    /// Why the open directory `dir` sits on a file system that other machines
    /// may change without this kernel knowing (the store's mount, or `dir`'s
    /// own by `fstatfs(2)`), if it does: no change notifications there, and no
    /// locks that stand for a process. Blocking.
    pub(super) fn on_network(&self, dir: &Dir) -> std::io::Result<Option<String>> {
        if let Some(why) = self.root_on_network() {
            return Ok(Some(why));
        }
        let st = rustix::fs::fstatfs(dir)?;
        // The field's type differs between architectures; the magic is 32 bits.
        #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
        let magic = i64::from(st.f_type) as u32;
        Ok(NETWORK_MAGICS
            .iter()
            .find(|(m, _)| *m == magic)
            .map(|(_, name)| format!("{} is on {name}", dir.path().display())))
    }

    /// The store's inotify instance, created on first use.
    pub(super) fn shared(&self) -> Result<Arc<Shared>> {
        let mut slot = self.inotify.lock();
        if let Some(shared) = &*slot {
            return Ok(shared.clone());
        }
        let shared = Arc::new(Shared::new().map_err(|e| self.unsupported(format!("inotify_init1 failed ({e})")))?);
        *slot = Some(shared.clone());
        Ok(shared)
    }

    /// Watches the open directory `dir` for `mask`, unless it (or the store)
    /// sits on a file system whose changes this kernel may not see; blocking.
    pub(super) fn register(
        &self,
        what: &str,
        dir: &Dir,
        mask: WatchFlags,
        shared: &Arc<Shared>,
    ) -> Result<Registration> {
        match self.on_network(dir) {
            Ok(None) => {}
            Ok(Some(why)) => return Err(self.unsupported(why)),
            Err(e) => return Err(self.err(format!("looking at the file system of {what}"), dir.path(), e)),
        }
        match shared.add(dir, mask) {
            Ok(r) => Ok(r),
            // The per-user limit of watches, or no /proc.
            Err(e) if e == Errno::NOSPC || e == Errno::NOENT => {
                Err(self.unsupported(format!("inotify_add_watch failed ({e})")))
            }
            Err(e) => Err(self.err(format!("watching the directory of {what}"), dir.path(), e.into())),
        }
    }

    /// Step 1 and 2 of a wait (see the module docs); blocking.
    pub(super) fn watch_setup_blocking(&self, key: &str, seen: Option<u64>, shared: &Arc<Shared>) -> Result<Setup> {
        if let Some(why) = self.root_on_network() {
            return Err(self.unsupported(why));
        }
        let Some(dir) = self.key_dir(key, false)? else {
            return Ok(if seen.is_none() { Setup::Absent } else { Setup::Moved });
        };
        let registration = self.register(&format!("key {key:?}"), &dir, mask(), shared)?;
        // Watching: now look again, so nothing that happened since the caller's
        // read is missed.
        let now = match self.scan(&dir) {
            Ok(scan) => scan.max(),
            Err(e) if is_gone(&e) => None,
            Err(e) => return Err(self.err(format!("listing key {key:?}"), dir.path(), e)),
        };
        Ok(if now == seen { Setup::Watching(registration) } else { Setup::Moved })
    }

    /// Waits on `registration` until `deadline`: whether what it waits for
    /// may have happened. A descriptor that fails is unusable (the store
    /// outlived the runtime that first waited on it): it is dropped from the
    /// store, and the wait returns as if woken, so that the caller looks again
    /// and waits with a new one, instead of failing its caller's wait.
    pub(super) async fn wait_on(&self, what: &str, registration: &mut Registration, deadline: Instant) -> Result<bool> {
        let shared = registration.shared.clone();
        registration.wait(deadline).await.or_else(|e| {
            tracing::debug!(error = %e, "watching {what}: the inotify instance failed; replaced");
            let mut slot = self.inotify.lock();
            if slot.as_ref().is_some_and(|s| Arc::ptr_eq(s, &shared)) {
                *slot = None;
            }
            Ok(true)
        })
    }

    /// Runs the blocking set-up `f` of a wait (inline, or on a blocking thread
    /// with the store's deadline), awaited only until the wait's own
    /// `deadline`: `None` past it (a call stuck in a hung mount is left to the
    /// store's deadline, and counted as stuck there).
    pub(super) async fn set_up<T: Send + 'static>(
        &self,
        what: String,
        deadline: Instant,
        f: impl FnOnce(&FileBackend) -> Result<T> + Send + 'static,
    ) -> Result<Option<T>> {
        if self.inline {
            return f(self).map(Some);
        }
        let (this, w) = (self.clone(), what.clone());
        let task = tokio::spawn(async move { this.run(w, f).await });
        match tokio::time::timeout_at(deadline, task).await {
            Ok(Ok(out)) => out.map(Some),
            Ok(Err(join)) => Err(Error::store(&*self.url, what, join.to_string())),
            Err(_) => Ok(None),
        }
    }

    /// [`tenure_core::backend::Backend::watch`].
    pub(super) async fn watch_dir(&self, key: &str, seen: Option<&Version>, timeout: Duration) -> Result<bool> {
        let deadline = Instant::now() + timeout;
        let seen = match seen {
            None => None,
            Some(Version { seq: Some(seq), .. }) => Some(*seq),
            // Not a version of this store: whatever is there now differs.
            Some(_) => return Ok(true),
        };
        // Before the setup, which a short `timeout` may cut off: a probe with
        // none (is there a watch here?) must learn that there is not.
        if let Some(why) = self.root_on_network() {
            return Err(self.unsupported(why));
        }
        let shared = self.shared()?;
        let k = key.to_string();
        let setup =
            self.set_up(format!("watching key {key:?}"), deadline, move |b| b.watch_setup_blocking(&k, seen, &shared));
        let Some(setup) = setup.await? else { return Ok(false) };
        let mut registration = match setup {
            Setup::Moved => return Ok(true),
            Setup::Absent => {
                // Nothing to watch yet: wait as a poller would.
                tokio::time::sleep_until(deadline).await;
                return Ok(false);
            }
            Setup::Watching(r) => r,
        };
        self.wait_on(&format!("key {key:?}"), &mut registration, deadline).await
    }
}

/// Whether an event may mean that the newest version changed.
fn matters(events: ReadFlags, name: Option<&[u8]>) -> bool {
    let lost = ReadFlags::QUEUE_OVERFLOW
        | ReadFlags::IGNORED
        | ReadFlags::DELETE_SELF
        | ReadFlags::MOVE_SELF
        | ReadFlags::UNMOUNT;
    if events.intersects(lost) {
        return true;
    }
    let name = name.map(std::os::unix::ffi::OsStrExt::from_bytes);
    events.intersects(ReadFlags::CREATE | ReadFlags::MOVED_TO)
        && name.is_some_and(|n: &std::ffi::OsStr| parse_version(n).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_version_files_and_the_directory_itself_matter() {
        assert!(matters(ReadFlags::CREATE, Some(b"~00000000000000000042")));
        assert!(matters(ReadFlags::MOVED_TO, Some(b"~00000000000000000042")));
        assert!(!matters(ReadFlags::DELETE, Some(b"~00000000000000000001")), "collection wakes nobody");
        assert!(!matters(ReadFlags::CREATE, Some(b"~tmp-0123456789abcdef")));
        assert!(!matters(ReadFlags::DELETE, Some(b"~tmp-0123456789abcdef")));
        assert!(!matters(ReadFlags::CREATE | ReadFlags::ISDIR, Some(b"child")));
        assert!(matters(ReadFlags::DELETE_SELF, None));
        assert!(matters(ReadFlags::QUEUE_OVERFLOW, None));
        assert!(matters(ReadFlags::IGNORED, None));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waits_share_one_instance_and_leave_no_watch_behind() {
        use tenure_core::backend::{Backend, Put, PutMode};
        let dir = tempfile::tempdir().expect("tempdir");
        let b = FileBackend::new(dir.path()).with_fsync(false);
        let Put::Done(v1) = b.put_blocking("k", b"one", &PutMode::Create).expect("create") else { panic!("conflict") };
        // A long wait and a short one on the same directory: the short one ends
        // without taking the long one's watch with it.
        let (b2, seen) = (b.clone(), v1.clone());
        let long = tokio::spawn(async move {
            b2.watch(&tenure_core::Key::new("k").expect("key"), Some(&seen), Duration::from_secs(20)).await
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !b.watch(&tenure_core::Key::new("k").expect("key"), Some(&v1), Duration::from_millis(100))
                .await
                .expect("short wait")
        );
        b.put_blocking("k", b"two", &PutMode::Update(v1)).expect("update");
        let woken = tokio::time::timeout(Duration::from_secs(5), long).await.expect("woken").expect("join");
        assert!(woken.expect("long wait"), "the long wait saw the new version");
        let shared = b.inotify.lock().clone().expect("one instance, kept");
        assert!(shared.watches.lock().is_empty(), "no watch is left once nobody waits");
    }

    /// Waits on a directory come and go while others wait on it, each adding
    /// the watch again: no event of the directory may be lost meanwhile (see
    /// [`Shared::add`]). One wait stays; another thread adds and drops waits
    /// in a loop while 10 000 versions are linked; every one of them is an
    /// event, counted by the news it bumps.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn adding_a_watch_again_loses_no_event_of_the_directory() {
        use std::sync::atomic::{AtomicBool, Ordering};
        const N: u64 = 10_000;
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = Arc::new(Dir::open_root(tmp.path(), false).expect("open").expect("there"));
        let shared = Arc::new(Shared::new().expect("inotify"));
        let stays = shared.add(&*dir, mask()).expect("watch");
        let stop = Arc::new(AtomicBool::new(false));
        let churn = {
            let (shared, dir, stop) = (shared.clone(), dir.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    drop(shared.add(&*dir, mask()).expect("watch again"));
                }
            })
        };
        std::fs::write(tmp.path().join("base"), b"v").expect("write");
        for v in 1..=N {
            let name = format!("~{v:020}");
            dir.link("base", &name).expect("link");
            dir.remove(&name).expect("remove");
            if v % 1_000 == 0 {
                // Well within the kernel's queue (16 384 events by default).
                shared.drain().expect("drain");
            }
        }
        stop.store(true, Ordering::Relaxed);
        churn.join().expect("churn");
        shared.drain().expect("drain");
        assert_eq!(*stays.news.borrow(), N, "every version linked is news to the wait");
    }

    #[test]
    fn network_mounts_are_known_by_type() {
        for t in ["nfs", "nfs4", "cifs", "fuse.sshfs", "fuse", "ceph", "9p"] {
            assert!(network_fstype(t), "{t}");
        }
        for t in ["ext4", "xfs", "btrfs", "tmpfs", "overlay", "fuseblk"] {
            assert!(!network_fstype(t), "{t}");
        }
    }
}
