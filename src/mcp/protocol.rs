//! JSON-RPC 2.0 framing for MCP over stdio: one JSON message per line.
//!
//! Protocol errors (bad JSON, unknown methods, bad parameters) are JSON-RPC
//! errors; a tool that runs and fails answers with a result whose `isError`
//! is true, as MCP asks, so an agent can read why.

use serde_json::{Value, json};

/// The protocol revisions this server speaks, newest first.
pub(crate) const PROTOCOL_VERSIONS: [&str; 3] = ["2025-06-18", "2025-03-26", "2024-11-05"];

pub(crate) const PARSE_ERROR: i64 = -32700;
pub(crate) const INVALID_REQUEST: i64 = -32600;
pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
pub(crate) const INVALID_PARAMS: i64 = -32602;
pub(crate) const INTERNAL_ERROR: i64 = -32603;

/// A JSON-RPC error to send back.
#[derive(Debug)]
pub(crate) struct RpcError {
    pub(crate) code: i64,
    pub(crate) message: String,
}

impl RpcError {
    pub(crate) fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError { code, message: message.into() }
    }
    pub(crate) fn params(message: impl Into<String>) -> Self {
        RpcError::new(INVALID_PARAMS, message)
    }
}

/// One incoming message, classified.
#[derive(Debug)]
pub(crate) enum Incoming {
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    Notification,
    /// A response from the client (we send no requests, so it is ignored).
    Response,
    /// Not a valid message; answer with this error (id may be null).
    Invalid {
        id: Value,
        error: RpcError,
    },
}

pub(crate) fn parse(line: &str) -> Incoming {
    let v: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => {
            return Incoming::Invalid {
                id: Value::Null,
                error: RpcError::new(PARSE_ERROR, format!("parse error: {e}")),
            };
        }
    };
    let Some(obj) = v.as_object() else {
        let msg = if v.is_array() { "batches are not supported" } else { "a message must be a JSON object" };
        return Incoming::Invalid { id: Value::Null, error: RpcError::new(INVALID_REQUEST, msg) };
    };
    let id = obj.get("id").cloned();
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Incoming::Invalid {
            id: id.unwrap_or(Value::Null),
            error: RpcError::new(INVALID_REQUEST, "missing \"jsonrpc\": \"2.0\""),
        };
    }
    let params = obj.get("params").cloned().unwrap_or(Value::Null);
    match (obj.get("method").and_then(Value::as_str), id) {
        (Some(m), Some(id)) if id.is_string() || id.is_number() => {
            Incoming::Request { id, method: m.to_string(), params }
        }
        (Some(_), Some(id)) => {
            Incoming::Invalid { id: Value::Null, error: RpcError::new(INVALID_REQUEST, format!("bad id {id}")) }
        }
        (Some(_), None) => Incoming::Notification,
        (None, Some(_)) if obj.contains_key("result") || obj.contains_key("error") => Incoming::Response,
        (None, id) => Incoming::Invalid {
            id: id.unwrap_or(Value::Null),
            error: RpcError::new(INVALID_REQUEST, "missing \"method\""),
        },
    }
}

pub(crate) fn response(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

pub(crate) fn error(id: &Value, e: &RpcError) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": e.code, "message": e.message}})
}

pub(crate) fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_messages() {
        assert!(matches!(parse("{"), Incoming::Invalid { error: RpcError { code: PARSE_ERROR, .. }, .. }));
        assert!(matches!(parse("[]"), Incoming::Invalid { error: RpcError { code: INVALID_REQUEST, .. }, .. }));
        assert!(matches!(parse(r#"{"id":1,"method":"x"}"#), Incoming::Invalid { .. }));
        assert!(matches!(parse(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#), Incoming::Request { .. }));
        assert!(matches!(parse(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#), Incoming::Notification));
        assert!(matches!(parse(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#), Incoming::Response));
        assert!(matches!(parse(r#"{"jsonrpc":"2.0","id":{},"method":"x"}"#), Incoming::Invalid { .. }));
    }
}
