//! Trace context across the hops, as W3C Trace Context writes it: the
//! `traceparent` and `tracestate` headers on HTTP and the same keys in
//! gRPC metadata (client to coordinator), and a `traceparent` carried with
//! the tasks it concerns (coordinator to worker, whose one long session
//! serves many requests).
//!
//! When spans are not exported, none of these does anything: no context
//! is read, none is written.

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator as _};
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The header (or metadata key) with a span's trace and id.
pub const TRACEPARENT: &str = "traceparent";
/// The header with the vendors' state that goes with it.
pub const TRACESTATE: &str = "tracestate";

/// Makes `span` a child of the span a carrier names (`get` reads one key:
/// [`TRACEPARENT`] or [`TRACESTATE`]). A carrier without a valid
/// `traceparent` leaves `span` where it was (a root, or the child of the
/// span it was made in); so does a span already entered, or spans not
/// being exported.
pub fn adopt<'a>(span: &tracing::Span, get: impl Fn(&str) -> Option<&'a str>) {
    struct Carrier<'a> {
        parent: &'a str,
        state: Option<&'a str>,
    }
    impl Extractor for Carrier<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            match key {
                TRACEPARENT => Some(self.parent),
                TRACESTATE => self.state,
                _ => None,
            }
        }
        fn keys(&self) -> Vec<&str> {
            vec![TRACEPARENT, TRACESTATE]
        }
    }
    let Some(parent) = get(TRACEPARENT) else {
        return;
    };
    if span.is_disabled() {
        return;
    }
    let carrier = Carrier {
        parent,
        state: get(TRACESTATE),
    };
    let cx = TraceContextPropagator::new().extract(&carrier);
    if cx.span().span_context().is_valid() {
        // (Refused only when no span is exported or the span has started:
        // it keeps its parent then.)
        let _ = span.set_parent(cx);
    }
}

/// [`adopt`] from a lone `traceparent` value.
pub fn adopt_traceparent(span: &tracing::Span, traceparent: &str) {
    adopt(span, |key| (key == TRACEPARENT).then_some(traceparent));
}

/// Writes `span`'s context into a carrier (`set` takes [`TRACEPARENT`] or
/// [`TRACESTATE`] and its value), when spans are exported. The span counts
/// as started from then on (see [`adopt`]).
pub fn inject(span: &tracing::Span, set: impl FnMut(&'static str, String)) {
    struct Carrier<F>(F);
    impl<F: FnMut(&'static str, String)> Injector for Carrier<F> {
        fn set(&mut self, key: &str, value: String) {
            match key {
                TRACEPARENT => (self.0)(TRACEPARENT, value),
                TRACESTATE => (self.0)(TRACESTATE, value),
                _ => {}
            }
        }
    }
    if span.is_disabled() {
        return;
    }
    let cx = span.context();
    if cx.span().span_context().is_valid() {
        TraceContextPropagator::new().inject_context(&cx, &mut Carrier(set));
    }
}

/// `span`'s `traceparent`, to pass on with its work; `None` when spans are
/// not exported.
pub fn traceparent(span: &tracing::Span) -> Option<String> {
    let mut found = None;
    inject(span, |key, value| {
        if key == TRACEPARENT {
            found = Some(value);
        }
    });
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::TracerProvider as _;
    use tracing_subscriber::layer::SubscriberExt as _;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn exporting<T>(f: impl FnOnce() -> T) -> T {
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        tracing::subscriber::with_default(subscriber, f)
    }

    /// (trace id, span id) of a `traceparent`.
    fn ids(traceparent: &str) -> (&str, &str) {
        let parts: Vec<&str> = traceparent.split('-').collect();
        assert_eq!(parts.len(), 4, "{traceparent}");
        assert_eq!(parts[0], "00", "{traceparent}");
        (parts[1], parts[2])
    }

    #[test]
    fn a_span_joins_the_trace_its_carrier_names_and_passes_itself_on() {
        exporting(|| {
            let span = tracing::info_span!("request");
            adopt(&span, |key| match key {
                TRACEPARENT => Some(PARENT),
                TRACESTATE => Some("vendor=1"),
                _ => None,
            });
            let mut carried = Vec::new();
            inject(&span, |key, value| carried.push((key, value)));
            let traceparent = carried
                .iter()
                .find(|(k, _)| *k == TRACEPARENT)
                .map(|(_, v)| v.clone())
                .expect("a traceparent");
            let (trace, id) = ids(&traceparent);
            assert_eq!(trace, "4bf92f3577b34da6a3ce929d0e0e4736");
            assert_ne!(
                id, "00f067aa0ba902b7",
                "the span's own id, not its parent's"
            );
            assert!(carried.contains(&(TRACESTATE, "vendor=1".to_string())));
            // A child made inside it is in the same trace.
            let child = span.in_scope(|| tracing::info_span!("window"));
            let child = traceparent_of(&child);
            assert_eq!(ids(&child).0, trace);
            assert_ne!(ids(&child).1, id);
        });
    }

    fn traceparent_of(span: &tracing::Span) -> String {
        traceparent(span).expect("spans are exported")
    }

    #[test]
    fn without_a_valid_carrier_a_span_starts_its_own_trace() {
        exporting(|| {
            for bad in [
                "",
                "garbage",
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            ] {
                let span = tracing::info_span!("request");
                adopt_traceparent(&span, bad);
                let own = traceparent_of(&span);
                assert_ne!(ids(&own).0, "4bf92f3577b34da6a3ce929d0e0e4736", "{bad:?}");
                assert_ne!(ids(&own).0, "00000000000000000000000000000000", "{bad:?}");
            }
            let span = tracing::info_span!("request");
            adopt(&span, |_| None);
            assert!(traceparent(&span).is_some());
        });
    }

    #[test]
    fn without_export_nothing_is_read_or_written() {
        let subscriber = tracing_subscriber::registry();
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("request");
            adopt_traceparent(&span, PARENT);
            assert_eq!(traceparent(&span), None);
        });
        // No subscriber at all.
        let span = tracing::info_span!("request");
        adopt_traceparent(&span, PARENT);
        assert_eq!(traceparent(&span), None);
    }
}
