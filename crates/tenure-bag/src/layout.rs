//! The log's configuration, bucket arithmetic and the manifest format.
//!
//! # Configuration
//!
//! Written once, by whoever first writes to (or closes in) the log, first one
//! wins (`link(2)` / create-if-absent), and never changed: every process must
//! agree on the bucket width (where a timestamp goes), the grace (when a bucket
//! may be closed), the clock-skew bound (when a writer may skip its check), the
//! chunk size of snapshots and the first bucket.
//!
//! ```text
//! tenure-bag-config 1
//! width_ms 1000
//! grace_ms 2000
//! max_skew_ms 500
//! chunk_buckets 3600
//! first_bucket_ms 1767225590000
//! ```
//!
//! # Manifest
//!
//! The list a close publishes: every item (data file or batch object) the closer
//! found after the prelock existed, and the size it had. A message is accepted
//! iff its frame ends within the size recorded for its item.
//!
//! ```text
//! tenure-bag-manifest 1
//! bucket 1767225600000 1000
//! item host1-4242-9f2c.0.data 18211
//! item host2-77-03aa.0.data 912
//! end 1c2f03a9                       CRC32C of every line above, in hex
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use tenure_core::limits::{MAX_DURATION, MAX_TIME_MS, millis};

/// Largest configuration file read.
pub const MAX_CONFIG_BYTES: usize = 64 << 10;
/// Most items (data files, batch objects) one bucket may hold: a closer refuses
/// to list more, so a manifest never lists more either.
pub const MAX_ITEMS: usize = 100_000;
/// Largest manifest read: [`MAX_ITEMS`] lines of at most ~120 bytes fit well.
pub const MAX_MANIFEST_BYTES: usize = 16 << 20;
/// Largest data file: a writer starts a new one before a batch would take its
/// file past this, so a larger file (or a manifest claiming one) is not a bag's.
pub const MAX_ITEM_BYTES: u64 = 256 << 20;
/// Largest snapshot: compaction leaves a chunk that would need a larger one to
/// its buckets, and readers skip larger files.
pub const MAX_SNAPSHOT_BYTES: usize = 1 << 30;
/// Most buckets per snapshot chunk.
pub const MAX_CHUNK_BUCKETS: u64 = 1 << 20;

/// Log-wide settings, fixed when the log is created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogConfig {
    /// Bucket width (ms): bucket `b` holds timestamps `[b, b + width)`.
    pub width_ms: u64,
    /// A bucket may be closed once `now >= end + grace` on the closer's clock.
    pub grace_ms: u64,
    /// Largest clock difference between any two processes using the log: a writer
    /// skips its post-append check only when `now + max_skew < end + grace`.
    pub max_skew_ms: u64,
    /// Buckets per snapshot chunk.
    pub chunk_buckets: u64,
    /// The first bucket: timestamps before it are refused, and closers start there.
    pub first_bucket_ms: u64,
}

/// How a new log is set up (see [`LogConfig`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogSettings {
    /// Bucket width; default 1 s.
    pub width: Duration,
    /// Grace before a bucket may be closed; default 2 s.
    pub grace: Duration,
    /// Clock-skew bound of the writers' fast path; default 500 ms.
    pub max_skew: Duration,
    /// Buckets per snapshot; default 3600 (one hour of 1 s buckets).
    pub chunk_buckets: u64,
}

impl Default for LogSettings {
    fn default() -> Self {
        Self {
            width: Duration::from_secs(1),
            grace: Duration::from_secs(2),
            max_skew: Duration::from_millis(500),
            chunk_buckets: 3600,
        }
    }
}

/// Buckets before "now" at creation that the log still accepts (slow clocks, and
/// a batch stamped just before its append created the log). The margin is at
/// least the clock-skew bound too, however narrow the buckets: a writer whose
/// clock is within the bound of the creator's is never before the first bucket.
pub const CREATION_MARGIN_BUCKETS: u64 = 10;

