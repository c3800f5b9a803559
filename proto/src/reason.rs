//! Why a status was sent, for programs: a `google.rpc.ErrorInfo` detail
//! (gRPC's richer error model) with colball's domain and a reason, so a
//! client decides by a stable name rather than by the English message
//! (which is for people and may change).

use std::collections::HashMap;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// The `ErrorInfo.domain` of every reason below.
pub const DOMAIN: &str = "colball";

/// UNAVAILABLE because the coordinator is going away (it was told to stop):
/// the request may be made again once it, or another, is back. Jobs keep
/// their stored results; `Results` can be asked again from the last index
/// read.
pub const SHUTTING_DOWN: &str = "SHUTTING_DOWN";

/// RESOURCE_EXHAUSTED because the client is over one of its quotas (named
/// in the `quota` metadata); a `RetryInfo` detail says when to try again.
pub const OVER_QUOTA: &str = "OVER_QUOTA";

/// A RESOURCE_EXHAUSTED status saying the client is over `quota`.
pub fn over_quota(
    message: impl Into<String>,
    quota: &str,
    retry_after: std::time::Duration,
) -> Status {
    let mut details = ErrorDetails::with_error_info(
        OVER_QUOTA,
        DOMAIN,
        HashMap::from([("quota".to_string(), quota.to_string())]),
    );
    details.set_retry_info(Some(retry_after));
    Status::with_error_details(Code::ResourceExhausted, message, details)
}

/// An UNAVAILABLE status saying the coordinator is shutting down.
pub fn shutting_down(message: impl Into<String>) -> Status {
    let details = ErrorDetails::with_error_info(SHUTTING_DOWN, DOMAIN, HashMap::new());
    Status::with_error_details(Code::Unavailable, message, details)
}

/// The reason a status carries, if it is one of colball's.
pub fn of(status: &Status) -> Option<String> {
    let info = status.get_details_error_info()?;
    (info.domain == DOMAIN).then_some(info.reason)
}

/// Whether the status says the coordinator is shutting down.
pub fn is_shutting_down(status: &Status) -> bool {
    status.code() == Code::Unavailable && of(status).as_deref() == Some(SHUTTING_DOWN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reason_survives_the_status_and_plain_text_does_not_count() {
        let sent = shutting_down("the coordinator is shutting down");
        // As a client receives it: code, message and the details bytes.
        let received =
            Status::with_details(sent.code(), sent.message(), sent.details().to_vec().into());
        assert!(is_shutting_down(&received));
        assert_eq!(received.message(), "the coordinator is shutting down");
        assert!(!is_shutting_down(&Status::unavailable(
            "the coordinator is shutting down"
        )));
        assert!(!is_shutting_down(&Status::with_details(
            Code::Internal,
            "x",
            sent.details().to_vec().into()
        )));
    }
}
