//! The standard `process_*` metrics of Prometheus client libraries, read
//! from `/proc/self` (Linux only; elsewhere none are exported): CPU time,
//! resident and virtual memory, open and maximum file descriptors, and the
//! start time.

/// What the process uses now. Each figure is `None` when it could not be
/// read.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcessStats {
    /// User and system CPU time, in seconds.
    pub cpu_seconds: Option<f64>,
    pub resident_bytes: Option<u64>,
    pub virtual_bytes: Option<u64>,
    pub open_fds: Option<u64>,
    /// The soft limit on open file descriptors.
    pub max_fds: Option<u64>,
    /// When the process started, in seconds since the Unix epoch.
    pub start_time_seconds: Option<f64>,
}

/// Clock ticks per second of `/proc` times: Linux reports them in
/// `USER_HZ`, which is 100 on every architecture Rust supports (the Go
/// Prometheus client assumes the same).
const USER_HZ: f64 = 100.0;

/// Reads the current process's figures.
pub fn read() -> ProcessStats {
    let root = std::path::Path::new("/proc");
    let read = |p: &str| std::fs::read_to_string(root.join(p)).ok();
    let mut stats = ProcessStats::default();
    let Some(stat) = read("self/stat") else {
        return stats;
    };
    let parsed = parse_stat(&stat);
    if let Some(s) = parsed {
        stats.cpu_seconds = Some((s.utime + s.stime) as f64 / USER_HZ);
        stats.virtual_bytes = Some(s.vsize);
        stats.start_time_seconds = read("stat")
            .and_then(|t| boot_time(&t))
            .map(|boot| boot as f64 + s.starttime as f64 / USER_HZ);
    }
    stats.resident_bytes = read("self/status").and_then(|t| status_kib(&t, "VmRSS:"));
    stats.max_fds = read("self/limits").and_then(|t| max_open_files(&t));
    stats.open_fds = std::fs::read_dir(root.join("self/fd"))
        .ok()
        .map(|d| d.count() as u64);
    stats
}

#[derive(Debug, PartialEq, Eq)]
struct Stat {
    utime: u64,
    stime: u64,
    starttime: u64,
    vsize: u64,
}

/// Fields of `/proc/self/stat` (see proc(5)). The command name, field 2,
/// is in parentheses and may hold spaces and parentheses: fields are
/// counted after its last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `fields[0]` is field 3 (state).
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        utime: field(14)?,
        stime: field(15)?,
        starttime: field(22)?,
        vsize: field(23)?,
    })
}

/// `btime` of `/proc/stat`: the boot time in seconds since the epoch.
fn boot_time(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// A `kB` line of `/proc/self/status`, in bytes.
fn status_kib(text: &str, key: &str) -> Option<u64> {
    let line = text.lines().find_map(|l| l.strip_prefix(key))?;
    let kib: u64 = line.split_whitespace().next()?.parse().ok()?;
    Some(kib * 1024)
}

/// The soft limit of "Max open files" in `/proc/self/limits`.
fn max_open_files(text: &str) -> Option<u64> {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?;
    line.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        let line = "4242 (odd ) name) S 1 4242 4242 0 -1 4194560 2000 0 0 0 \
                    250 130 0 0 20 0 9 0 12345 987654321 2048 18446744073709551615";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                utime: 250,
                stime: 130,
                starttime: 12345,
                vsize: 987654321
            })
        );
        assert_eq!(parse_stat("12 (x) S 1 2"), None, "too short");
    }

    #[test]
    fn status_limits_and_boot_time() {
        assert_eq!(
            status_kib("Name:\tx\nVmRSS:\t  5120 kB\n", "VmRSS:"),
            Some(5 << 20)
        );
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n";
        assert_eq!(max_open_files(limits), Some(1024));
        assert_eq!(
            boot_time("cpu  1 2 3\nbtime 1700000000\n"),
            Some(1_700_000_000)
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_has_every_figure() {
        let s = read();
        assert!(s.cpu_seconds.is_some_and(|c| c >= 0.0), "{s:?}");
        assert!(s.resident_bytes.is_some_and(|b| b > 0), "{s:?}");
        assert!(
            s.virtual_bytes
                .is_some_and(|b| b >= s.resident_bytes.unwrap_or(0))
        );
        assert!(s.open_fds.is_some_and(|n| n >= 3), "{s:?}");
        assert!(s.max_fds.is_some_and(|n| n >= s.open_fds.unwrap_or(0)));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let start = s.start_time_seconds.unwrap();
        assert!(
            start <= now + 1.0 && start > now - 86_400.0 * 365.0,
            "{s:?}"
        );
    }
}