impl LogSettings {
    /// Checks the settings against the bounds every log keeps (see
    /// [`LogConfig::check`]).
    pub fn check(&self) -> Result<(), String> {
        for (what, d) in [("bucket width", self.width), ("grace", self.grace), ("clock-skew bound", self.max_skew)] {
            if d > MAX_DURATION {
                return Err(format!("the {what} must be at most {} ms (10 years)", millis(MAX_DURATION)));
            }
        }
        if millis(self.width) == 0 {
            return Err("the bucket width must be at least 1ms".into());
        }
        if millis(self.grace) == 0 {
            return Err("the grace must be at least 1ms".into());
        }
        if !(1..=MAX_CHUNK_BUCKETS).contains(&self.chunk_buckets) {
            return Err(format!("a snapshot chunk holds 1 to {MAX_CHUNK_BUCKETS} buckets, not {}", self.chunk_buckets));
        }
        Ok(())
    }

    /// Checks the settings and fixes them into a configuration created at `now_ms`.
    pub fn config_at(&self, now_ms: u64) -> Result<LogConfig, String> {
        self.check()?;
        if now_ms > MAX_TIME_MS {
            return Err(format!("the clock reads {now_ms} ms, past the year 9999"));
        }
        let (width_ms, max_skew_ms) = (millis(self.width), millis(self.max_skew));
        let margin_ms = width_ms.saturating_mul(CREATION_MARGIN_BUCKETS).max(max_skew_ms);
        let first = now_ms.saturating_sub(margin_ms) / width_ms * width_ms;
        let cfg = LogConfig {
            width_ms,
            grace_ms: millis(self.grace),
            max_skew_ms,
            chunk_buckets: self.chunk_buckets,
            first_bucket_ms: first,
        };
        cfg.check()?;
        Ok(cfg)
    }
}

impl LogConfig {
    /// Checks the values against the bounds every log keeps: a width, grace and
    /// skew bound of at most 10 years (width and grace at least 1 ms), 1 to
    /// [`MAX_CHUNK_BUCKETS`] buckets per chunk, and a bucket-aligned first bucket
    /// no later than the year 9999. Sums of two such values cannot overflow.
    pub fn check(&self) -> Result<(), String> {
        let max = millis(MAX_DURATION);
        for (what, v) in [("width_ms", self.width_ms), ("grace_ms", self.grace_ms), ("max_skew_ms", self.max_skew_ms)] {
            if v > max {
                return Err(format!("{what} {v} is more than 10 years"));
            }
        }
        if self.width_ms == 0 || self.grace_ms == 0 {
            return Err("the width and the grace must be at least 1 ms".into());
        }
        if !(1..=MAX_CHUNK_BUCKETS).contains(&self.chunk_buckets) {
            return Err(format!("chunk_buckets {} is not from 1 to {MAX_CHUNK_BUCKETS}", self.chunk_buckets));
        }
        if self.first_bucket_ms > MAX_TIME_MS || !self.first_bucket_ms.is_multiple_of(self.width_ms) {
            return Err(format!(
                "first_bucket_ms {} is not a bucket start before the year 10000",
                self.first_bucket_ms
            ));
        }
        Ok(())
    }

    /// The bucket (its start, ms) holding timestamp `ts`.
    pub fn bucket_of(&self, ts_ms: u64) -> u64 {
        ts_ms - ts_ms % self.width_ms
    }
    /// The end (exclusive) of bucket `b`.
    pub fn end_of(&self, bucket: u64) -> u64 {
        bucket.saturating_add(self.width_ms)
    }
    /// Whether bucket `b` may be closed at `now` (closer's clock).
    pub fn closable(&self, bucket: u64, now_ms: u64) -> bool {
        now_ms >= self.end_of(bucket).saturating_add(self.grace_ms)
    }
    /// The newest bucket that may be closed at `now`, if any.
    pub fn last_closable(&self, now_ms: u64) -> Option<u64> {
        let limit = now_ms.checked_sub(self.grace_ms)?.checked_sub(self.width_ms)?;
        let b = self.bucket_of(limit);
        (b >= self.first_bucket_ms).then_some(b)
    }
    /// The writers' fast path: with clocks at most `max_skew` apart, no closer can
    /// have judged bucket `b` closable before this writer read `now` (after its
    /// write completed), so no prelock can predate the write.
    pub fn clearly_early(&self, bucket: u64, now_ms: u64) -> bool {
        now_ms.saturating_add(self.max_skew_ms) < self.end_of(bucket).saturating_add(self.grace_ms)
    }
    /// The snapshot chunk of bucket `b`.
    pub fn chunk_of(&self, bucket: u64) -> u64 {
        bucket / self.width_ms / self.chunk_buckets
    }
    /// The buckets `[start, end)` (ms) of chunk `c`.
    pub fn chunk_range(&self, chunk: u64) -> (u64, u64) {
        let per = self.width_ms.saturating_mul(self.chunk_buckets);
        (chunk.saturating_mul(per), chunk.saturating_add(1).saturating_mul(per))
    }

