//! `GET /metrics`: the coordinator's Prometheus metrics, from one registry
//! built when the endpoint starts ([`Metrics`]).
//!
//! Three kinds of figures, each kept where it is made:
//!
//! - the traffic totals (answers by strategy, error results, the solve-time
//!   histogram) are long-lived families counted as each result goes by
//!   ([`crate::coordinator::traffic`]);
//! - the scheduler's gauges and counters are the state machine's own
//!   books, read once per scrape from one snapshot, so every figure of a
//!   scrape is of the same moment and a worker gone is gone from its
//!   families. One collector ([`StateCollector`]) writes both, the
//!   snapshot's first;
//! - the standard `process_*` figures, read from `/proc` per scrape
//!   ([`ProcessCollector`]).
//!
//! Help texts carry no final full stop: prometheus-client adds one to what
//! is registered, and [`Out`] to what a collector writes.

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

use super::process;
use crate::coordinator::Scheduler;
use crate::coordinator::traffic::{Labels, TrafficMetrics, label};
use crate::jobs::Jobs;
use colball_core::Priority;
use colball_core::{REJECT_LABELS, WorkerView};

/// The two text formats `/metrics` speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricsFormat {
    /// The Prometheus text format 0.0.4: what a plain scrape gets, and
    /// what `promtool check metrics` reads.
    Prometheus,
    /// OpenMetrics 1.0.0: for a scraper that asks for it
    /// (`Accept: application/openmetrics-text`), as Prometheus does.
    OpenMetrics,
}

impl MetricsFormat {
    /// Picks the format from an `Accept` header: OpenMetrics when it is
    /// accepted (a quality above 0) at least as much as plain text.
    pub fn negotiate(accept: Option<&str>) -> MetricsFormat {
        let Some(accept) = accept else {
            return MetricsFormat::Prometheus;
        };
        let mut open = 0.0f64;
        let mut plain = 0.0f64;
        for range in accept.split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or("").to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.strip_prefix("q="))
                .find_map(|q| q.parse::<f64>().ok())
                .unwrap_or(1.0);
            match media.as_str() {
                "application/openmetrics-text" => open = open.max(q),
                "text/plain" => plain = plain.max(q),
                _ => {}
            }
        }
        if open > 0.0 && open >= plain {
            MetricsFormat::OpenMetrics
        } else {
            MetricsFormat::Prometheus
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            MetricsFormat::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
            MetricsFormat::OpenMetrics => {
                "application/openmetrics-text; version=1.0.0; charset=utf-8"
            }
        }
    }
}

/// Every family `/metrics` serves, registered once.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
}

impl Metrics {
    /// The registry of a coordinator's metrics: its scheduler's, and its
    /// jobs' when it has them.
    pub fn new(shared: Arc<Scheduler>, jobs: Option<Arc<Jobs>>) -> Metrics {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(ProcessCollector));
        let colball = registry.sub_registry_with_prefix("colball");
        let build = Family::<Labels, Gauge>::default();
        build
            .get_or_create(&label("version", env!("CARGO_PKG_VERSION")))
            .set(1);
        colball.register(
            "build_info",
            "The coordinator's version (the value is always 1)",
            build,
        );
        let traffic = shared.events().metrics();
        colball.register_collector(Box::new(StateCollector { shared, traffic }));
        if let Some(jobs) = jobs {
            colball.register_collector(Box::new(JobsCollector(jobs)));
        }
        Metrics { registry }
    }

    /// Everything, in `format`.
    pub fn encode(&self, format: MetricsFormat) -> Result<String, std::fmt::Error> {
        let mut body = String::new();
        encode(&mut body, &self.registry)?;
        Ok(match format {
            MetricsFormat::OpenMetrics => body,
            MetricsFormat::Prometheus => openmetrics_to_prometheus(&body),
        })
    }
}

/// Writes constant metrics into a collector's encoder.
struct Out<'a, 'e>(&'a mut DescriptorEncoder<'e>);

