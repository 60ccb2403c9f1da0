//! What the blocking calls and the held changes share: the raw requests' timeout and how an API answer reads.

use crate::error::ClientError;
use serde_json::Value;
use std::time::Duration;

/// Per-request timeout for the raw HTTP calls (toxiproxy_rust's own reqwest default is 30 s).
pub(super) const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// A 2xx answer's body, or the API's error (Toxiproxy's `{"error": ...}` when it sent one).
pub(super) fn api_answer(status: u16, body: String) -> Result<String, ClientError> {
    if !(200..300).contains(&status) {
        let message = serde_json::from_str::<Value>(&body)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
            .unwrap_or_else(|| body.trim().to_string());
        return Err(ClientError::Api { status, message });
    }
    Ok(body)
}
