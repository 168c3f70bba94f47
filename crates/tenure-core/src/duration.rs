//! Durations written for people.

use std::time::Duration;

/// `1.5s`, `250ms`, `2m30s`: short durations for humans.
pub fn human_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1_000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        let tenths = ms / 100;
        if tenths.is_multiple_of(10) {
            format!("{}s", tenths / 10)
        } else {
            format!("{}.{}s", tenths / 10, tenths % 10)
        }
    } else if ms < 3_600_000 {
        let s = ms / 1000;
        if s.is_multiple_of(60) { format!("{}m", s / 60) } else { format!("{}m{}s", s / 60, s % 60) }
    } else {
        let m = ms / 60_000;
        if m.is_multiple_of(60) { format!("{}h", m / 60) } else { format!("{}h{}m", m / 60, m % 60) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations_read_naturally() {
        let cases =
            [(250, "250ms"), (1_000, "1s"), (1_500, "1.5s"), (90_000, "1m30s"), (120_000, "2m"), (5_400_000, "1h30m")];
        for (ms, text) in cases {
            assert_eq!(human_duration(Duration::from_millis(ms)), text);
        }
    }
}