impl Out<'_, '_> {
    /// A family's descriptor; its help ends with a full stop, as those of
    /// registered families do.
    fn descriptor<'s>(
        &'s mut self,
        name: &'s str,
        help: &str,
        kind: MetricType,
    ) -> Result<MetricEncoder<'s>, std::fmt::Error> {
        self.0
            .encode_descriptor(name, &format!("{help}."), None, kind)
    }

    /// One metric: a constant of this scrape, or a long-lived one updated
    /// where its events happen.
    fn metric(&mut self, name: &str, help: &str, metric: &impl EncodeMetric) -> std::fmt::Result {
        metric.encode(self.descriptor(name, help, metric.metric_type())?)
    }

    fn gauge(&mut self, name: &str, help: &str, value: u64) -> std::fmt::Result {
        self.metric(name, help, &ConstGauge::new(gauge_value(value)))
    }

    fn counter(&mut self, name: &str, help: &str, value: u64) -> std::fmt::Result {
        self.metric(name, help, &ConstCounter::new(value))
    }

    /// A family of one label, `key`, a sample per value.
    fn family<'v>(
        &mut self,
        kind: MetricType,
        (name, help, key): (&str, &str, &str),
        samples: impl IntoIterator<Item = (&'v str, u64)>,
    ) -> std::fmt::Result {
        let mut family = self.descriptor(name, help, kind)?;
        for (value, n) in samples {
            let labels = label(key, value);
            let sample = family.encode_family(&labels)?;
            match kind {
                MetricType::Counter => ConstCounter::new(n).encode(sample)?,
                _ => ConstGauge::new(gauge_value(n)).encode(sample)?,
            }
        }
        Ok(())
    }
}

/// A count as a gauge's value (saturating).
fn gauge_value(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The standard `process_*` families, those that could be read.
#[derive(Debug)]
struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let p = process::read();
        let mut out = Out(&mut encoder);
        if let Some(v) = p.cpu_seconds {
            out.metric(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                &ConstCounter::new(v),
            )?;
        }
        let gauges = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                p.resident_bytes.map(|b| b as f64),
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                p.virtual_bytes.map(|b| b as f64),
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                p.open_fds.map(|n| n as f64),
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                p.max_fds.map(|n| n as f64),
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                p.start_time_seconds,
            ),
        ];
        for (name, help, value) in gauges {
            if let Some(v) = value {
                out.metric(name, help, &ConstGauge::new(v))?;
            }
        }
        Ok(())
    }
}

/// The scheduler's figures, from one snapshot of the state per scrape,
/// then the traffic families (read after the snapshot, so the answers
/// counted cover the puzzles the snapshot counts as solved).
#[derive(Debug)]
pub struct StateCollector {
    shared: Arc<Scheduler>,
    traffic: TrafficMetrics,
}