    /// The configuration file's text.
    pub fn encode(&self) -> String {
        format!(
            "tenure-bag-config 1\nwidth_ms {}\ngrace_ms {}\nmax_skew_ms {}\nchunk_buckets {}\nfirst_bucket_ms {}\n",
            self.width_ms, self.grace_ms, self.max_skew_ms, self.chunk_buckets, self.first_bucket_ms
        )
    }

    /// Parses a configuration file.
    pub fn parse(text: &[u8]) -> Result<Self, String> {
        let text = std::str::from_utf8(text).map_err(|_| "not UTF-8")?;
        let mut lines = text.lines();
        if lines.next() != Some("tenure-bag-config 1") {
            return Err("not a tenure bag configuration (version 1)".into());
        }
        let mut fields = BTreeMap::new();
        for line in lines {
            let (k, v) = line.split_once(' ').ok_or_else(|| format!("bad line {line:?}"))?;
            let v: u64 = v.parse().map_err(|_| format!("bad number in {line:?}"))?;
            if fields.insert(k, v).is_some() {
                return Err(format!("{k} is given twice"));
            }
        }
        let get = |k: &str| fields.get(k).copied().ok_or_else(|| format!("missing {k}"));
        let cfg = LogConfig {
            width_ms: get("width_ms")?,
            grace_ms: get("grace_ms")?,
            max_skew_ms: get("max_skew_ms")?,
            chunk_buckets: get("chunk_buckets")?,
            first_bucket_ms: get("first_bucket_ms")?,
        };
        cfg.check()?;
        Ok(cfg)
    }
}

/// The suffix of a directory log's data files (`<writer>.<generation>.data`).
pub(crate) const DATA_SUFFIX: &str = ".data";

/// Whether `name` is an item name on either storage: a data file
/// (`<writer>.<generation>.data`) or a batch object (`<writer>.<sequence>`).
pub fn is_item_name(name: &str) -> bool {
    crate::frame::is_item_name(name, DATA_SUFFIX) || crate::frame::is_item_name(name, "")
}

/// A closed bucket's manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// Bucket start (ms).
    pub bucket: u64,
    /// Bucket width (ms).
    pub width_ms: u64,
    /// Item name → size covered.
    pub items: BTreeMap<String, u64>,
}

impl Manifest {
    /// Whether a frame ending at `end` in `item` is covered (accepted).
    pub fn covers(&self, item: &str, end: u64) -> bool {
        self.items.get(item).is_some_and(|&size| size >= end)
    }