impl Collector for StateCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let (s, cache_entries) = self.shared.snapshot();
        let (hits, misses) = self.shared.cache().counts();
        let mut out = Out(&mut encoder);
        out.gauge("workers", "Connected workers", s.workers as u64)?;
        out.gauge("slots", "Solver slots over all workers", s.slots)?;
        out.gauge("queued", "Puzzles waiting for a worker", s.queued as u64)?;
        out.gauge("in_flight", "Puzzles held by workers", s.in_flight as u64)?;
        out.gauge(
            "pending",
            "Puzzles admitted and not yet answered",
            s.pending as u64,
        )?;
        out.gauge("batches", "Open requests", s.batches as u64)?;
        out.gauge(
            "held",
            "Results admitted and not yet read by their clients (bounded by --max-pending)",
            s.held as u64,
        )?;
        out.gauge(
            "result_cache_entries",
            "Entries of the coordinator's result cache",
            cache_entries as u64,
        )?;
        let c = &s.counters;
        let counters = [
            ("solved", "Puzzles solved by workers", c.solved),
            (
                "failed",
                "Puzzles that got an error result from the cluster",
                c.failed,
            ),
            (
                "redispatched",
                "Puzzles re-dispatched after a worker was lost",
                c.redispatched,
            ),
            (
                "workers_lost",
                "Workers lost while holding work or without leaving cleanly",
                c.workers_lost,
            ),
            (
                "cancelled",
                "Puzzles cancelled because their client went away",
                c.cancelled,
            ),
            (
                "workers_quarantined",
                "Workers quarantined because an answer of theirs failed the check",
                c.quarantined,
            ),
            (
                "tasks_timed_out",
                "Workers lost for holding a task past --task-timeout-secs",
                c.timed_out,
            ),
            (
                "audits_passed",
                "Audited answers another worker confirmed",
                c.audits_passed,
            ),
            (
                "backups_started",
                "Backup copies of overdue tasks started on another worker",
                c.backups_started,
            ),
            (
                "backups_won",
                "Backup copies whose verified answer came first",
                c.backups_won,
            ),
            (
                "backups_wasted",
                "Backup copies cancelled or lost (the first copy answered, or the task was no longer wanted)",
                c.backups_wasted,
            ),
            (
                "workers_marked_slow",
                "Times a worker was marked slow (every task it held far past its expected time)",
                c.workers_slow,
            ),
            (
                "workers_stuck",
                "Workers lost for answering nothing for many times the expected solve time while others answered",
                c.workers_stuck,
            ),
            (
                "result_cache_hits",
                "Puzzles answered from the coordinator's result cache",
                hits,
            ),
            (
                "result_cache_misses",
                "Puzzles looked up in the result cache and dispatched",
                misses,
            ),
        ];
        for (name, help, value) in counters {
            out.counter(name, help, value)?;
        }
        out.family(
            MetricType::Gauge,
            (
                "queue_depth",
                "Puzzles waiting for a worker, by priority class",
                "class",
            ),
            Priority::ALL
                .iter()
                .zip(s.queued_by_class)
                .map(|(class, n)| (class.name(), n as u64)),
        )?;
        out.family(
            MetricType::Counter,
            (
                "results_rejected",
                "Worker answers refused (never delivered nor cached), by reason",
                "reason",
            ),
            REJECT_LABELS.iter().copied().zip(c.rejected),
        )?;
        type PerWorker = (&'static str, &'static str, fn(&WorkerView) -> u64);
        let per_worker: [PerWorker; 5] = [
            (
                "worker_cache_hits",
                "Puzzles a worker answered from its solver cache",
                |w| w.cache_hits,
            ),
            (
                "worker_cache_misses",
                "Solver cache lookups that missed, by worker",
                |w| w.cache_misses,
            ),
            (
                "worker_cache_evictions",
                "Entries evicted from a worker's solver cache",
                |w| w.cache_evictions,
            ),
            (
                "worker_table_builds",
                "Distance tables a worker built",
                |w| w.table_builds,
            ),
            (
                "worker_table_hits",
                "Puzzles a worker answered from a distance table",
                |w| w.table_hits,
            ),
        ];
        for (name, help, value) in per_worker {
            out.family(
                MetricType::Counter,
                (name, help, "worker"),
                s.worker_list.iter().map(|w| (w.name.as_str(), value(w))),
            )?;
        }
        out.family(
            MetricType::Gauge,
            (
                "worker_slow",
                "1 while every task a worker holds is far past its expected time",
                "worker",
            ),
            s.worker_list
                .iter()
                .map(|w| (w.name.as_str(), u64::from(w.slow))),
        )?;
        out.family(
            MetricType::Gauge,
            ("worker_in_flight", "Puzzles a worker holds", "worker"),
            s.worker_list
                .iter()
                .map(|w| (w.name.as_str(), w.in_flight as u64)),
        )?;
        let mut family = out.descriptor(
            "expected_solve_seconds",
            "How long workers held a task of this board size until its verified answer: the 90th percentile of the last 256 (a size shows once 20 are known)",
            MetricType::Gauge,
        )?;
        for t in &s.solve_times {
            ConstGauge::new(t.p90_seconds)
                .encode(family.encode_family(&label("size", &t.size))?)?;
        }
        let TrafficMetrics {
            answered,
            result_errors,
            solve_latency,
        } = &self.traffic;
        out.metric(
            "answered",
            "Answers sent to clients, by strategy (`result_cache`: the coordinator's cache; `cache`: a worker's)",
            answered,
        )?;
        out.metric(
            "result_errors",
            "Error results sent to clients (invalid puzzles, puzzles given up on)",
            result_errors,
        )?;
        out.metric(
            "solve_latency_seconds",
            "Time workers spent on each puzzle they solved",
            solve_latency,
        )
    }
}

/// The jobs' figures: the store's leader, and the windows shared with
/// other coordinators.
#[derive(Debug)]
struct JobsCollector(Arc<Jobs>);

impl Collector for JobsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let jobs = &self.0;
        let mut out = Out(&mut encoder);
        out.gauge(
            "store_leader",
            "1 while this coordinator leads the job store's maintenance (retention, windows whose lease ran out); always 1 on a store of its own",
            u64::from(jobs.leading()),
        )?;
        let s = &jobs.sharing;
        let read = |n: &std::sync::atomic::AtomicU64| n.load(std::sync::atomic::Ordering::Relaxed);
        out.counter(
            "job_windows_claimed",
            "Windows of jobs' puzzles this coordinator claimed on a shared store",
            read(&s.windows_claimed),
        )?;
        out.counter(
            "job_windows_taken_over",
            "Windows claimed from another coordinator whose lease had run out",
            read(&s.windows_taken_over),
        )?;
        out.counter(
            "job_windows_lost",
            "Windows this coordinator held that another claimed once its lease had run out (results written here for them afterwards were refused)",
            read(&s.windows_lost),
        )?;
        out.counter(
            "job_windows_rescued",
            "Windows whose lease ran out let go by this coordinator as the store's leader",
            read(&s.windows_rescued),
        )?;
        out.counter(
            "job_uploads_rescued",
            "Jobs whose upload was abandoned (its coordinator died) deleted by this coordinator as the store's leader",
            read(&s.uploads_rescued),
        )?;
        let calls = &jobs.webhook_calls;
        out.counter(
            "webhooks_delivered",
            "Webhook calls of finished jobs answered with a 2xx status",
            read(&calls.delivered),
        )?;
        out.counter(
            "webhook_calls_failed",
            "Webhook calls that failed (another status, no connection, no answer in time) and are to be made again",
            read(&calls.failed),
        )?;
        out.counter(
            "webhooks_given_up",
            "Webhook calls given up: failing past --webhook-retry-hours, or to a URL no longer allowed",
            read(&calls.given_up),
        )
    }
}