    /// The manifest's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut text = format!("tenure-bag-manifest 1\nbucket {} {}\n", self.bucket, self.width_ms);
        for (name, size) in &self.items {
            text.push_str(&format!("item {name} {size}\n"));
        }
        let crc = crc32c::crc32c(text.as_bytes());
        text.push_str(&format!("end {crc:08x}\n"));
        text.into_bytes()
    }

    /// Parses a manifest, checking its checksum and that it is for `bucket`.
    pub fn parse(bytes: &[u8], bucket: u64) -> Result<Self, String> {
        let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8")?;
        if !text.ends_with('\n') {
            return Err("truncated".into());
        }
        let body_end = text.rfind("end ").ok_or("no end line (truncated?)")?;
        let (body, end) = text.split_at(body_end);
        let crc = u32::from_str_radix(end.trim_start_matches("end ").trim_end(), 16).map_err(|_| "bad end line")?;
        if crc32c::crc32c(body.as_bytes()) != crc {
            return Err("checksum mismatch".into());
        }
        let mut lines = body.lines();
        if lines.next() != Some("tenure-bag-manifest 1") {
            return Err("not a tenure bag manifest (version 1)".into());
        }
        let head = lines.next().ok_or("no bucket line")?;
        let mut parts = head.split(' ');
        let (Some("bucket"), Some(b), Some(w), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
            return Err(format!("bad bucket line {head:?}"));
        };
        let (b, width_ms): (u64, u64) = (b.parse().map_err(|_| "bad bucket")?, w.parse().map_err(|_| "bad width")?);
        if b != bucket {
            return Err(format!("it is the manifest of bucket {b}, found in bucket {bucket}"));
        }
        if width_ms == 0 || width_ms > millis(MAX_DURATION) {
            return Err(format!("bucket width {width_ms} is not from 1 ms to 10 years"));
        }
        let mut items = BTreeMap::new();
        for line in lines {
            let mut parts = line.split(' ');
            let (Some("item"), Some(name), Some(size), None) = (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return Err(format!("bad item line {line:?}"));
            };
            // Only names a writer makes: a manifest can never send a reader
            // elsewhere (`../x`, `/etc/passwd`).
            if !is_item_name(name) {
                return Err(format!("{name:?} is not an item name"));
            }
            let size: u64 = size.parse().map_err(|_| format!("bad size in {line:?}"))?;
            if size > MAX_ITEM_BYTES {
                return Err(format!("item {name} claims {size} bytes, more than an item may hold ({MAX_ITEM_BYTES})"));
            }
            if items.len() >= MAX_ITEMS {
                return Err(format!("more than {MAX_ITEMS} items"));
            }
            if items.insert(name.to_string(), size).is_some() {
                return Err(format!("item {name} is listed twice"));
            }
        }
        Ok(Manifest { bucket, width_ms, items })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> LogConfig {
        LogConfig { width_ms: 1000, grace_ms: 2000, max_skew_ms: 500, chunk_buckets: 10, first_bucket_ms: 10_000 }
    }

    #[test]
    fn buckets_close_only_after_their_grace() {
        let c = cfg();
        assert_eq!(c.bucket_of(12_345), 12_000);
        assert!(!c.closable(12_000, 14_999));
        assert!(c.closable(12_000, 15_000));
        assert_eq!(c.last_closable(15_000), Some(12_000));
        assert_eq!(c.last_closable(15_999), Some(12_000));
        assert_eq!(c.last_closable(12_000), None, "nothing before the first bucket");
    }

    #[test]
    fn the_fast_path_ends_max_skew_before_any_closer_may_start() {
        let c = cfg();
        // end + grace = 15_000; a writer whose clock reads 14_499 may skip its check,
        // 14_500 may not: a closer 500 ms ahead would already read 15_000.
        assert!(c.clearly_early(12_000, 14_499));
        assert!(!c.clearly_early(12_000, 14_500));
        for now in 14_500..15_100 {
            assert!(!c.clearly_early(12_000, now) || !c.closable(12_000, now + c.max_skew_ms));
        }
    }

    #[test]
    fn a_new_log_starts_ten_buckets_and_at_least_the_skew_bound_before_its_creation() {
        let now = 1_767_225_600_123;
        let wide = LogSettings::default().config_at(now).expect("settings");
        assert_eq!(wide.first_bucket_ms, 1_767_225_590_000, "ten 1 s buckets before the bucket of now");
        let narrow = LogSettings { width: Duration::from_millis(1), ..LogSettings::default() };
        let c = narrow.config_at(now).expect("settings");
        // Ten 1 ms buckets would refuse a writer whose clock is 11 ms slow.
        assert_eq!(c.first_bucket_ms, now - 500, "the skew bound, not ten buckets");
        let slow_writer = c.bucket_of(now - c.max_skew_ms);
        assert!(slow_writer >= c.first_bucket_ms, "a writer within the skew bound is after the first bucket");
        assert!(c.first_bucket_ms.is_multiple_of(c.width_ms));
    }

    #[test]
    fn config_and_manifest_round_trip_and_refuse_damage() {
        let c = cfg();
        assert_eq!(LogConfig::parse(c.encode().as_bytes()), Ok(c));
        assert!(LogConfig::parse(b"tenure-bag-config 1\nwidth_ms 0\n").is_err());
        let m = Manifest {
            bucket: 12_000,
            width_ms: 1000,
            items: [("a.0.data".to_string(), 10), ("b.0.data".to_string(), 0)].into_iter().collect(),
        };
        let bytes = m.encode();
        assert_eq!(Manifest::parse(&bytes, 12_000), Ok(m.clone()));
        assert!(Manifest::parse(&bytes, 13_000).is_err(), "a manifest copied into another bucket");
        for cut in 0..bytes.len() {
            assert!(Manifest::parse(&bytes[..cut], 12_000).is_err(), "truncated at {cut}");
        }
        let mut flipped = bytes.clone();
        flipped[30] ^= 1;
        assert!(Manifest::parse(&flipped, 12_000).is_err());
        assert!(m.covers("a.0.data", 10) && !m.covers("a.0.data", 11) && !m.covers("c.0.data", 0));
    }
}