/// Rewrites OpenMetrics text as Prometheus text 0.0.4: a counter's `HELP`
/// and `TYPE` name its samples (`x_total`) rather than its family (`x`),
/// `unknown` is `untyped`, and there is no `UNIT` line nor `# EOF`.
pub fn openmetrics_to_prometheus(open: &str) -> String {
    let typed: std::collections::HashMap<&str, &str> = open
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.split_once(' '))
        .collect();
    let mut out = String::with_capacity(open.len() + 256);
    for line in open.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let rewritten = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let (name, rest) = line.strip_prefix(prefix)?.split_once(' ')?;
            let kind = typed.get(name).copied().unwrap_or("");
            let (name, rest) = match (kind, *prefix) {
                ("counter", _) => (format!("{name}_total"), rest),
                ("unknown", "# TYPE ") => (name.to_string(), "untyped"),
                _ => (name.to_string(), rest),
            };
            Some(format!("{prefix}{name} {rest}"))
        });
        out.push_str(rewritten.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinator::traffic::label;

    #[test]
    fn openmetrics_is_asked_for_and_plain_text_is_the_default() {
        use MetricsFormat::*;
        assert_eq!(MetricsFormat::negotiate(None), Prometheus);
        assert_eq!(MetricsFormat::negotiate(Some("*/*")), Prometheus);
        assert_eq!(MetricsFormat::negotiate(Some("text/plain")), Prometheus);
        // What Prometheus 2.x sends.
        let prometheus = "application/openmetrics-text;version=1.0.0,\
            application/openmetrics-text;version=0.0.1;q=0.75,\
            text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(MetricsFormat::negotiate(Some(prometheus)), OpenMetrics);
        assert_eq!(
            MetricsFormat::negotiate(Some("text/plain;q=0.9, application/openmetrics-text;q=0.5")),
            Prometheus
        );
        assert_eq!(
            MetricsFormat::negotiate(Some("application/openmetrics-text;q=0")),
            Prometheus
        );
    }

    #[test]
    fn counters_are_named_by_their_samples_in_prometheus_text() {
        let open = "# HELP x_answered Answers.\n# TYPE x_answered counter\n\
                    x_answered_total{s=\"a\"} 3\n\
                    # HELP x_up Up.\n# TYPE x_up gauge\nx_up 1\n\
                    # HELP x_t_seconds Time.\n# TYPE x_t_seconds histogram\n# UNIT x_t_seconds seconds\n\
                    # HELP x_odd Odd.\n# TYPE x_odd unknown\nx_odd 2\n# EOF\n";
        assert_eq!(
            openmetrics_to_prometheus(open),
            "# HELP x_answered_total Answers.\n# TYPE x_answered_total counter\n\
             x_answered_total{s=\"a\"} 3\n\
             # HELP x_up Up.\n# TYPE x_up gauge\nx_up 1\n\
             # HELP x_t_seconds Time.\n# TYPE x_t_seconds histogram\n\
             # HELP x_odd Odd.\n# TYPE x_odd untyped\nx_odd 2\n"
        );
    }

    #[test]
    fn the_registry_lives_on_and_counts_results_as_they_are_published() {
        use colball_proto::v1::{self, cluster_event::Kind, puzzle_result};
        let shared = Scheduler::new(
            crate::coordinator::SchedulingConfig::default(),
            crate::lifecycle::Lifecycle::new(tokio_util::sync::CancellationToken::new()),
        );
        let metrics = Metrics::new(shared.clone(), None);
        let result = |strategy: &str, cached| {
            Kind::Result(v1::ResultEvent {
                batch: 1,
                result: Some(v1::PuzzleResult {
                    outcome: Some(puzzle_result::Outcome::Solved(v1::Solved {
                        moves: 3,
                        strategy: strategy.into(),
                        time_us: 40,
                        cached,
                        ..Default::default()
                    })),
                    ..Default::default()
                }),
            })
        };
        let sample = |body: &str, name: &str| -> Option<f64> {
            body.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        };
        let before = metrics.encode(MetricsFormat::Prometheus).unwrap();
        assert_eq!(sample(&before, "colball_result_errors_total"), Some(0.0));
        assert_eq!(
            sample(&before, "colball_answered_total{strategy=\"bidir\"}"),
            None
        );
        shared
            .events()
            .publish_all([result("bidir", false), result("bidir", false)]);
        shared.events().publish(result("idastar", false));
        shared.events().publish(result("", true));
        for _ in 0..2 {
            let body = metrics.encode(MetricsFormat::Prometheus).unwrap();
            let answered = |how: &str| {
                sample(
                    &body,
                    &format!("colball_answered_total{{strategy=\"{how}\"}}"),
                )
            };
            assert_eq!(answered("bidir"), Some(2.0), "{body}");
            assert_eq!(answered("idastar"), Some(1.0));
            assert_eq!(answered("result_cache"), Some(1.0));
            // Cached answers take no solve time.
            assert_eq!(
                sample(&body, "colball_solve_latency_seconds_count"),
                Some(3.0)
            );
            // Every family once, however many scrapes.
            for family in [
                "colball_answered_total",
                "colball_workers",
                "process_cpu_seconds_total",
            ] {
                let typed = format!("# TYPE {family} ");
                assert_eq!(body.matches(&typed).count(), 1, "{family} in\n{body}");
            }
        }
        // The dashboard reads the same counters.
        let traffic = shared.traffic();
        assert_eq!(traffic.by_strategy["bidir"], 2);
        assert_eq!(traffic.by_strategy["result_cache"], 1);
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(
            label("worker", "a\"b\\c\nd"),
            vec![("worker".to_string(), "a\\\"b\\\\c\\nd".to_string())]
        );
    }
}