/// Largest sweep result read: a sweep covers at most one group of buckets, so a
/// few thousand ranges at most.
pub const MAX_SWEEP_BYTES: usize = 1 << 20;

/// A range close ("sweep", see [`crate::protocol`]): buckets `[lo, hi)` closed
/// at once, and which of them it found empty (no bucket stored at its
/// listing). `empty` is `None` until the sweep's result is published.
///
/// ```text
/// tenure-bag-sweep 1
/// range 1767225600000 1767225604096
/// empty 1767225600000 1767225600513        buckets [a, b) closed empty
/// end 5e0c9a11                             CRC32C of every line above
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sweep {
    /// First bucket covered.
    pub lo: u64,
    /// End (exclusive) of the buckets covered.
    pub hi: u64,
    /// The runs `[a, b)` of buckets found empty; `None` while unpublished.
    pub empty: Option<Vec<(u64, u64)>>,
}

impl Sweep {
    /// Whether the sweep covers `bucket`.
    pub fn covers(&self, bucket: u64) -> bool {
        (self.lo..self.hi).contains(&bucket)
    }

    /// Whether its published result closed `bucket` empty.
    pub fn emptied(&self, bucket: u64) -> bool {
        self.empty.as_ref().is_some_and(|runs| runs.iter().any(|&(a, b)| (a..b).contains(&bucket)))
    }

    /// The published form (only of a resolved sweep).
    pub fn encode(&self) -> Vec<u8> {
        let mut body = format!("tenure-bag-sweep 1\nrange {} {}\n", self.lo, self.hi);
        for (a, b) in self.empty.iter().flatten() {
            body.push_str(&format!("empty {a} {b}\n"));
        }
        let crc = crc32c::crc32c(body.as_bytes());
        body.push_str(&format!("end {crc:08x}\n"));
        body.into_bytes()
    }

    /// Parses a published sweep of `[lo, hi)`, checking its checksum and that
    /// every run lies in the range, in order.
    pub fn parse(bytes: &[u8], lo: u64, hi: u64) -> Result<Self, String> {
        let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8".to_string())?;
        let end_at = text.rfind("end ").ok_or("no end line")?;
        let (body, end) = text.split_at(end_at);
        let crc = u32::from_str_radix(end.trim_start_matches("end ").trim_end(), 16).map_err(|_| "a bad end line")?;
        if crc != crc32c::crc32c(body.as_bytes()) {
            return Err("its checksum does not match".into());
        }
        let mut lines = body.lines();
        if lines.next() != Some("tenure-bag-sweep 1") {
            return Err("not a sweep (tenure-bag-sweep 1)".into());
        }
        if lines.next() != Some(format!("range {lo} {hi}").as_str()) {
            return Err(format!("not the sweep of [{lo}, {hi})"));
        }
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for line in lines {
            let mut words = line.split(' ');
            let run = match (words.next(), words.next(), words.next(), words.next()) {
                (Some("empty"), Some(a), Some(b), None) => (a.parse::<u64>(), b.parse::<u64>()),
                _ => return Err(format!("a bad line {line:?}")),
            };
            let (Ok(a), Ok(b)) = run else { return Err(format!("a bad line {line:?}")) };
            if !(lo <= a && a < b && b <= hi) || runs.last().is_some_and(|&(_, end)| a < end) {
                return Err(format!("run [{a}, {b}) is out of range or order"));
            }
            runs.push((a, b));
        }
        Ok(Sweep { lo, hi, empty: Some(runs) })
    }
}
